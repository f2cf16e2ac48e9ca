#!/usr/bin/env bash
# Out-of-tree plugin proof (ctest out_of_tree_plugin):
#   1. install the already-built TransferEngine build tree into WORK/prefix;
#   2. configure and build tests/out-of-tree (a plugin) against that install
#      with find_package(TransferEngine) - only the installed header is used;
#   3. build check_plugin.c against the installed library with pkg-config and
#      run it: it calls te_version() and negotiates with the new plugin.
# Usage: run.sh BUILD_DIR WORK_DIR
set -euo pipefail

die() { echo "out_of_tree_plugin: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

[ $# -eq 2 ] || die "usage: $0 BUILD_DIR WORK_DIR"
[ -d "$1" ] || die "build directory $1 does not exist"
build=$(cd "$1" && pwd)
mkdir -p "$2"
work=$(cd "$2" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cmake=${CMAKE_COMMAND:-cmake}
cc=${CC:-cc}
prefix=$work/prefix

rm -rf "$prefix" "$work/build" "$work/check_plugin" "$work"/*.log

step "install $build into $prefix"
if ! "$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
    cat "$work/install.log" >&2
    die "cmake --install failed (is the whole project built? run: cmake --build $build)"
fi
for f in include/te/plugin.h include/te/te.h; do
    [ -f "$prefix/$f" ] || die "install lacks $f"
done

step "configure and build the out-of-tree plugin"
"$cmake" -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$work/configure.log" 2>&1 || { cat "$work/configure.log" >&2; die "configuring $src failed"; }
"$cmake" --build "$work/build" >"$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; die "building the out-of-tree plugin failed"; }
plugin=$work/build/libte-plugin-skeleton.so
[ -f "$plugin" ] || die "$plugin was not produced"
# It must not have been compiled against the source tree.
if grep -q -- "$(cd "$src/../.." && pwd)/include" "$work/build/CMakeFiles/te-plugin-skeleton.dir/flags.make" 2>/dev/null; then
    die "the plugin was compiled against the source tree's headers"
fi
if command -v readelf >/dev/null && readelf -d "$plugin" | grep -q 'NEEDED.*libtransferengine'; then
    die "the plugin links libtransferengine; a plugin must only include te/plugin.h"
fi

step "build check_plugin with pkg-config against the install"
pc=$(find "$prefix" -name transferengine.pc -print -quit)
[ -n "$pc" ] || die "install lacks transferengine.pc"
pkgconf() { PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --define-variable=prefix="$prefix" "$@" transferengine; }
cflags=$(pkgconf --cflags) || die "pkg-config --cflags transferengine failed"
libs=$(pkgconf --libs) || die "pkg-config --libs transferengine failed"
libdir=$(pkgconf --variable=libdir)
case "$cflags $libs" in
    *"$prefix"*) ;;
    *) die "pkg-config flags do not point into $prefix: $cflags $libs" ;;
esac
# shellcheck disable=SC2086
"$cc" -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Werror $cflags \
    -o "$work/check_plugin" "$src/check_plugin.c" $libs -ldl \
    || die "check_plugin.c does not build against the installed library"

step "run check_plugin"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$work/check_plugin" "$plugin" skeleton || die "the out-of-tree plugin did not negotiate"
step "run the installed tools from the prefix (no LD_LIBRARY_PATH, no TE_PLUGIN_PATH)"
# They must find libtransferengine (install RPATH) and the installed
# plugins (beside the library) on their own, whatever the prefix.
out=$(env -u LD_LIBRARY_PATH -u TE_PLUGIN_PATH -u TE_CONFIG "$prefix/bin/te-info" --plugins 2>&1) \
    || { echo "$out" >&2; die "installed te-info does not run from $prefix"; }
echo "$out" | grep -q "loopback" || { echo "$out" >&2; die "installed te-info does not find the installed loopback plugin"; }
out=$(env -u LD_LIBRARY_PATH -u TE_PLUGIN_PATH -u TE_CONFIG "$prefix/bin/te-demo" --pages 8 --layers 2 2>&1) \
    || { echo "$out" >&2; die "installed te-demo does not run from $prefix"; }
echo "out_of_tree_plugin: PASS"
