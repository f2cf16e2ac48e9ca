#!/usr/bin/env bash
# Bad-input sweep of the command-line tools (docs/tools.md, "Command lines").
#
#   tests/cli/run.sh BUILD_DIR [TABLE.tsv ...]
#
# Runs every case of every tests/cli/*.tsv (or of the tables named). A table
# holds one case per line, tab-separated:
#
#   <tool> <args>	<expected exit status>	<text stderr must contain>
#
# (blank lines and lines starting with # are skipped; the first field is
# split like a shell command line, so '' is an empty argument). A case
# passes when the tool exits with that status and its stderr contains the
# text (a fixed string); a case expecting 2 (a refused command line) must
# also print nothing on stdout: the tool refused before starting anything.
# Each case runs under a 60 s timeout and, unless the tool is built with
# AddressSanitizer (which reserves terabytes of address space), a 4 GiB
# address-space limit, so a count that turns into a huge allocation fails
# the case at once instead of eating the machine.
set -u
build=${1:?usage: run.sh BUILD_DIR [TABLE.tsv ...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
tables=("$@")
[ ${#tables[@]} -gt 0 ] || tables=("$here"/*.tsv)
export TE_PLUGIN_PATH=${TE_PLUGIN_PATH:-$build/plugins}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

declare -A exe_of
find_tool() { # the built executable of a tool name, cached
    local t=$1
    if [ -z "${exe_of[$t]:-}" ]; then
        exe_of[$t]=$(find "$build/tools" "$build/apps" -maxdepth 2 -type f \
                     -perm -u+x -name "$t" 2>/dev/null | head -n 1)
    fi
    printf '%s' "${exe_of[$t]}"
}

cases=0 failed=0
for table in "${tables[@]}"; do
    n=0
    while IFS=$'\t' read -r cmd want text || [ -n "$cmd" ]; do
        n=$((n + 1))
        case "$cmd" in ''|'#'*) continue ;; esac
        cases=$((cases + 1))
        where="$(basename "$table"):$n"
        if [ -z "${want:-}" ] || [ -z "${text:-}" ]; then
            echo "FAIL $where: want 3 tab-separated fields: $cmd"
            failed=$((failed + 1))
            continue
        fi
        eval "set -- $cmd"
        exe=$(find_tool "$1")
        if [ -z "$exe" ]; then
            echo "FAIL $where: tool $1 not found under $build/tools or $build/apps"
            failed=$((failed + 1))
            continue
        fi
        shift
        limit="ulimit -v 4194304;"
        grep -q __asan_init "$exe" && limit=""
        (eval "$limit"; exec timeout 60 "$exe" "$@") \
            >"$out/stdout" 2>"$out/stderr"
        got=$?
        why=""
        if [ "$got" != "$want" ]; then
            why="exit $got, want $want"
        elif ! grep -qF -- "$text" "$out/stderr"; then
            why="stderr lacks \"$text\""
        elif [ "$want" = 2 ] && [ -s "$out/stdout" ]; then
            why="refused, yet printed on stdout (started something?)"
        fi
        if [ -n "$why" ]; then
            failed=$((failed + 1))
            echo "FAIL $where: $cmd: $why"
            sed 's/^/  stderr: /' "$out/stderr" | head -n 5
            sed 's/^/  stdout: /' "$out/stdout" | head -n 3
        fi
    done <"$table"
done
echo "cli: $cases cases, $failed failed"
[ "$cases" -gt 0 ] && [ "$failed" -eq 0 ]
