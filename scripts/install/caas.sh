#!/usr/bin/env bash
# Container apps (providers/podman/): rootful podman 4 with runc and netavark, iptables for the
# isolation chains (CAAS-FWD / CAAS-IN), and mmdebstrap for the Debian base image, from Debian's
# packages when absent. The engine keeps its whole podman configuration and storage in its own data
# directory (CONTAINERS_CONF / CONTAINERS_STORAGE_CONF), so nothing under /etc/containers is
# changed here, and no service is needed: podman has no daemon (the engine's keeper starts its
# containers again after a reboot). policy-rc.d keeps the install from starting the package's units.
set -euo pipefail

. "$(dirname "$0")/lib.sh"

missing=()
command -v podman >/dev/null 2>&1 || [ -x /usr/bin/podman ] || missing+=(podman)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || [ -x /usr/bin/runc ] || missing+=(runc)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
command -v mmdebstrap >/dev/null 2>&1 || [ -x /usr/bin/mmdebstrap ] || missing+=(mmdebstrap)

if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  apt_install "${missing[@]}"
fi


# The Debian minbase the base image of container apps is made from, once per machine (mmdebstrap,
# 30-60 s here): every data directory then builds `caas-node` from it in seconds.
cache="${CAAS_BASE_CACHE_DIR:-/var/cache/cloud-caas}"
if [ "$(id -u)" = 0 ] && [ ! -f "$cache/debian-minbase-bookworm.tar" ]; then
  log "building the Debian base for container apps (once per machine)"
  cd "$(dirname "$0")/../.." && node_modules/.bin/tsx scripts/caas-base.ts
fi
