#!/usr/bin/env bash
# The main job on a fresh machine: install, build, then run the KV-cache
# WriteImm/ImmCounter demo on the loopback transport, in one process and in
# two processes; then the same job with a real model: a tiny torch
# transformer prefilled in one process, its KV pushed layer by layer into
# another process's own cache tensor and decoded there, tokens and logits
# equal to a single-process run (python/examples/kv_disagg_torch.py,
# docs/kvcache.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export TE_PLUGIN_PATH="$PWD/build/plugins"
build/tools/te-info/te-info --plugins --groups
build/tools/te-demo/te-demo "$@"
build/tools/te-demo/te-demo --two-process "$@"
PYTHONPATH="$PWD/build/python" /usr/bin/python3 python/examples/kv_disagg_torch.py
