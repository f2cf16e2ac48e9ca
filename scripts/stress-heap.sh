#!/usr/bin/env bash
# Heap-corruption stress campaign (issue 29 item 2, docs/reliability.md,
# "Heap corruption campaign (issue 29)"): many copies of the kvcache tests
# and of the core's handler/space/request-pool tests at once, round after
# round, under one memory checker, and a verdict per run from its exit
# status and its output.
#
#   scripts/stress-heap.sh --build build-asan --mode asan
#   scripts/stress-heap.sh --build build --mode malloc --copies 4 --rounds 20
#   scripts/stress-heap.sh --build build --mode valgrind --tests kv_transfer --copies 2
#   scripts/stress-heap.sh --build build-tsan --mode tsan --rounds 3
#
# Options (defaults in brackets):
#   --build DIR      build directory holding the test binaries (relative to
#                    the current directory or the repository root) [build]
#   --mode M         plain | malloc | asan | valgrind | tsan [malloc]
#                    plain:    no checker (the configuration of the report)
#                    malloc:   glibc's checking malloc: MALLOC_CHECK_=3 with
#                              libc_malloc_debug.so preloaded (glibc >= 2.34
#                              ignores MALLOC_CHECK_ without it) and a random
#                              MALLOC_PERTURB_ per run (freed and new memory
#                              filled, so a use after free reads garbage)
#                    asan:     a -fsanitize=address,undefined build (ASan,
#                              UBSan, LSan options of the asan test preset)
#                    valgrind: memcheck around a plain build, following forks
#                    tsan:     a -fsanitize=thread build
#   --copies N       concurrent copies of each test per round [3]
#   --rounds N       rounds at most [5]
#   --time S         start no round after S seconds [1800]
#   --run-timeout S  a run is killed (and counted failed) after S s [400]
#   --tests LIST     comma-separated, of: kv_transfer kv_soak kv_soak_faults
#                    kv_badreq kv_units recv_handler imm_space engine moe
#                    [kv_transfer,kv_badreq,kv_soak_faults,recv_handler,imm_space,moe;
#                    asan, tsan, valgrind: without imm_space, whose 2^24-value
#                    case outlasts Check's timeout under them on a loaded
#                    machine; tsan, valgrind: without kv_soak_faults too,
#                    which does not end its requests in time under them]
#   --out DIR        logs and summary [a new /tmp/stress-heap.XXXXXX]
#   --nice N         niceness of every run [19]
# Every loop is bounded (rounds, time, per-run timeout). Exit 0 when every
# run passed with no memory report, 1 otherwise (summary on stdout and in
# OUT/summary.txt; a failed run's log stays in OUT).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=build mode=malloc copies=3 rounds=5 tlimit=1800 rtimeout=400
tests=""
out="" niceness=19
while [ $# -gt 0 ]; do
    case "$1" in -h|--help) ;; *)
        [ $# -ge 2 ] || { echo "stress-heap: $1 needs a value" >&2; exit 2; } ;;
    esac
    case "$1" in
    --build) build=$2 ;;
    --mode) mode=$2 ;;
    --copies) copies=$2 ;;
    --rounds) rounds=$2 ;;
    --time) tlimit=$2 ;;
    --run-timeout) rtimeout=$2 ;;
    --tests) tests=$2 ;;
    --out) out=$2 ;;
    --nice) niceness=$2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "stress-heap: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
    shift 2
done
for v in copies rounds tlimit rtimeout niceness; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "stress-heap: --$v: not a number: ${!v}" >&2; exit 2; }
done
[ "$copies" -ge 1 ] && [ "$copies" -le 16 ] || { echo "stress-heap: --copies 1..16" >&2; exit 2; }
[ "$rounds" -le 10000 ] || { echo "stress-heap: --rounds at most 10000" >&2; exit 2; }
# --build relative to where we were started, else to the repository root
given=$build
build=$( { cd "$given" 2>/dev/null || cd "$root/$given" 2>/dev/null; } && pwd) ||
    { echo "stress-heap: no build dir $given" >&2; exit 2; }
cd "$root"
[ -n "$out" ] || out=$(mktemp -d /tmp/stress-heap.XXXXXX)
mkdir -p "$out"

# name -> binary (relative to the build dir) and extra environment
bin_of() {
    case "$1" in
    kv_transfer) echo apps/kvcache/test_kv_transfer ;;
    kv_soak|kv_soak_faults) echo apps/kvcache/test_kv_soak ;;
    kv_badreq) echo apps/kvcache/test_kv_badreq ;;
    kv_units) echo apps/kvcache/test_kv_units ;;
    recv_handler) echo tests/test_recv_handler ;;
    imm_space) echo tests/test_imm_space ;;
    engine) echo tests/test_engine ;;
    moe) echo apps/moe/test_moe ;;
    *) return 1 ;;
    esac
}
env_of() {
    case "$1" in
    kv_soak_faults) echo "TE_LOOPBACK_FAULT_REORDER=true TE_LOOPBACK_FAULT_DELAY_US=50 TE_KV_SOAK_REQUESTS=2000" ;;
    moe) echo "CK_DEFAULT_TIMEOUT=240" ;;
    esac
}
if [ -z "$tests" ]; then
    case "$mode" in
    asan) tests=kv_transfer,kv_badreq,kv_soak_faults,recv_handler,moe ;;
    tsan|valgrind) tests=kv_transfer,kv_badreq,recv_handler,moe ;;
    *) tests=kv_transfer,kv_badreq,kv_soak_faults,recv_handler,imm_space,moe ;;
    esac
fi
IFS=, read -r -a names <<<"$tests"
for n in "${names[@]}"; do
    b=$(bin_of "$n") || { echo "stress-heap: unknown test $n" >&2; exit 2; }
    [ -x "$build/$b" ] || { echo "stress-heap: $build/$b not built" >&2; exit 2; }
done

# The checker: environment common to every run, and a wrapper command.
common=(TE_PLUGIN_PATH="$build/plugins" CK_DEFAULT_TIMEOUT=120)
last=() # after each test's own environment: the mode's caps win
wrap=()
case "$mode" in
plain) ;;
malloc)
    dbg=$(ls /lib/*-linux-gnu/libc_malloc_debug.so.0 /usr/lib/*-linux-gnu/libc_malloc_debug.so.0 2>/dev/null | head -1)
    [ -n "$dbg" ] || { echo "stress-heap: libc_malloc_debug.so.0 not found" >&2; exit 2; }
    common+=(MALLOC_CHECK_=3 LD_PRELOAD="$dbg") ;;
asan)
    common+=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
             UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
             LSAN_OPTIONS=suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0) ;;
tsan)
    common+=(TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/fuzz/tsan.supp
             CK_TIMEOUT_MULTIPLIER=4)
    last=(TE_KV_SOAK_REQUESTS=1500) ;;
valgrind)
    command -v valgrind >/dev/null || { echo "stress-heap: valgrind not installed (apt-get install valgrind)" >&2; exit 2; }
    common+=(CK_TIMEOUT_MULTIPLIER=8)
    last=(TE_KV_SOAK_REQUESTS=300)
    wrap=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=no
          --fair-sched=yes --child-silent-after-fork=no --track-origins=no) ;;
*) echo "stress-heap: --mode plain|malloc|asan|valgrind|tsan" >&2; exit 2 ;;
esac

# What counts as a memory report in a run's output, whatever its exit code.
report='corrupted|free\(\): |malloc\(\): |realloc\(\): |munmap_chunk|double free|malloc_consolidate|AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:|Invalid (read|write|free)|Mismatched free|uninitialised|Received signal (6|7|11)|Segmentation fault|Aborted|core dumped'

start=$(date +%s)
runs=0 passed=0 failed=0 flagged=0
printf 'stress-heap: mode %s, build %s, %s copies of {%s} per round, %s rounds, %s s, logs %s\n' \
    "$mode" "$build" "$copies" "$tests" "$rounds" "$tlimit" "$out" | tee "$out/summary.txt"
for ((r = 1; r <= rounds; r++)); do
    now=$(date +%s)
    [ $((now - start)) -lt "$tlimit" ] || { echo "stress-heap: time limit reached before round $r" | tee -a "$out/summary.txt"; break; }
    pids=() logs=()
    for n in "${names[@]}"; do
        for ((c = 1; c <= copies; c++)); do
            log="$out/r$r-$n-$c.log"
            extra=()
            [ "$mode" = malloc ] && extra=(MALLOC_PERTURB_=$((RANDOM % 255 + 1)))
            read -r -a e2 <<<"$(env_of "$n")"
            ( echo "# $(date -u +%FT%TZ) round $r copy $c: ${extra[*]:-}"
              exec env "${common[@]}" "${e2[@]}" "${last[@]}" "${extra[@]}" \
                timeout -k 10 "$rtimeout" nice -n "$niceness" \
                "${wrap[@]}" "$build/$(bin_of "$n")" ) >"$log" 2>&1 &
            pids+=($!) logs+=("$log")
        done
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}"; rc=$?
        runs=$((runs + 1))
        log=${logs[$i]}
        hit=$(grep -E -m3 "$report" "$log" || true)
        if [ "$rc" -eq 0 ] && [ -z "$hit" ]; then
            passed=$((passed + 1)); rm -f "$log"
        else
            failed=$((failed + 1))
            [ -n "$hit" ] && flagged=$((flagged + 1))
            printf 'FAIL %s rc=%s%s\n' "$log" "$rc" "${hit:+ memory: $(echo "$hit" | head -1)}" | tee -a "$out/summary.txt"
        fi
    done
    echo "round $r: $runs runs so far, $failed failed, $((  $(date +%s) - start )) s" | tee -a "$out/summary.txt"
done
# CPU time of every run (children reaped by this shell and theirs).
times >"$out/times.txt"
cpu=$(tail -1 "$out/times.txt" | awk '{ split($1, u, "m"); split($2, s, "m"); sub("s", "", u[2]); sub("s", "", s[2]); printf "%.0f", u[1]*60 + u[2] + s[1]*60 + s[2] }')
printf 'stress-heap: %s: %d runs, %d passed, %d failed (%d with a memory report), %d s wall, %s s CPU\n' \
    "$mode" "$runs" "$passed" "$failed" "$flagged" $(( $(date +%s) - start )) "$cpu" | tee -a "$out/summary.txt"
[ "$failed" -eq 0 ]
