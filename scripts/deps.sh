#!/usr/bin/env bash
# Installs lipt's build dependencies on Debian/Ubuntu when missing (apt-get, through sudo when not root).
# Sourced by scripts/test.sh and scripts/demo.sh; extra package names may be passed as arguments.
set -euo pipefail
PKGS=(cmake make gcc libc6-dev pkg-config libopenblas-openmp-dev check libsubunit-dev zlib1g-dev "$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  command -v apt-get >/dev/null || { echo "error: apt-get not found: install ${missing[*]} by hand" >&2; exit 1; }
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "error: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
