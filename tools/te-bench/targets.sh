#!/bin/sh
# Runs the performance targets of docs/benchmarks.md RUNS times each and
# summarizes the medians (tools/te-bench/summarize.py). Not a test: it
# reports, it does not fail on slow numbers.
#
# usage: targets.sh TE_BENCH OUTDIR [RUNS] [TARGET...]
#   TE_BENCH  the te-bench binary (TE_PLUGIN_PATH must find the plugins)
#   OUTDIR    where the JSON of every run goes (created)
#   RUNS      runs per target (default 5)
#   TARGET    any of the names below (default: all)
# Environment: TB_PREFIX is put before every command (e.g. "nice -n -20";
# with scheduler autogroups (/proc/sys/kernel/sched_autogroup_enabled = 1)
# nice acts only inside the session, see docs/benchmarks.md).
set -eu
BENCH=$1
OUT=$2
RUNS=${3:-5}
shift 2
if [ $# -gt 0 ]; then shift; fi
TARGETS=${*:-"write_1p write_2p paged_16k imm_rate imm_rate_2e post_56 imm_lat nics_1 nics_2 nics_4"}
PREFIX=${TB_PREFIX:-}
mkdir -p "$OUT"

args_for() {
    case $1 in
    write_1p)  echo "--test write --size 1M,4M,16M --reference memcpy,cma" ;;
    write_2p)  echo "--test write --size 1M,4M,16M --reference memcpy,cma --two-process" ;;
    paged_16k) echo "--test paged --size 1M,4M,16M --page 16K --reference write,memcpy" ;;
    imm_rate)  echo "--test imm --size 0 --imm-batch 1024 --self" ;;
    imm_rate_2e) echo "--test imm --size 0 --imm-batch 1024" ;;
    post_56)   echo "--test post --peers 56 --size 0" ;;
    imm_lat)   echo "--test immlat" ;;
    nics_1)    echo "--test write,paged --size 1M,4M,16M --nics 1 --set loopback.link_gbps=8 --reference none" ;;
    nics_2)    echo "--test write,paged --size 1M,4M,16M --nics 2 --set loopback.link_gbps=8 --reference none" ;;
    nics_4)    echo "--test write,paged --size 1M,4M,16M --nics 4 --set loopback.link_gbps=8 --reference none" ;;
    *) echo "unknown target $1" >&2; exit 2 ;;
    esac
}

for t in $TARGETS; do
    a=$(args_for "$t")
    i=1
    while [ "$i" -le "$RUNS" ]; do
        echo "[$t run $i/$RUNS] $PREFIX $BENCH $a --reps 5 --json" >&2
        # shellcheck disable=SC2086
        $PREFIX "$BENCH" $a --reps 5 --json --no-progress > "$OUT/$t.$i.json" ||
            echo "  (run $i of $t reported a failure; kept for the summary)" >&2
        i=$((i + 1))
    done
done
python3 "$(dirname "$0")/summarize.py" "$OUT"
