#!/usr/bin/env bash
# `npm test`: install what is missing, then typecheck, lint and run the whole suite against a real
# PostgreSQL and real Temporal servers (dev server and time-skipping test server).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-tools.sh
echo "== typecheck"; node_modules/.bin/tsc -p .
echo "== lint"; node_modules/.bin/eslint . --max-warnings=0
echo "== tests"; node_modules/.bin/vitest run
