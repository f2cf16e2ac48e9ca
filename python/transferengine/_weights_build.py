"""cffi (API mode) build of the weights binding: compiled against
apps/weights/include/te/weights.h and linked to libte-weights, so the C
compiler checks every struct and constant declared here. A module of its
own (transferengine._te_weights) beside the core's _te: the core binding
does not depend on libte-weights.

    python3 python/transferengine/_weights_build.py OUTDIR

(CMake's target python-binding runs this when libte-weights is built);
TE_INCLUDE_DIR / TE_WEIGHTS_INCLUDE_DIR / TE_LIBRARY_DIR /
TE_WEIGHTS_LIBRARY_DIR say where the headers and libraries are, else the
source tree and ./build.
"""
from _app_build import app_builder, main

CDEF = r"""
#define TE_WT_MAX_DIMS ...
#define TE_MEM_HOST ...
#define TE_MEM_CUDA ...
typedef struct te_engine te_engine;
typedef enum te_wt_dtype {
    TE_WT_BOOL, TE_WT_U8, TE_WT_I8, TE_WT_F8_E4M3, TE_WT_F8_E5M2,
    TE_WT_I16, TE_WT_U16, TE_WT_F16, TE_WT_BF16,
    TE_WT_I32, TE_WT_U32, TE_WT_F32, TE_WT_I64, TE_WT_U64, TE_WT_F64,
    TE_WT_DTYPE_COUNT
} te_wt_dtype;
typedef struct te_wt_tensor {
    char *name; te_wt_dtype dtype; uint32_t ndim; uint64_t shape[8];
    uint64_t offset; uint64_t nbytes;
} te_wt_tensor;
typedef struct te_wt_model { char *name; uint32_t count; te_wt_tensor *tensors; ...; }
    te_wt_model;
typedef struct te_wt_infer_layout { uint32_t ranks, tp, ep, fp8; } te_wt_infer_layout;
typedef struct te_wt_sharding { uint32_t nparams; uint64_t nslices; ...; } te_wt_sharding;
typedef struct te_wt_schedule { uint32_t trainers; uint32_t nics; uint64_t nwrites; ...; }
    te_wt_schedule;
typedef struct te_wt_trainer te_wt_trainer;
typedef struct te_wt_receiver te_wt_receiver;
typedef struct te_wt_source {
    const char *name; const void *addr; uint64_t bytes; te_wt_dtype dtype;
    uint32_t ndim; uint64_t shape[8]; uint32_t mem;
} te_wt_source;
typedef struct te_wt_rank_param {
    const char *name; uint32_t param; uint32_t members; uint32_t fp8;
    te_wt_dtype dtype; uint64_t rows, cols; uint64_t bytes;
} te_wt_rank_param;
typedef struct te_wt_dest { const char *name; void *addr; uint64_t bytes; uint32_t mem; }
    te_wt_dest;
typedef struct te_wt_push_stats {
    uint64_t writes, write_bytes, reads, read_bytes;
    double seconds; double start_s, end_s; uint64_t peak_inflight;
} te_wt_push_stats;
typedef struct te_wt_update_report {
    uint32_t version; uint32_t live_version; uint32_t expected; uint32_t missing;
    char missing_names[512]; int32_t live_set; uint32_t clobbered;
} te_wt_update_report;

const char *te_wt_last_error(void);
unsigned te_wt_dtype_size(te_wt_dtype d);
int te_wt_dtype_parse(const char *name, te_wt_dtype *out);
int te_wt_model_new(const char *name, const te_wt_tensor *tensors, uint32_t count,
                    te_wt_model **out);
void te_wt_model_free(te_wt_model *m);
int te_wt_sharding_build(const te_wt_model *m, const te_wt_infer_layout *l,
                         te_wt_sharding **out);
void te_wt_sharding_free(te_wt_sharding *s);
int te_wt_schedule_build(const te_wt_model *m, const te_wt_sharding *s,
                         uint32_t trainers, uint32_t nics, uint64_t staging_bytes,
                         te_wt_schedule **out);
void te_wt_schedule_free(te_wt_schedule *s);
void te_wt_fsdp_range(const te_wt_tensor *t, uint32_t trainers, uint32_t rank,
                      uint64_t *begin, uint64_t *end);
int te_wt_trainer_create(te_engine *e, const te_wt_model *m, const te_wt_sharding *sh,
                         const te_wt_schedule *s, uint32_t rank, te_wt_trainer **out);
int te_wt_trainer_bind(te_wt_trainer *t, const te_wt_source *src, uint32_t n);
uint64_t te_wt_trainer_registrations(const te_wt_trainer *t);
int te_wt_trainer_push(te_wt_trainer *t, const char *dir, uint32_t version,
                       int timeout_ms, te_wt_push_stats *st);
int te_wt_trainer_wait_done(te_wt_trainer *t, const char *dir, uint32_t version,
                            int timeout_ms);
void te_wt_trainer_destroy(te_wt_trainer *t);
typedef void (*te_wt_progress_fn)(uint64_t writes, uint64_t total_writes,
                                  uint64_t bytes, uint64_t total_bytes,
                                  uint64_t inflight, void *arg);
void te_wt_trainer_set_progress(te_wt_trainer *t, te_wt_progress_fn fn, void *arg);
int64_t te_wt_rank_params(const te_wt_model *m, const te_wt_sharding *sh,
                          uint32_t rank, te_wt_rank_param *out, uint64_t cap);
int te_wt_receiver_create_into(te_engine *e, const te_wt_model *m,
                               const te_wt_sharding *sh, const te_wt_schedule *s,
                               uint32_t rank, const te_wt_dest *set0,
                               const te_wt_dest *set1, uint32_t n,
                               te_wt_receiver **out);
int te_wt_receiver_update(te_wt_receiver *r, const char *dir, uint32_t version,
                          int timeout_ms, te_wt_update_report *rep);
int te_wt_receiver_wait_trainers(te_wt_receiver *r, const char *dir,
                                 uint32_t version, int timeout_ms);
int te_wt_receiver_live_set(const te_wt_receiver *r, uint32_t *version);
void te_wt_receiver_destroy(te_wt_receiver *r);
"""


ffibuilder = app_builder("_te_weights", "weights", "WEIGHTS", "te-weights", CDEF,
                         "#include <te/weights.h>\n")

if __name__ == "__main__":
    main(ffibuilder)
