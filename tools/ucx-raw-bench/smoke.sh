#!/bin/sh
# Smoke run of ucx-raw-bench (ctest, label bench): every test over shared
# memory and over TCP on 127.0.0.1, tiny sizes and short runs, and checks
# that the output has what te-bench's --reference reads (the last
# "<number> GB/s" for bandwidth, a last line starting with a number for
# latency) and that the number is positive. No timing thresholds.
#   smoke.sh PATH-TO-ucx-raw-bench
set -u
U=${1:?usage: smoke.sh ucx-raw-bench}
fail=0
check() { # tls test kind args...
  tls=$1 test=$2 kind=$3
  shift 3
  out=$(timeout 60 "$U" --tls "$tls" --test "$test" --timeout 20 "$@" 2>/tmp/ucx-smoke.$$)
  rc=$?
  err=$(cat /tmp/ucx-smoke.$$); rm -f /tmp/ucx-smoke.$$
  if [ "$kind" = bw ]; then
    v=$(printf '%s\n' "$out" | grep -o '[0-9.]* GB/s' | tail -n 1 | cut -d' ' -f1)
  else
    v=$(printf '%s\n' "$out" | tail -n 1 | grep -o '^ *[0-9][0-9.]*' | tr -d ' ')
  fi
  if [ $rc -ne 0 ] || [ -z "$v" ] || ! awk -v v="$v" 'BEGIN{exit !(v > 0)}'; then
    echo "FAIL: $tls $test (exit $rc, value '${v:-none}'):"
    printf '%s\n%s\n' "$out" "$err" | sed 's/^/    /'
    fail=1
  else
    echo "ok: $tls $test $* -> $v"
  fi
}
for tls in shm tcp; do
  check $tls write  bw  --size 64K --ms 5 --min-iters 4
  check $tls write  bw  --size 64K --ms 5 --min-iters 4 --no-imm
  check $tls paged  bw  --size 64K --chunk 16K --ms 5 --min-iters 4
  check $tls read   bw  --size 64K --ms 5 --min-iters 4
  check $tls immlat lat --iters 20 --warmup 2
  check $tls send   lat --size 8 --iters 20 --warmup 2
done
# Bad input is refused with a message, not run.
if "$U" --test scatter >/dev/null 2>&1 || "$U" --tls ib >/dev/null 2>&1; then
  echo "FAIL: bad input accepted"
  fail=1
fi
[ $fail -eq 0 ] && echo "ucx-raw-bench smoke: OK"
exit $fail
