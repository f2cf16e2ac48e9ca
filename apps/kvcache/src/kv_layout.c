/* Model shapes and the heads-before-pages layout (te/kv.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kv_internal.h"

#define DEFAULT_PAGE_BYTES (32u * 1024u)

static const struct preset {
    const char *name;
    uint32_t layers, kv_heads, head_dim, elem_bytes, kv_factor, hidden;
} presets[] = {
    /* Qwen3-235B-A22B: 94 layers, GQA with 4 KV heads of 128, bf16. */
    {"qwen3-235b-a22b", 94, 4, 128, 2, 2, 4096},
    /* Llama-3.1-70B: 80 layers, 8 KV heads of 128, bf16. */
    {"llama-3.1-70b", 80, 8, 128, 2, 2, 8192},
    /* DeepSeek-V3 MLA: 61 layers, one 576-element latent (512 + 64 rope)
     * per token, bf16. */
    {"deepseek-v3", 61, 1, 576, 2, 1, 7168},
};

int te_kv_shape_custom(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
                       uint32_t elem_bytes, uint32_t kv_factor,
                       uint32_t hidden, uint32_t page_bytes, te_kv_shape *out)
{
    kv_clear();
    if (!out)
        return kv_fail(-EINVAL, "te_kv_shape: out is NULL");
    if (!layers || layers > 4096 || !kv_heads || kv_heads > 1024 ||
        !head_dim || head_dim > 65536 || (elem_bytes != 1 && elem_bytes != 2 &&
        elem_bytes != 4) || (kv_factor != 1 && kv_factor != 2) || !hidden ||
        hidden > (1u << 20))
        return kv_fail(-EINVAL, "te_kv_shape: layers %u, kv_heads %u, "
                       "head_dim %u, elem_bytes %u, kv_factor %u, hidden %u: "
                       "out of range", layers, kv_heads, head_dim, elem_bytes,
                       kv_factor, hidden);
    if (!page_bytes)
        page_bytes = DEFAULT_PAGE_BYTES;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "custom");
    out->layers = layers;
    out->kv_heads = kv_heads;
    out->head_dim = head_dim;
    out->elem_bytes = elem_bytes;
    out->kv_factor = kv_factor;
    out->hidden = hidden;
    uint64_t tb = te_kv_token_bytes(out);
    out->tokens_per_page = tb >= page_bytes ? 1 : (uint32_t)(page_bytes / tb);
    return 0;
}

int te_kv_shape_preset(const char *name, uint32_t page_bytes, te_kv_shape *out)
{
    kv_clear();
    for (size_t i = 0; name && i < sizeof(presets) / sizeof(presets[0]); i++) {
        const struct preset *p = &presets[i];
        if (strcmp(name, p->name) != 0)
            continue;
        int rc = te_kv_shape_custom(p->layers, p->kv_heads, p->head_dim,
                                    p->elem_bytes, p->kv_factor, p->hidden,
                                    page_bytes, out);
        if (!rc)
            snprintf(out->name, sizeof(out->name), "%s", p->name);
        return rc;
    }
    return kv_fail(-ENOENT, "unknown model \"%s\" (presets: qwen3-235b-a22b, "
                   "llama-3.1-70b, deepseek-v3; or a custom shape)",
                   name ? name : "(null)");
}

uint64_t te_kv_token_bytes(const te_kv_shape *s)
{
    return (uint64_t)s->kv_factor * s->kv_heads * s->head_dim * s->elem_bytes;
}

uint64_t te_kv_page_bytes(const te_kv_shape *s)
{
    return te_kv_token_bytes(s) * s->tokens_per_page;
}

uint32_t te_kv_pages_for(const te_kv_shape *s, uint32_t tokens)
{
    return (tokens + s->tokens_per_page - 1) / s->tokens_per_page;
}
