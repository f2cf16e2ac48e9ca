#!/usr/bin/env bash
# ctest entry (tests/mlx5.cmake): boots the test guest with two soft-RoCE
# devices and runs, in that one boot, the conformance suite against the
# mlx5 plugin and the cross-device pair tests (tests/vm/guest-mlx5.sh).
#
# Exit 77 (ctest: Skipped), with a loud message, only when the test bed
# cannot exist here: no qemu-system-x86, no linux-image-amd64 with the
# rdma_rxe module, no busybox-static, or the plugin was not built. Install
# them with scripts/install-deps.sh (list: scripts/deps/mlx5.list).
# usage: mlx5-conformance.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: mlx5-conformance.sh BUILD_DIR}" && pwd)

skip() {
  echo "************************************************************"
  echo "SKIP mlx5 on soft-RoCE: $*"
  echo "     install scripts/deps/mlx5.list (scripts/install-deps.sh)"
  echo "************************************************************"
  exit 77
}
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 missing (package qemu-system-x86)"
kimg=$(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -1)
[ -n "$kimg" ] || skip "no /boot/vmlinuz-*-amd64 (package linux-image-amd64)"
kver=${kimg#/boot/vmlinuz-}
find "/lib/modules/$kver" -name 'rdma_rxe.ko*' 2>/dev/null | grep -q . ||
  skip "kernel $kver has no rdma_rxe module"
[ -x /bin/busybox ] || skip "/bin/busybox missing (package busybox-static)"
for t in cpio xz modinfo ip rdma tc; do
  command -v "$t" >/dev/null || skip "tool $t missing (packages cpio xz-utils kmod iproute2)"
done
[ -f "$build/plugins/libte-plugin-mlx5.so" ] ||
  skip "$build/plugins/libte-plugin-mlx5.so not built (TE_WITH_MLX5=OFF, or libibverbs-dev missing)"
[ -x "$build/tools/te-conformance/te-conformance" ] ||
  skip "te-conformance not built"
[ -x "$build/tests/te-mlx5-pair" ] || skip "te-mlx5-pair not built"

# --share: ctest runs this in $build/tests, and a build directory under
# /tmp outside the source tree would otherwise leave the guest without
# $build/tools and $build/plugins.
exec "$here/run.sh" --rxe --timeout 420 --guest "$build/tests/vm-guest" \
  --share "$build" \
  -- bash "$here/guest-mlx5.sh" "$build"
