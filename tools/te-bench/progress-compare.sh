#!/bin/sh
# Small operations and bandwidth in every progress model, side by side with
# raw UCX (docs/benchmarks.md, "Small operations: progress models"). RUNS
# rounds; each round runs, for the loopback plugin and the efa plugin over
# libfabric's shm provider, two processes, interleaved:
#   thread  the defaults (idle workers block, engine.busy_wait = nap)
#   sleep   engine.idle_wait = sleep (the sleep-polling loop before ABI 1.3)
#   caller  engine.progress = caller (te-bench's server progresses its
#           engine from one thread; the client thread progresses its own)
# te-bench --test immlat,send --reference ucx   (UCX p50 in the row's note)
# te-bench --test write --size 64K,1M,16M --reference ucx
# then the idle CPU of two engines that exchanged a few writes, over 2 s,
# per idle_wait. Writes JSON per run into OUTDIR; progress-summary.py
# OUTDIR prints the tables. Not a test.
#
# usage: progress-compare.sh BUILD_DIR OUTDIR [RUNS]
set -u
B=$1
OUT=$2
RUNS=${3:-5}
BENCH=$B/tools/te-bench/te-bench
export TE_PLUGIN_PATH=${TE_PLUGIN_PATH:-$B/plugins}
export TE_BENCH_UCX=${TE_BENCH_UCX:-$B/tools/ucx-raw-bench/ucx-raw-bench}
mkdir -p "$OUT"
i=1
while [ "$i" -le "$RUNS" ]; do
    for plug in loopback efa; do
        case $plug in
        loopback) P="--plugin loopback" ;;
        efa) P="--plugin efa --set efa.provider=shm" ;;
        esac
        for mode in thread sleep caller; do
            case $mode in
            thread) M="" ;;
            sleep) M="--set engine.idle_wait=sleep" ;;
            caller) M="--set engine.progress=caller" ;;
            esac
            echo "[run $i/$RUNS: $plug $mode]" >&2
            # shellcheck disable=SC2086
            "$BENCH" $P $M --two-process --test immlat,send --reference ucx \
                --json --no-progress > "$OUT/lat.$plug.$mode.$i.json" ||
                echo "  (latency failed)" >&2
            # shellcheck disable=SC2086
            "$BENCH" $P $M --two-process --test write --size 64K,1M,16M \
                --reference ucx --json --no-progress \
                > "$OUT/bw.$plug.$mode.$i.json" || echo "  (write failed)" >&2
        done
    done
    for iw in block sleep; do
        PYTHONPATH=$B/python /usr/bin/python3 "$(dirname "$0")/idle-cpu.py" \
            "$iw" >> "$OUT/idle.$iw.txt"
    done
    i=$((i + 1))
done
