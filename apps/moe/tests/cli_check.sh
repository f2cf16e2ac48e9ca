#!/bin/sh
# Run a command and check both its exit status and its output (stdout and
# stderr together), which a ctest PASS_REGULAR_EXPRESSION alone cannot do.
#   cli_check.sh zero|nonzero [-e EXTENDED_REGEX]... -- COMMAND [ARGS...]
# Every -e pattern must match some line of the output.
set -u
want=$1
shift
n=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    [ "$1" = "-e" ] || { echo "cli_check: expected -e or --, got $1"; exit 2; }
    n=$((n + 1))
    eval "pat_$n=\$2"
    shift 2
done
[ $# -gt 1 ] || { echo "cli_check: no command"; exit 2; }
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
case $want in
zero) [ $rc -eq 0 ] || { echo "cli_check: exit status $rc, expected 0"; exit 1; } ;;
nonzero) [ $rc -ne 0 ] || { echo "cli_check: exit status 0, expected non-zero"; exit 1; } ;;
*) echo "cli_check: zero or nonzero, not $want"; exit 2 ;;
esac
[ $rc -lt 128 ] || { echo "cli_check: killed by signal $((rc - 128))"; exit 1; }
i=1
while [ $i -le $n ]; do
    eval "p=\$pat_$i"
    printf '%s\n' "$out" | grep -qE -- "$p" || {
        echo "cli_check: no line of the output matches: $p"; exit 1; }
    i=$((i + 1))
done
echo "cli_check: ok (exit status $rc)"
