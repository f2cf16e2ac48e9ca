#!/usr/bin/env bash
# ctest entry vm_run_share (tests/mlx5.cmake): run.sh --share makes a
# directory under /tmp visible in the guest at its own path, and without it
# the guest's tmpfs hides that directory. That is what lets
# mlx5_rxe_conformance reach a build directory in /tmp outside the source
# tree (ctest starts it in $build/tests; the guest needs $build/tools).
# Exit 77 (Skipped) only when the guest cannot boot here (no qemu, kernel
# or busybox: scripts/deps/mlx5.list). usage: share-test.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: share-test.sh BUILD_DIR}" && pwd)
skip() { echo "SKIP vm_run_share: $*"; exit 77; }
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 missing"
ls /boot/vmlinuz-*-amd64 >/dev/null 2>&1 || skip "no /boot/vmlinuz-*-amd64"
[ -x /bin/busybox ] || skip "/bin/busybox missing"

d=$(mktemp -d /tmp/te-vm-share.XXXXXX)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/work"
marker="shared $$ $(date +%s%N)"
echo "$marker" > "$d/marker"
cd "$d/work"
run() { "$here/run.sh" --timeout 240 --guest "$build/tests/vm-guest" "$@"; }

out=$(run --share "$d" -- cat "$d/marker" 2>&1) ||
  { echo "$out"; echo "FAIL: the guest could not read $d/marker with --share"; exit 1; }
grep -qF "$marker" <<<"$out" ||
  { echo "$out"; echo "FAIL: the guest read something else than $d/marker"; exit 1; }
out=$(run -- test -e "$d/marker" 2>&1) && {
  echo "$out"
  echo "FAIL: $d/marker visible without --share: this test no longer shows the need"
  exit 1
}
echo "PASS: $d visible in the guest with --share only"
