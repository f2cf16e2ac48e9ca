#!/usr/bin/env bash
# Installs the Debian 12 packages TransferEngine needs to build and test.
# Idempotent; run as root (or with sudo available).
set -euo pipefail
PKGS=(build-essential cmake pkg-config libinih-dev check
      libfabric-dev libfabric-bin libibverbs-dev rdma-core ibverbs-providers
      valgrind)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
