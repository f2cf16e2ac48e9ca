"""RL weight updates with torch, end to end (docs/weights.md "Python"):
two trainer processes train a tiny seeded model (FSDP style: each hands
the library only its half of every tensor, bf16, as torch tensors it keeps
in place), and after each version one inference process receives it into
its own parameter tensors (two sets: double-buffered, the swap is a
pointer flip on "version complete"). fp8 (E4M3, 128x128 block scales) for
the MLP matrices, bf16 for the rest. After every version the inference
process checks, bit for bit, that every serving parameter is the torch
reference quantisation (transferengine._weights_fp8, written from the
format's definition) of the trainer's weights of the serving version, and
that its outputs on a fixed batch equal the trainer's reference outputs.

With --kill-at V, trainer 1 SIGKILLs itself mid-push of version V (after
half of its writes were submitted); the driver restarts it for V+1 (it
replays the seeded training, so its weights are the other trainer's).
Version V must be rejected with version V-1 still serving whole, and V+1
must apply.

    python3 weights_rl_torch.py --versions 4 --kill-at 3   # the driver
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

import torch

import transferengine as te
from transferengine import weights
from transferengine import _weights_fp8 as fp8

H, INTER, VOCAB, LAYERS = 160, 192, 128, 2
BATCH, SEQ, STEPS = 8, 16, 3


def tensor_specs():
    """(name, shape) of the model, Hugging Face names (the sharding rules
    read roles from them: gate_proj+up_proj fuse, MLP matrices go fp8)."""
    specs = [("model.embed_tokens.weight", (VOCAB, H))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        specs += [(p + "input_layernorm.weight", (H,)),
                  (p + "mlp.gate_proj.weight", (INTER, H)),
                  (p + "mlp.up_proj.weight", (INTER, H)),
                  (p + "mlp.down_proj.weight", (H, INTER))]
    return specs + [("model.norm.weight", (H,)), ("lm_head.weight", (VOCAB, H))]


def init_master(seed=1):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in tensor_specs():
        if len(shape) == 1:
            t = 1 + 0.1 * torch.randn(shape, generator=g)
        else:
            t = torch.randn(shape, generator=g) / shape[1] ** 0.5
        out[name] = t.requires_grad_()
    return out


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def forward(w, tokens):
    """Logits; w maps inference param names (first member tensor's name;
    gate_proj's holds the fused [gate; up]) to float32 weights."""
    h = w["model.embed_tokens.weight"][tokens]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        x = rms(h, w[p + "input_layernorm.weight"])
        g, u = (x @ w[p + "mlp.gate_proj.weight"].t()).split(INTER, dim=-1)
        h = h + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].t()
    return rms(h, w["model.norm.weight"]) @ w["lm_head.weight"].t()


def fused(tensors):
    """Checkpoint tensors -> inference params (gate and up concatenated)."""
    w = {}
    for name, t in tensors.items():
        if name.endswith("up_proj.weight"):
            continue
        if name.endswith("gate_proj.weight"):
            t = torch.cat([t, tensors[name.replace("gate_proj", "up_proj")]])
        w[name] = t
    return w


def train(master, opt, version):
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * version + step)
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        loss = torch.nn.functional.cross_entropy(
            forward(fused(master), tokens).reshape(-1, VOCAB), ((tokens * 3 + 1) % VOCAB).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss)


def fixed_batch():
    return torch.randint(0, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(7))


def reference(bf16, plan):
    """The torch reference of what the engine must hold: per inference
    param, fp8 (codes, scales) or the bf16 tensor; and the outputs."""
    params, w = {}, {}
    fp8_names = {p.name for p in plan.rank_params(0) if p.fp8}
    for name, t in fused(bf16).items():
        if name in fp8_names:
            params[name] = fp8.quantise(t)
            w[name] = fp8.dequantise(*params[name])
        else:
            params[name] = t
            w[name] = t.to(torch.float32)
    return params, forward(w, fixed_batch())


def make_plan():
    return weights.Plan([(n, s, "bfloat16") for n, s in tensor_specs()], trainers=2,
                        ranks=1, tp=1, fp8=True, nics=1, staging_bytes=4 << 20,
                        name="tiny")


def run_trainer(a):
    torch.set_num_threads(1)
    plan = make_plan()
    master = init_master()
    opt = torch.optim.Adam(master.values(), lr=1e-2)
    parts = {}
    for name, _ in tensor_specs():  # this rank's FSDP half: the framework's tensors
        b, e = plan.fsdp_range(name, a.rank)
        parts[name] = torch.empty(e - b, dtype=torch.bfloat16)
    with te.Engine() as engine:
        tr = weights.Trainer(engine, plan, a.rank)
        for v in range(1, a.versions + 1):
            loss = train(master, opt, v)
            with torch.no_grad():
                for name, t in master.items():
                    b, e = plan.fsdp_range(name, a.rank)
                    parts[name].copy_(t.detach().to(torch.bfloat16).flatten()[b:e])
            if v < a.start:
                continue  # a restarted trainer replays the versions it missed
            if a.rank == 0:
                bf16 = {n: t.detach().to(torch.bfloat16) for n, t in master.items()}
                torch.save(reference(bf16, plan), os.path.join(a.dir, f"ref-{v}.pt"))
            regs = tr.bind(parts)
            if a.rank == 1 and v == a.kill_at:
                def die(writes, total, *_):
                    if 2 * writes >= total:
                        print(f"train 1: SIGKILL mid-push of version {v} after "
                              f"{writes} of {total} writes", flush=True)
                        os.kill(os.getpid(), signal.SIGKILL)
                tr.set_progress(die)
            try:
                st = tr.push(a.dir, v, timeout_ms=30000)
                print(f"train {a.rank}: version {v} pushed (loss {loss:.4f}, "
                      f"{st['writes']} writes, {regs} new registrations)", flush=True)
            except te.TEError as ex:
                print(f"train {a.rank}: version {v} failed: {ex}", flush=True)
            tr.wait_done(a.dir, v, timeout_ms=90000)
        tr.close()


def received_weights(live, plan):
    """float32 weights from the engine's own (serving) tensors, in place."""
    w, params = {}, {}
    for p in plan.rank_params(0):
        t = live[p.name]
        if p.fp8:
            params[p.name] = fp8.slice_views(t, p.rows, p.cols)
            w[p.name] = fp8.dequantise(*params[p.name])
        else:
            params[p.name] = t
            w[p.name] = t.to(torch.float32)
    return params, w


def same(a, b):
    if isinstance(a, tuple):
        return all(torch.equal(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


def run_infer(a):
    torch.set_num_threads(1)
    plan = make_plan()

    def make(p):
        if p.fp8:
            return torch.zeros(p.bytes, dtype=torch.uint8)
        return torch.zeros((p.rows, p.cols) if p.cols > 1 else (p.rows * p.cols,),
                           dtype=torch.bfloat16)
    sets = [weights.empty_params(plan, 0, make), weights.empty_params(plan, 0, make)]
    bad = 0
    with te.Engine() as engine:
        rv = weights.Receiver(engine, plan, 0, sets[0], sets[1])
        for v in range(1, a.versions + 1):
            rep = rv.update(a.dir, v, timeout_ms=60000 if v == 1 else 15000)
            live = rv.live()
            if live is None:
                print(f"infer: version {v} rejected, nothing serving", flush=True)
                bad += 1
                continue
            params, w = received_weights(live, plan)
            ref_params, ref_out = torch.load(os.path.join(a.dir, f"ref-{rep.live_version}.pt"))
            differ = [n for n in params if not same(params[n], ref_params[n])]
            equal = torch.equal(forward(w, fixed_batch()), ref_out)
            what = "applied" if rep.ok else f"rejected ({rep.missing} of {rep.expected} missing)"
            print(f"infer: version {v} {what}; serving version {rep.live_version} from "
                  f"set {rep.live_set}: {len(params) - len(differ)} of {len(params)} params "
                  f"bit-exact vs the torch reference, outputs equal: {equal}", flush=True)
            expect_ok = v != a.kill_at
            bad += bool(differ) + (not equal) + (rep.ok != expect_ok)
            bad += rep.live_version != (v if rep.ok else v - 1)
        rv.wait_trainers(a.dir, a.versions, 30000)
        rv.close()
    print(f"infer: {'PASS' if not bad else f'FAIL ({bad} problems)'}", flush=True)
    return 1 if bad else 0


def run_driver(a):
    d = a.dir or tempfile.mkdtemp(prefix="te_weights_rl_")
    me = [sys.executable, os.path.abspath(__file__), "--dir", d, "--versions", str(a.versions),
          "--kill-at", str(a.kill_at)]
    infer = subprocess.Popen(me + ["--role", "infer"])
    trainers = [subprocess.Popen(me + ["--role", "train", "--rank", str(r)]) for r in (0, 1)]
    rc1 = trainers[1].wait(timeout=300)
    if a.kill_at:
        if rc1 != -signal.SIGKILL:
            print(f"driver: trainer 1 exited {rc1}, expected SIGKILL", flush=True)
            infer.kill()
            return 1
        trainers[1] = subprocess.Popen(me + ["--role", "train", "--rank", "1",
                                             "--start", str(a.kill_at + 1)])
    rcs = [infer.wait(timeout=300)] + [t.wait(timeout=300) for t in trainers]
    print(f"driver: exit codes infer {rcs[0]}, trainers {rcs[1:]}", flush=True)
    return 0 if rcs == [0, 0, 0] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=("driver", "train", "infer"), default="driver")
    ap.add_argument("--dir", default="")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--versions", type=int, default=4)
    ap.add_argument("--kill-at", type=int, default=0)
    ap.add_argument("--start", type=int, default=1)
    a = ap.parse_args()
    if a.role == "train":
        run_trainer(a)
        return 0
    return run_infer(a) if a.role == "infer" else run_driver(a)


if __name__ == "__main__":
    sys.exit(main())
