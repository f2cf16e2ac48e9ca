#!/usr/bin/env bash
# The main job on a fresh machine: install, build, then run the KV-cache
# WriteImm/ImmCounter demo on the loopback transport, in one process and in
# two processes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export TE_PLUGIN_PATH="$PWD/build/plugins"
build/tools/te-info/te-info --plugins --groups
build/tools/te-demo/te-demo "$@"
build/tools/te-demo/te-demo --two-process "$@"
