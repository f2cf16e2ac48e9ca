"""A vLLM-style KV connector (the worker-side methods of vLLM's
KVConnectorBase_V1) as a thin wrapper over transferengine.kv, in the push
model: the decode instance asks, the prefill instance writes each layer
into the decode instance's own KV blocks as soon as it is computed.

vLLM is not a dependency: this class has the same method names and
arguments, and python/tests/test_kv_vllm.py drives it the way vLLM's model
runner does. docs/kvcache.md maps each method to the library call:

  register_kv_caches(kv_caches)  -> kv.KVCache over the per-layer views
                                    (+ kv.Source or kv.Decoder)
  start_load_kv(metadata)        -> Decoder.submit(request, tokens, block ids)
  wait_for_layer_load(layer)     -> Decoder.wait_layer(request, layer index)
                                    (a per_layer Decoder: the source's note
                                    that the layer's writes completed)
  save_kv_layer(layer, ...)      -> Source.layer_done(request, layer index)
  wait_for_save()                -> nothing: writes leave in layer_done;
                                    their completion is get_finished's
  get_finished(finished_ids)     -> (sent: Source.wait done,
                                     received: Futures resolved)

``kv_caches``: layer name -> tensor [2, num_blocks, block_size, heads,
head_dim] (vLLM's FlashAttention layout), all views of one allocation.
Request ids are vLLM's strings, mapped to 64-bit ids both sides agree on.
"""
import hashlib

from transferengine import kv


def request_id64(req_id: str) -> int:
    """The 64-bit id both instances derive from vLLM's request id."""
    return int.from_bytes(hashlib.sha256(req_id.encode()).digest()[:8],
                          "little") or 1


class Metadata:
    """What vLLM's scheduler side hands the worker each step
    (build_connector_meta): per request its block ids and token count."""

    def __init__(self):
        self.requests = []  # (req_id str, block_ids list, num_tokens)

    def add(self, req_id, block_ids, num_tokens):
        self.requests.append((req_id, list(block_ids), num_tokens))


class TEKVConnector:
    """role "producer" (prefill instance) or "consumer" (decode instance)."""

    def __init__(self, engine, role, prefiller_address=None):
        if role not in ("producer", "consumer"):
            raise ValueError(f"role {role!r}: producer or consumer")
        self.engine, self.role = engine, role
        self._prefiller_address = prefiller_address
        self._meta = Metadata()
        self._layer_index = {}
        self._loading = {}   # consumer: req_id -> Future
        self._saving = set()  # producer: req_ids begun, not yet waited

    # -------------------------------------------------- both instances
    def register_kv_caches(self, kv_caches):
        names = list(kv_caches)
        self._layer_index = {n: i for i, n in enumerate(names)}
        self.cache = kv.KVCache([(kv_caches[n][0], kv_caches[n][1])
                                 for n in names])
        if self.role == "producer":
            self.source = kv.Source(self.engine, self.cache)
        else:
            self.decoder = kv.Decoder(self.engine, self.cache,
                                      per_layer=True)
            self._pf = self.decoder.add_prefiller(self._prefiller_address)

    def bind_connector_metadata(self, metadata):
        self._meta = metadata

    # ----------------------------------------------- decode instance
    def start_load_kv(self, forward_context=None):
        for req_id, blocks, tokens in self._meta.requests:
            if self.role == "consumer" and req_id not in self._loading:
                self._loading[req_id] = self.decoder.submit(
                    request_id64(req_id), tokens, blocks, prefiller=self._pf)

    def wait_for_layer_load(self, layer_name):
        layer = self._layer_index[layer_name]
        for req_id, fut in self._loading.items():
            if not self.decoder.wait_layer(request_id64(req_id), layer):
                raise TimeoutError(f"{req_id}: layer {layer_name} did not "
                                   "arrive")

    # ---------------------------------------------- prefill instance
    def save_kv_layer(self, layer_name, kv_layer=None, attn_metadata=None):
        layer = self._layer_index[layer_name]
        for req_id, blocks, tokens in self._meta.requests:
            rid = request_id64(req_id)
            if req_id not in self._saving:
                self.source.begin(rid, tokens, blocks)
                self._saving.add(req_id)
            self.source.layer_done(rid, layer)

    def wait_for_save(self):
        return None

    # ------------------------------------------------------- both
    def get_finished(self, finished_req_ids=()):
        """(requests whose KV was sent, requests whose KV arrived)."""
        sent, received = set(), set()
        if self.role == "producer":
            for req_id in list(self._saving):
                if req_id in finished_req_ids:
                    self.source.wait(request_id64(req_id))
                    self._saving.discard(req_id)
                    sent.add(req_id)
        else:
            for req_id, fut in list(self._loading.items()):
                if fut.done():
                    fut.result()  # raises the request's TEError
                    del self._loading[req_id]
                    received.add(req_id)
        return sent, received

    def request_finished(self, req_id):
        """The decode instance is done with the blocks: they are its own
        again (te_kv_decoder_release)."""
        self.decoder.release(request_id64(req_id))

    def close(self):
        obj = getattr(self, "source", None) or getattr(self, "decoder", None)
        if obj is not None:
            obj.close()
            self.cache.close()
