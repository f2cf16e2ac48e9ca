#!/bin/sh
# The efa plugin through the engine side by side with the same libfabric
# traffic written directly (tools/fi-raw-bench), on libfabric's shm and
# tcp;ofi_rxm providers, RUNS interleaved pairs each (raw, then te-bench),
# so that drifting load on a shared machine hits both alike. Then
# summarize.py prints the ratios (docs/benchmarks.md). Not a test.
#
# Why not te-bench's in-run `--reference CMD`: the command runs while
# te-bench's own engines are alive, and their idle workers (spin 50 us,
# then wake every 20 us) take CPU from the raw program on a 2-core machine
# (measured: raw shm 64 KiB 3.96 GB/s inside te-bench, 6.6-7.5 GB/s alone).
# Here each side runs alone.
#
# usage: efa-compare.sh TE_BENCH FI_RAW_BENCH OUTDIR [RUNS] [PROVIDER...]
#   PROVIDER: shm, tcp (= tcp;ofi_rxm on 127.0.0.1); default both.
# Environment: TB_PREFIX goes before every command (see prio.sh);
# TE_PLUGIN_PATH must find the efa plugin.
set -eu
BENCH=$1
RAW=$2
OUT=$3
RUNS=${4:-5}
shift 3
if [ $# -gt 0 ]; then shift; fi
PROVIDERS=${*:-"shm tcp"}
PREFIX=${TB_PREFIX:-}
mkdir -p "$OUT"

# Sizes and windows as te-bench picks them by default (16 MiB / size,
# 2..64 in flight); the raw program cycles over the same footprint.
SIZES="64K:65536:64:4 1M:1048576:16:16 8M:8388608:2:16"

for prov in $PROVIDERS; do
    case $prov in
    shm) fi="shm"; raw_node=""; te_set="--set efa.provider=shm" ;;
    tcp) fi="tcp;ofi_rxm"; raw_node="--node 127.0.0.1"
         te_set="--set efa.provider=tcp;ofi_rxm --set efa.node=127.0.0.1" ;;
    *) echo "unknown provider $prov (shm or tcp)" >&2; exit 2 ;;
    esac
    i=1
    while [ "$i" -le "$RUNS" ]; do
        echo "[efa $prov run $i/$RUNS]" >&2
        for s in $SIZES; do
            IFS=: read -r label bytes win mib <<EOF
$s
EOF
            # shellcheck disable=SC2086
            $PREFIX "$RAW" --provider "$fi" $raw_node --mode stream \
                --sizes "$bytes" --window "$win" --region-mib "$mib" \
                --ms 1000 --json > "$OUT/efa_raw_stream.$prov.$label.$i.json" ||
                echo "  (raw stream $label failed)" >&2
        done
        # shellcheck disable=SC2086
        $PREFIX "$RAW" --provider "$fi" $raw_node --mode pingpong --sizes 8 \
            --iters 5000 --idle-sleep-us 0 --json \
            > "$OUT/efa_raw_pingpong.$prov.$i.json" ||
            echo "  (raw pingpong failed)" >&2
        # shellcheck disable=SC2086
        $PREFIX "$BENCH" --plugin efa $te_set --two-process --test write \
            --size 64K,1M,8M --reference none --reps 5 --json --no-progress \
            > "$OUT/efa_te_write.$prov.$i.json" ||
            echo "  (te-bench write failed)" >&2
        # The engine's own share of a small write's latency: the sender's
        # te_submit() -> transport post() (one peer, worker spinning) and
        # the receiver's transport poll() -> ImmCounter callback.
        # shellcheck disable=SC2086
        $PREFIX "$BENCH" --plugin efa $te_set --test post,immlat --peers 1 \
            --reps 5 --json --no-progress > "$OUT/efa_te_lat.$prov.$i.json" ||
            echo "  (te-bench latency failed)" >&2
        i=$((i + 1))
    done
done
python3 "$(dirname "$0")/summarize.py" "$OUT"
