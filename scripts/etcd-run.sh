#!/usr/bin/env bash
# Runs a command next to a real etcd (Debian's etcd-server) on 127.0.0.1:
# a free port, a temporary data directory, stopped and removed at the end
# whatever happens. The command sees TE_KV_ETCD=etcd://127.0.0.1:PORT.
#   scripts/etcd-run.sh COMMAND [ARGS...]
# Exit 77 (ctest: skipped) when etcd is not installed.
set -uo pipefail
ETCD=$(command -v etcd || true)
[ -n "$ETCD" ] || { echo "etcd-run: etcd not installed (apt-get install etcd-server): skipped"; exit 77; }
dir=$(mktemp -d /tmp/te-etcd-XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
client=$(free_port)
peer=$(free_port)
"$ETCD" --name te-test --data-dir "$dir/data" \
  --listen-client-urls "http://127.0.0.1:$client" \
  --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "te-test=http://127.0.0.1:$peer" \
  >"$dir/etcd.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -s -m 1 -X POST -d '{}' "http://127.0.0.1:$client/v3/maintenance/status" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "etcd-run: etcd exited:"; cat "$dir/etcd.log"; exit 1; }
  sleep 0.1
done
export TE_KV_ETCD="etcd://127.0.0.1:$client"
echo "etcd-run: etcd $("$ETCD" --version | head -1) at $TE_KV_ETCD"
"$@"
rc=$?
exit $rc
