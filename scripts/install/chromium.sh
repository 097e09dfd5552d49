#!/usr/bin/env bash
# Chromium from Debian's packages, for the reference page test (test/reference-page.test.ts) and
# scripts/docs-screenshot.ts. Skipped when it is there (or CHROMIUM_PATH points at a browser).
set -euo pipefail
CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then exit 0; fi
printf '\033[2m[setup]\033[0m %s\n' "installing Chromium from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq chromium >/dev/null
