#!/usr/bin/env bash
# The serverless data planes' servers (dataplane/serverless/): Redis 7 for kv (`redis-server`) and
# bubblewrap for the functions' sandboxes (`bwrap`), from Debian's packages when absent. workerd
# itself comes with the npm dependencies (@cloudflare/workerd-linux-64, prebuilt); the db primitive
# uses node:sqlite, built into Node. The data plane starts its own Redis (providers/redis/), so the
# package's system service must not run: policy-rc.d keeps the install from starting it, and it is
# stopped and disabled if an init system runs it.
set -euo pipefail

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

missing=()
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || missing+=(redis-server)
command -v bwrap >/dev/null 2>&1 || [ -x /usr/bin/bwrap ] || missing+=(bubblewrap)

if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  had_policy=0
  [ -e "$policy" ] && had_policy=1
  if [ "$had_policy" = 0 ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"; fi
  trap '[ "$had_policy" = 0 ] && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled redis-server >/dev/null 2>&1; then
  systemctl disable --now redis-server >/dev/null 2>&1 || true
elif [ -x /etc/init.d/redis-server ] && [ -f /run/redis/redis-server.pid ]; then
  /etc/init.d/redis-server stop >/dev/null 2>&1 || true
  command -v update-rc.d >/dev/null 2>&1 && update-rc.d redis-server disable >/dev/null 2>&1 || true
fi
