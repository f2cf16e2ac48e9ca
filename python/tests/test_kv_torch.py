"""The proof (python/examples/kv_disagg_torch.py): a tiny torch transformer
prefilled in one process, its KV pushed layer by layer into another
process's own cache tensor, decoded there: tokens and logits equal to a
single-process run, bit for bit; and a prefiller killed mid-prompt fails
the request cleanly, the retry on the survivor gives the same tokens."""
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transferengine.kv")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import kv_disagg_torch as proof  # noqa: E402


def check_same(r):
    assert r["in_engine_tensor"]  # the registration is the engine's arena
    for got, want in zip(r["kv"], r["ref_kv"]):
        assert torch.equal(got, want)  # the prompt's K/V, per layer
    assert torch.equal(r["hidden"], r["ref_hidden"])
    assert r["tokens"] == r["ref_tokens"]
    assert torch.equal(r["logits"], r["ref_logits"])


def test_disaggregated_decode_equals_single_process():
    r = proof.run()
    assert "failed" not in r
    check_same(r)


def test_killed_prefiller_fails_cleanly_and_retry_matches():
    r = proof.run(kill=True)
    assert "fenced" in r["failed"] and "no write can land" in r["failed"]
    check_same(r)
