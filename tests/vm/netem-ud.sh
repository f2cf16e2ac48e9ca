#!/usr/bin/env bash
# Inside the test guest: impair only the mlx5 plugin's handshake datagrams
# on both veth ends, i.e. RoCEv2 packets (UDP port 4791) whose BTH opcode is
# UD SEND-only (0x64); RC traffic passes untouched.
#   netem-ud.sh "loss 50% duplicate 50%"   drop / duplicate (netem syntax)
#   netem-ud.sh "loss 100%"                nothing gets through
#   netem-ud.sh clear
# The u32 offset 28 is the first byte after a 20-byte IPv4 header and the
# 8-byte UDP header: the BTH opcode.
set -euo pipefail
spec=${1:?usage: netem-ud.sh NETEM-SPEC|clear}
for dev in te-veth0 te-veth1; do
  tc qdisc del dev "$dev" root 2>/dev/null || true
  [ "$spec" = clear ] && continue
  tc qdisc add dev "$dev" root handle 1: prio
  # shellcheck disable=SC2086
  tc qdisc add dev "$dev" parent 1:3 handle 30: netem $spec
  tc filter add dev "$dev" parent 1:0 protocol ip prio 1 u32 \
    match ip protocol 17 0xff match ip dport 4791 0xffff \
    match u8 0x64 0xff at 28 flowid 1:3
done
