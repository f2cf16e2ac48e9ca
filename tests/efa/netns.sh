#!/usr/bin/env bash
# Two hosts on one machine: the conformance suite over the efa plugin with
# provider tcp;ofi_rxm between two network namespaces joined by a veth pair
# (TEST-NET-2 addresses 198.51.100.1/24 and 198.51.100.2/24; never
# 192.0.2.0/24, this machine's own eth0 network). The parent runs in
# namespace A, every remote in its own process in namespace B
# (te-conformance --remote-wrapper "ip netns exec B"). The namespaces
# (tests/lib/netns.sh) have unique names and are deleted on every exit path.
#
# usage: netns.sh BUILD_DIR [extra te-conformance arguments...]
# exit: te-conformance's status; 77 = skipped (cannot create namespaces).
BUILD=${1:?usage: netns.sh BUILD_DIR [te-conformance args...]}
shift
CONF=$BUILD/tools/te-conformance/te-conformance
export TE_PLUGIN_PATH=$BUILD/plugins
. "$(dirname "$0")/../lib/netns.sh"

netns_require
[ -x "$CONF" ] || { echo "FAIL: $CONF not built"; exit 1; }
netns_up efa
echo "netns: $NS_A ($ADDR_A) <-> $NS_B ($ADDR_B) over veth $IF_A/$IF_B"

# The whole run is bounded; te-conformance bounds every wait itself.
timeout 180 ip netns exec "$NS_A" "$CONF" --plugin efa --two-process \
  --set "efa.provider=tcp;ofi_rxm" --set "efa.node=$ADDR_A" \
  --remote-wrapper "ip netns exec $NS_B" --remote-set "efa.node=$ADDR_B" "$@"
rc=$?
echo "netns: te-conformance exited with $rc"
exit $rc
