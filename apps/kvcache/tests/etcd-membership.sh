#!/usr/bin/env bash
# Run by scripts/etcd-run.sh (TE_KV_ETCD set): two prefiller processes
# register in etcd with 3 s leases, a decoder finds both and pushes requests
# through them; a SIGSTOPped prefiller drops out when its lease expires and
# registers again once resumed; a SIGKILLed prefiller's record disappears
# when its lease expires while the survivor's stays.
#   etcd-membership.sh TE_KV
set -uo pipefail
kv=$1
cluster=test-$$
common=(--store "$TE_KV_ETCD" --cluster "$cluster" --model qwen3-235b-a22b
        --layers 4 --tokens 128 --layer-us 100)
"$kv" prefill "${common[@]}" --name pf-a --seconds 60 & a=$!
"$kv" prefill "${common[@]}" --name pf-b --seconds 60 & b=$!
trap 'kill $a $b 2>/dev/null; wait 2>/dev/null' EXIT
"$kv" decode "${common[@]}" --prefillers 2 --requests 6 || { echo "FAIL: decode via etcd"; exit 1; }
"$kv" members "${common[@]}" | tee /tmp/te-kv-members.$$ | grep -q "pf-a prefill" || { echo "FAIL: pf-a not listed"; exit 1; }
# A prefiller stopped past its 3 s lease drops out of the list; once it
# runs again its keepalive finds the lease gone and registers again.
kill -STOP $b
for _ in $(seq 1 50); do
  "$kv" members "${common[@]}" | grep -q "pf-b" || break
  sleep 0.2
done
"$kv" members "${common[@]}" | grep -q "pf-b" && { kill -CONT $b; echo "FAIL: a stopped prefiller is still listed after 10 s"; exit 1; }
kill -CONT $b
for _ in $(seq 1 25); do
  "$kv" members "${common[@]}" | grep -q "pf-b prefill" && break
  sleep 0.2
done
"$kv" members "${common[@]}" | grep -q "pf-b prefill" || { echo "FAIL: the resumed prefiller did not register again"; exit 1; }
kill -9 $a
for _ in $(seq 1 60); do
  out=$("$kv" members "${common[@]}")
  echo "$out" | grep -q "pf-a" || break
  sleep 0.2
done
echo "$out" | grep -q "pf-a" && { echo "FAIL: the killed prefiller is still listed"; exit 1; }
echo "$out" | grep -q "pf-b prefill" || { echo "FAIL: the survivor vanished"; exit 1; }
rm -f /tmp/te-kv-members.$$
echo "kvcache_etcd: PASS (decode through 2 prefillers found in etcd; a stopped one expired and registered again when resumed; a killed one expired)"
