#!/usr/bin/env bash
# `npm test`: install what is missing, then typecheck, lint and run the whole suite against a real
# PostgreSQL and real Temporal servers (dev server and time-skipping test server).
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's own Node 24 (node_modules/.bin/node) first, also when this script is run directly.
export PATH="$PWD/node_modules/.bin:$PATH"
bash scripts/ensure-tools.sh
bash scripts/require-node.sh
mkdir -p .data
# Node keeps the bytecode of the modules it compiles here, so the many processes a run starts (the
# CLI per command, the fault tests' API and worker, whole `npm start`s) do not compile them again.
export NODE_COMPILE_CACHE="$PWD/.data/node-compile-cache"
# The three checks run beside the tests (each check uses one core while the tests mostly wait on
# servers), their output printed in order once the tests are done; either failing fails the run.
# The typecheck and prettier keep caches in .data/ that only skip unchanged files; eslint has none
# (its cache would keep a file's typed-rule results when only a file it imports changed).
checks=$(mktemp -d)
node_modules/.bin/tsc -p . --incremental --tsBuildInfoFile .data/tsbuildinfo >"$checks/typecheck" 2>&1 &
typecheck=$!
node_modules/.bin/eslint . --max-warnings=0 >"$checks/lint" 2>&1 &
lint=$!
node_modules/.bin/prettier --check . --log-level=warn --cache --cache-strategy content --cache-location .data/prettier-cache >"$checks/format" 2>&1 &
format=$!
echo "== tests (tiers unit, stack, real: vitest.config.mts), with typecheck, lint and format beside them"
report=.data/vitest-report.json
rm -f "$report"
status=0
node_modules/.bin/vitest run --reporter=default --reporter=json --outputFile.json="$report" "$@" || status=$?
failed=""
for check in typecheck lint format; do
  if wait "${!check}"; then echo "== $check: ok"; else echo "== $check: FAILED"; failed="$failed $check"; fi
  cat "$checks/$check"
done
rm -rf "$checks"
# One plain closing line for CI: "N passed, N failed".
if [ -f "$report" ]; then
  # A file that fails outside its tests (a hook timing out) fails no test but does fail the run: say so.
  node -e 'const r=require(process.argv[1]); const files=r.testResults.filter((f)=>f.status==="failed"&&f.assertionResults.every((a)=>a.status!=="failed")).length; console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (r.numPendingTests ? `, ${r.numPendingTests} skipped` : "") + (files ? `, ${files} test file(s) failed outside their tests` : ""))' "$PWD/$report"
fi
if [ -n "$failed" ]; then echo "failed:$failed"; exit 1; fi
exit "$status"
