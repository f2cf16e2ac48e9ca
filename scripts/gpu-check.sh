#!/usr/bin/env bash
# GPU check of TransferEngine's CUDA support (docs/cuda.md), for a machine
# with an NVIDIA GPU and the CUDA toolkit (nvcc, cmake, python3) but possibly
# no internet and no apt. It builds the tree, runs every ctest of label gpu,
# the conformance suite with device memory and the GPU benchmarks, and writes
# a results file (default gpu-results/results.txt) with device, date, commit.
#
# Build dependencies (inih, check, pkg-config, libcrypto, libcurl, jansson,
# libfabric for the efa plugin over shm, and cffi for the image's python3)
# come from .deb files and Debian's cffi
# source carried along in gpu-debs/, unpacked with dpkg -x (no root, no
# apt). Fetch them on a Debian 12 machine with apt (this repository's dev
# host), in the repository root: scripts/gpu-check.sh --download-debs
# (DEBS below, libcurl4's libraries by apt-cache depends --recurse, and
# python-cffi_*.orig.tar.gz from a deb-src source list of its own).
# gpu-debs/ is untracked, not ignored, so a copy of the working tree
# carries it. Where the libraries are installed already, the debs are not
# needed.
#
# Usage: scripts/gpu-check.sh [--download-debs] [--out DIR] [--quick]
#   --quick   fewer benchmark samples (for a short device lease)
# Exit: 0 when everything that ran passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=gpu-results
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    --download-debs)
        DEBS="libinih1 libinih-dev libinireader0 check libsubunit0
              libsubunit-dev pkgconf pkgconf-bin libpkgconf3 pkg-config
              libffi8 libffi-dev python3-pycparser python3-ply libssl3
              libssl-dev libjansson4 libjansson-dev libcurl4-openssl-dev
              libfabric1 libfabric-dev libibverbs1 librdmacm1 libnl-3-200
              libnl-route-3-200 libnuma1 libpsm2-2 libpsm-infinipath1
              libatomic1 libucx0 libucx-dev"
        # libcurl4 and the libraries it needs, libc and gcc's left out.
        CURL=$(apt-cache depends --recurse --no-recommends --no-suggests \
               --no-conflicts --no-breaks --no-replaces --no-enhances \
               --no-pre-depends libcurl4 | grep -v '^[ <]' | sort -u |
               grep -vxE 'libc6|libgcc-s1|gcc-12-base')
        SRC=$(mktemp -d)
        mkdir -p "$SRC/lists/partial"
        printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            > "$SRC/src.sources"
        APT_SRC="-oDir::Etc::SourceList=/dev/null -oDir::Etc::SourceParts=$SRC -oDir::State::Lists=$SRC/lists"
        mkdir -p gpu-debs && (cd gpu-debs && apt-get download $DEBS $CURL &&
            apt-get $APT_SRC update > /dev/null &&
            apt-get $APT_SRC source --download-only python-cffi &&
            rm -f python-cffi_*.dsc python-cffi_*.debian.tar.*)
        rc=$?
        rm -rf "$SRC"
        exit $rc ;;
    --out) OUT=$2; shift ;;
    --quick) QUICK=1 ;;
    *) echo "usage: $0 [--download-debs] [--out DIR] [--quick]" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$OUT/results.txt
: > "$RES"
say() { echo "$*" | tee -a "$RES"; }
FAILED=0

# ---------------------------------------------------------------- deps
if [ -d gpu-debs ] && ls gpu-debs/*.deb > /dev/null 2>&1; then
    SYSROOT=$ROOT/build-gpu-deps
    rm -rf "$SYSROOT" && mkdir -p "$SYSROOT"
    for d in gpu-debs/*.deb; do dpkg -x "$d" "$SYSROOT"; done
    ARCHLIB=$(ls -d "$SYSROOT"/usr/lib/*-linux-gnu 2>/dev/null | head -1)
    export PATH=$SYSROOT/usr/bin:$PATH
    # At run time only the libraries the image lacks come from the debs
    # (older Debian builds must not shadow the image's own libssl, zlib...).
    RTLIB=$SYSROOT/runtime-libs
    mkdir -p "$RTLIB"
    HAVE_SONAMES=$(ldconfig -p | awk 'NR > 1 { print $1 }')
    for f in "$ARCHLIB"/lib*.so.*; do
        soname=$(basename "$f" | sed -E 's/(\.so\.[0-9]+).*/\1/')
        # UCX's libraries go together: an image with its own libuct but
        # no libucp crashed Debian's libucp in uct_tl_register.
        case $soname in libuc[mpst].so.*) ln -sf "$f" "$RTLIB/$soname"; continue ;; esac
        echo "$HAVE_SONAMES" | grep -qxF "$soname" || ln -sf "$f" "$RTLIB/$soname"
    done
    echo "deps: from the debs at run time: $(ls "$RTLIB" | tr '\n' ' ')"
    export LD_LIBRARY_PATH=$RTLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1
    # The .pc files say prefix=/usr: the sysroot is prepended to -I/-L.
    export PKG_CONFIG_SYSROOT_DIR=$SYSROOT
    export PKG_CONFIG_LIBDIR=$ARCHLIB/pkgconfig:$SYSROOT/usr/share/pkgconfig
    # Debian's pkg-config is a link to pkgconf; libpkgconf3 is in ARCHLIB.
    command -v pkg-config > /dev/null || ln -sf pkgconf "$SYSROOT/usr/bin/pkg-config"
    echo "deps: unpacked $(ls gpu-debs/*.deb | wc -l) .deb files into $SYSROOT"
    # UCX (te-bench's peer reference, ucx-raw-bench) loads its transports
    # from a directory compiled in as /usr/lib/...: point it at the sysroot.
    [ -d "$ARCHLIB/ucx" ] && export UCX_MODULE_DIR=$ARCHLIB/ucx
fi
# The image's python3 (the one with torch) may lack cffi: Debian's cffi
# source (python-cffi_*.orig.tar.gz, apt-get source python-cffi) and
# pycparser (python3-pycparser) carried in gpu-debs are installed into it, so
# that the binding is built for that interpreter and python_gpu runs torch
# CUDA tensors through it. Without them (or a Python.h) the binding is not
# built and python_gpu is not registered (said in the results).
PY=$(command -v python3 || true)
PYARG=
if [ -n "$PY" ] && ! "$PY" -c "import cffi" 2> /dev/null \
   && ls gpu-debs/python-cffi_*.orig.tar.gz > /dev/null 2>&1 && [ -n "${SYSROOT:-}" ]; then
    PURE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    cp -r "$SYSROOT"/usr/lib/python3/dist-packages/pycparser \
          "$SYSROOT"/usr/lib/python3/dist-packages/ply "$PURE"/ 2> /dev/null
    tar xzf gpu-debs/python-cffi_*.orig.tar.gz -C "$SYSROOT"
    # setup.py in place, setuptools imported first (Python 3.12 has no
    # distutils of its own); no pip, so no wheel package needed.
    (cd "$SYSROOT"/cffi-* && CFLAGS="-I$SYSROOT/usr/include/$(basename "$ARCHLIB")" \
        LDFLAGS="-L$ARCHLIB" "$PY" -c "import setuptools, runpy, sys; \
        sys.argv = ['setup.py', 'build_ext', '--inplace']; \
        runpy.run_path('setup.py', run_name='__main__')" \
        && cp -r cffi _cffi_backend*.so "$PURE"/) > "$OUT/cffi.log" 2>&1 \
        || echo "cffi build failed (cffi.log)"
fi
if [ -n "$PY" ] && "$PY" -c "import cffi, torch, sysconfig, os, sys; \
        sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
        2> /dev/null; then
    PYARG=-DTE_SYSTEM_PYTHON=$PY
fi
for m in inih check libcrypto libcurl jansson; do
    pkg-config --exists $m || { echo "missing $m (see the header of $0)" >&2; exit 1; }
done

# --------------------------------------------------------------- build
export PATH=/usr/local/cuda/bin:$PATH
say "# TransferEngine GPU check"
say "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+local changes)')"
say "host:   $(uname -srm), $(nproc) CPUs"
say "gpu:    $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -4 | tr '\n' ';')"
say "nvcc:   $(nvcc --version 2>/dev/null | tail -1)"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
configure() {
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTE_WITH_CUDA=ON \
          -DTE_WITH_MLX5=AUTO -DTE_WITH_EFA=AUTO "$@" \
          ${ARCH:+-DCMAKE_CUDA_ARCHITECTURES=$ARCH} > "$OUT/configure.log" 2>&1 \
        || { say "configure FAILED (configure.log)"; exit 1; }
}
say "python: ${PYARG:-none with cffi, torch and Python.h: binding and python_gpu not built}"
configure $PYARG
if ! cmake --build build-gpu -j"$(nproc)" > "$OUT/build.log" 2>&1; then
    # A binding that does not compile for that interpreter must not cost the
    # rest of the check: build again without it.
    if [ -n "$PYARG" ]; then
        say "build with the binding for $PY FAILED (build-py.log): again without it"
        cp "$OUT/build.log" "$OUT/build-py.log"
        configure -DTE_SYSTEM_PYTHON=/nonexistent/python3
        cmake --build build-gpu -j"$(nproc)" > "$OUT/build.log" 2>&1 \
            || { say "build FAILED (build.log)"; tail -30 "$OUT/build.log"; exit 1; }
    else
        say "build FAILED (build.log)"; tail -30 "$OUT/build.log"; exit 1
    fi
fi
say "build:  ok ($(grep -c 'warning:' "$OUT/build.log") warnings)"
BIN=$ROOT/build-gpu
export TE_PLUGIN_PATH=$BIN/plugins
say "te-info: $("$BIN"/tools/te-info/te-info --groups 2>&1 | grep 'CUDA memory')"

# --------------------------------------------------------------- tests
say ""
say "## ctest -L gpu (unit tests and the conformance suite with --mem cuda)"
(cd build-gpu && ctest -L gpu -V -j4 --timeout 300) > "$OUT/ctest-gpu.log" 2>&1 || FAILED=1
grep -E "Test +#|tests passed|Skipped|Failed" "$OUT/ctest-gpu.log" | tee -a "$RES"
grep -q "Skipped" "$OUT/ctest-gpu.log" && { say "NOTE: gpu tests were SKIPPED: see ctest-gpu.log"; FAILED=1; }
say ""
say "## ctest cuda_ and host regressions (conformance_loopback, test_engine)"
(cd build-gpu && ctest -R 'cuda_|conformance_loopback|test_engine|test_loopback' -j4 --timeout 300) \
    > "$OUT/ctest-host.log" 2>&1 || FAILED=1
grep -E "tests passed|Failed" "$OUT/ctest-host.log" | tee -a "$RES"

# ------------------------------------------------------------ benchmarks
say ""
say "## benchmarks (te-bench, one process, loopback; references in the same run)"
IT_W=20; IT_L=2000; IT_F=1000
[ $QUICK = 1 ] && { IT_W=5; IT_L=300; IT_F=200; }
for r in 1 2 3; do
    for m in "cuda cuda" "host cuda" "cuda host"; do
        set -- $m
        say "### cudawrite run $r: --mem-src $1 --mem-dst $2"
        "$BIN"/tools/te-bench/te-bench --test cudawrite --mem-src "$1" --mem-dst "$2" \
            --iters $IT_W 2>&1 | tee -a "$RES" || FAILED=1
    done
    say "### watcher run $r"
    "$BIN"/tools/te-bench/te-bench --test watcher --iters $IT_L 2>&1 | tee -a "$RES" || FAILED=1
    say "### gpuflag run $r"
    "$BIN"/tools/te-bench/te-bench --test gpuflag --iters $IT_F 2>&1 | tee -a "$RES" || FAILED=1
done

# The MoE proxy's added latency (docs/moe.md, "GPU path"): a kernel's
# WriteImm through the proxy ring vs the same write from a CPU thread and
# the bus round trip alone, thread and caller progress.
if [ -x "$BIN/apps/moe/te-moe-proxy-bench" ]; then
    PIT=2000; [ $QUICK = 1 ] && PIT=500
    for prog in thread caller; do
        say ""
        say "## te-moe-proxy-bench, engine.progress=$prog"
        TE_ENGINE_PROGRESS=$prog timeout 120 "$BIN"/apps/moe/te-moe-proxy-bench \
            --iters $PIT --reps 3 2>&1 | tee -a "$RES" || FAILED=1
    done
fi

# te-moe's split calls on device tensors (te_moe_gpu_mem_ops) vs host
# tensors in the same run, at the decode shape (issue 25's GPU report):
# staged and in place, caller and thread progress.
if [ -x "$BIN/apps/moe/te-moe-gpu-bench" ]; then
    GB=20; [ $QUICK = 1 ] && GB=8
    for prog in caller thread; do
        for mode in "" --inplace; do
            say ""
            say "## te-moe-gpu-bench $mode, engine.progress=$prog"
            timeout 300 "$BIN"/apps/moe/te-moe-gpu-bench --batches $GB $mode \
                --set engine.progress=$prog 2>&1 | tee -a "$RES" || FAILED=1
        done
    done
fi

# efa over libfabric shm with CUDA memory, where the plugin was built.
if [ -e "$BIN/plugins/libte-plugin-efa.so" ]; then
    say ""
    say "## efa (libfabric shm) conformance with --mem cuda"
    "$BIN"/tools/te-conformance/te-conformance --plugin efa --set efa.provider=shm \
        --set efa.hmem=on --mem cuda > "$OUT/efa-shm-cuda.log" 2>&1
    rc=$?
    tail -1 "$OUT/efa-shm-cuda.log" | tee -a "$RES"
    say "efa shm --mem cuda: exit $rc (77 = skipped; see efa-shm-cuda.log)"
fi
say ""
say "overall: $([ $FAILED = 0 ] && echo PASS || echo FAIL)"
exit $FAILED
