#!/usr/bin/env bash
# Installs the system packages knowlyr needs on Debian 12 (run as root; idempotent).
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v setpriv >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing system packages: ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
