#!/usr/bin/env bash
# Builds the tiny test guest from Debian packages only (no downloads):
#   OUT/vmlinux        the kernel of linux-image-amd64 as an uncompressed ELF
#                      (QEMU boots it through PVH: ~4 s faster under TCG
#                      than decompressing the bzImage)
#   OUT/initrd.cpio.gz busybox-static + the virtio/9p modules + tests/vm/init
#   OUT/kver           the kernel release
# The guest mounts the host's / read-only over virtio-9p and chroots into it,
# so binaries built on the host, rdma-core, perftest and the rdma_rxe module
# of that same kernel package run unchanged inside.
#
# usage: build-guest.sh OUT [KVER]   (KVER: newest /boot/vmlinuz-*-amd64)
# Rebuilds only when the kernel, busybox or tests/vm/init changed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-guest.sh OUT [KVER]}
kver=${2:-}
if [ -z "$kver" ]; then
  kimg=$(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$kimg" ] || { echo "build-guest: no /boot/vmlinuz-*-amd64 (apt-get install linux-image-amd64)" >&2; exit 2; }
  kver=${kimg#/boot/vmlinuz-}
fi
kimg=/boot/vmlinuz-$kver
moddir=/lib/modules/$kver
for f in "$kimg" "$moddir/modules.dep" /bin/busybox; do
  [ -e "$f" ] || { echo "build-guest: missing $f (packages linux-image-amd64, busybox-static)" >&2; exit 2; }
done
for t in cpio xz gzip modinfo; do
  command -v "$t" >/dev/null || { echo "build-guest: missing tool $t (packages cpio xz-utils kmod)" >&2; exit 2; }
done

mkdir -p "$out"
stamp="$kver $(stat -c %Y "$kimg") $(stat -c %Y /bin/busybox) $(cksum < "$here/init")"
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] &&
   [ -f "$out/vmlinux" ] && [ -f "$out/initrd.cpio.gz" ]; then
  exit 0
fi

# 1. The kernel: the bzImage carries an xz stream holding the ELF vmlinux.
# (pipefail off: head and xz --single-stream stop reading early, by design)
set +o pipefail
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$kimg" | head -1 | cut -d: -f1)
[ -n "$off" ] || { echo "build-guest: no xz stream in $kimg" >&2; exit 2; }
tail -c +$((off + 1)) "$kimg" | xz -dc --single-stream > "$out/vmlinux.tmp"
set -o pipefail
head -c 4 "$out/vmlinux.tmp" | grep -q ELF || { echo "build-guest: $kimg did not hold an ELF kernel" >&2; exit 2; }
mv "$out/vmlinux.tmp" "$out/vmlinux"

# 2. The initramfs: modules needed to reach the 9p root, in load order.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/mods" "$root/proc" "$root/sys" "$root/dev" "$root/newroot"
cp /bin/busybox "$root/bin/busybox"
cp "$here/init" "$root/init"
chmod 755 "$root/init"
declare -A seen=()
order=()
add_mod() { # depth-first: dependencies before the module
  local m=$1 dep
  [ -n "${seen[$m]:-}" ] && return 0
  seen[$m]=1
  for dep in $(modinfo -k "$kver" -F depends "$m" | tr ',' ' '); do
    add_mod "$dep"
  done
  local f
  f=$(modinfo -k "$kver" -F filename "$m")
  case "$f" in
    /*) ;;
    *) return 0 ;; # built into the kernel
  esac
  case "$f" in
    *.ko.xz) xz -dc "$f" > "$root/mods/$m.ko" ;;
    *.ko.zst) zstd -dcq "$f" > "$root/mods/$m.ko" ;;
    *) cp "$f" "$root/mods/$m.ko" ;;
  esac
  order+=("$m")
}
for m in virtio_pci 9pnet_virtio 9p; do add_mod "$m"; done
printf '%s\n' "${order[@]}" > "$root/mods/order"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) > "$out/initrd.cpio.gz"
echo "$kver" > "$out/kver"
echo "$stamp" > "$out/stamp"
