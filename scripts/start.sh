#!/usr/bin/env bash
# `npm start`: install what is missing, then run the whole system in the foreground (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's own Node 24 (node_modules/.bin/node) first, also when this script is run directly;
# the API and worker children inherit this PATH.
export PATH="$PWD/node_modules/.bin:$PATH"
bash scripts/ensure-tools.sh
bash scripts/require-node.sh
# Compiled modules are kept for the next start (and for each process this one starts).
export NODE_COMPILE_CACHE="$PWD/.data/node-compile-cache"
exec node_modules/.bin/tsx scripts/dev.ts
