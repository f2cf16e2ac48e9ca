#!/usr/bin/env bash
# te-kv decode against a prefiller of another model (docs/kvcache.md, "Tool").
#
#   tests/cli/kv_decode_mismatch.sh BUILD_DIR
#
# Every request is REJECTed, so nothing arrives: decode must exit 1, say
# "no data arrived, nothing verified" with no rate (it used to print "every
# byte verified" and a throughput), print the first failure once with a
# reason that points at the model (it said only "Invalid argument"), and
# count the others in its summary instead of a line each.
set -u
build=${1:?usage: kv_decode_mismatch.sh BUILD_DIR}
kv=$build/apps/kvcache/te-kv
export TE_PLUGIN_PATH=${TE_PLUGIN_PATH:-$build/plugins}
dir=$(mktemp -d)
pf=
cleanup() {
    [ -n "$pf" ] && kill "$pf" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; sed 's/^/  /' "$dir/out" "$dir/err"; exit 1; }

timeout 120 "$kv" prefill --store "dir:$dir" --model llama-3.1-70b \
    --seconds 60 --name pf-llama >"$dir/pf.out" 2>&1 &
pf=$!
timeout 100 "$kv" decode --store "dir:$dir" --model qwen3-235b-a22b \
    --requests 4 >"$dir/out" 2>"$dir/err"
rc=$?
[ $rc -eq 1 ] || fail "exit $rc, want 1"
grep -q '0/4 requests completed.*4 failed.*no data arrived, nothing verified$' \
    "$dir/out" || fail "no 'nothing verified' summary"
grep -q 'verified in\|GB/s' "$dir/out" && fail "claims verified data or a rate"
[ "$(grep -c '^te-kv: request' "$dir/err")" -eq 1 ] ||
    fail "want exactly one failure line"
grep -q 'does not fit its model' "$dir/err" || fail "the reason does not name the model"
echo "ok: $(cat "$dir/out")"
