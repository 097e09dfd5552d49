#!/usr/bin/env bash
# What the DBaaS instances need (providers/dbinstances/): PostgreSQL's server binaries (initdb,
# pg_ctl, pg_dumpall), MariaDB's server and client (mariadbd, mariadb-install-db, mariadb-dump,
# mariadb) and openssl (the per-install CA). Installs what is missing, skips what is there.
#
# Debian's mariadb-server starts its own system service (port 3306, /run/mysqld) on install. The
# project never uses it: every instance has its own datadir, socket, loopback port and
# --defaults-file. It is kept from starting during the install and stopped and disabled if it runs.
set -euo pipefail

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
[ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1 || missing+=(mariadb-server)
command -v mariadb-dump >/dev/null 2>&1 && command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-client)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)

if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} for DBaaS instances"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's convention for "do not start services from maintainer scripts": exit code 101.
  policy_added=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_added=1
  fi
  trap 'if [ "$policy_added" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The packaged MariaDB service: stop it if it runs, keep it from starting at boot.
system_pid=$(cat /run/mysqld/mysqld.pid 2>/dev/null || true)
if [ -n "$system_pid" ] && kill -0 "$system_pid" 2>/dev/null; then
  log "stopping the mariadb system service (DBaaS runs its own instances)"
  if [ -d /run/systemd/system ]; then systemctl stop mariadb || true
  else service mariadb stop >/dev/null 2>&1 || kill "$system_pid" || true
  fi
fi
if [ -d /run/systemd/system ]; then
  systemctl is-enabled --quiet mariadb 2>/dev/null && systemctl disable --quiet mariadb || true
elif [ -e /etc/init.d/mariadb ] && command -v update-rc.d >/dev/null 2>&1; then
  update-rc.d mariadb disable >/dev/null 2>&1 || true
fi
