#!/usr/bin/env bash
# HAProxy for the load balancers (providers/haproxy/): Debian's package when the binary is absent.
# The control plane runs one HAProxy process per balancer itself, so the package's own system
# service must not run: it would hold ports and answer nothing of ours. It is stopped and disabled
# here, and policy-rc.d keeps the install from starting it in the first place. Run as root, the
# control plane gives each balancer's workers an account of their own (useradd/userdel, from the
# base system's passwd package; providers/os-accounts.ts), not the package's `haproxy` account.
set -euo pipefail

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  log "installing HAProxy from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  had_policy=0
  [ -e "$policy" ] && had_policy=1
  if [ "$had_policy" = 0 ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"; fi
  trap '[ "$had_policy" = 0 ] && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq haproxy >/dev/null
fi

# The system service, if any init system runs it: stopped and kept from starting at boot.
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled haproxy >/dev/null 2>&1; then
  systemctl disable --now haproxy >/dev/null 2>&1 || true
elif [ -x /etc/init.d/haproxy ] && [ -f /run/haproxy.pid ]; then
  /etc/init.d/haproxy stop >/dev/null 2>&1 || true
  command -v update-rc.d >/dev/null 2>&1 && update-rc.d haproxy disable >/dev/null 2>&1 || true
fi
