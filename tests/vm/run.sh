#!/usr/bin/env bash
# Runs one command inside the test guest and returns its exit status.
#
# usage: tests/vm/run.sh [options] [--] COMMAND [ARG...]
#   --rxe           before COMMAND, create two soft-RoCE devices rxe0/rxe1 on
#                   a veth pair te-veth0/te-veth1 (198.51.100.1/.2, TEST-NET-2)
#                   with policy routing so traffic between them crosses the
#                   veth (tests/vm/rxe-setup.sh)
#   --env NAME=VAL  export this variable to COMMAND (nothing else from the
#                   host environment reaches the guest); repeatable
#   --share DIR     also make DIR visible at its own path when it lies under
#                   /tmp, /run or /root (a build directory outside the
#                   source tree); repeatable
#   --timeout S     kill the guest after S seconds (default 300): exit 124
#   --cpus N        vCPUs (default 2)   --mem MB  guest memory (default 1024)
#   --guest DIR     where the guest image is built and cached
#                   (default: $TE_VM_DIR, else /tmp/te-vm-$UID)
# COMMAND runs as root in the host's file system (read-only, with tmpfs on
# /tmp /run /root) in the current directory, under bash. The source tree and
# the current directory are shared again at their own paths when they lie
# under /tmp, /run or /root (a CI checkout in /tmp stays visible). The guest has no network card (-nic none): nothing
# leaves the machine. Exit 124: timeout; 125: the guest could not run it.
#
# Why TCG: the nested hypervisor here only runs specially built kernels
# under KVM (measured: a stock Debian kernel dies with emulation failures),
# so QEMU emulates the CPU. Keep guest work short; see docs/mlx5.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
rxe=0
timeout_s=300
cpus=2
mem=1024
guest=${TE_VM_DIR:-/tmp/te-vm-$(id -u)}
envs=()
extra_shares=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rxe) rxe=1; shift ;;
    --env) envs+=("$2"); shift 2 ;;
    --share) extra_shares+=("$(cd "$2" && pwd)"); shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --guest) guest=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: run.sh [--rxe] [--env N=V]... [--share DIR]... [--timeout S] -- COMMAND..." >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null ||
  { echo "run.sh: qemu-system-x86_64 not found (apt-get install qemu-system-x86)" >&2; exit 2; }

t0=$(date +%s%N)
"$here/build-guest.sh" "$guest"
io=$(mktemp -d "${TMPDIR:-/tmp}/te-vm-io.XXXXXX")
trap 'rm -rf "$io"' EXIT

{
  echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  echo "export HOME=/root"
  for e in "${envs[@]+"${envs[@]}"}"; do
    printf 'export %q=%q\n' "${e%%=*}" "${e#*=}"
  done
  printf 'cd %q || exit 125\n' "$PWD"
  echo 'echo "te-guest: booted in $(cut -d" " -f1 /proc/uptime) s (guest uptime)"'
  if [ "$rxe" = 1 ]; then
    printf 'source %q || { echo "te-guest: rxe setup failed"; exit 125; }\n' \
      "$here/rxe-setup.sh"
    echo 'echo "te-guest: rxe0/rxe1 ready at $(cut -d" " -f1 /proc/uptime) s"'
  fi
  printf '%q ' "$@"
  echo
} > "$io/cmd.sh"

# Directories the tmpfs mounts would hide: shared read-only at their path.
shares=()
: > "$io/binds"
src_root=$(cd "$here/../.." && pwd)
# Widest first: a directory inside one already shared is visible through it.
for d in "$src_root" "${extra_shares[@]+"${extra_shares[@]}"}" "$PWD"; do
  case "$d" in
    /tmp|/tmp/*|/run|/run/*|/root|/root/*) ;;
    *) continue ;;
  esac
  dup=0
  for s in "${shares[@]+"${shares[@]}"}"; do
    case "$d/" in "$s"/*) dup=1 ;; esac
  done
  [ "$dup" = 1 ] && continue
  tag="tebind${#shares[@]}"
  shares+=("$d")
  echo "$tag $d" >> "$io/binds"
done
share_args=()
i=0
for s in "${shares[@]+"${shares[@]}"}"; do
  share_args+=(-virtfs "local,path=$s,mount_tag=tebind$i,readonly=on,security_model=none,multidevs=remap")
  i=$((i + 1))
done

# -nodefaults/-vga none: fewer devices to probe; -no-reboot + panic=-1: a
# crashed guest ends qemu instead of looping.
set +e
timeout --foreground -k 5 "$timeout_s" qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp "$cpus" -m "$mem" \
  -nodefaults -vga none -display none -no-reboot -nic none \
  -serial stdio -monitor none \
  -kernel "$guest/vmlinux" -initrd "$guest/initrd.cpio.gz" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init" \
  -virtfs "local,path=/,mount_tag=hostroot,readonly=on,security_model=none,multidevs=remap" \
  -virtfs "local,path=$io,mount_tag=teio,security_model=none" \
  "${share_args[@]+"${share_args[@]}"}"
qrc=$?
set -e
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wall=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  echo "run.sh: guest killed after ${timeout_s}s (--timeout)" >&2
  exit 124
fi
if [ ! -s "$io/rc" ]; then
  echo "run.sh: the guest left no exit status (qemu exit $qrc, ${wall}s)" >&2
  exit 125
fi
rc=$(cat "$io/rc")
echo "run.sh: guest command exit status $rc (qemu wall time ${wall}s)" >&2
exit "$rc"
