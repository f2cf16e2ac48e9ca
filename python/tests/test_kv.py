"""transferengine.kv over numpy arrays, two engines in one process: the
bytes land in the decoder's own arrays at the pages it named (nothing else
written), and bad input is refused naming the field (docs/kvcache.md)."""
import numpy as np
import pytest

te = pytest.importorskip("transferengine")
kv = pytest.importorskip("transferengine.kv")

L, PAGES, TPP, HEADS, DIM = 2, 6, 4, 2, 8


def arena(dtype=np.float32, dim=DIM):
    """One allocation: kv[layer][k|v] views [pages, tpp, heads, dim], then
    two hidden slots of 16."""
    n = L * 2 * PAGES * TPP * HEADS * dim
    a = np.zeros(n + 2 * 16, dtype=dtype)
    kvv = a[:n].reshape(L, 2, PAGES, TPP, HEADS, dim)
    return a, [(kvv[l, 0], kvv[l, 1]) for l in range(L)], a[n:].reshape(2, 16)


def engine():
    return te.Engine(engine_max_msg_size=str(kv.MSG_MAX + 64))


def test_bytes_land_in_the_decoders_arrays():
    with engine() as pe, engine() as de:
        sa, sl, sh = arena()
        da, dl, dh = arena()
        sc, dc = kv.KVCache(sl, sh), kv.KVCache(dl, dh)
        assert dc.address_range == (da.ctypes.data, da.ctypes.data + da.nbytes)
        src, dec = kv.Source(pe, sc), kv.Decoder(de, dc)
        rng = np.random.default_rng(7)
        for k, v in sl:
            k[...] = rng.standard_normal(k.shape)
            v[...] = rng.standard_normal(v.shape)
        sh[1] = rng.standard_normal(16)
        pf = dec.add_prefiller(pe.address())
        fut = dec.submit(5, 6, np.array([4, 1]), hidden_slot=0, prefiller=pf)
        src.begin(5, 6, [2, 5], hidden_slot=1)
        for layer in range(L):
            src.layer_done(5, layer)
        src.hidden_done(5)
        fut.result(timeout=10)
        src.wait(5, timeout=10)
        want = np.zeros_like(da)
        _, wl, wh = (want, *arena()[1:])
        wkv = want[:-32].reshape(L, 2, PAGES, TPP, HEADS, DIM)
        for layer in range(L):
            for kvi in range(2):
                wkv[layer, kvi][[4, 1]] = sl[layer][kvi][[2, 5]]
        want[-32:-16] = sh[1]
        np.testing.assert_array_equal(da, want)  # nothing else written
        dec.release(5)
        dec.close()
        src.close()
        sc.close()
        dc.close()


def test_bad_input_is_named():
    with engine() as pe, engine() as de:
        sa, sl, sh = arena()
        with pytest.raises(ValueError, match=r"layers\[1\]\.V"):
            kv.KVCache([sl[0], (sl[1][0], sl[1][1][:, :2])], sh)
        with pytest.raises(ValueError, match=r"layers\[1\]\.V: .* float16"):
            kv.KVCache([sl[0], (sl[1][0], np.zeros(sl[1][1].shape,
                                                   np.float16))], sh)
        with pytest.raises(te.TEError, match="overlaps"):
            kv.KVCache([sl[0], (sl[1][0], sl[1][0])], sh)
        sc = kv.KVCache(sl, sh)
        src = kv.Source(pe, sc)
        with pytest.raises(te.TEError, match=r"src_pages\[1\] = 6: out of range"):
            src.begin(1, 6, [0, 6])
        src.begin(1, 6, [0, 1])
        src.layer_done(1, 0)
        with pytest.raises(te.TEError, match="layer 0 reported twice"):
            src.layer_done(1, 0)
        with pytest.raises(te.TEError, match="layer 2: out of range"):
            src.layer_done(1, 2)
        with pytest.raises(te.TEError, match="still use it"):
            sc.close()
        # A decoder of another dtype (float16): its request is refused,
        # the source names the field, nothing lands.
        da, dl, dh = arena(np.float16)
        dc = kv.KVCache(dl, dh)
        dec = kv.Decoder(de, dc)
        fut = dec.submit(1, 6, [3, 4], prefiller=dec.add_prefiller(pe.address()))
        with pytest.raises(te.TEError, match="Invalid argument"):
            fut.result(timeout=10)
        with pytest.raises(te.TEError, match=r"elem_bytes \(dtype\): the "
                           r"decoder's 2, ours 4"):
            src.wait(1, timeout=10)
        assert not da.any()
        dec.close()
        src.close()
        sc.close()
        with pytest.raises(te.TEError, match="KVCache is closed"):
            kv.Source(pe, sc)
        dc.close()


def test_per_layer_arrival():
    """A per_layer Decoder: wait_layer(layer 0) returns while layer 1 is not
    reported yet, and layer 0's bytes are then in the decoder's array."""
    with engine() as pe, engine() as de:
        _, sl, sh = arena()
        _, dl, dh = arena()
        sc, dc = kv.KVCache(sl, sh), kv.KVCache(dl, dh)
        src, dec = kv.Source(pe, sc), kv.Decoder(de, dc, per_layer=True)
        for k, v in sl:
            k[...] = 1.5
            v[...] = 2.5
        fut = dec.submit(9, 6, [0, 3], prefiller=dec.add_prefiller(pe.address()))
        src.begin(9, 6, [1, 2])
        src.layer_done(9, 0)
        assert dec.wait_layer(9, 0, timeout=10)
        assert (dl[0][0][[0, 3]] == 1.5).all() and (dl[0][1][[0, 3]] == 2.5).all()
        assert not dl[1][0].any() and not fut.done()
        assert not dec.wait_layer(9, 1, timeout=0.05)  # not reported yet
        src.layer_done(9, 1)
        fut.result(timeout=10)
        assert dec.wait_layer(9, 1, timeout=10)
        src.wait(9)
        dec.release(9)
        with pytest.raises(KeyError):
            dec.wait_layer(9, 0)
        dec.close()
        src.close()
        sc.close()
        dc.close()


def separate(dtype=np.float32):
    """One allocation per tensor (as an engine that allocates per layer and
    per K/V): [(K, V)] of [pages, tpp, heads, dim], and [2, 16] hidden."""
    shape = (PAGES, TPP, HEADS, DIM)
    return ([(np.zeros(shape, dtype), np.zeros(shape, dtype))
             for _ in range(L)], np.zeros((2, 16), dtype))


def test_separate_allocations_per_layer():
    """The decoder's K, V and hidden are each their own numpy array, the
    source's one torch tensor per layer ([2, pages, ...], vLLM's shape) when
    torch is here: the bytes land in the decoder's arrays at the named pages,
    nothing else written, and each array is registered where it lies."""
    try:
        import torch
    except ImportError:
        torch = None
    with engine() as pe, engine() as de:
        rng = np.random.default_rng(11)
        if torch is not None:
            per_layer = [torch.zeros(2, PAGES, TPP, HEADS, DIM)
                         for _ in range(L)]
            for t in per_layer:
                t.copy_(torch.from_numpy(rng.standard_normal(t.shape)))
            sl = [(t[0], t[1]) for t in per_layer]
            sh = torch.from_numpy(rng.standard_normal((2, 16)).astype(
                np.float32))
            src_np = [(k.numpy(), v.numpy()) for k, v in sl]
            sh_np = sh.numpy()
        else:
            sl, sh = separate()
            for k, v in sl:
                k[...] = rng.standard_normal(k.shape)
                v[...] = rng.standard_normal(v.shape)
            sh[...] = rng.standard_normal(sh.shape)
            src_np, sh_np = sl, sh
        dl, dh = separate()
        sc, dc = kv.KVCache(sl, sh), kv.KVCache(dl, dh)
        assert dc.address_range is None
        arrays = [a for pair in dl for a in pair] + [dh]
        assert dc.address_ranges == [(a.ctypes.data, a.ctypes.data + a.nbytes)
                                     for a in arrays]  # zero-copy: these
        assert len(sc.address_ranges) == (L + 1 if torch is not None
                                          else 2 * L + 1)
        src, dec = kv.Source(pe, sc), kv.Decoder(de, dc)
        fut = dec.submit(7, 6, [3, 0], hidden_slot=1,
                         prefiller=dec.add_prefiller(pe.address()))
        src.begin(7, 6, [5, 1], hidden_slot=0)
        for layer in range(L):
            src.layer_done(7, layer)
        src.hidden_done(7)
        fut.result(timeout=10)
        src.wait(7, timeout=10)
        for layer in range(L):
            for kvi in range(2):
                want = np.zeros_like(dl[layer][kvi])
                want[[3, 0]] = src_np[layer][kvi][[5, 1]]
                np.testing.assert_array_equal(dl[layer][kvi], want)
        np.testing.assert_array_equal(dh[1], sh_np[0])
        assert not dh[0].any()
        dec.release(7)
        dec.close()
        src.close()
        sc.close()
        dc.close()
