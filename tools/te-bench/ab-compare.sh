#!/bin/sh
# Two builds of the tree (A before a change, B after) measured round by
# round, interleaved, with default settings: the small-operation latencies
# of docs/benchmarks.md and what they could cost elsewhere. Per round and
# build:
#   te-bench --plugin loopback --two-process --test immlat --no-tune
#            --reference ucx                          (submit -> callback)
#   te-bench --plugin efa --set efa.provider=shm ... the same immlat
#   te-bench --plugin loopback --two-process --test send (64 B ping-pong)
#   te-bench --plugin loopback --two-process --test write --size 64K,1M,16M
#   apps/kvcache/bench_kv_cache 200 1                  (per-layer notify)
#   idle CPU of two engines that exchanged 10 writes, then idle 2 s
# Text output per run in OUTDIR; ab-summary.py OUTDIR prints medians.
# Not a test: run it on an otherwise idle machine.
#
# usage: ab-compare.sh BUILD_A BUILD_B OUTDIR [ROUNDS]
set -u
A=$1
B=$2
OUT=$3
ROUNDS=${4:-5}
mkdir -p "$OUT"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for side in A B; do
        if [ "$side" = A ]; then D=$A; else D=$B; fi
        export TE_PLUGIN_PATH="$D/plugins"
        export TE_BENCH_UCX="$D/tools/ucx-raw-bench/ucx-raw-bench"
        T="$D/tools/te-bench/te-bench"
        o="$OUT/$side.$r"
        echo "[round $r/$ROUNDS: $side]" >&2
        "$T" --plugin loopback --two-process --test immlat --no-tune \
            --reference ucx --no-progress > "$o.immlat-lb.txt" 2>&1
        "$T" --plugin efa --set efa.provider=shm --two-process \
            --test immlat --no-tune --no-progress > "$o.immlat-efa.txt" 2>&1
        "$T" --plugin loopback --two-process --test send --no-progress \
            > "$o.send.txt" 2>&1
        "$T" --plugin loopback --two-process --test write \
            --size 64K,1M,16M --no-progress > "$o.write.txt" 2>&1
        "$D/apps/kvcache/bench_kv_cache" 200 1 > "$o.kv.txt" 2>&1
        PYTHONPATH="$D/python" /usr/bin/python3 "$(dirname "$0")/idle-cpu.py" \
            > "$o.idle.txt"
    done
    r=$((r + 1))
done
