#!/usr/bin/python3
"""A KV-cache style push: the decoder owns a pool of pages and gives the
prefiller a page table (numpy uint32) per request; the prefiller writes each
layer's pages with one paged write as soon as the layer is "computed"; the
decoder expects exactly te_expected_imms() immediates per layer.

    PYTHONPATH=build/python TE_PLUGIN_PATH=build/plugins \\
        /usr/bin/python3 python/examples/kv_paged_push.py
"""
import time

import numpy as np

import transferengine as te

LAYERS, PAGES, PAGE = 4, 64, 32 * 1024


def main():
    with te.Engine() as prefill, te.Engine() as decode:
        kv_src = np.random.default_rng(0).integers(
            0, 255, LAYERS * PAGES * PAGE, dtype=np.uint8)
        pool = np.zeros(LAYERS * 2 * PAGES * PAGE, dtype=np.uint8)
        src = prefill.register(kv_src, access=0)
        dst = decode.register(pool, access=te.REMOTE_WRITE)
        peer = prefill.add_peer(decode.address())
        # The decoder's page table: where each of the prompt's pages goes.
        table = np.random.default_rng(1).permutation(2 * PAGES)[:PAGES]
        table = table.astype(np.uint32)
        mine = np.arange(PAGES, dtype=np.uint32)
        space = decode.imm_space("kv-demo", LAYERS)
        t0 = time.perf_counter()
        waits = []
        for layer in range(LAYERS):
            req = te.paged(peer, src, dst.descriptor(), mine, table, PAGE,
                           src_offset=layer * PAGES * PAGE,
                           dst_offset=layer * 2 * PAGES * PAGE,
                           imm=space[layer])
            waits.append(decode.expect(space[layer], prefill.expected_imms(req),
                                       timeout_ms=30000))
            prefill.submit(req)
        for w in waits:
            w.result()
        dt = time.perf_counter() - t0
        for layer in range(LAYERS):
            for k in (0, PAGES - 1):
                s = (layer * PAGES + k) * PAGE
                d = (layer * 2 * PAGES + int(table[k])) * PAGE
                assert (pool[d:d + PAGE] == kv_src[s:s + PAGE]).all()
        mib = LAYERS * PAGES * PAGE / 2**20
        print(f"pushed {LAYERS} layers x {PAGES} pages of {PAGE >> 10} KiB "
              f"({mib:.0f} MiB) in {dt * 1e3:.1f} ms; pages verified")


if __name__ == "__main__":
    main()
