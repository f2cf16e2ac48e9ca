#!/usr/bin/env bash
# Installs the Debian 12 packages TransferEngine needs to build and test:
# every name listed in scripts/deps/*.list (one per line, '#' comments).
# Idempotent; run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")"
mapfile -t PKGS < <(cat deps/*.list | sed 's/#.*//' | tr -s ' \t' '\n' | sed '/^$/d' | sort -u)
# A name counts as present only in this machine's architecture (or "all"):
# after scripts/test-arm64.sh, dpkg-query also answers for an arm64 -dev
# package of the same name, which this build cannot use.
ARCH=$(dpkg --print-architecture)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status} ${Architecture}\n' "$p" 2>/dev/null \
    | grep -Eq "^install ok installed ($ARCH|all)\$" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
