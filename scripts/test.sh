#!/usr/bin/env bash
# Install, build and run the whole test suite (unit tests, ABI tests, the
# conformance suite on loopback in every mode, tool smoke tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 600 "$@"
