/* The GPU-driven variant of layer_done (te/kv.h, te_kv_gpu_layers_*): the
 * engine's forward pass, a CUDA graph replayed per step, bumps a watcher
 * word (te_k_bump_watcher on its stream) after each layer's K/V are in the
 * cache; the core's te_gpu_watcher thread sees each +1 step and reports the
 * layer here, so no CPU thread of the engine has to follow the GPU. Step k
 * (1-based) reports layer k-1; step layers+1 the hidden state. Built and
 * refusal-tested here; unrun on a GPU (docs/kvcache.md). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "kv_internal.h"

struct te_kv_gpu_layers {
    te_kv_source *s;
    uint64_t id;
    uint32_t layers;
    te_gpu_watcher *w;
};

/* The watcher thread, once per +1 step (TE_GPU_WATCH_EACH_STEP). */
static void on_step(uint64_t old_value, uint64_t new_value, void *arg)
{
    struct te_kv_gpu_layers *g = arg;
    (void)old_value;
    int rc = new_value <= g->layers
                 ? te_kv_source_layer_done(g->s, g->id,
                                           (uint32_t)(new_value - 1))
                 : new_value == g->layers + 1u
                       ? te_kv_source_hidden_done(g->s, g->id)
                       : -ERANGE;
    if (rc)
        te_log_printf(TE_LOG_ERROR, "te-kv", "gpu layers of request %" PRIu64
                      ": step %" PRIu64 ": %s", g->id, new_value,
                      rc == -ERANGE ? "more steps than layers + 1"
                                    : te_kv_last_error());
}

int te_kv_gpu_layers_new(te_kv_source *s, uint64_t id, uint32_t layers,
                         int device, te_kv_gpu_layers **out)
{
    kv_clear();
    if (!s || !out || !layers)
        return kv_fail(-EINVAL, "te_kv_gpu_layers_new: NULL source/out or "
                       "0 layers");
    struct te_kv_gpu_layers *g = calloc(1, sizeof(*g));
    if (!g)
        return kv_fail(-ENOMEM, "te_kv_gpu_layers_new: out of memory");
    g->s = s;
    g->id = id;
    g->layers = layers;
    int rc = te_gpu_watcher_create(device, TE_GPU_WATCH_EACH_STEP, on_step, g,
                                   &g->w);
    if (rc) {
        free(g);
        return kv_fail(rc, "te_kv_gpu_layers_new: watcher on device %d: %s",
                       device, te_last_error());
    }
    *out = g;
    return 0;
}

void *te_kv_gpu_layers_word(const te_kv_gpu_layers *g)
{
    return te_gpu_watcher_device_ptr(g->w);
}

int te_kv_gpu_layers_free(te_kv_gpu_layers *g)
{
    if (!g)
        return 0;
    int rc = te_gpu_watcher_destroy(g->w);
    if (rc)
        return kv_fail(rc, "te_kv_gpu_layers_free: %s", te_last_error());
    free(g);
    return 0;
}
