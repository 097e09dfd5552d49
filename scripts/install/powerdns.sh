#!/usr/bin/env bash
# PowerDNS Authoritative with the SQLite backend, for the DNS family's local server
# (providers/powerdns/powerdns.server.ts), plus the sqlite3 shell that creates its database.
# Skips what is there. The project runs its own pdns_server on loopback ports; the Debian system
# service (which would bind port 53) is kept from starting on install and stopped if it runs.
# The package's `pdns` account is kept: the local server, started as root, drops to it after binding
# (providers/powerdns/powerdns.server.ts; without it the server makes an account of its own).
set -euo pipefail

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

missing=()
[ -x /usr/sbin/pdns_server ] || missing+=(pdns-server)
[ -f /usr/lib/x86_64-linux-gnu/pdns/libgsqlite3backend.so ] || ls /usr/lib/*/pdns/libgsqlite3backend.so >/dev/null 2>&1 || missing+=(pdns-backend-sqlite3)
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)

if [ "${#missing[@]}" -gt 0 ] && [ "${DNS_BACKEND:-powerdns}" = simulator ]; then
  log "DNS_BACKEND=simulator: not installing ${missing[*]}"
elif [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d 101 keeps the package's service from starting during the install.
  policy=/usr/sbin/policy-rc.d
  placed=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && placed=1
  fi
  trap 'if [ "$placed" = 1 ]; then rm -f "$policy"; fi' EXIT
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The system service is not ours: stop and disable it when it runs, so it never holds ports or files.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  if systemctl is-enabled --quiet pdns.service 2>/dev/null || systemctl is-active --quiet pdns.service 2>/dev/null; then
    log "stopping and disabling the system pdns service"
    systemctl disable --now pdns.service >/dev/null 2>&1 || true
  fi
elif [ -x /etc/init.d/pdns ] && /etc/init.d/pdns status >/dev/null 2>&1; then
  log "stopping the system pdns service"
  /etc/init.d/pdns stop >/dev/null 2>&1 || true
fi
