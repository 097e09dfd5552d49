#!/usr/bin/env bash
# `npm start`: install what is missing, then run the whole system in the foreground (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-tools.sh
exec node_modules/.bin/tsx scripts/dev.ts
