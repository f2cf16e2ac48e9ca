#!/usr/bin/env bash
# te-bench over the mlx5 plugin side by side with perftest (ib_write_bw,
# ib_write_lat) on the same two soft-RoCE devices in one guest boot, RUNS
# interleaved pairs (perftest, then te-bench), so both see the same guest.
# Each side is pinned to its own vCPU (initiator on rxe0 / vCPU 0, target on
# rxe1 / vCPU 1), traffic crosses the guest's veth as RoCEv2 packets.
# Not a test: it reports (docs/benchmarks.md). rxe is a software NIC in a
# TCG-emulated CPU: only the ratios mean anything.
#
# usage: tests/vm/bench-rxe.sh BUILD_DIR OUTDIR [RUNS]
#   BUILD_DIR  a build with te-bench and the mlx5 plugin (Release advised)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
out=$2
runs=${3:-5}
mkdir -p "$out"
out=$(cd "$out" && pwd)

guest_script=$(cat <<'EOS'
set -u
B=$BUILD/tools/te-bench/te-bench
S="--plugin mlx5 --set engine.idle_spin_us=10"
PT="-x 1 --report_gbits"
perftest() { # tool size extra...: server on rxe1/vCPU1, client on rxe0/vCPU0
  local tool=$1 size=$2; shift 2
  taskset -c 1 "$tool" -d rxe1 $PT -s "$size" "$@" >/dev/null 2>&1 & sleep 1
  echo "@@begin $tool $size"
  taskset -c 0 "$tool" -d rxe0 $PT -s "$size" "$@" 198.51.100.2 2>&1
  echo "@@end"
  wait
}
tebench() { # name args...: te-bench server on rxe1/vCPU1, client on rxe0
  # (pinned to vCPU 0 unless CLIENT_PIN is set empty)
  local name=$1; shift
  taskset -c 1 "$B" --server --addr 198.51.100.2 $S --set mlx5.devices=rxe1 \
    >/dev/null 2>&1 & sleep 2
  echo "@@begin te $name"
  ${CLIENT_PIN-taskset -c 0} "$B" --client --addr 198.51.100.2 $S --set mlx5.devices=rxe0 \
    --reference none --no-progress --json --rep-ms 1500 "$@" 2>/dev/null
  echo "@@end"
  wait
}
for i in $(seq 1 "$RUNS"); do
  echo "@@run $i"
  perftest ib_write_bw 65536 -n 2000 -t 64
  tebench write_64k_noimm --test write --size 64K --window 64 --no-imm --reps 3
  tebench write_64k_imm --test write --size 64K --window 64 --reps 3
  perftest ib_write_bw 1048576 -n 200 -t 16
  tebench write_1m_noimm --test write --size 1M --window 16 --no-imm --reps 3
  perftest ib_write_lat 8 -n 2000
  tebench write_8_lat --test write --size 8 --window 1 --no-imm --reps 3 --lat-iters 500
  # Tuned for latency: the client's worker spins, its thread busy-polls,
  # unpinned (a pinned process would put both spinners on one vCPU).
  CLIENT_PIN= tebench write_8_lat_spin --test write --size 8 --window 1 --no-imm \
    --reps 3 --lat-iters 500 --spin-wait --set engine.idle_spin_us=10000000
done
EOS
)

"$here/run.sh" --rxe --timeout 1500 --env "BUILD=$build" --env "RUNS=$runs" \
  --env "TE_PLUGIN_PATH=$build/plugins" -- bash -c "$guest_script" \
  > "$out/rxe-guest.log" 2>&1 || { tail -20 "$out/rxe-guest.log"; exit 1; }

python3 - "$out" <<'EOP'
import json, re, statistics, sys
out = sys.argv[1]
log = open(out + "/rxe-guest.log", errors="replace").read()
blocks = re.findall(r"@@begin (\S+) (\S+)\n(.*?)@@end", log, re.S)
perf = {}   # (tool, size) -> [value]
te = {}     # name -> [doc]
for tool, arg, text in blocks:
    if tool == "te":
        try:
            te.setdefault(arg, []).append(json.loads(text[text.index("{"):]))
        except ValueError:
            print("warning: te-bench %s: no JSON" % arg, file=sys.stderr)
        continue
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == arg:
            # ib_write_bw: bytes iters peak avg rate; ib_write_lat: bytes
            # iters min max typical avg stdev 99% 99.9%
            perf.setdefault((tool, arg), []).append(
                float(f[3]) if tool == "ib_write_bw" else float(f[4]))
med = lambda xs: statistics.median(xs) if xs else None
def te_gbit(name):
    return [r["gbit"] for d in te.get(name, []) for r in d["results"] if r["ok"]]
def te_p50(name):
    return [r["latency"]["request_us"]["p50"]
            for d in te.get(name, []) for r in d["results"] if r["ok"]]
def pairs(a, b):
    return [x / y for x, y in zip(a, b) if x and y]
print("| case | te-bench (mlx5 plugin) | perftest | ratio (median of pairs) | runs |")
print("|---|---|---|---|---|")
for label, name, key in (("write 64 KiB, no imm, 64 in flight", "write_64k_noimm", ("ib_write_bw", "65536")),
                         ("WriteImm 64 KiB, 64 in flight", "write_64k_imm", ("ib_write_bw", "65536")),
                         ("write 1 MiB, no imm, 16 in flight", "write_1m_noimm", ("ib_write_bw", "1048576"))):
    t, p = te_gbit(name), perf.get(key, [])
    r = med(pairs(t, p))
    print("| %s | %s Gbps | %s Gbps (ib_write_bw) | %s | %d |" % (
        label, "%.3f" % med(t) if t else "-", "%.3f" % med(p) if p else "-",
        "%.3f" % r if r else "-", min(len(t), len(p))))
# ib_write_lat prints half a ping-pong; a write's local completion on RC
# waits for the target's ACK, a round trip: compare with twice its value.
p = [2 * x for x in perf.get(("ib_write_lat", "8"), [])]
for name, how in (("write_8_lat", "default idle policy, client pinned"),
                  ("write_8_lat_spin", "client worker spinning, --spin-wait")):
    t = te_p50(name)
    print("| write 8 B latency, %s (te: submit -> local completion p50; perftest: 2 x typical ib_write_lat = a round trip) | %s us | %s us | %s | %d |" % (
        how, "%.1f" % med(t) if t else "-", "%.1f" % med(p) if p else "-",
        "%.3f" % med(pairs(t, p)) if t and p else "-", min(len(t), len(p))))
EOP
