#!/bin/bash
# weights_e2e: te-weights trainers and receivers as separate processes on
# the loopback transport. Checks, with the receivers verifying every byte of
# their live weights against the checkpoint (same sharding + quantisation):
#  1. N trainers -> M receivers for (N, M) in {1,2,4} combinations, fp8 and
#     bf16, two versions in a row, 2 NICs per GPU;
#  2. a trainer killed mid-update (loopback fault_kill_after): the version
#     is rejected at every receiver with the missing tensors named, the
#     previous version stays live and identical to its checkpoint;
#  3. bad input: a schedule of another model, a lying safetensors header.
# Usage: e2e.sh path/to/te-weights
set -u
TW=$1
WORK=$(mktemp -d /tmp/weights_e2e.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; for f in "$WORK"/*/*.log; do echo "== $f"; cat "$f"; done; exit 1; }

"$TW" gen --model small --seed 1 --out "$WORK/c1.safetensors" >/dev/null || fail gen
"$TW" gen --model small --seed 2 --out "$WORK/c2.safetensors" >/dev/null || fail gen
C1=$WORK/c1.safetensors
C2=$WORK/c2.safetensors

# run NAME TRAINERS RANKS "plan options" [KILL_TRAINER KILL_AFTER]
run() {
    local name=$1 n=$2 m=$3 opts=$4 kill_t=${5:-} kill_after=${6:-}
    local d=$WORK/$name
    mkdir -p "$d/rv"
    "$TW" plan --model "$C1" --trainers "$n" --ranks "$m" --nics 2 --watermark 1 $opts \
        --out "$d/s.bin" > "$d/plan.log" || fail "$name: plan"
    local common=(--model "$C1" --schedule "$d/s.bin" --dir "$d/rv" --timeout-ms 8000
                  --update 1="$C1" --update 2="$C2")
    local pids=() tpids=()
    for ((r = 0; r < m; r++)); do
        timeout 60 "$TW" infer "${common[@]}" --rank $r > "$d/infer$r.log" 2>&1 &
        pids+=($!)
    done
    for ((t = 0; t < n; t++)); do
        if [ "$t" = "$kill_t" ]; then
            TE_LOOPBACK_FAULT_KILL_AFTER=$kill_after timeout 60 "$TW" train "${common[@]}" \
                --rank $t > "$d/train$t.log" 2>&1 &
        else
            timeout 60 "$TW" train "${common[@]}" --rank $t > "$d/train$t.log" 2>&1 &
        fi
        tpids+=($!)
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    touch "$d/rv/done"
    local trc=0 codes=""
    for p in "${tpids[@]}"; do
        wait "$p"
        local c=$?
        codes="$codes $c"
        [ $c = 0 ] || trc=1
    done
    [ $rc = 0 ] || fail "$name: a receiver found bytes that differ or failed"
    # Trainers exit 0 when every version was pushed (3 when one failed, as
    # in the killed run; anything else, e.g. a sanitizer report, fails).
    [ -n "$kill_t" ] || [ $trc = 0 ] || fail "$name: a trainer failed (exit codes:$codes)"
}

for cfg in "1 1 --tp=1" "2 2 --tp=2 --fp8" "4 2 --tp=2 --fp8" "2 4 --tp=2" "1 4 --tp=4 --ep=2 --fp8" \
           "4 4 --tp=2 --ep=4 --fp8"; do
    set -- $cfg
    n=$1 m=$2
    shift 2
    opts=$(echo "$*" | sed 's/=/ /g')
    name="n${n}_m${m}_$(echo "$opts" | tr -d ' -')"
    run "$name" "$n" "$m" "$opts"
    for ((r = 0; r < m; r++)); do
        grep -q "version 1 live: .* 0 differ" "$WORK/$name/infer$r.log" || fail "$name rank $r v1"
        grep -q "version 2 live: .* 0 differ" "$WORK/$name/infer$r.log" || fail "$name rank $r v2"
    done
    echo "ok: $n trainers -> $m receivers ($opts): 2 versions live, every byte identical"
done

# Trainer 1 of 2 dies during version 2: its NICs die after 1.5x the
# operations each of them posted for version 1 in the same configuration
# above (every write and read is sharded over both NICs: writes + reads per
# NIC, from its log), so the kill lands mid-version 2.
v1=$(grep "version 1 pushed" "$WORK/n2_m2_tp2fp8/train1.log") || fail "no v1 log"
ops=$(echo "$v1" | sed -E 's/.*: ([0-9]+) writes [0-9]+ bytes, ([0-9]+) reads.*/\1 \2/' |
      awk '{print $1 + $2}')
run killed 2 2 "--tp 2 --fp8" 1 $((ops + ops / 2))
for r in 0 1; do
    log=$WORK/killed/infer$r.log
    grep -q "version 1 live: .* 0 differ" "$log" || fail "killed: rank $r v1"
    grep -Eq "version 2 rejected: [1-9][0-9]* of [0-9]+ tensors missing \(model\..*\); live version 1, [0-9]+ tensors checked, 0 differ" "$log" \
        || fail "killed: rank $r did not keep version 1"
done
echo "ok: trainer killed mid-update: version 2 rejected with the missing tensors named, version 1 stays live, 0 bytes differ"

# Bad input: a schedule of another model is refused naming the field.
"$TW" plan --model qwen3-235b --trainers 2 --ranks 2 --tp 2 --out "$WORK/other.bin" >/dev/null
out=$("$TW" infer --model "$C1" --schedule "$WORK/other.bin" --rank 0 --dir "$WORK" \
      --update 1="$C1" 2>&1)
echo "$out" | grep -q "field fingerprint" || fail "other model's schedule: $out"
printf '\x10\x27\x00\x00\x00\x00\x00\x00{}' > "$WORK/lying.safetensors"
out=$("$TW" plan --model "$WORK/lying.safetensors" 2>&1)
echo "$out" | grep -q "header length 10000 exceeds" || fail "lying header: $out"
echo "ok: bad input refused with the cause named"
echo "weights_e2e: OK"
