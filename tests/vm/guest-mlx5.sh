#!/usr/bin/env bash
# Runs INSIDE the test guest (tests/vm/mlx5-conformance.sh starts it with
# run.sh --rxe): the mlx5 plugin on soft-RoCE, everything in one boot.
#
#   1. the conformance suite, every case, one remote process, two NICs per
#      engine (rxe0 and rxe1: sharded and pinned routes on both devices,
#      each device looping its traffic back inside rxe);
#   2. its remote_killed case (needs two remote processes): a remote is
#      SIGKILLed mid-stream; its requests must fail, once each, and the
#      survivor keep working;
#   3. te-mlx5-pair: two processes on DIFFERENT devices (rxe0 <-> rxe1), so
#      RoCEv2 packets cross the veth: plain; a receiver finding its killed
#      sender by keyless heartbeats (and not without); with half of the handshake
#      datagrams lost and half duplicated (netem-ud.sh, 3 runs); and with
#      all of them lost, where a write must fail at the connect deadline;
#      and, with idle workers blocking and no timed wake-up (--block), ten
#      rounds of fresh engines whose first write is queued while the
#      connection is set up (with and without lost datagrams);
#   4. job authentication (engine.auth_key, docs/security.md): the
#      conformance suite with the same secret in every engine; the pair
#      with one secret (also with lost and duplicated datagrams); and two
#      refusals: another secret, and no secret on one side, each refused on
#      both sides by name ("failed authentication") with nothing written.
#
# Engine workers block when idle (engine.idle_spin_us, then the completion
# channel) so the processes and the guest kernel share the two emulated
# CPUs instead of spinning.
# usage: guest-mlx5.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: guest-mlx5.sh BUILD_DIR}
conf=$build/tools/te-conformance/te-conformance
pair=$build/tests/te-mlx5-pair
export TE_PLUGIN_PATH=$build/plugins
common=(--plugin mlx5 --two-process
        --set engine.idle_spin_us=10 --set engine.idle_sleep_us=50
        --set mlx5.connect_timeout_ms=8000)
rc=0
ts() { cut -d' ' -f1 /proc/uptime; }
step() { # name command...: run, time, remember failure
  local name=$1 t0 t1
  shift
  echo "== $name"
  t0=$(ts)
  "$@" || { echo "== FAILED: $name"; rc=1; }
  t1=$(ts)
  times+=("$(echo "$t0 $t1" | awk -v n="$name" '{printf "%s %.1f s", n, $2-$1}')")
}
times=()

# Idle workers block on the completion channel (plugin ABI 1.3) with every
# timed wake-up off: a missed completion event would be a hang. Every case,
# the kills of a remote included. (A write queued while its connection was
# being set up used to hang here now and then, after a kill more often:
# becoming established woke nobody to post it; see docs/mlx5.md.)
step "conformance, workers blocking with no timed wake-up (rxe0, 1 remote)" \
  timeout 240 "$conf" "${common[@]}" --remotes 1 \
  --set engine.idle_spin_us=0 --set engine.idle_block_max_ms=0 \
  --set engine.heartbeat_ms=0 --set engine.peer_timeout_ms=0 \
  --set engine.request_timeout_ms=0 --set engine.busy_wait=block
# The same settings where that race is the rule: fresh engines each round,
# A writes right after te_peer_add, so the write waits for the handshake.
step "pair, first write queued while connecting, blocking workers (10 rounds)" \
  timeout 120 "$pair" --block --setup-runs 10
# Heartbeats every 50 ms: idle peers between cases are probed with
# zero-length writes over the verbs path all along.
step "conformance (rxe0+rxe1, 1 remote process, heartbeats)" \
  timeout 240 "$conf" "${common[@]}" --remotes 1 --set engine.nics_per_group=2 \
  --set engine.heartbeat_ms=50
# Caller-driven progress (docs/progress.md) on verbs.
step "conformance, caller-driven progress (rxe0+rxe1, 1 remote)" \
  timeout 240 "$conf" "${common[@]}" --remotes 1 \
  --set engine.nics_per_group=2 --set engine.progress=caller
step "conformance remote_killed (2 remote processes)" \
  timeout 120 "$conf" "${common[@]}" --remotes 2 --case remote_killed
# The remote's bye is an orderly close (PEER_DOWN with -ESHUTDOWN), noticed
# without traffic: strict, so a NOTE fails the step (docs/mlx5.md).
step "conformance peer_closed, strict (bye = orderly close)" \
  timeout 120 "$conf" "${common[@]}" --remotes 1 --case peer_closed --strict
# No silent degradation: rxe is a software device; te-info --paths says so
# and engine.require = hardware refuses it, naming the capability.
info=$build/tools/te-info/te-info
paths_check() {
  local out
  out=$("$info" --paths --plugin mlx5 2>&1)
  echo "$out" | grep -q "write .*DEGRADED.*lacks \[hardware\]" || { echo "$out"; return 1; }
  out=$("$info" --paths --plugin mlx5 --set engine.require=hardware 2>&1) && { echo "$out"; return 1; }
  echo "$out" | grep -q "engine.require: write on NIC rxe[0-9]* lacks hardware" || { echo "$out"; return 1; }
  "$info" --paths --plugin mlx5 --set engine.require=fast >/dev/null 2>&1
}
step "paths: rxe reported as software, refused under engine.require=hardware" \
  paths_check
step "pair rxe0<->rxe1" timeout 60 "$pair"
# A receiver that never writes to its sender finds the SIGKILLed sender
# down by keyless heartbeats (zero-length RDMA WRITEs without a key, IB
# C9-88), and does not without them (engine.heartbeat_keyless = false).
step "pair, receiver finds its killed sender by keyless heartbeats" \
  timeout 90 "$pair" --sender-killed
step "pair, no keyless heartbeats: the killed sender stays live" \
  timeout 90 "$pair" --sender-killed --no-keyless
# Job authentication: every handshake proves engine.auth_key (HMAC over
# both nonces, addresses and the announced QP) before a QP goes to RTR.
key=mlx5-conformance-job-secret-0123
step "conformance with a job secret (engine.auth_key; rxe0+rxe1, 1 remote)" \
  timeout 240 "$conf" "${common[@]}" --remotes 1 --set engine.nics_per_group=2 \
  --set engine.auth_key=$key
step "pair rxe0<->rxe1, both with the same engine.auth_key" \
  timeout 60 "$pair" --key-a $key --key-b $key
refused() { # pair options...: both sides refuse, the refusal named
  local out
  out=$(timeout 60 "$pair" --expect-refused "$@" 2>&1)
  local st=$?
  echo "$out"
  [ $st -eq 0 ] && echo "$out" | grep -q "failed authentication"
}
step "pair, another engine.auth_key on B: refused on both sides" \
  refused --key-a $key --key-b another-job-secret-456789
step "pair, no engine.auth_key on B: refused on both sides" \
  refused --key-a $key
"$here/netem-ud.sh" "loss 50% duplicate 50%" || rc=1
for i in 1 2 3; do
  step "pair, handshake datagrams 50% lost 50% duplicated ($i)" \
    timeout 60 "$pair"
done
step "pair with engine.auth_key, handshake datagrams 50% lost 50% duplicated" \
  timeout 60 "$pair" --key-a $key --key-b $key
step "pair, first write queued while connecting, blocking workers, lossy (10 rounds)" \
  timeout 120 "$pair" --block --setup-runs 10
"$here/netem-ud.sh" "loss 100%" || rc=1
step "pair, every handshake datagram lost: write fails at the deadline" \
  timeout 60 "$pair" --expect-down --connect-timeout-ms 3000
"$here/netem-ud.sh" clear
echo "== guest times:"
printf '   %s\n' "${times[@]}"
exit $rc
