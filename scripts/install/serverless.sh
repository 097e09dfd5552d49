#!/usr/bin/env bash
# The serverless data planes' servers (dataplane/serverless/): Redis 7 for kv (`redis-server`) and
# bubblewrap for the functions' sandboxes (`bwrap`), from Debian's packages when absent. workerd
# itself comes with the npm dependencies (@cloudflare/workerd-linux-64, prebuilt); the db primitive
# uses node:sqlite, built into Node. The data plane starts its own Redis (providers/redis/), so the
# package's system service must not run: policy-rc.d keeps the install from starting it, and it is
# stopped and disabled if an init system runs it.
set -euo pipefail

. "$(dirname "$0")/lib.sh"

missing=()
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || missing+=(redis-server)
command -v bwrap >/dev/null 2>&1 || [ -x /usr/bin/bwrap ] || missing+=(bubblewrap)

if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  apt_install "${missing[@]}"
fi

disable_service redis-server
