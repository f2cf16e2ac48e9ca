#!/usr/bin/env bash
# weights across two hosts on one machine: te-weights trainers in network
# namespace A (efa.node=198.51.100.1), receivers (`infer`) in namespace B
# (efa.node=198.51.100.2), over the efa plugin with provider tcp;ofi_rxm
# across a veth pair (TEST-NET-2, as tests/efa/netns.sh; never
# 192.0.2.0/24, this machine's own network). The rendezvous --dir is a
# plain directory: namespaces share the filesystem.
#  1. 2 trainers -> 2 receivers, the small preset, tp 2, fp8, two versions:
#     every receiver verifies every byte of each live version (0 differ);
#  2. the same in bf16 with 2 NICs per rank (efa.devices = 2);
#  3. 1 with trainer 1 SIGKILLed mid-version 2 (train --die-at 2:50
#     kills itself once half of its version-2 writes were submitted): every
#     receiver rejects version 2 naming the missing tensors and keeps
#     version 1 live, 0 bytes differ.
# Namespaces and processes are removed on every exit path.
#
# usage: netns.sh TE_WEIGHTS   (TE_PLUGIN_PATH: where libte-plugin-efa.so is)
#   TE_WT_NETNS_MODEL=medium: the same runs on the medium preset (the
#   throughput figure of docs/weights.md; ctest uses small).
# exit: 0 pass, 1 fail, 77 skipped (no root / namespaces / efa plugin).
TW=${1:?usage: netns.sh path/to/te-weights}
. "$(dirname "$0")/../../../tests/lib/netns.sh"

netns_require
command -v pgrep >/dev/null 2>&1 ||
  skip "pgrep not found (scripts/deps/netns.list installs procps)"
netns_require_efa_plugin
[ -x "$TW" ] || { echo "FAIL: $TW not built"; exit 1; }

WORK=$(mktemp -d /tmp/te-wt-netns.XXXXXX)
NETNS_CLEAN=("$WORK")
NETNS_LOGS="$WORK/*/*.log"
netns_up wt
echo "netns: $NS_A ($ADDR_A: trainers) <-> $NS_B ($ADDR_B: receivers) over veth $IF_A/$IF_B"

# One engine configuration per side and NIC count (te-weights --config;
# the schedule sets engine.nics_per_group); log_level 2 so that the plugin
# names its provider and paths (no silent fallback).
for side in A B; do
  addr=$ADDR_A
  [ $side = B ] && addr=$ADDR_B
  for nics in 1 2; do
    printf '[engine]\nplugin = efa\nlog_level = 2\n[efa]\nprovider = tcp;ofi_rxm\nnode = %s\ndevices = %s\n' \
      "$addr" "$nics" >"$WORK/$side$nics.ini"
  done
done

MODEL=${TE_WT_NETNS_MODEL:-small}
WATERMARK=1  # MiB of staging per trainer (as weights_e2e); larger presets
[ "$MODEL" = small ] || WATERMARK=64  # have slices above 1 MiB
timeout 30 "$TW" gen --model "$MODEL" --seed 1 --out "$WORK/c1.safetensors" >/dev/null || fail gen
timeout 30 "$TW" gen --model "$MODEL" --seed 2 --out "$WORK/c2.safetensors" >/dev/null || fail gen
C1=$WORK/c1.safetensors
C2=$WORK/c2.safetensors

# run NAME NICS "PLAN OPTIONS" [DIE_AT]: 2 trainers in A, 2 receivers in
# B; trainer 1 gets --die-at DIE_AT when given.
run() {
  local name=$1 nics=$2 opts=$3 die=${4:-}
  local d=$WORK/$name
  mkdir -p "$d/rv"
  timeout 30 "$TW" plan --model "$C1" --trainers 2 --ranks 2 $opts --nics "$nics" \
    --watermark "$WATERMARK" --out "$d/s.bin" >"$d/plan.log" || fail "$name: plan"
  local common=(--model "$C1" --schedule "$d/s.bin" --dir "$d/rv" --timeout-ms 8000
                --update 1="$C1" --update 2="$C2")
  local rpids=() tpids=() r t
  for r in 0 1; do
    timeout 60 ip netns exec "$NS_B" "$TW" infer "${common[@]}" --config "$WORK/B$nics.ini" \
      --rank $r >"$d/infer$r.log" 2>&1 &
    rpids+=($!)
    PIDS+=($!)
  done
  for t in 0 1; do
    local extra=()
    [ -n "$die" ] && [ $t = 1 ] && extra=(--die-at "$die")
    # In a subshell with its stderr (bash's "Killed" notice) discarded: a
    # SIGKILLed trainer is not reported on the test's output.
    (timeout 60 ip netns exec "$NS_A" "$TW" train "${common[@]}" --config "$WORK/A$nics.ini" \
      --rank $t "${extra[@]}" >"$d/train$t.log" 2>&1; exit $?) 2>/dev/null &
    tpids+=($!)
    PIDS+=($!)
  done
  local rc=0 p
  for p in "${rpids[@]}"; do wait "$p" || rc=1; done
  touch "$d/rv/done"  # the trainers stay reachable until this marker
  TRAIN_CODES=""
  for p in "${tpids[@]}"; do
    wait "$p"
    TRAIN_CODES="$TRAIN_CODES $?"
  done
  [ $rc = 0 ] || fail "$name: a receiver found bytes that differ or failed"
}

# 1, 2. two versions, every byte verified at both receivers.
check_versions() { # NAME
  local name=$1 side r v t
  [ "$TRAIN_CODES" = " 0 0" ] || fail "$name: a trainer failed (exit codes:$TRAIN_CODES)"
  for side in train0 infer0; do
    grep -q "provider=tcp;ofi_rxm" "$WORK/$name/$side.log" ||
      fail "$name: $side's engine is not on efa tcp;ofi_rxm"
  done
  for r in 0 1; do
    for v in 1 2; do
      grep -q "version $v live: .* 0 differ" "$WORK/$name/infer$r.log" ||
        fail "$name: receiver $r version $v"
    done
  done
  for t in 0 1; do
    grep "version [12] pushed" "$WORK/$name/train$t.log" |
      awk -v t=$t -v n=$name '{ for (i = 1; i <= NF; i++) { if ($i == "writes") w = $(i + 1);
                     if ($i == "s") s = $(i - 1) }
                     printf "netns %s trainer %d: version %s pushed %d bytes in %s s (%.2f Gbit/s)\n",
                            n, t, $4, w, s, w * 8 / s / 1e9 }'
  done
}
run fp8_1nic 1 "--tp 2 --fp8"
check_versions fp8_1nic
echo "ok: 2 trainers ($NS_A) -> 2 receivers ($NS_B), fp8, 1 NIC, over efa tcp;ofi_rxm: 2 versions live, every byte identical"
run bf16_2nic 2 "--tp 2"
check_versions bf16_2nic
for side in train0 infer0; do
  [ "$(grep -c ": opened (" "$WORK/bf16_2nic/$side.log")" = 2 ] ||
    fail "bf16_2nic: $side did not open 2 NICs"
done
echo "ok: 2 trainers -> 2 receivers, bf16, 2 NICs each, over efa tcp;ofi_rxm: 2 versions live, every byte identical"

# 3. trainer 1 dies mid-version 2.
run killed 1 "--tp 2 --fp8" 2:50
grep -q "die-at: SIGKILL after" "$WORK/killed/train1.log" || fail "killed: trainer 1 did not die mid-version 2"
grep -q "version 1 pushed" "$WORK/killed/train1.log" || fail "killed: trainer 1 did not push version 1"
grep -q "version 2 pushed" "$WORK/killed/train1.log" && fail "killed: trainer 1 pushed version 2"
for r in 0 1; do
  log=$WORK/killed/infer$r.log
  grep -q "version 1 live: .* 0 differ" "$log" || fail "killed: receiver $r version 1"
  grep -Eq "version 2 rejected: [1-9][0-9]* of [0-9]+ tensors missing \(model\..*\); live version 1, [0-9]+ tensors checked, 0 differ" "$log" ||
    fail "killed: receiver $r did not keep version 1"
  grep -o "version 2 rejected: [0-9]* of [0-9]* tensors missing" "$log" | sed "s/^/netns killed: receiver $r: /"
done
echo "ok: trainer killed mid-version 2 (exit codes:$TRAIN_CODES): version 2 rejected with the missing tensors named, version 1 stays live, 0 bytes differ"
echo "weights_netns_efa_tcp: PASS"
