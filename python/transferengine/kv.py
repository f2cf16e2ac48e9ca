"""KV-cache transfer into and out of the inference engine's own tensors
(libte-kv's engine-owned way, te/kv.h; docs/kvcache.md).

    cache = kv.KVCache([(k0, v0), (k1, v1), ...], hidden=h)   # both sides
    # prefill process
    src = kv.Source(engine, cache)
    src.begin(req_id, tokens, src_page_ids, hidden_slot=0)
    for layer in range(L):
        ...forward layer, K/V into the engine's pages...
        src.layer_done(req_id, layer)        # that layer's writes leave now
    src.hidden_done(req_id); src.wait(req_id)
    # decode process
    dec = kv.Decoder(engine, cache); pf = dec.add_prefiller(prefill_address)
    fut = dec.submit(req_id, tokens, dst_page_ids, hidden_slot=0, prefiller=pf)
    fut.result(timeout=10)                   # the bytes are in the tensors
    ...decode on the engine's own pages...; dec.release(req_id)

Tensors: per layer a (K, V) pair or one MLA latent, each shaped
[pages, tokens_per_page, ...] with a page's elements contiguous, of one
dtype and device, host or CUDA. They may be views of one allocation (a
torch storage, or one numpy base array) or separate allocations (one
tensor per layer, or per layer's K and V, as vLLM and SGLang allocate
them): each distinct allocation is registered once. The writes read the
prefiller's tensors and land in the decoder's: no copy.
"""
import concurrent.futures
import threading

from ._lib import TEError, ffi as _core_ffi
from ._te_kv import ffi, lib

#: engine.max_msg_size an engine carrying te-kv messages needs at least.
MSG_MAX = lib.TE_KV_MSG_MAX
NO_HIDDEN = 0xFFFFFFFF


def _check(rc, call):
    if rc < 0:
        raise TEError(-rc, ffi.string(lib.te_kv_last_error()).decode(
            "utf-8", "replace"), call)
    return rc


def _engine_ptr(engine):
    return ffi.cast("te_engine *",
                    int(_core_ffi.cast("uintptr_t", engine._cdata())))


def _is_torch(t):
    return type(t).__module__.startswith("torch")


def _info(t, name):
    """(address, shape, element bytes, byte strides, dtype, is_cuda)."""
    if _is_torch(t):
        es = t.element_size()
        return (t.data_ptr(), tuple(t.shape), es,
                tuple(s * es for s in t.stride()), str(t.dtype),
                t.device.type == "cuda")
    try:
        ai = t.__array_interface__
    except AttributeError:
        raise TypeError(f"{name}: a torch tensor or numpy array, not "
                        f"{type(t).__name__}") from None
    return (ai["data"][0], tuple(t.shape), t.itemsize, tuple(t.strides),
            str(t.dtype), False)


def _allocation(t):
    """(base address, bytes) of the allocation t is a view of."""
    if _is_torch(t):
        st = t.storage()
        return st.data_ptr(), st.nbytes()
    root = t
    while getattr(root, "base", None) is not None and hasattr(root.base,
                                                              "__array_interface__"):
        root = root.base
    return root.__array_interface__["data"][0], root.nbytes


def _page_ids(ids, name):
    """Page ids (list, numpy array or torch tensor) as a uint32 C array."""
    if _is_torch(ids):
        ids = ids.tolist()
    elif hasattr(ids, "tolist"):
        ids = ids.tolist()
    ids = [int(x) for x in ids]
    for i, x in enumerate(ids):
        if x < 0 or x > 0xFFFFFFFF:
            raise ValueError(f"{name}[{i}] = {x}: not a page id")
    return ffi.new("uint32_t[]", ids), len(ids)


class KVCache:
    """The engine's KV cache, described once for te_kv_cache_new.

    ``layers``: per layer a (K, V) pair or one latent tensor, each
    [pages, tokens_per_page, *rest]; ``hidden``: optional [slots, hidden]
    for the last hidden state. Shapes and dtypes must agree across layers
    (ValueError naming the tensor); each tensor's allocation (its torch
    storage or numpy base array) becomes one te_kv_alloc, and the C library
    checks that every page lies in its allocation and that no two pages
    overlap (TEError naming them). The tensors must outlive every
    Source/Decoder made on this cache."""

    def __init__(self, layers, hidden=None):
        self._keep = (layers, hidden)
        self._c = None
        views = []
        for l, entry in enumerate(layers):
            parts = entry if isinstance(entry, (tuple, list)) else (entry,)
            names = ("K", "V") if len(parts) == 2 else ("latent",)
            views += [(f"layers[{l}].{n}", p) for n, p in zip(names, parts)]
        if not views:
            raise ValueError("layers: empty")
        kv_factor = len(views) // len(layers)
        if kv_factor not in (1, 2) or kv_factor * len(layers) != len(views):
            raise ValueError("layers: every layer a (K, V) pair, or every "
                             "layer one latent tensor")
        name0, t0 = views[0]
        _, shape0, es, _, dtype0, cuda0 = _info(t0, name0)
        if len(shape0) < 3:
            raise ValueError(f"{name0}: shape {shape0}: want [pages, "
                             "tokens_per_page, ..., head_dim]")
        pages, tpp, dim = shape0[0], shape0[1], shape0[-1]
        heads = 1
        for x in shape0[2:-1]:
            heads *= x
        page_bytes = tpp * heads * dim * es
        allocs = []  # distinct (base, bytes), in order of first use

        def alloc_of(t):
            a = _allocation(t)
            if a not in allocs:
                allocs.append(a)
            return allocs.index(a), a[0]

        regions = ffi.new("te_kv_region[]", len(views))
        for i, (name, t) in enumerate(views):
            addr, shape, tes, strides, dtype, cuda = _info(t, name)
            if shape != shape0 or dtype != dtype0 or cuda != cuda0:
                raise ValueError(f"{name}: {shape} {dtype} differs from "
                                 f"{name0}'s {shape0} {dtype0}")
            inner = tes
            for d in range(len(shape) - 1, 0, -1):  # a page is contiguous
                if shape[d] > 1 and strides[d] != inner:
                    raise ValueError(f"{name}: a page's elements are not "
                                     f"contiguous (strides {strides})")
                inner *= shape[d]
            regions[i].alloc, base = alloc_of(t)
            regions[i].offset = addr - base
            regions[i].page_stride = strides[0] if pages > 1 else page_bytes
        d = ffi.new("te_kv_cache_desc *")
        hid = 1
        if hidden is not None:
            haddr, hshape, hes, hstrides, hdtype, hcuda = _info(hidden, "hidden")
            if len(hshape) != 2 or hes != es or hcuda != cuda0:
                raise ValueError(f"hidden: {hshape} {hdtype}: want [slots, "
                                 f"hidden] of {dtype0} on the same device")
            d.hidden_alloc, base = alloc_of(hidden)
            hid = hshape[1]
            d.hidden_offset = haddr - base
            d.hidden_stride = hstrides[0] if hshape[0] > 1 else hid * es
            d.hidden_slots = hshape[0]
        _check(lib.te_kv_shape_custom(len(layers), heads, dim, es, kv_factor,
                                      hid, page_bytes * kv_factor,
                                      ffi.addressof(d.shape)), "KVCache shape")
        if len(allocs) > lib.TE_KV_MAX_ALLOCS:
            raise ValueError(f"layers: {len(allocs)} allocations (at most "
                             f"{lib.TE_KV_MAX_ALLOCS})")
        arr = ffi.new("te_kv_alloc[]", len(allocs))
        for i, (b, n) in enumerate(allocs):
            arr[i].base = ffi.cast("void *", b)
            arr[i].len = n
        d.allocs = arr
        d.nallocs = len(allocs)
        d.mem = 1 if cuda0 else 0  # TE_MEM_CUDA / TE_MEM_HOST
        d.pages = pages
        d.regions = regions
        out = ffi.new("te_kv_cache **")
        _check(lib.te_kv_cache_new(d, out), "te_kv_cache_new")
        self._c = out[0]
        # An owned copy: d.shape is a view into d, which cffi frees with d
        # when this function returns (CI read a freed shape once).
        self._shape = ffi.new("te_kv_shape *", d.shape)
        self.layers, self.kv_factor = len(layers), kv_factor
        self.pages, self.tokens_per_page = pages, tpp
        #: what is registered: one (start, end) per allocation
        self.address_ranges = [(b, b + n) for b, n in allocs]
        #: the one allocation's range (None when there are several)
        self.address_range = (self.address_ranges[0]
                              if len(allocs) == 1 else None)

    def pages_for(self, tokens):
        """Pages a prompt of ``tokens`` tokens needs."""
        return lib.te_kv_pages_for(self._shape, tokens)

    def _cdata(self):
        if self._c is None:
            raise TEError(108, "KVCache is closed", "KVCache")  # ESHUTDOWN
        return self._c

    def close(self):
        """te_kv_cache_free: TEError(EBUSY) while a Source/Decoder uses it."""
        if self._c is not None:
            _check(lib.te_kv_cache_free(self._c), "te_kv_cache_free")
            self._c = None


class Source:
    """The prefill side (te_kv_source): the engine reports each computed
    layer; that layer's pages are written to the decoder at once."""

    def __init__(self, engine, cache, timeout_ms=0, group=0):
        out = ffi.new("te_kv_source **")
        _check(lib.te_kv_source_new(_engine_ptr(engine), group,
                                    cache._cdata(), timeout_ms, out),
               "te_kv_source_new")
        self._s, self._engine, self._cache = out[0], engine, cache

    def _cdata(self):
        if self._s is None:
            raise TEError(108, "Source is closed", "Source")
        return self._s

    def begin(self, req_id, tokens, pages, hidden_slot=None):
        """Request ``req_id`` of ``tokens`` tokens is prefilled from the
        engine's pages ``pages`` (list/array/tensor of page ids)."""
        arr, n = _page_ids(pages, "pages")
        _check(lib.te_kv_source_begin(
            self._cdata(), req_id, tokens, arr, n,
            NO_HIDDEN if hidden_slot is None else hidden_slot),
            "te_kv_source_begin")

    def layer_done(self, req_id, layer):
        """Layer ``layer`` of ``req_id`` is in the cache: write it now."""
        _check(lib.te_kv_source_layer_done(self._cdata(), req_id, layer),
               "te_kv_source_layer_done")

    def hidden_done(self, req_id):
        """The hidden state is in its slot: write it (if asked for)."""
        _check(lib.te_kv_source_hidden_done(self._cdata(), req_id),
               "te_kv_source_hidden_done")

    def wait(self, req_id, timeout=30.0):
        """Until every write of ``req_id`` completed (its source pages are
        the engine's again): None, or TEError (ECANCELED, a write's error,
        ETIMEDOUT when still running after ``timeout`` seconds)."""
        _check(lib.te_kv_source_wait(self._cdata(), req_id,
                                     int(timeout * 1000)), "te_kv_source_wait")

    def close(self):
        if self._s is not None:
            s, self._s = self._s, None
            lib.te_kv_source_free(s)


class Decoder:
    """The decode side over the engine's cache: submit() names the engine's
    destination pages and returns a Future resolved when every write landed
    (result None) or the request failed (TEError). With ``per_layer`` the
    source also says as each layer lands (wait_layer())."""

    def __init__(self, engine, cache, max_requests=16, accept_timeout_ms=0,
                 cancel_timeout_ms=0, group=0, per_layer=False):
        o = ffi.new("te_kv_decoder_opts *")
        o.shape = cache._shape[0]
        o.pool_pages = cache.pages
        o.max_requests = max_requests
        o.group = group
        o.accept_timeout_ms = accept_timeout_ms
        o.cancel_timeout_ms = cancel_timeout_ms
        self._box = lib.kvpy_box_new()
        if self._box == ffi.NULL:
            raise MemoryError("Decoder: completion queue")
        out = ffi.new("te_kv_decoder **")
        try:
            _check(lib.te_kv_decoder_new_cache(_engine_ptr(engine), o,
                                               cache._cdata(), out),
                   "te_kv_decoder_new_cache")
        except Exception:
            lib.kvpy_box_free(self._box)
            raise
        self._d, self._engine, self._cache = out[0], engine, cache
        if per_layer:
            _check(lib.te_kv_decoder_on_layer(self._d, lib.kvpy_layer_fn(),
                                              self._box),
                   "te_kv_decoder_on_layer")
        self._futures = {}  # in flight
        self._all = {}      # submitted, until release() (for wait_layer)
        self._landed = {}   # req_id -> set of layers noted
        self._lock = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._collect, daemon=True,
                                        name="te-kv decoder")
        self._thread.start()

    def _collect(self):
        rid = ffi.new("uint64_t *")
        st = ffi.new("int *")
        layer = ffi.new("int *")
        why = ffi.new("char[]", 300)
        while not self._stop:
            if not lib.kvpy_box_wait(self._box, 100, rid, st, layer, why, 300):
                continue
            with self._lock:
                if layer[0] >= 0:
                    if rid[0] in self._futures:
                        self._landed.setdefault(rid[0], set()).add(layer[0])
                        self._lock.notify_all()
                    continue
                fut = self._futures.pop(rid[0], None)
                self._landed.pop(rid[0], None)
                self._lock.notify_all()
            if fut is None:
                continue
            if st[0] == 0:
                fut.set_result(None)
            else:
                fut.set_exception(TEError(-st[0], ffi.string(why).decode(
                    "utf-8", "replace"), f"request {rid[0]}"))

    def _cdata(self):
        if self._d is None:
            raise TEError(108, "Decoder is closed", "Decoder")
        return self._d

    def add_prefiller(self, address):
        """A Source's engine address (bytes): its index for submit()."""
        out = ffi.new("uint32_t *")
        _check(lib.te_kv_decoder_add_prefiller(self._cdata(), address,
                                               len(address), out),
               "te_kv_decoder_add_prefiller")
        return out[0]

    def submit(self, req_id, tokens, pages, hidden_slot=None, prefiller=0,
               timeout_ms=0):
        """Ask ``prefiller`` for ``req_id``'s KV into the engine's pages
        ``pages``: a concurrent.futures.Future. Until it resolved (and after
        a success until release()), the pages belong to the request."""
        arr, n = _page_ids(pages, "pages")
        fut = concurrent.futures.Future()
        with self._lock:
            if req_id in self._futures:
                raise ValueError(f"request {req_id} is in flight")
            self._futures[req_id] = fut
            self._all[req_id] = fut
        try:
            _check(lib.te_kv_decoder_submit_pages(
                self._cdata(), prefiller, req_id, tokens, arr, n,
                NO_HIDDEN if hidden_slot is None else hidden_slot,
                timeout_ms, lib.kvpy_done_fn(), self._box),
                "te_kv_decoder_submit_pages")
        except Exception:
            with self._lock:
                self._futures.pop(req_id, None)
                self._all.pop(req_id, None)
            raise
        return fut

    def wait_layer(self, req_id, layer, timeout=30.0):
        """Until ``layer`` of ``req_id`` is in the engine's pages (per_layer
        decoders): True, or False after ``timeout`` seconds. A request that
        ended returns at once: True if it completed (every layer is there),
        its TEError if it failed."""
        with self._lock:
            fut = self._all.get(req_id)
            if fut is None:
                raise KeyError(f"request {req_id} was not submitted (or "
                               "was released)")
            ok = self._lock.wait_for(
                lambda: layer in self._landed.get(req_id, ()) or fut.done(),
                timeout)
        if ok and fut.done():
            fut.result()  # raises the request's error
        return ok

    def cancel(self, req_id):
        """te_kv_decoder_cancel: the Future fails with ECANCELED once the
        prefiller confirmed that no write can land (or it was fenced)."""
        _check(lib.te_kv_decoder_cancel(self._cdata(), req_id),
               "te_kv_decoder_cancel")

    def release(self, req_id):
        """Give a completed request's pages back (the engine may reuse
        them for another request)."""
        _check(lib.te_kv_decoder_release(self._cdata(), req_id),
               "te_kv_decoder_release")
        with self._lock:
            self._all.pop(req_id, None)

    def close(self):
        """Requests in flight are fenced first; their Futures fail."""
        if self._d is None:
            return
        d, self._d = self._d, None
        lib.te_kv_decoder_free(d)
        self._stop = True
        self._thread.join()
        lib.kvpy_box_free(self._box)
        with self._lock:
            for fut in self._futures.values():
                fut.set_exception(TEError(125, "decoder closed", "Decoder"))
            self._futures.clear()
