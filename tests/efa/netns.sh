#!/usr/bin/env bash
# Two hosts on one machine: the conformance suite over the efa plugin with
# provider tcp;ofi_rxm between two network namespaces joined by a veth pair
# (TEST-NET-2 addresses 198.51.100.1/24 and 198.51.100.2/24; never
# 192.0.2.0/24, this machine's own eth0 network). The parent runs in
# namespace A, every remote in its own process in namespace B
# (te-conformance --remote-wrapper "ip netns exec B"). The namespaces are
# created here with unique names and deleted on every exit path.
#
# usage: netns.sh BUILD_DIR [extra te-conformance arguments...]
# exit: te-conformance's status; 77 = skipped (cannot create namespaces).
set -u
BUILD=${1:?usage: netns.sh BUILD_DIR [te-conformance args...]}
shift
CONF=$BUILD/tools/te-conformance/te-conformance
export TE_PLUGIN_PATH=$BUILD/plugins
SKIP=77

skip() { echo "SKIP: $*"; exit $SKIP; }
command -v ip >/dev/null 2>&1 ||
  skip "iproute2 'ip' not found (scripts/deps/efa.list installs iproute2)"
[ "$(id -u)" -eq 0 ] ||
  skip "creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
[ -x "$CONF" ] || { echo "FAIL: $CONF not built"; exit 1; }

NS_A=te-efa-a-$$
NS_B=te-efa-b-$$
IF_A=tefa$$
IF_B=tefb$$
ADDR_A=198.51.100.1
ADDR_B=198.51.100.2

cleanup() {
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null  # takes the veth pair with it
  ip link del "$IF_A" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

err=$(ip netns add "$NS_A" 2>&1) || skip "cannot create a network namespace: $err"
err=$(ip netns add "$NS_B" 2>&1) || skip "cannot create a network namespace: $err"
set -e
ip link add "$IF_A" type veth peer name "$IF_B"
ip link set "$IF_A" netns "$NS_A"
ip link set "$IF_B" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$IF_A" up
ip -n "$NS_B" link set "$IF_B" up
set +e
echo "netns: $NS_A ($ADDR_A) <-> $NS_B ($ADDR_B) over veth $IF_A/$IF_B"

# The whole run is bounded; te-conformance bounds every wait itself.
timeout 180 ip netns exec "$NS_A" "$CONF" --plugin efa --two-process \
  --set "efa.provider=tcp;ofi_rxm" --set "efa.node=$ADDR_A" \
  --remote-wrapper "ip netns exec $NS_B" --remote-set "efa.node=$ADDR_B" "$@"
rc=$?
echo "netns: te-conformance exited with $rc"
exit $rc
