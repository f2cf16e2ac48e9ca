#!/usr/bin/env bash
# Install, build and run the whole test suite (unit tests, ABI tests, the
# conformance suite on loopback in every mode, tool smoke tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 600 "$@"
# The same tree cross-built for aarch64, its unit tests and loopback
# conformance under qemu-user (docs/arm64.md; TE_SKIP_ARM64=1 skips it).
../scripts/test-arm64.sh
