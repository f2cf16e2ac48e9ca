# Sourced by the guest (tests/vm/run.sh --rxe) before the command: two
# soft-RoCE devices on the two ends of one veth pair, in the initial network
# namespace (measured: rxe on Debian's 6.1 kernel routes only there; with
# network namespaces the first send fails with "local QP operation error").
#
#   rxe0 on te-veth0 198.51.100.1/24  <-- veth -->  te-veth1 198.51.100.2/24 rxe1
#
# Both addresses are local to the one namespace, so without help the kernel
# would deliver .1 -> .2 on the loopback device. Policy routing sends traffic
# between them out of the veth instead (and local delivery applies to what
# comes in on a veth), so RoCEv2 packets really cross the link. Traffic of a
# device to itself stays inside rxe (its loopback path).
# TEST-NET-2 addresses only; the guest has no other network.

te_rxe_setup() {
  local i
  # Few processes: under TCG every exec costs a fraction of a second.
  modprobe -a rdma_rxe veth || return 1
  ip -batch - <<'IP' || return 1
link set lo up
link add te-veth0 type veth peer name te-veth1
link set te-veth0 mtu 4200 up
link set te-veth1 mtu 4200 up
addr add 198.51.100.1/24 dev te-veth0
addr add 198.51.100.2/24 dev te-veth1
rule add pref 100 lookup local
rule del pref 0 lookup local
rule add pref 10 iif te-veth0 lookup local
rule add pref 10 iif te-veth1 lookup local
rule add pref 20 from 198.51.100.1 to 198.51.100.2 lookup 102
rule add pref 20 from 198.51.100.2 to 198.51.100.1 lookup 101
route add 198.51.100.2/32 dev te-veth0 src 198.51.100.1 table 102
route add 198.51.100.1/32 dev te-veth1 src 198.51.100.2 table 101
IP
  # (MTU 4200: rxe can then use a 4096-byte RoCE MTU.) Packets from our
  # own addresses arrive on the veths: accept them.
  sysctl -qw net.ipv4.conf.all.rp_filter=0 \
    net.ipv4.conf.te-veth0.rp_filter=0 net.ipv4.conf.te-veth0.accept_local=1 \
    net.ipv4.conf.te-veth1.rp_filter=0 net.ipv4.conf.te-veth1.accept_local=1
  rdma link add rxe0 type rxe netdev te-veth0 || return 1
  rdma link add rxe1 type rxe netdev te-veth1 || return 1
  # The IPv4 GIDs appear asynchronously; a QP connected before they exist
  # fails RTR with EINVAL (measured). Wait, bounded (about 5 s).
  for i in $(seq 1 100); do
    if grep -qs '0000:0000:0000:0000:0000:ffff:c633:6401' \
         /sys/class/infiniband/rxe0/ports/1/gids/[0-7] &&
       grep -qs '0000:0000:0000:0000:0000:ffff:c633:6402' \
         /sys/class/infiniband/rxe1/ports/1/gids/[0-7]; then
      return 0
    fi
    sleep 0.05
  done
  echo "te-guest: rxe IPv4 GIDs did not appear" >&2
  return 1
}
te_rxe_setup
