#!/usr/bin/env bash
# kvcache across two hosts on one machine: te-kv over the efa plugin with
# provider tcp;ofi_rxm between two network namespaces joined by a veth pair
# (TEST-NET-2 198.51.100.1/24 and 198.51.100.2/24, as tests/efa/netns.sh;
# never 192.0.2.0/24, this machine's own network).
#   namespace A (the host side): etcd on 198.51.100.1:2379 (peer port on
#     A's 127.0.0.1), and every decoder (efa.node=198.51.100.1);
#   namespace B: two prefiller processes (efa.node=198.51.100.2) that
#     register in that etcd across the veth.
# Runs, each a fresh decoder process, every completed request verified
# byte for byte (te_kv_decoder_verify) and freed pages poisoned and checked
# on reuse (--poison: late writes must be 0):
#   1. transfer: requests of 1024 tokens without compute (Gbit/s printed);
#   2. cancels: every 3rd request and the one before it cancelled;
#   3. kill: a prefiller SIGKILLed while requests stream: its requests
#      fail at their deadline (fenced, keys revoked) or completed before,
#      later ones go to the survivor, nothing lost, no late write;
#   4. the killed prefiller's etcd record expires; a decoder then finds
#      only the survivor and its requests all complete.
# Namespaces, etcd and prefillers are removed on every exit path.
#
# usage: netns.sh TE_KV      (TE_PLUGIN_PATH: where libte-plugin-efa.so is)
# exit: 0 pass, 1 fail, 77 skipped (no root / namespaces / etcd / efa plugin).
KV=${1:?usage: netns.sh path/to/te-kv}
. "$(dirname "$0")/../../../tests/lib/netns.sh"

netns_require
command -v pgrep >/dev/null 2>&1 ||
  skip "pgrep not found (scripts/deps/netns.list installs procps)"
ETCD=$(command -v etcd || true)
[ -n "$ETCD" ] || skip "etcd not installed (apt-get install etcd-server)"
command -v curl >/dev/null 2>&1 || skip "curl not found (the etcd probe; scripts/deps/netns.list)"
netns_require_efa_plugin
[ -x "$KV" ] || { echo "FAIL: $KV not built"; exit 1; }

WORK=$(mktemp -d /tmp/te-kv-netns.XXXXXX)
# etcd's data on tmpfs: on this shared machine a WAL fsync on disk was
# measured at 3 s, as long as the prefillers' 3 s lease, which then expired
# (the prefiller registers again at its next keepalive, but decoders that
# listed the members meanwhile missed it).
ETCD_DATA=$(mktemp -d /dev/shm/te-kv-etcd.XXXXXX 2>/dev/null || mktemp -d "$WORK/etcd.XXXXXX")
NETNS_CLEAN=("$WORK" "$ETCD_DATA")
NETNS_LOGS="$WORK/*.log"
netns_up kv
echo "netns: $NS_A ($ADDR_A: etcd, decoders) <-> $NS_B ($ADDR_B: prefillers) over veth $IF_A/$IF_B"

# etcd in A: the namespace is fresh, so its fixed ports are free.
STORE=etcd://$ADDR_A:2379
timeout 280 ip netns exec "$NS_A" "$ETCD" --name te-kv-netns --data-dir "$ETCD_DATA/data" \
  --listen-client-urls "http://$ADDR_A:2379" --advertise-client-urls "http://$ADDR_A:2379" \
  --listen-peer-urls "http://127.0.0.1:2380" \
  --initial-advertise-peer-urls "http://127.0.0.1:2380" \
  --initial-cluster "te-kv-netns=http://127.0.0.1:2380" >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)
up=0
for _ in $(seq 1 100); do  # bounded: 100 probes, 1 s each at most
  # probed from B: the prefillers' side of the veth reaches it
  ip netns exec "$NS_B" curl -s -m 1 -X POST -d '{}' \
    "http://$ADDR_A:2379/v3/maintenance/status" >/dev/null 2>&1 && { up=1; break; }
  kill -0 "${PIDS[0]}" 2>/dev/null || fail "etcd exited"
  sleep 0.1
done
[ $up = 1 ] || fail "etcd not reachable from $NS_B"
echo "netns: etcd $("$ETCD" --version | head -1) at $STORE, reached from $NS_B"

efa=(--set engine.plugin=efa --set "efa.provider=tcp;ofi_rxm")
shape=(--store "$STORE" --cluster "netns-$$" --model qwen3-235b-a22b --layers 8)

# Prefillers in B: "fast" ones without compute (the transfer run) and
# "slow" ones with 10 ms of compute per layer at every prompt size
# (--ref-tokens = --tokens), so that requests last ~80 ms and the cancel
# and kill runs land mid-request. A later --cluster wins over shape's.
start_prefiller() { # NAME LAYER_US CLUSTER
  # In a subshell with its stderr (bash's "Killed" notice) discarded:
  # the SIGKILLed one is not reported on the test's output.
  # They serve until the end of the script stops them; --seconds only
  # bounds them (the whole run took 82 s under ThreadSanitizer: an 80 s
  # life ended the survivor during the last stage).
  (timeout 250 ip netns exec "$NS_B" "$KV" prefill "${shape[@]}" "${efa[@]}" \
    --cluster "$3" --set "efa.node=$ADDR_B" --tokens 1024 --layer-us "$2" \
    --ref-tokens 1024 --name "$1" --seconds 240 >"$WORK/$1.log" 2>&1; exit $?) 2>/dev/null &
  PIDS+=($!)
  eval "pid_$1=$!"
}
# Decoders: a prefiller ACCEPTs a request when it starts serving it (one
# at a time), so with 8 requests in flight the last one waits for the
# others; 10 s for the ACCEPT and the whole request (--request-ms) leave
# room for that on a loaded machine and under ASan (a 3 s deadline was
# exceeded here: the survivor of the kill run was fenced too).
decode() { # LOG ARGS...
  local log=$1
  shift
  timeout 120 ip netns exec "$NS_A" "$KV" decode "${shape[@]}" "${efa[@]}" \
    --set "efa.node=$ADDR_A" --poison --request-ms 10000 "$@" >"$WORK/$log.log" 2>&1
}
# The te-kv process of a prefiller: subshell -> timeout -> te-kv (ip
# netns exec execs it); kill -9 of the subshell or timeout would orphan it.
child_of() { local t; t=$(pgrep -P "$1" | head -1); [ -n "$t" ] && pgrep -P "$t" | head -1; }

# 1. transfer: prefillers without compute, 32 requests of 1024 tokens.
start_prefiller fast0 0 "netns-$$"
start_prefiller fast1 0 "netns-$$"
start_prefiller slow0 10000 "netns-$$-slow"
start_prefiller slow1 10000 "netns-$$-slow"
# log_level 2: the plugin names its provider and paths (no silent fallback).
decode transfer --prefillers 2 --tokens 1024 --requests 32 --set engine.log_level=2 ||
  fail "transfer run (exit $?)"
paths=$(grep -m1 "paths:" "$WORK/transfer.log")
echo "$paths" | grep -q "tcp;ofi_rxm" || fail "the decoder's engine is not on efa tcp;ofi_rxm: $paths"
echo "netns decoder engine: $paths"
grep -q "32/32 requests completed from 2 prefillers, 0 failed, every byte verified" \
  "$WORK/transfer.log" || fail "transfer: not every request completed verified"
grep -q "late writes 0$" "$WORK/transfer.log" || fail "transfer: late writes"
sed -n 's/^te-kv decode: 32\/32 requests completed/netns transfer: 32\/32 requests completed/p' \
  "$WORK/transfer.log"

# 2. cancels, on the prefillers with compute.
slow=(--cluster "netns-$$-slow")
decode cancel "${slow[@]}" --prefillers 2 --tokens 1024 --requests 24 \
  --cancel-every 3 || fail "cancel run (exit $?)"
line=$(grep "ended of 24" "$WORK/cancel.log") || fail "cancel: no summary"
echo "netns cancel: $line"
echo "$line" | grep -Eq ": 24 ended of 24: [0-9]+ completed, [1-9][0-9]* cancelled .* 0 failed, 0 rerouted; late writes 0$" ||
  fail "cancel: a request was lost or failed, none was cancelled, or a late write"

# 3. kill slow0 with SIGKILL while 40 requests stream through both (~80 ms
# of compute each, one at a time per prefiller: >1.6 s of requests). The
# kill lands 0.3 s after the decoder's engine is up (its info line; it
# lists the store before, then adds the prefillers and submits at once).
# The victim's requests in flight fail at their 10 s deadline.
victim=$(child_of "$pid_slow0")
[ -n "$victim" ] || fail "no te-kv process under prefiller slow0's timeout"
decode kill "${slow[@]}" --prefillers 2 --tokens 1024 --requests 40 \
  --allow-failed --set engine.log_level=2 & dec=$!
PIDS+=($dec)
for _ in $(seq 1 200); do  # bounded: 200 x 0.05 s
  grep -q "paths:" "$WORK/kill.log" 2>/dev/null && break
  kill -0 "$dec" 2>/dev/null || break
  sleep 0.05
done
sleep 0.3
kill -9 "$victim"
wait "$dec" || fail "kill run (exit $?)"
line=$(grep "ended of 40" "$WORK/kill.log") || fail "kill: no summary"
echo "netns kill: $line"
echo "$line" | grep -Eq ": 40 ended of 40: [0-9]+ completed, 0 cancelled .* late writes 0$" ||
  fail "kill: a request was lost or a late write"
grep -q "every byte verified" "$WORK/kill.log" || fail "kill: a completed request failed verification"
failed=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
if [ "$failed" -gt 0 ]; then
  # Failed requests are the victim's, fenced: its keys revoked.
  [ "$(grep -c "fenced" "$WORK/kill.log")" -ge 1 ] || fail "kill: failures without a fence"
fi

# 4. slow0's lease (3 s) expires; the survivor alone serves.
gone=0
for _ in $(seq 1 50); do  # bounded: 50 x (<= 10 s + 0.2 s)
  out=$(timeout 10 ip netns exec "$NS_A" "$KV" members "${shape[@]}" "${slow[@]}" 2>&1)
  echo "$out" | grep -q "slow0" || { gone=1; break; }
  sleep 0.2
done
[ $gone = 1 ] || fail "the killed prefiller is still listed: $out"
echo "$out" | grep -q "slow1 prefill" || fail "the survivor vanished: $out"
decode after "${slow[@]}" --prefillers 1 --tokens 1024 --requests 8 ||
  fail "after the kill (exit $?)"
grep -q "8/8 requests completed from 1 prefillers, 0 failed, every byte verified" \
  "$WORK/after.log" || fail "after the kill: not every request completed verified"
echo "netns after kill: slow0 expired from etcd, 8/8 requests through slow1 verified"

for p in "$pid_fast0" "$pid_fast1" "$pid_slow1"; do kill -TERM "$(child_of "$p")" 2>/dev/null; done
for p in "$pid_fast0" "$pid_fast1" "$pid_slow1"; do wait "$p" 2>/dev/null; done
cat "$WORK"/fast0.log "$WORK"/fast1.log "$WORK"/slow1.log | grep "^te-kv prefill"
echo "kvcache_netns_efa_tcp: PASS"
