#!/usr/bin/env bash
# Node 24 LTS everywhere (Node 20 is past its end of life). The `node` devDependency puts a Node 24
# binary in node_modules/.bin, which npm scripts put first on PATH; scripts/start.sh and
# scripts/test.sh put it first as well, so running them directly uses it too. This prints which
# Node runs and refuses anything older.
set -euo pipefail
required=24
version=$(node -p 'process.versions.node')
echo "== node v${version} ($(command -v node))"
if [ "${version%%.*}" -lt "$required" ]; then
  echo "Node ${required} or newer is required (found v${version}); run through npm (npm test / npm start) after npm ci, or put node_modules/.bin first on PATH." >&2
  exit 1
fi
