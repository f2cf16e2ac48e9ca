#!/bin/sh
# Caller-driven WriteImm latency of two builds (A before a change, B after),
# round by round, interleaved, each run a few seconds (so 30 pairs fit in
# minutes): this VM moves between a fast and a slow state within minutes,
# and only pairs measured side by side compare (docs/benchmarks.md, "Cold
# submits"). Per round and build, at high priority (prio.sh):
#   te-bench --set engine.progress=caller --two-process --test immlat
#            --reference ucx --reps 5 --json  [ARGS, default --plugin loopback]
# JSON per run in OUTDIR (A.R.json, B.R.json); ab-immlat-summary.py OUTDIR
# prints each series' medians, in how many pairs B is lower, and the median
# of the per-pair B/A ratios. Not a test: run it on an otherwise idle
# machine.
#
# usage: ab-immlat.sh BUILD_A BUILD_B OUTDIR [ROUNDS [TE-BENCH ARGS...]]
#   e.g. ab-immlat.sh build-a build-b out 12
#        ab-immlat.sh build-a build-b out 6 --plugin efa --set efa.provider=shm
set -u
if [ $# -lt 3 ]; then
    echo "usage: ab-immlat.sh BUILD_A BUILD_B OUTDIR [ROUNDS [TE-BENCH ARGS...]]" >&2
    exit 2
fi
A=$1
B=$2
OUT=$3
ROUNDS=${4:-12}
shift 3
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- --plugin loopback
case $ROUNDS in
    ''|*[!0-9]*) echo "ab-immlat.sh: ROUNDS must be a whole number, got \"$ROUNDS\"" >&2; exit 2 ;;
esac
for d in "$A" "$B"; do
    if [ ! -x "$d/tools/te-bench/te-bench" ]; then
        echo "ab-immlat.sh: no te-bench in $d/tools/te-bench" >&2
        exit 2
    fi
done
PRIO="$(dirname "$0")/prio.sh"
mkdir -p "$OUT"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for side in A B; do
        if [ "$side" = A ]; then D=$A; else D=$B; fi
        echo "[round $r/$ROUNDS: $side]" >&2
        TE_PLUGIN_PATH="$D/plugins" \
        TE_BENCH_UCX="$D/tools/ucx-raw-bench/ucx-raw-bench" \
            "$PRIO" "$D/tools/te-bench/te-bench" "$@" \
            --set engine.progress=caller --two-process --test immlat \
            --reference ucx --reps 5 --no-progress --json \
            > "$OUT/$side.$r.json" 2> "$OUT/$side.$r.err"
    done
    r=$((r + 1))
done
