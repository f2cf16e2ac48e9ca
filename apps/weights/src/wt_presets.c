/*
 * Tensor tables of real models, generated from their published configs
 * (config.json of moonshotai/Kimi-K2-Instruct, deepseek-ai/DeepSeek-V3,
 * Qwen/Qwen3-235B-A22B) with the Hugging Face tensor names, bf16 weights
 * (the training-side dtype; e_score_correction_bias is F32 as published).
 * The small model has the Qwen3-MoE shape family plus one dense layer, and
 * is small enough to push end to end on this machine.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt_internal.h"

/* A config: the numbers of config.json that fix the tensor table. */
struct wt_config {
    const char *name;
    int mla;                 /* DeepSeek-V3 family (MLA) vs Qwen3 (GQA) */
    uint32_t layers, hidden, heads, kv_heads, head_dim, vocab;
    uint32_t experts, shared_experts, top_k, moe_inter, dense_inter, first_dense;
    uint32_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
    int tied;                /* lm_head shares embed_tokens */
};

static const struct wt_config configs[TE_WT_PRESET_COUNT] = {
    [TE_WT_KIMI_K2] = {"Kimi-K2", 1, 61, 7168, 64, 64, 0, 163840,
                       384, 1, 8, 2048, 18432, 1, 1536, 512, 128, 64, 128, 0},
    [TE_WT_DEEPSEEK_V3] = {"DeepSeek-V3", 1, 61, 7168, 128, 128, 0, 129280,
                           256, 1, 8, 2048, 18432, 3, 1536, 512, 128, 64, 128, 0},
    [TE_WT_QWEN3_235B] = {"Qwen3-235B-A22B", 0, 94, 4096, 64, 4, 128, 151936,
                          128, 0, 8, 1536, 12288, 0, 0, 0, 0, 0, 0, 0},
    [TE_WT_SMALL_MOE] = {"small-moe", 0, 3, 256, 4, 2, 64, 1024,
                         8, 0, 2, 128, 512, 1, 0, 0, 0, 0, 0, 0},
    [TE_WT_MEDIUM_MOE] = {"medium-moe", 0, 4, 1024, 8, 4, 128, 8192,
                          8, 0, 2, 512, 2048, 1, 0, 0, 0, 0, 0, 0},
};

static const char *const preset_keys[TE_WT_PRESET_COUNT] = {
    "kimi-k2", "deepseek-v3", "qwen3-235b", "small", "medium"};

const char *te_wt_preset_name(te_wt_preset p)
{
    return (unsigned)p < TE_WT_PRESET_COUNT ? preset_keys[p] : "?";
}

int te_wt_preset_parse(const char *name, te_wt_preset *out)
{
    for (int i = 0; i < TE_WT_PRESET_COUNT; i++)
        if (!strcasecmp(name, preset_keys[i])) {
            *out = (te_wt_preset)i;
            return 0;
        }
    return wt_fail(-EINVAL, "unknown model preset '%s' (kimi-k2, deepseek-v3, "
                   "qwen3-235b, small, medium)", name);
}

struct builder {
    te_wt_model *m;
    uint32_t cap;
    int rc;
};

static void add(struct builder *b, te_wt_dtype dt, uint64_t d0, uint64_t d1,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void add(struct builder *b, te_wt_dtype dt, uint64_t d0, uint64_t d1,
                const char *fmt, ...)
{
    if (b->rc)
        return;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    uint64_t shape[2] = {d0, d1};
    b->rc = wt_model_push(b->m, &b->cap, name, dt, d1 ? 2 : 1, shape);
}

#define BF TE_WT_BF16

static void mlp(struct builder *b, const char *prefix, uint32_t inter, uint32_t hidden)
{
    add(b, BF, inter, hidden, "%s.gate_proj.weight", prefix);
    add(b, BF, inter, hidden, "%s.up_proj.weight", prefix);
    add(b, BF, hidden, inter, "%s.down_proj.weight", prefix);
}

static void attention(struct builder *b, const struct wt_config *c, uint32_t l)
{
    const char *p = "model.layers";
    if (c->mla) {
        uint32_t qk = c->qk_nope + c->qk_rope;
        add(b, BF, c->q_lora, c->hidden, "%s.%u.self_attn.q_a_proj.weight", p, l);
        add(b, BF, c->q_lora, 0, "%s.%u.self_attn.q_a_layernorm.weight", p, l);
        add(b, BF, (uint64_t)c->heads * qk, c->q_lora,
            "%s.%u.self_attn.q_b_proj.weight", p, l);
        add(b, BF, c->kv_lora + c->qk_rope, c->hidden,
            "%s.%u.self_attn.kv_a_proj_with_mqa.weight", p, l);
        add(b, BF, c->kv_lora, 0, "%s.%u.self_attn.kv_a_layernorm.weight", p, l);
        add(b, BF, (uint64_t)c->heads * (c->qk_nope + c->v_head), c->kv_lora,
            "%s.%u.self_attn.kv_b_proj.weight", p, l);
        add(b, BF, c->hidden, (uint64_t)c->heads * c->v_head,
            "%s.%u.self_attn.o_proj.weight", p, l);
    } else {
        uint64_t q = (uint64_t)c->heads * c->head_dim, kv = (uint64_t)c->kv_heads * c->head_dim;
        add(b, BF, q, c->hidden, "%s.%u.self_attn.q_proj.weight", p, l);
        add(b, BF, kv, c->hidden, "%s.%u.self_attn.k_proj.weight", p, l);
        add(b, BF, kv, c->hidden, "%s.%u.self_attn.v_proj.weight", p, l);
        add(b, BF, c->hidden, q, "%s.%u.self_attn.o_proj.weight", p, l);
        add(b, BF, c->head_dim, 0, "%s.%u.self_attn.q_norm.weight", p, l);
        add(b, BF, c->head_dim, 0, "%s.%u.self_attn.k_norm.weight", p, l);
    }
}

int te_wt_preset_model(te_wt_preset which, te_wt_model **out)
{
    wt_error_clear();
    if ((unsigned)which >= TE_WT_PRESET_COUNT)
        return wt_fail(-EINVAL, "preset %d out of range", (int)which);
    const struct wt_config *c = &configs[which];
    struct builder b = {calloc(1, sizeof(te_wt_model)), 0, 0};
    if (!b.m)
        return wt_fail(-ENOMEM, "out of memory");
    te_wt_model *m = b.m;
    m->name = strdup(c->name);
    m->layers = c->layers;
    m->hidden = c->hidden;
    m->heads = c->heads;
    m->kv_heads = c->kv_heads;
    m->head_dim = c->mla ? c->qk_nope + c->qk_rope : c->head_dim;
    m->experts = c->experts;
    m->top_k = c->top_k;
    m->moe_inter = c->moe_inter;
    m->dense_inter = c->dense_inter;
    m->vocab = c->vocab;
    add(&b, BF, c->vocab, c->hidden, "model.embed_tokens.weight");
    char prefix[128];
    for (uint32_t l = 0; l < c->layers; l++) {
        add(&b, BF, c->hidden, 0, "model.layers.%u.input_layernorm.weight", l);
        attention(&b, c, l);
        add(&b, BF, c->hidden, 0, "model.layers.%u.post_attention_layernorm.weight", l);
        if (l < c->first_dense) {
            snprintf(prefix, sizeof(prefix), "model.layers.%u.mlp", l);
            mlp(&b, prefix, c->dense_inter, c->hidden);
            continue;
        }
        add(&b, BF, c->experts, c->hidden, "model.layers.%u.mlp.gate.weight", l);
        if (c->mla)
            add(&b, TE_WT_F32, c->experts, 0,
                "model.layers.%u.mlp.gate.e_score_correction_bias", l);
        for (uint32_t e = 0; e < c->experts; e++) {
            snprintf(prefix, sizeof(prefix), "model.layers.%u.mlp.experts.%u", l, e);
            mlp(&b, prefix, c->moe_inter, c->hidden);
        }
        if (c->shared_experts) {
            snprintf(prefix, sizeof(prefix), "model.layers.%u.mlp.shared_experts", l);
            mlp(&b, prefix, c->moe_inter * c->shared_experts, c->hidden);
        }
    }
    add(&b, BF, c->hidden, 0, "model.norm.weight");
    if (!c->tied)
        add(&b, BF, c->vocab, c->hidden, "lm_head.weight");
    if (b.rc || !m->name) {
        te_wt_model_free(m);
        return b.rc ? b.rc : wt_fail(-ENOMEM, "out of memory");
    }
    *out = m;
    return 0;
}
