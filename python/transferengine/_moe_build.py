"""cffi (API mode) build of transferengine._te_moe, the binding of libte-moe
(apps/moe/include/te/moe.h, docs/moe.md), compiled against te/moe.h so the
C compiler checks every layout declared here. Built like the core module
(_build.py): ``python3 python/transferengine/_moe_build.py OUTDIR`` (CMake
target python-moe-binding), finding the headers and libraries through
TE_INCLUDE_DIR / TE_MOE_INCLUDE_DIR / TE_LIBRARY_DIR / TE_MOE_LIBRARY_DIR,
else the source tree and ./build. The engine comes from the core module as
an address (te_engine * has no type shared between the two modules).
"""
from _app_build import app_builder, main

CDEF = r"""
#define TE_MOE_MAX_RANKS ...
#define TE_MOE_MAX_TOPK ...
#define TE_MOE_MAX_EXPERTS ...
enum te_moe_dtype { TE_MOE_FP32, TE_MOE_BF16, ... };
typedef struct te_engine te_engine;
typedef struct te_moe_rank te_moe_rank;

typedef struct te_moe_config {
    uint32_t ranks, experts, topk, hidden, dtype, max_tokens, private_rows;
    int32_t timeout_ms;
    uint32_t naive;
    ...;
} te_moe_config;

typedef struct te_moe_src {
    uint32_t rank, token, slot;
    float weight;
} te_moe_src;

typedef struct te_moe_recv {
    void *x;
    te_moe_src *src;
    uint32_t *count;
    uint32_t capacity;
    const void **rows;
} te_moe_recv;

typedef struct te_moe_expert_out {
    const void *y;
    uint32_t dtype, experts, rows, hidden;
} te_moe_expert_out;

typedef struct te_moe_stats {
    uint32_t dispatch_writes[64];
    uint32_t combine_writes[64];
    uint32_t rows_sent, rows_received;
    double dispatch_us, combine_us;
    uint64_t dispatch_bytes[64];
    uint64_t combine_bytes[64];
    double pack_us, post_us, experts_us;
    double layout_us;
} te_moe_stats;

#define TE_MOE_MEM_OPS_VERSION ...
typedef struct te_moe_mem_ops {
    uint32_t version;
    uint32_t mem;
    void *ctx;
    ...;
} te_moe_mem_ops;

int te_moe_rank_new(te_engine *e, const te_moe_config *c, uint32_t rank,
                    te_moe_rank **out);
int te_moe_rank_blob(te_moe_rank *r, void *buf, size_t *len);
int te_moe_rank_connect(te_moe_rank *r, uint32_t peer, const void *blob,
                        size_t len);
int te_moe_rank_input(te_moe_rank *r, const void *x, size_t bytes);
int te_moe_rank_mem_ops(te_moe_rank *r, const te_moe_mem_ops *ops);
int te_moe_dispatch_start(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                          const void *x, const uint16_t *experts,
                          const float *weights);
int te_moe_dispatch_wait(te_moe_rank *r, const te_moe_recv *recv);
int te_moe_combine_start(te_moe_rank *r, uint64_t batch,
                         const te_moe_expert_out *y);
int te_moe_combine_wait(te_moe_rank *r, float *out);
void te_moe_rank_stats(te_moe_rank *r, te_moe_stats *out);
const char *te_moe_last_error(void);
int te_moe_rank_disconnect(te_moe_rank *r);
void te_moe_rank_free(te_moe_rank *r);
"""


ffibuilder = app_builder("_te_moe", "moe", "MOE", "te-moe", CDEF,
                         ("#include <te/moe.h>\n"
                          "_Static_assert(TE_MOE_MAX_RANKS == 64, \"stats arrays\");\n"))

if __name__ == "__main__":
    main(ffibuilder)
