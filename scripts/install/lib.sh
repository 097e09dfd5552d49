# What the install scripts share (sourced, not run): a log line, installing Debian packages without
# starting their services, and stopping a package's system service that the platform replaces with
# processes of its own.

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

# apt_install PACKAGE...: installs them from Debian's packages (no recommends). policy-rc.d answers
# 101 while it runs, so no package starts its service (the platform runs its own servers).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local policy=/usr/sbin/policy-rc.d placed=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && placed=1; fi
  local status=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } || status=$?
  if [ "$placed" = 1 ]; then rm -f "$policy"; fi
  return "$status"
}

# disable_service NAME: a package's system service, if an init system runs it, stopped and kept from
# starting at boot.
disable_service() {
  local name="$1"
  if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled "$name" >/dev/null 2>&1; then
    systemctl disable --now "$name" >/dev/null 2>&1 || true
  elif [ -x "/etc/init.d/$name" ]; then
    "/etc/init.d/$name" stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && update-rc.d "$name" disable >/dev/null 2>&1 || true
  fi
}
