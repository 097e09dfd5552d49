#!/usr/bin/env bash
# HAProxy for the load balancers (providers/haproxy/): Debian's package when the binary is absent.
# The control plane runs one HAProxy process per balancer itself, so the package's own system
# service must not run: it would hold ports and answer nothing of ours. It is stopped and disabled
# here, and policy-rc.d keeps the install from starting it in the first place. Run as root, the
# control plane gives each balancer's workers an account of their own (useradd/userdel, from the
# base system's passwd package; providers/os-accounts.ts), not the package's `haproxy` account.
set -euo pipefail

. "$(dirname "$0")/lib.sh"

if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  log "installing HAProxy from Debian's packages"
  apt_install haproxy
fi

# The system service, if any init system runs it: stopped and kept from starting at boot.
disable_service haproxy
