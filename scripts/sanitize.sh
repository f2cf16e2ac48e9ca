#!/usr/bin/env bash
# Build with a sanitizer preset (CMakePresets.json) and run the whole ctest
# suite under it: unit tests, conformance on loopback (in-process and
# two-process), tools, and the fuzz corpora replay.
#   scripts/sanitize.sh            ASan + UBSan + LeakSanitizer (build-asan)
#   scripts/sanitize.sh tsan       ThreadSanitizer (build-tsan)
#   scripts/sanitize.sh asan -R conformance    extra arguments go to ctest
# Fails if a test fails or if any test's output holds a sanitizer report
# (tests that match their output with a regular expression would otherwise
# pass despite one). Results and commands: docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-asan}
[ $# -gt 0 ] && shift
case "$preset" in
    asan|tsan) ;;
    *) echo "usage: $0 [asan|tsan] [ctest arguments...]" >&2; exit 2 ;;
esac
scripts/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j"$(nproc)"
# tsan: two-process tests run in a second pass that ignores the accesses of
# libc interceptors (cross-process copies look like races; docs/reliability.md).
passes=("$preset")
[ "$preset" = tsan ] && passes+=(tsan-twoproc)
rc=0
for p in "${passes[@]}"; do
    ctest --preset "$p" -j"$(nproc)" "$@" || rc=$?
    log="build-$preset/Testing/Temporary/LastTest.log"
    if [ -f "$log" ] && grep -nE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer" "$log"; then
        echo "sanitize: sanitizer reports in the test output above (full log: $log)" >&2
        rc=1
    fi
done
[ "$rc" -eq 0 ] && echo "sanitize: $preset: clean"
exit "$rc"
