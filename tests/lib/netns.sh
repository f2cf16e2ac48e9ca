# Two hosts on one machine for the tests that need them: two network
# namespaces joined by a veth pair, with TEST-NET-2 addresses
# 198.51.100.1/24 (namespace A) and 198.51.100.2/24 (namespace B); never
# 192.0.2.0/24, this machine's own eth0 network. Sourced (not run) by
# tests/efa/netns.sh (the conformance suite), apps/kvcache/tests/netns.sh
# and apps/weights/tests/netns.sh:
#
#   . "$(dirname "$0")/<up>/tests/lib/netns.sh"
#   netns_require                # skips (77) without ip or root
#   netns_require_efa_plugin     # skips without libte-plugin-efa.so in TE_PLUGIN_PATH
#   netns_up TAG                 # NS_A NS_B IF_A IF_B ADDR_A ADDR_B, or skips
#
# Every exit path stops the processes listed in PIDS (and their
# descendants: stop_tree, needs pgrep), deletes the namespaces and removes
# the paths listed in NETNS_CLEAN. fail MSG prints MSG and the last lines of
# each log matched by the glob NETNS_LOGS, then exits 1.
set -u
SKIP=77
ADDR_A=198.51.100.1
ADDR_B=198.51.100.2
PIDS=()
NETNS_CLEAN=()
NETNS_LOGS=
NS_A=
NS_B=
IF_A=

skip() { echo "SKIP: $*"; exit $SKIP; }
fail() {
  echo "FAIL: $*"
  # each log's last lines without the engines' info lines and sanitizer
  # stack frames, so that the tool's own error shows
  local f
  for f in $NETNS_LOGS; do
    [ -f "$f" ] && { echo "== $f"; grep -v "transferengine info\|^    #[0-9]" "$f" | tail -25; }
  done
  # A sanitizer's report in full (frames included, first 80 lines): the
  # tail above shows that there was one, not where (a leak seen once in a
  # CI rehearsal could not be placed for want of its frames).
  for f in $NETNS_LOGS; do
    [ -f "$f" ] && grep -q "ERROR: \(Address\|Leak\)Sanitizer" "$f" &&
      { echo "== $f: sanitizer report"; sed -n '/ERROR: \(Address\|Leak\)Sanitizer/,$p' "$f" | head -80; }
  done
  exit 1
}

netns_require() {
  command -v ip >/dev/null 2>&1 ||
    skip "iproute2 'ip' not found (scripts/deps/efa.list installs iproute2)"
  [ "$(id -u)" -eq 0 ] ||
    skip "creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
}

netns_require_efa_plugin() {
  local d efa_so=
  for d in ${TE_PLUGIN_PATH//:/ }; do
    [ -f "$d/libte-plugin-efa.so" ] && efa_so=$d/libte-plugin-efa.so
  done
  [ -n "$efa_so" ] || skip "libte-plugin-efa.so not in TE_PLUGIN_PATH (built with TE_WITH_EFA=OFF?)"
}

# Stop a process we started and its descendants, by pid, children first
# (a subshell killed alone would orphan its timeout and tool).
stop_tree() {
  local c
  for c in $(pgrep -P "$1"); do stop_tree "$c"; done
  kill "$1" 2>/dev/null
}

netns_cleanup() {
  local p
  for p in "${PIDS[@]}"; do stop_tree "$p"; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "$NS_A" ] && ip netns del "$NS_A" 2>/dev/null
  [ -n "$NS_B" ] && ip netns del "$NS_B" 2>/dev/null  # takes the veth pair with it
  [ -n "$IF_A" ] && ip link del "$IF_A" 2>/dev/null
  [ ${#NETNS_CLEAN[@]} -gt 0 ] && rm -rf "${NETNS_CLEAN[@]}"
  return 0
}
trap netns_cleanup EXIT
trap 'exit 130' INT TERM

# netns_up TAG: namespaces te-TAG-a-PID and te-TAG-b-PID (unique names),
# veth tTAGaPID/tTAGbPID, addresses up; skips where they cannot be made.
netns_up() {
  NS_A=te-$1-a-$$
  NS_B=te-$1-b-$$
  IF_A=t$1a$$
  IF_B=t$1b$$
  local err
  err=$(ip netns add "$NS_A" 2>&1) || skip "cannot create a network namespace: $err"
  err=$(ip netns add "$NS_B" 2>&1) || skip "cannot create a network namespace: $err"
  set -e
  ip link add "$IF_A" type veth peer name "$IF_B"
  ip link set "$IF_A" netns "$NS_A"
  ip link set "$IF_B" netns "$NS_B"
  ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
  ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
  local ns
  for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
  ip -n "$NS_A" link set "$IF_A" up
  ip -n "$NS_B" link set "$IF_B" up
  set +e
}
