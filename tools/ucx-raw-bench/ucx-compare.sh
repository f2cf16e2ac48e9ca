#!/bin/sh
# te-bench side by side with raw UCX (docs/benchmarks.md, "UCX side by
# side"): RUNS rounds; each round runs, for the loopback plugin and the efa
# plugin over libfabric's shm provider, two processes:
#   te-bench --test write --size 64K,1M,16M --reference ucx,ucx-tcp
#   te-bench --test immlat --reference ucx,ucx-tcp
#   te-bench --test send --size 8 --reference ucx,ucx-tcp
# (in-run pairs: ucx-raw-bench runs before each te-bench repetition, or
# once per latency case), then ucx-raw-bench alone for the same cases over
# shm and tcp (standalone: no te-bench engines alive beside it). Prints
# nothing but progress; ucx-summary.py OUTDIR prints the table. Not a test.
#
# usage: ucx-compare.sh TE_BENCH UCX_RAW_BENCH OUTDIR [RUNS]
# Environment: TB_PREFIX goes before every command (tools/te-bench/prio.sh
# on a shared machine); TE_PLUGIN_PATH must find the plugins.
set -u
BENCH=$1
UCX=$2
OUT=$3
RUNS=${4:-5}
PREFIX=${TB_PREFIX:-}
export TE_BENCH_UCX="$UCX"
mkdir -p "$OUT"

# Idle share of the CPUs over 2 s (this script's own programs are not
# running then): the load average would count our own spinning processes.
idle_pct() {
    a=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
    sleep 2
    b=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
    echo "$a $b" | awk '{d=$4-$2; print (d > 0 ? int(100*($3-$1)/d) : 0)}'
}
# Wait (at most QUIET_WAIT_S, default 600) until others leave the CPUs
# >= QUIET_PCT (default 80) % idle; the log says what it found.
quiet() {
    waited=0
    while :; do
        p=$(idle_pct)
        if [ "$p" -ge "${QUIET_PCT:-80}" ] || [ "$waited" -ge "${QUIET_WAIT_S:-600}" ]; then
            echo "  idle ${p}% (waited ${waited} s), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
            return
        fi
        sleep 8
        waited=$((waited + 10))
    done
}
i=1
while [ "$i" -le "$RUNS" ]; do
    for plug in loopback efa; do
        case $plug in
        loopback) P="--plugin loopback" ;;
        efa) P="--plugin efa --set efa.provider=shm" ;;
        esac
        echo "[run $i/$RUNS: $plug]" >&2
        quiet
        # shellcheck disable=SC2086
        $PREFIX "$BENCH" $P --two-process --test write --size 64K,1M,16M \
            --reference ucx,ucx-tcp --json --no-progress \
            > "$OUT/te.$plug.write.$i.json" || echo "  (write failed)" >&2
        # shellcheck disable=SC2086
        $PREFIX "$BENCH" $P --two-process --test immlat \
            --reference ucx,ucx-tcp --json --no-progress \
            > "$OUT/te.$plug.immlat.$i.json" || echo "  (immlat failed)" >&2
        # shellcheck disable=SC2086
        $PREFIX "$BENCH" $P --two-process --test send --size 8 \
            --reference ucx,ucx-tcp --json --no-progress \
            > "$OUT/te.$plug.send.$i.json" || echo "  (send failed)" >&2
    done
    echo "[run $i/$RUNS: ucx-raw-bench alone]" >&2
    quiet
    for tls in shm tcp; do
        for s in 64K:64 1M:16 16M:2; do
            size=${s%:*} win=${s#*:}
            $PREFIX "$UCX" --tls $tls --test write --size $size --window $win \
                --ms 200 > "$OUT/ucx.$tls.write.$size.$i.txt" 2>&1 ||
                echo "  (ucx $tls write $size failed)" >&2
        done
        $PREFIX "$UCX" --tls $tls --test immlat --iters 5000 --warmup 1000 \
            > "$OUT/ucx.$tls.immlat.$i.txt" 2>&1 || echo "  (ucx $tls immlat failed)" >&2
        $PREFIX "$UCX" --tls $tls --test send --size 8 --iters 5000 --warmup 1000 \
            > "$OUT/ucx.$tls.send.$i.txt" 2>&1 || echo "  (ucx $tls send failed)" >&2
    done
    i=$((i + 1))
done
