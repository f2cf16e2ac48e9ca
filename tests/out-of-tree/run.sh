#!/usr/bin/env bash
# Installed-prefix proof (ctest out_of_tree_plugin, docs/install.md):
#   1. install the already-built build tree into WORK/stage, then MOVE it to
#      WORK/moved: everything after uses the moved copy, so any path the
#      install recorded (.pc, CMake package, RPATH, plugin directory) fails;
#   2. the installed docs: the plugin guide, every docs/NAME.md it names,
#      and the plugin skeleton where the guide says it is;
#   3. build that INSTALLED skeleton plugin with find_package(TransferEngine)
#      (installed header only), and check_plugin.c with pkg-config, which
#      negotiates with it;
#   4. consumers.sh: every installed library, with pkg-config and with CMake
#      components, built and run;
#   5. the installed tools run from the moved prefix on their own.
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
stage=$work/stage
prefix=$work/moved

rm -rf "$stage" "$prefix" "$work/build" "$work/check_plugin" "$work"/*.log

step "install $build into $stage, then move it to $prefix"
if ! "$cmake" --install "$build" --prefix "$stage" >"$work/install.log" 2>&1; then
    cat "$work/install.log" >&2
    die "cmake --install failed (is the whole project built? run: cmake --build $build)"
fi
mv "$stage" "$prefix"
for f in include/te/plugin.h include/te/te.h; do
    [ -f "$prefix/$f" ] || die "install lacks $f"
done
stale=$(grep -rl --include="*.pc" --include="*.cmake" -e "$stage" "$prefix" || true)
[ -z "$stale" ] || die "installed files name the install-time prefix $stage: $stale"

step "installed docs"
docdir=$prefix/share/doc/transferengine
guide=$docdir/docs/plugin-guide.md
[ -f "$guide" ] || die "install lacks $guide"
for d in $(grep -o 'docs/[a-z0-9-]*\.md' "$guide" | sort -u) docs/config.md docs/install.md; do
    [ -f "$docdir/$d" ] || die "the installed plugin guide names $d, which is not in $docdir"
done
skel=$docdir/examples/plugin-skeleton
grep -q "share/doc/transferengine/examples/plugin-skeleton" "$guide" \
    || die "the installed plugin guide does not say where the skeleton is installed"
for f in skeleton.c CMakeLists.txt; do
    [ -f "$skel/$f" ] || die "install lacks $skel/$f"
done

step "configure and build the installed plugin skeleton"
"$cmake" -S "$skel" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$work/configure.log" 2>&1 || { cat "$work/configure.log" >&2; die "configuring $skel failed"; }
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

step "build check_plugin with pkg-config against the install, run it"
pcdir=$(dirname "$(find "$prefix" -name transferengine.pc -print -quit)")
pkgconf() { PKG_CONFIG_PATH=$pcdir pkg-config "$@" transferengine; }
cflags=$(pkgconf --cflags) || die "pkg-config --cflags transferengine failed"
libs=$(pkgconf --libs) || die "pkg-config --libs transferengine failed"
libdir=$(pkgconf --variable=libdir)
# shellcheck disable=SC2086
"$cc" -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Werror $cflags \
    -o "$work/check_plugin" "$src/check_plugin.c" $libs -Wl,-rpath,"$libdir" -ldl \
    || die "check_plugin.c does not build against the installed library"
"$work/check_plugin" "$plugin" skeleton || die "the out-of-tree plugin did not negotiate"

"$src/consumers.sh" "$prefix" "$work"

step "configure the out-of-tree plugin from its INI section"
# The core validates [skeleton] against the plugin's typed keys: a good
# value reaches the plugin (then the engine stops: it has no device), a
# bad one is refused naming the key, an unknown key with a suggestion.
# te-info exits non-zero here (no engine without a device): its text is checked.
te_info() { env -u TE_PLUGIN_PATH -u TE_CONFIG "$prefix/bin/te-info" "$@" 2>&1 || true; }
printf '[engine]\nplugin = %s\n[skeleton]\ndevices = 3\nmode = ON\n' "$plugin" >"$work/good.ini"
out=$(te_info --config "$work/good.ini")
echo "$out" | grep -q 'devices *= 3 .*' || { echo "$out" >&2; die "te-info does not show [skeleton] devices = 3"; }
echo "$out" | grep -q 'values: integer in \[0, 16\]' || { echo "$out" >&2; die "te-info does not show the key's range"; }
echo "$out" | grep -q 'plugin skeleton found no device' || { echo "$out" >&2; die "the good section did not reach the plugin"; }
printf '[engine]\nplugin = %s\n[skeleton]\ndevices = 17\n' "$plugin" >"$work/bad.ini"
out=$(te_info --config "$work/bad.ini")
echo "$out" | grep -q 'skeleton.devices = "17" .*expected an integer in \[0, 16\]' \
    || { echo "$out" >&2; die "an out-of-range [skeleton] value was not refused by name"; }
printf '[engine]\nplugin = %s\n[skeleton]\nmdoe = on\n' "$plugin" >"$work/typo.ini"
out=$(te_info --config "$work/typo.ini")
echo "$out" | grep -q 'unknown key "mdoe" in section \[skeleton\].*did you mean "mode"' \
    || { echo "$out" >&2; die "an unknown [skeleton] key was not refused with a suggestion"; }

step "run the installed tools from the prefix (no LD_LIBRARY_PATH, no TE_PLUGIN_PATH)"
# They must find libtransferengine (install RPATH) and the installed
# plugins (beside the library) on their own, whatever the prefix.
out=$(env -u LD_LIBRARY_PATH -u TE_PLUGIN_PATH -u TE_CONFIG "$prefix/bin/te-info" --plugins 2>&1) \
    || { echo "$out" >&2; die "installed te-info does not run from $prefix"; }
echo "$out" | grep -q "loopback" || { echo "$out" >&2; die "installed te-info does not find the installed loopback plugin"; }
out=$(env -u LD_LIBRARY_PATH -u TE_PLUGIN_PATH -u TE_CONFIG "$prefix/bin/te-demo" --pages 8 --layers 2 2>&1) \
    || { echo "$out" >&2; die "installed te-demo does not run from $prefix"; }
echo "out_of_tree_plugin: PASS"
