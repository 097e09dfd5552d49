#!/usr/bin/env bash
# PostgreSQL for `npm start` and `npm test`: the machine's cluster (installed from Debian's packages
# when absent, created and started when needed) with a `cloud` superuser and database; nothing when
# DATABASE_URL names a server of your own. Skips what is there.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

if [ -n "${DATABASE_URL:-}" ]; then
  log "using DATABASE_URL"
  exit 0
fi
# As postgres, from `/`: the checkout may be somewhere postgres cannot read (psql would say
# "could not change directory"); the cluster tools are run from there too.
as_postgres() { (cd / && runuser -u postgres -- "$@"); }
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  log "installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
PG_VERSION=$(ls /usr/lib/postgresql | sort -V | tail -n1)
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^${PG_VERSION} main$"; then
  log "creating PostgreSQL ${PG_VERSION} cluster"
  (cd / && pg_createcluster "${PG_VERSION}" main >/dev/null)
fi
if ! pg_lsclusters -h | awk -v v="${PG_VERSION}" '$1==v && $2=="main" {print $4}' | grep -q online; then
  log "starting PostgreSQL ${PG_VERSION}"
  (cd / && pg_ctlcluster "${PG_VERSION}" main start)
fi
for _ in $(seq 1 30); do
  if as_postgres psql -qAtc 'select 1' >/dev/null 2>&1; then break; fi
  sleep 0.5
done
if [ "$(as_postgres psql -qAtc "select 1 from pg_roles where rolname='cloud'")" != "1" ]; then
  log "creating role and database 'cloud'"
  # Superuser so that the test suite can create and drop a fresh database per test file.
  as_postgres psql -qc "create role cloud login superuser password 'cloud'"
fi
if [ "$(as_postgres psql -qAtc "select 1 from pg_database where datname='cloud'")" != "1" ]; then
  as_postgres psql -qc "create database cloud owner cloud"
fi
