#!/usr/bin/env bash
# Builds every installed library's consumer (consumers/use_*.c) against an
# installed TransferEngine PREFIX, once with pkg-config and once with CMake
# find_package(TransferEngine COMPONENTS ...), and runs each with no
# LD_LIBRARY_PATH, TE_PLUGIN_PATH or TE_CONFIG: the programs find the
# libraries by their RPATH and the engine finds the installed loopback
# plugin beside the installed library. Called by run.sh (ctest
# out_of_tree_plugin); usable on its own.
# Usage: consumers.sh PREFIX WORK_DIR
set -euo pipefail

die() { echo "out_of_tree_plugin: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

[ $# -eq 2 ] || die "usage: $0 PREFIX WORK_DIR"
prefix=$1
work=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/consumers" && pwd)
cmake=${CMAKE_COMMAND:-cmake}
cc=${CC:-cc}
rm -rf "$work/pc" "$work/cmake" "$work/cmake-bad"
mkdir -p "$work/pc"

# run_clean PROGRAM: runs it outside this environment's library and plugin paths.
run_clean() {
    local out
    out=$(env -u LD_LIBRARY_PATH -u TE_PLUGIN_PATH -u TE_CONFIG "$1" 2>&1) \
        || { echo "$out" >&2; die "$1 failed"; }
    echo "   $out"
}

# Library .pc module -> consumer program; te-moe-gpu only if installed.
pcdir=$(dirname "$(find "$prefix" -name transferengine.pc -print -quit)")
[ -d "$pcdir" ] || die "$prefix has no transferengine.pc"
mods="transferengine:use_te te-kv:use_kv te-weights:use_weights te-moe:use_moe"
[ -f "$pcdir/te-moe-gpu.pc" ] && mods="$mods te-moe-gpu:use_moe_gpu"

pc() { PKG_CONFIG_PATH=$pcdir pkg-config "$@" "$mod"; }

# An app library is found by its consumer's RPATH, but its own dependency
# libtransferengine only through the app library's RUNPATH, which must be
# its own directory: $ORIGIN/../lib is right only while <libdir> is "lib".
for pair in $mods; do
    mod=${pair%%:*}
    [ "$mod" = transferengine ] && continue
    lib=$pcdir/../lib$mod.so
    readelf -d "$lib" | grep -E '\(R(UN)?PATH\)' | grep -qF '[$ORIGIN]' \
        || die "lib$mod.so's RUNPATH is not \$ORIGIN: $(readelf -d "$lib" | grep PATH)"
done

step "pkg-config (PKG_CONFIG_PATH=$pcdir, nothing else)"
for pair in $mods; do
    mod=${pair%%:*} prog=${pair#*:}
    [ -f "$pcdir/$mod.pc" ] || die "$prefix lacks $mod.pc"
    cflags=$(pc --cflags) || die "pkg-config --cflags $mod failed"
    libs=$(pc --libs) || die "pkg-config --libs $mod failed"
    libdir=$(pc --variable=libdir)
    # The moved prefix, found from the .pc file's own place (${pcfiledir}).
    [ "$(cd "$libdir" 2>/dev/null && pwd -P)" = "$(cd "$pcdir/.." && pwd -P)" ] \
        || die "$mod.pc: libdir $libdir is not the directory above $pcdir"
    # shellcheck disable=SC2086
    "$cc" -std=gnu11 -Wall -Wextra -Werror $cflags -o "$work/pc/$prog" "$src/$prog.c" \
        $libs -Wl,-rpath,"$libdir" || die "$prog.c does not build with pkg-config $mod"
    run_clean "$work/pc/$prog"
done

step "CMake find_package(TransferEngine COMPONENTS kv weights moe)"
"$cmake" -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
    >"$work/consumers-configure.log" 2>&1 \
    || { cat "$work/consumers-configure.log" >&2; die "configuring the CMake consumers failed"; }
"$cmake" --build "$work/cmake" >"$work/consumers-build.log" 2>&1 \
    || { cat "$work/consumers-build.log" >&2; die "building the CMake consumers failed"; }
for pair in $mods; do
    run_clean "$work/cmake/${pair#*:}"
done

step "CMake: an unknown component is an error that names it"
if "$cmake" -S "$src" -B "$work/cmake-bad" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_C_COMPILER="$cc" -DTE_EXTRA_COMPONENTS=nosuch >"$work/bad.log" 2>&1; then
    die "find_package(TransferEngine COMPONENTS nosuch) succeeded"
fi
grep -q "no component nosuch" "$work/bad.log" \
    || { cat "$work/bad.log" >&2; die "the error for an unknown component does not name it"; }
