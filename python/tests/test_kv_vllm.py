"""python/examples/kv_vllm_connector.py driven the way vLLM's model runner
calls a KVConnectorBase_V1 (register_kv_caches; per step bind metadata,
start_load_kv, per layer wait_for_layer_load / save_kv_layer,
wait_for_save, get_finished): the decode instance's blocks end up holding
the prefill instance's blocks, and nothing else of its cache is written."""
import pathlib
import sys
import time

import pytest

torch = pytest.importorskip("torch")
te = pytest.importorskip("transferengine")
kv = pytest.importorskip("transferengine.kv")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from kv_vllm_connector import Metadata, TEKVConnector  # noqa: E402

LAYERS, BLOCKS, BLOCK, HEADS, DIM = 3, 10, 4, 2, 8


def kv_caches():
    """vLLM's dict: layer name -> [2, blocks, block_size, heads, dim], here
    views of one bf16 allocation."""
    arena = torch.zeros(LAYERS, 2, BLOCKS, BLOCK, HEADS, DIM,
                        dtype=torch.bfloat16)
    return arena, {f"model.layers.{i}.self_attn": arena[i]
                   for i in range(LAYERS)}


def test_connector_round_trip():
    engine = lambda: te.Engine(engine_max_msg_size=str(kv.MSG_MAX + 64))
    with engine() as pe, engine() as de:
        p_arena, p_caches = kv_caches()
        d_arena, d_caches = kv_caches()
        prod = TEKVConnector(pe, "producer")
        prod.register_kv_caches(p_caches)
        cons = TEKVConnector(de, "consumer", prefiller_address=pe.address())
        cons.register_kv_caches(d_caches)
        # decode instance: the scheduler allocated blocks 7, 2 for 6 tokens
        dm = Metadata()
        dm.add("req-a", [7, 2], 6)
        cons.bind_connector_metadata(dm)
        cons.start_load_kv()
        # prefill instance: blocks 1, 5; each layer's forward, then save
        pm = Metadata()
        pm.add("req-a", [1, 5], 6)
        prod.bind_connector_metadata(pm)
        for i, name in enumerate(p_caches):
            p_caches[name][:, [1, 5]] = torch.randn(2, 2, BLOCK, HEADS, DIM
                                                    ).to(torch.bfloat16)
            prod.save_kv_layer(name, p_caches[name], None)
        prod.wait_for_save()
        for name in d_caches:  # the decode forward, layer by layer
            cons.wait_for_layer_load(name)
        received = set()
        for _ in range(1000):  # the decode loop polls each step
            received |= cons.get_finished()[1]
            if received:
                break
            time.sleep(0.01)
        assert received == {"req-a"}
        assert prod.get_finished({"req-a"})[0] == {"req-a"}
        want = torch.zeros_like(d_arena)
        want[:, :, [7, 2]] = p_arena[:, :, [1, 5]]
        assert torch.equal(d_arena, want)
        cons.request_finished("req-a")
        cons.close()
        prod.close()
