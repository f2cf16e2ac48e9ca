"""A tiny decoder-only transformer in torch with a paged KV cache in its own
layout, the model of the KV-transfer proof (kv_disagg_torch.py).

Seeded random weights (CPU, float32), learned positions, pre-norm blocks of
multi-head attention and an MLP, greedy decoding. The KV cache is one
arena: ``kv[layer][0|1]`` is K or V, shaped [pages, tokens_per_page, heads,
head_dim] (vLLM's per-layer layout), and ``hidden`` [slots, hidden] holds the
prefill's last hidden state. A sequence's page table is a list of page ids;
token t lives in page ``table[t // tokens_per_page]``, slot ``t % tpp``.
Prefill and decode read K/V back from the pages they wrote, so a decode on
pages received from another process computes exactly what it computes on
the pages its own prefill wrote.
"""
import torch

VOCAB, HIDDEN, HEADS, HEAD_DIM, LAYERS, MLP = 64, 32, 2, 16, 3, 64
TPP = 4  # tokens per page
MAX_POS = 128


class TinyModel:
    """The weights (seeded: every process builds the same model)."""

    def __init__(self, seed=1234):
        g = torch.Generator().manual_seed(seed)

        def w(*shape):
            return torch.randn(*shape, generator=g) / shape[0] ** 0.5
        self.embed = w(VOCAB, HIDDEN)
        self.pos = w(MAX_POS, HIDDEN)
        self.layers = [dict(wq=w(HIDDEN, HEADS * HEAD_DIM),
                            wk=w(HIDDEN, HEADS * HEAD_DIM),
                            wv=w(HIDDEN, HEADS * HEAD_DIM),
                            wo=w(HEADS * HEAD_DIM, HIDDEN),
                            w1=w(HIDDEN, MLP), w2=w(MLP, HIDDEN))
                       for _ in range(LAYERS)]
        self.head = w(HIDDEN, VOCAB)


def make_cache(pages, hidden_slots=2):
    """The engine's cache: (kv per layer as (K, V) views, hidden), all views
    of one arena tensor (one registration covers it)."""
    n = LAYERS * 2 * pages * TPP * HEADS * HEAD_DIM
    arena = torch.zeros(n + hidden_slots * HIDDEN)
    kv = arena[:n].view(LAYERS, 2, pages, TPP, HEADS, HEAD_DIM)
    layers = [(kv[l, 0], kv[l, 1]) for l in range(LAYERS)]
    hidden = arena[n:].view(hidden_slots, HIDDEN)
    return layers, hidden


def _norm(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _store(cache_l, table, positions, k, v):
    for i, p in enumerate(positions):
        cache_l[0][table[p // TPP], p % TPP] = k[i]
        cache_l[1][table[p // TPP], p % TPP] = v[i]


def _gather(cache_l, table, n):
    """K and V of positions 0..n-1 from the pages: [n, heads, dim] each."""
    idx = torch.tensor(table, dtype=torch.long)
    k = cache_l[0].index_select(0, idx).reshape(-1, HEADS, HEAD_DIM)[:n]
    v = cache_l[1].index_select(0, idx).reshape(-1, HEADS, HEAD_DIM)[:n]
    return k, v


def _layer(m, l, cache_l, table, x, positions):
    """One block over the tokens at `positions` (their K/V stored first,
    then attention reads every earlier position back from the pages)."""
    p = m.layers[l]
    h = _norm(x)
    q = (h @ p["wq"]).view(-1, HEADS, HEAD_DIM)
    _store(cache_l, table, positions, (h @ p["wk"]).view(-1, HEADS, HEAD_DIM),
           (h @ p["wv"]).view(-1, HEADS, HEAD_DIM))
    k, v = _gather(cache_l, table, positions[-1] + 1)
    att = torch.einsum("thd,shd->hts", q, k) / HEAD_DIM ** 0.5
    pos = torch.tensor(positions).view(-1, 1)
    mask = torch.arange(k.shape[0]).view(1, -1) > pos  # causal
    att = att.masked_fill(mask.unsqueeze(0), float("-inf")).softmax(-1)
    o = torch.einsum("hts,shd->thd", att, v).reshape(-1, HEADS * HEAD_DIM)
    x = x + o @ p["wo"]
    return x + torch.relu(_norm(x) @ p["w1"]) @ p["w2"]


def prefill(m, cache, table, prompt, hidden_slot, layer_done=None):
    """Run the prompt through every layer, its K/V into the pages of
    `table`; layer_done(l) after each layer; the last position's final
    hidden state into hidden[hidden_slot]."""
    layers, hidden = cache
    positions = list(range(len(prompt)))
    x = m.embed[torch.tensor(prompt)] + m.pos[:len(prompt)]
    for l in range(LAYERS):
        x = _layer(m, l, layers[l], table, x, positions)
        if layer_done:
            layer_done(l)
    hidden[hidden_slot] = _norm(x[-1])


def decode(m, cache, table, n_prompt, hidden_slot, steps, new_page):
    """Greedy decoding from the prefill's hidden state and pages: the
    tokens and the logits of each step. new_page() gives a free page id
    when the sequence grows past its pages."""
    layers, hidden = cache
    table = list(table)
    logits = [hidden[hidden_slot] @ m.head]
    tokens = [int(logits[0].argmax())]
    for s in range(steps - 1):
        p = n_prompt + s
        if p // TPP >= len(table):
            table.append(new_page())
        x = (m.embed[tokens[-1]] + m.pos[p]).view(1, -1)
        for l in range(LAYERS):
            x = _layer(m, l, layers[l], table, x, [p])
        logits.append(_norm(x[0]) @ m.head)
        tokens.append(int(logits[-1].argmax()))
    return tokens, torch.stack(logits)
