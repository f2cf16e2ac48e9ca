/*
 * libte-weights: RL weight updates over TransferEngine (issue 13).
 *
 * After each RL step every training rank writes its fresh weights straight
 * into the inference ranks' registered weight buffers. This library holds
 * the pieces that make that exact and fast:
 *
 *  - model metadata: parsed from real safetensors headers or generated from
 *    a published config (presets: Kimi-K2, DeepSeek-V3, Qwen3-235B-A22B and
 *    a small model that fits this machine);
 *  - sharding rules: FSDP on the training side (each rank a contiguous slice
 *    of every tensor), TP/EP on the inference side (column and row splits,
 *    experts per rank, fused qkv / gate_up), optional fp8 e4m3 with 128x128
 *    block scales;
 *  - a static schedule computed once from metadata and both shardings,
 *    balanced by bytes over trainer and receiver NICs, serialisable;
 *  - an analytic simulator of the update time;
 *  - the trainer pipeline and the inference-side version switch
 *    (weights_runtime: te_wt_trainer_*, te_wt_receiver_*).
 *
 * Conventions are the core's: 0 or a non-negative value on success, a
 * negative errno value on failure with the reason in te_wt_last_error()
 * (e.g. "tensor 'x.weight': data_offsets [0, 10) do not match shape
 * [2, 3] x F32 = 24 bytes").
 */
#ifndef TE_WEIGHTS_H
#define TE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "te/te.h" /* TE_API, and the runtime part below */

#ifdef __cplusplus
extern "C" {
#endif

/** Most dimensions of one tensor. */
#define TE_WT_MAX_DIMS 8
/** Largest safetensors JSON header accepted (bytes); real ones are < 10 MiB. */
#define TE_WT_MAX_HEADER (100u << 20)

/** Message of the most recent failure of a te_wt_* call on this thread. */
TE_API const char *te_wt_last_error(void);

/* ---------------------------------------------------------------- dtypes */

/** Element types of safetensors (the names are the format's). */
typedef enum te_wt_dtype {
    TE_WT_BOOL, TE_WT_U8, TE_WT_I8, TE_WT_F8_E4M3, TE_WT_F8_E5M2,
    TE_WT_I16, TE_WT_U16, TE_WT_F16, TE_WT_BF16,
    TE_WT_I32, TE_WT_U32, TE_WT_F32, TE_WT_I64, TE_WT_U64, TE_WT_F64,
    TE_WT_DTYPE_COUNT
} te_wt_dtype;

/** Bytes per element of a dtype (0 if out of range). */
TE_API unsigned te_wt_dtype_size(te_wt_dtype d);
/** safetensors name of a dtype ("BF16"), "?" if out of range. */
TE_API const char *te_wt_dtype_name(te_wt_dtype d);
/** Parse a safetensors dtype name; -EINVAL for an unknown one. */
TE_API int te_wt_dtype_parse(const char *name, te_wt_dtype *out);

/* -------------------------------------------------------------- metadata */

/** One tensor of a checkpoint. */
typedef struct te_wt_tensor {
    char *name;                      /**< owned by the model */
    te_wt_dtype dtype;               /**< element type */
    uint32_t ndim;                   /**< 0 = scalar */
    uint64_t shape[TE_WT_MAX_DIMS];  /**< dims, outermost first */
    uint64_t offset;                 /**< start in the data section */
    uint64_t nbytes;                 /**< product(shape) * dtype size */
} te_wt_tensor;

/**
 * A model: its tensors (sorted by data offset for safetensors input, in
 * generation order for presets) and, for shape families the sharding rules
 * need, its architecture numbers.
 */
typedef struct te_wt_model {
    char *name;            /**< "Kimi-K2", or the file name */
    uint32_t count;        /**< tensors */
    te_wt_tensor *tensors; /**< count entries */
    uint64_t data_bytes;   /**< size of the data section */
    char *metadata_json;   /**< __metadata__ object as JSON text, or NULL */
    /* Architecture (0 when unknown, e.g. a bare safetensors file). */
    uint32_t layers, hidden, heads, kv_heads, head_dim;
    uint32_t experts, top_k, moe_inter, dense_inter, vocab;
} te_wt_model;

/**
 * Parse a safetensors header from untrusted bytes buf[0..len): the 8-byte
 * little-endian header length, then the JSON header. `len` may cover the
 * header only (data_size_known = 0) or the whole file (then offsets must lie
 * inside the data that follows the header, and the data section must be
 * covered exactly). Validates: the length against len and TE_WT_MAX_HEADER,
 * JSON syntax, each entry's dtype, shape (non-negative integers, at most
 * TE_WT_MAX_DIMS, no overflow), data_offsets ([begin, end], begin <= end,
 * end - begin = elements * dtype size), overlaps between tensors, gaps, and
 * __metadata__ (an object of strings). Never reads outside buf. Errors
 * (-EBADMSG, -EINVAL, -ERANGE, -E2BIG) name the tensor and the field.
 */
TE_API int te_wt_safetensors_parse(const void *buf, size_t len, int data_size_known,
                                   te_wt_model **out);

/** Read the header of a safetensors file (validated against the file size). */
TE_API int te_wt_safetensors_load(const char *path, te_wt_model **out);

/**
 * Write a safetensors file for `m` whose data section is `data`
 * (m->data_bytes bytes, tensors at their offsets).
 */
TE_API int te_wt_safetensors_write(const char *path, const te_wt_model *m,
                                   const void *data);

/** Presets generated from published configs. */
typedef enum te_wt_preset {
    TE_WT_KIMI_K2, TE_WT_DEEPSEEK_V3, TE_WT_QWEN3_235B, TE_WT_SMALL_MOE,
    TE_WT_MEDIUM_MOE, /**< 156 MiB: large enough to time on loopback */
    TE_WT_PRESET_COUNT
} te_wt_preset;

/** Build the tensor table of a preset (bf16 weights, contiguous offsets). */
TE_API int te_wt_preset_model(te_wt_preset p, te_wt_model **out);
/** Find a preset by name ("kimi-k2", "deepseek-v3", "qwen3-235b", "small",
 *  "medium"). */
TE_API int te_wt_preset_parse(const char *name, te_wt_preset *out);
/** Name of a preset. */
TE_API const char *te_wt_preset_name(te_wt_preset p);

/**
 * A model from a framework's own tensor table (names, dtypes, shapes, e.g.
 * torch's named_parameters()): `count` entries of `tensors` (name, dtype,
 * ndim and shape read; offsets are laid out back to back). Names must be
 * non-empty and distinct; errors name the tensor.
 */
TE_API int te_wt_model_new(const char *name, const te_wt_tensor *tensors,
                           uint32_t count, te_wt_model **out);

/** Total parameters (elements) of a model. */
TE_API uint64_t te_wt_model_params(const te_wt_model *m);
/** Index of a tensor by name, or -ENOENT. */
TE_API int64_t te_wt_model_find(const te_wt_model *m, const char *name);
/**
 * Fingerprint of a model: FNV-1a over names, dtypes and shapes. Schedules
 * carry it so a schedule of another model is refused.
 */
TE_API uint64_t te_wt_model_fingerprint(const te_wt_model *m);
/** Free a model (NULL allowed). */
TE_API void te_wt_model_free(te_wt_model *m);

/* ------------------------------------------------------------------ fp8 */

/**
 * Encode a float as OCP fp8 E4M3 (FN variant: no infinities, 0x7f/0xff are
 * NaN, largest finite 448): round to nearest, ties to even; values beyond
 * 448 saturate to +-448; NaN stays NaN (0x7f with the sign).
 */
TE_API uint8_t te_wt_fp8_e4m3_from_float(float x);
/** Exact value of an fp8 E4M3 byte. */
TE_API float te_wt_fp8_e4m3_to_float(uint8_t v);
/** bf16 bits to float (exact). */
TE_API float te_wt_bf16_to_float(uint16_t v);

/** fp8 block edge (DeepSeek-V3 / Kimi-K2 weight_scale_inv layout). */
#define TE_WT_FP8_BLOCK 128

/** Number of float scales of a rows x cols matrix quantised by blocks. */
TE_API uint64_t te_wt_fp8_scale_count(uint64_t rows, uint64_t cols);

/**
 * Quantise a rows x cols row-major bf16 matrix: for each 128x128 block
 * (partial at the edges) scale = amax / 448 (1 for an all-zero block);
 * out[i] = e4m3(x[i] / scale); scales row-major by block. Exactly what
 * the inference side dequantises with out * scale.
 */
TE_API void te_wt_fp8_quantise_bf16(const uint16_t *in, uint64_t rows, uint64_t cols,
                                    uint8_t *out, float *scales);

/* ------------------------------------------------------------- sharding */

/** Inference-side layout of a model. */
typedef struct te_wt_infer_layout {
    uint32_t ranks; /**< inference GPUs */
    uint32_t tp;    /**< tensor-parallel group size (divides ranks) */
    uint32_t ep;    /**< expert-parallel size: 0 = ranks */
    uint32_t fp8;   /**< 1: linear weights arrive as fp8 e4m3 + scales */
} te_wt_infer_layout;

/** How one inference parameter is cut. */
typedef enum te_wt_split {
    TE_WT_REPLICATE = 0, /**< whole on every rank */
    TE_WT_COLUMN = 1,    /**< dim 0 split over the TP group */
    TE_WT_ROW = 2,       /**< dim 1 split over the TP group */
    TE_WT_EXPERT = 3,    /**< whole on the rank owning the expert */
} te_wt_split;

/**
 * An inference parameter: one or several checkpoint tensors (fused, e.g.
 * q/k/v or gate/up, concatenated along dim 0 after splitting), cut by one
 * rule, optionally quantised.
 */
typedef struct te_wt_param {
    uint32_t first_member; /**< index into te_wt_plan_members */
    uint32_t members;      /**< fused checkpoint tensors (1..3) */
    uint32_t split;        /**< te_wt_split */
    uint32_t expert;       /**< TE_WT_EXPERT: expert id */
    uint32_t fp8;          /**< quantised on arrival */
    uint32_t unit_rows;    /**< COLUMN: rows split in whole units of this */
} te_wt_param;

/** One slice an inference rank holds: param p's part for that rank. */
typedef struct te_wt_slice {
    uint32_t param;     /**< index of the param */
    uint32_t rank;      /**< inference rank */
    uint64_t dst_off;   /**< offset in the rank's weight buffer */
    uint64_t bytes;     /**< bytes written (fp8 data + scales if fp8) */
} te_wt_slice;

/** The inference-side cut of a model: params and per-rank slices. */
typedef struct te_wt_sharding {
    te_wt_infer_layout layout;
    uint32_t nparams;
    te_wt_param *params;
    uint32_t *members;        /**< tensor indices, params[i].first_member.. */
    uint64_t nslices;
    te_wt_slice *slices;      /**< grouped by param, ranks ascending */
    uint64_t *slice_of_param; /**< nparams + 1 prefix: slices of param p */
    uint64_t *rank_bytes;     /**< ranks entries: weight buffer size */
} te_wt_sharding;

/**
 * Cut a model for an inference layout. Tensor roles come from their names
 * (HF conventions of DeepSeek-V3/Kimi-K2/Qwen3: *_proj, experts.N.*,
 * embed_tokens, lm_head, norms). Errors name the tensor and the field when
 * a shape does not split (e.g. "tensor 'model.layers.0.self_attn.o_proj
 * .weight': dim 1 = 100 does not split over tp 8").
 */
TE_API int te_wt_sharding_build(const te_wt_model *m, const te_wt_infer_layout *l,
                                te_wt_sharding **out);
TE_API void te_wt_sharding_free(te_wt_sharding *s);

/**
 * Rows x cols of param p's part on a rank (before quantisation; elements of
 * the checkpoint dtype). Sets *rows0_of_member (array of p->members) to
 * the first row taken from each member and *mrows to each member's rows.
 */
TE_API void te_wt_slice_geometry(const te_wt_model *m, const te_wt_sharding *s,
                                 uint32_t param, uint32_t rank, uint64_t *rows,
                                 uint64_t *cols, uint64_t *col0, uint64_t *mrow0,
                                 uint64_t *mrows);

/**
 * Produce the bytes an inference rank holds for param p from the full
 * checkpoint tensors (`tensor_data(i)` returns tensor i's bytes): slice,
 * fuse, and quantise when the param is fp8. `out` receives slice.bytes.
 */
typedef const void *(*te_wt_tensor_data_fn)(uint32_t tensor, void *arg);
TE_API int te_wt_slice_produce(const te_wt_model *m, const te_wt_sharding *s,
                               const te_wt_slice *sl, te_wt_tensor_data_fn data,
                               void *arg, void *out);

/** FSDP: training rank r's part of tensor t, in elements -> bytes. */
TE_API void te_wt_fsdp_range(const te_wt_tensor *t, uint32_t trainers, uint32_t rank,
                             uint64_t *begin, uint64_t *end);
/** Bytes of training rank r's FSDP buffer (its parts, in tensor order). */
TE_API uint64_t te_wt_fsdp_bytes(const te_wt_model *m, uint32_t trainers, uint32_t rank);
/** Offset of tensor t's part within rank r's FSDP buffer. */
TE_API uint64_t te_wt_fsdp_offset(const te_wt_model *m, uint32_t trainers,
                                  uint32_t rank, uint32_t tensor);

/* ------------------------------------------------------------- schedule */

/** One write of the schedule. */
typedef struct te_wt_write {
    uint64_t slice;       /**< index into sharding->slices */
    uint64_t staging_off; /**< where the trainer prepares it */
    uint32_t trainer;     /**< producing training rank */
    uint32_t seq;         /**< position in that trainer's order */
} te_wt_write;

/** The static schedule. */
typedef struct te_wt_schedule {
    uint64_t fingerprint;  /**< of the model */
    uint32_t trainers;     /**< training ranks */
    uint32_t nics;         /**< NICs per GPU (both sides) */
    te_wt_infer_layout layout;
    uint64_t staging_bytes; /**< watermark: staging ring size per trainer */
    uint32_t nparams;       /**< params of the sharding */
    uint64_t nwrites;
    te_wt_write *writes;    /**< grouped by trainer, in seq order */
    uint64_t *trainer_first; /**< trainers + 1 prefix into writes */
} te_wt_schedule;

/**
 * Compute the schedule: the slices of each param are cut into units (one
 * unit, unless the param alone is a large part of a trainer's share, e.g.
 * a replicated embedding); each unit goes to one trainer (greedy by bytes,
 * largest first, to the trainer with the least load = its writes out plus
 * its gather reads in); a trainer gathers each param it has a unit of
 * once. Writes of a unit start at receiver (trainer mod slices) so the
 * trainers hit different receivers at every moment; staging offsets are
 * assigned in a ring of staging_bytes (0 = 1 GiB) per trainer.
 * Deterministic.
 */
TE_API int te_wt_schedule_build(const te_wt_model *m, const te_wt_sharding *s,
                                uint32_t trainers, uint32_t nics,
                                uint64_t staging_bytes, te_wt_schedule **out);
TE_API void te_wt_schedule_free(te_wt_schedule *s);

/** Summary of a schedule (te-weights plan). */
typedef struct te_wt_summary {
    uint64_t writes, bytes;
    uint64_t writes_min, writes_max;       /**< per trainer */
    uint64_t tx_min, tx_max;               /**< bytes written per trainer */
    uint64_t gather_max;                   /**< bytes read per trainer (max) */
    uint64_t rx_min, rx_max;               /**< bytes received per inference rank */
    double trainer_imbalance, receiver_imbalance; /**< max / mean */
} te_wt_summary;
TE_API void te_wt_schedule_summary(const te_wt_model *m, const te_wt_sharding *sh,
                                   const te_wt_schedule *s, te_wt_summary *out);

/** Serialised schedule format version. */
#define TE_WT_SCHEDULE_VERSION 1
/** Serialise (malloc'd buffer in *buf, its length in *len). */
TE_API int te_wt_schedule_serialize(const te_wt_schedule *s, void **buf, size_t *len);
/**
 * Parse untrusted bytes. With m and sh given, the schedule must be of that
 * model (fingerprint) and layout and every slice, trainer and staging range
 * must be in bounds; errors name the field ("schedule is of model
 * fingerprint 0x.., this model is 0x..").
 */
TE_API int te_wt_schedule_parse(const void *buf, size_t len, const te_wt_model *m,
                                const te_wt_sharding *sh, te_wt_schedule **out);

/* ------------------------------------------------------------ simulator */

/** Hardware and pipeline parameters of the simulator. */
typedef struct te_wt_sim_params {
    double nic_gbps;        /**< per NIC, each direction */
    uint32_t nics;          /**< NICs per GPU */
    double write_overhead_us; /**< CPU cost to submit one write */
    double read_overhead_us;  /**< CPU cost to submit one gather read */
    double quant_gbps;      /**< GPU quantise/fuse rate (bytes in) */
    double h2d_gbps;        /**< host->device copy; 0 = weights on GPU */
    uint64_t watermark;     /**< bytes in flight per trainer */
    int target_charged;     /**< 1: only bytes landing at a NIC cost it
                                 (loopback's cap); 0: full duplex TX and RX */
} te_wt_sim_params;

/** Prediction of the simulator. */
typedef struct te_wt_sim_result {
    double seconds;           /**< predicted update time */
    double trainer_tx_s, trainer_rx_s, receiver_rx_s, submit_s, quant_s, fill_s;
    const char *bound;        /**< which term bounds it */
} te_wt_sim_result;

TE_API int te_wt_simulate(const te_wt_model *m, const te_wt_sharding *sh,
                          const te_wt_schedule *s, const te_wt_sim_params *p,
                          te_wt_sim_result *out);

/* -------------------------------------------------------------- runtime */
/*
 * The update itself, on TransferEngine (public API, te/te.h). Processes
 * find each other through a rendezvous directory: each publishes a small
 * record (engine address and state, written atomically) as
 * <dir>/train-<t> or <dir>/infer-<r>, and a descriptor table
 * <dir>/<role>-<n>.table with one memory descriptor per entry (a trainer's
 * tensor parts, a receiver's param slices: the caller's own memory).
 *
 * Each receiver reserves an immediate space (te_imm_space_create, name
 * "weights") with one value per slice it holds, and publishes the raw value
 * of index 0 of the space's current life with its record; a write carries
 * base + index (index = the slice's position among the receiver's
 * slices), so a receiver counts each tensor separately and can name the
 * ones that did not arrive. Every version is one life of the space
 * (retired after the version, complete or not), so a late write of an
 * abandoned version is counted as stale, never for the next one.
 */

/** Most slices one inference rank may hold (the size of an imm space). */
#define TE_WT_MAX_RANK_SLICES (1u << 24)

typedef struct te_wt_trainer te_wt_trainer;   /**< a training rank (opaque) */
typedef struct te_wt_receiver te_wt_receiver; /**< an inference rank (opaque) */

/**
 * A training rank on group 0 of engine e, for schedule s of model m / cut
 * sh (all must outlive it). Registers the staging ring (s->staging_bytes:
 * the watermark of bytes in flight) and the gather buffers (the next params
 * are gathered while the current one is written): the only memory of the
 * library's. The weights themselves stay where the training framework
 * holds them: hand them over with te_wt_trainer_bind() (or
 * te_wt_trainer_set_source_fn(), or te_wt_trainer_load() for a file).
 * The engine's group 0 must have s->nics NICs.
 */
TE_API int te_wt_trainer_create(te_engine *e, const te_wt_model *m,
                                const te_wt_sharding *sh, const te_wt_schedule *s,
                                uint32_t rank, te_wt_trainer **out);

/**
 * Where this training rank's FSDP part of one tensor lives, as the
 * framework holds it: elements [te_wt_fsdp_range()) of the full tensor,
 * contiguous, in the model's dtype.
 */
typedef struct te_wt_source {
    const char *name;     /**< checkpoint tensor name (as in the model) */
    const void *addr;     /**< first byte of this rank's part */
    uint64_t bytes;       /**< bytes readable at addr (>= the part's) */
    te_wt_dtype dtype;    /**< dtype of the full tensor: must be the model's */
    uint32_t ndim;        /**< full tensor's dims: must be the model's */
    uint64_t shape[TE_WT_MAX_DIMS]; /**< full tensor's shape */
    uint32_t mem;         /**< TE_MEM_HOST or TE_MEM_CUDA (device memory,
                               registered as such; this trainer's own part
                               is then read through the engine, never by
                               the CPU: docs/weights.md) */
} te_wt_source;

/**
 * Bind the trainer to the framework's tensors: one source per tensor of
 * the model, any order. Everything is checked before anything changes: an
 * unknown or repeated name, a missing tensor, a dtype or shape other than
 * the model's, a range smaller than the part: -EINVAL naming the tensor.
 * Each part is registered remote-readable (the other trainers gather from
 * it) unless it is already registered for the same range: returns the
 * number of registrations made (0 when every address is unchanged). The
 * push reads the tensors where they are (no copy into a library buffer);
 * they must hold the version being pushed until te_wt_trainer_wait_done().
 */
TE_API int te_wt_trainer_bind(te_wt_trainer *t, const te_wt_source *src, uint32_t n);

/** Fill *out for tensor `tensor` of the model (0, or a negative errno). */
typedef int (*te_wt_source_fn)(uint32_t tensor, te_wt_source *out, void *arg);
/**
 * Install a callback asked for every tensor's source at the start of each
 * push (then te_wt_trainer_bind() of the answers): for frameworks that may
 * move their shards between steps. NULL uninstalls it.
 */
TE_API void te_wt_trainer_set_source_fn(te_wt_trainer *t, te_wt_source_fn fn, void *arg);

/** Registrations made for sources so far (re-registration test, stats). */
TE_API uint64_t te_wt_trainer_registrations(const te_wt_trainer *t);

/**
 * Convenience for a checkpoint file: allocate (once) a buffer for this
 * rank's parts, read them from a safetensors file of the same model (only
 * those bytes), and te_wt_trainer_bind() them.
 */
TE_API int te_wt_trainer_load(te_wt_trainer *t, const char *checkpoint);
/** Publish <dir>/train-<rank> and connect to every other trainer's record
 *  (waiting at most timeout_ms for them to appear). */
TE_API int te_wt_trainer_connect(te_wt_trainer *t, const char *dir, int timeout_ms);

/** What one push did. */
typedef struct te_wt_push_stats {
    uint64_t writes, write_bytes, reads, read_bytes;
    double seconds;        /**< first submission to last completion */
    double start_s, end_s; /**< those two moments, CLOCK_MONOTONIC seconds */
    uint64_t peak_inflight; /**< most staging bytes in flight at once */
} te_wt_push_stats;

/**
 * Push `version` (1..): publish that this rank's shard holds it and wait
 * (<= timeout_ms) until every trainer's does and every receiver published
 * that it is ready for exactly this version, then run the pipeline: gather each
 * param with TE_OP_READ from the other trainers (own part copied), fuse,
 * quantise, and WriteImm each slice into its receiver's standby buffer.
 * A failed operation stops the push: -errno, the tensor and reason in
 * te_wt_last_error(); outstanding operations are drained first. Writes
 * whose completions have not come by the end of the drain (the deadline,
 * at least 5 s after the last submission) fail the push with -ETIMEDOUT;
 * a later push waits (within its own deadline; -EBUSY) for them before
 * reusing the buffers. Requests complete through te_request.done: the
 * engine's completion queue is left to its other users.
 */
TE_API int te_wt_trainer_push(te_wt_trainer *t, const char *dir, uint32_t version,
                              int timeout_ms, te_wt_push_stats *st);
/**
 * Progress of a push, called on the pushing thread after each param's
 * writes were submitted: writes and bytes submitted so far of the
 * trainer's totals, and the staging bytes in flight (<= the watermark).
 */
typedef void (*te_wt_progress_fn)(uint64_t writes, uint64_t total_writes,
                                  uint64_t bytes, uint64_t total_bytes,
                                  uint64_t inflight, void *arg);
/** Install (or clear, fn = NULL) the progress callback of a trainer. */
TE_API void te_wt_trainer_set_progress(te_wt_trainer *t, te_wt_progress_fn fn, void *arg);

/**
 * Wait (<= timeout_ms) until every other trainer has finished pushing
 * `version` (no one gathers that version from this rank's shard any more):
 * call it before te_wt_trainer_load() of the next version.
 */
TE_API int te_wt_trainer_wait_done(te_wt_trainer *t, const char *dir, uint32_t version,
                                   int timeout_ms);
TE_API void te_wt_trainer_destroy(te_wt_trainer *t);

/** What an inference rank holds of one param: the destination it needs. */
typedef struct te_wt_rank_param {
    const char *name;   /**< the param's first member tensor (owned by the model) */
    uint32_t param;     /**< index in the sharding */
    uint32_t members;   /**< fused checkpoint tensors, concatenated by rows */
    uint32_t fp8;       /**< 1: E4M3 bytes, padded to 4, then float32 scales */
    te_wt_dtype dtype;  /**< checkpoint dtype of the members */
    uint64_t rows, cols; /**< the rank's part, in elements before quantisation */
    uint64_t bytes;     /**< bytes the trainers write (the destination's size) */
} te_wt_rank_param;

/**
 * The params inference rank `rank` holds, in the order its slices are
 * counted: fills out[0..cap) and returns how many there are (call with
 * cap 0 to size the array).
 */
TE_API int64_t te_wt_rank_params(const te_wt_model *m, const te_wt_sharding *sh,
                                 uint32_t rank, te_wt_rank_param *out, uint64_t cap);

/** The engine's own memory for one param of this rank. */
typedef struct te_wt_dest {
    const char *name;   /**< te_wt_rank_param.name */
    void *addr;         /**< where the engine keeps it */
    uint64_t bytes;     /**< bytes writable at addr (>= te_wt_rank_param.bytes) */
    uint32_t mem;       /**< TE_MEM_HOST or TE_MEM_CUDA */
} te_wt_dest;

/**
 * An inference rank writing into the engine's own parameters. `set0` (and
 * `set1`, or NULL) hold one destination per param of this rank, any order.
 *  - two sets (double-buffered by the engine): version v is written into
 *    the set not serving; when every slice has arrived te_wt_receiver_update()
 *    returns 0 with report.live_set = that set, and the engine flips its
 *    pointer to it. The serving set is never written: a version is applied
 *    whole or not at all.
 *  - one set (in place, set1 NULL): every version is written into the
 *    serving parameters; the engine must not run while an update is in
 *    flight. A complete version is whole; a failed one (deadline) leaves
 *    the parameters with a mix of the previous and the new bytes
 *    (report.clobbered = 1): the engine must not serve until a later
 *    version completes. Half the memory, no atomic switch.
 * Checked before anything is registered: an unknown, repeated or missing
 * name, a range smaller than the param's bytes: -EINVAL naming it. Each
 * destination is registered remote-writable on group 0 of e (the receiver's
 * engine: a registration made on another engine is never used).
 */
TE_API int te_wt_receiver_create_into(te_engine *e, const te_wt_model *m,
                                      const te_wt_sharding *sh,
                                      const te_wt_schedule *s, uint32_t rank,
                                      const te_wt_dest *set0, const te_wt_dest *set1,
                                      uint32_t n, te_wt_receiver **out);

/**
 * Convenience: an inference rank with two weight buffers of the library's
 * (sh->rank_bytes[rank] each, slices at their dst_off), built on
 * te_wt_receiver_create_into(); te_wt_receiver_live() returns the serving one.
 */
TE_API int te_wt_receiver_create(te_engine *e, const te_wt_model *m,
                                 const te_wt_sharding *sh, const te_wt_schedule *s,
                                 uint32_t rank, te_wt_receiver **out);

/** Outcome of one version at a receiver. */
typedef struct te_wt_update_report {
    uint32_t version;     /**< the version tried */
    uint32_t live_version; /**< the version serving afterwards (0 = none) */
    uint32_t expected;    /**< slices this rank expects */
    uint32_t missing;     /**< slices that did not arrive complete */
    char missing_names[512]; /**< the first missing tensors, comma separated */
    int32_t live_set;     /**< destination set serving afterwards (-1 = none) */
    uint32_t clobbered;   /**< in place only: a failed version left mixed bytes */
} te_wt_update_report;

/**
 * Receive `version`: publish the standby set's table and <dir>/infer-<rank>
 * (ready for it), wait until every slice's immediates have arrived
 * (te_expected_imms per write), then name the standby set live
 * (report.live_set). At the deadline the live set is left as it was (the
 * previous version keeps serving), the standby set's remote access is
 * revoked (no late write can land in it) and -ETIMEDOUT is returned with
 * the missing tensors in the report. Double-buffered, never half-applies a
 * version; in place (one set), a failed version is reported clobbered.
 */
TE_API int te_wt_receiver_update(te_wt_receiver *r, const char *dir, uint32_t version,
                                 int timeout_ms, te_wt_update_report *rep);
/**
 * Wait (<= timeout_ms) until every trainer has finished its push of
 * `version` (all its operations completed). A receiver has every byte of a
 * complete version before the writers have their completions: call this
 * before shutting the engine down, or a trainer sees its last writes fail.
 */
TE_API int te_wt_receiver_wait_trainers(te_wt_receiver *r, const char *dir,
                                        uint32_t version, int timeout_ms);

/** The live buffer of te_wt_receiver_create() (NULL before the first
 *  version, and for a receiver writing into the engine's memory). */
TE_API const uint8_t *te_wt_receiver_live(const te_wt_receiver *r, uint32_t *version);
/** The serving destination set (0 or 1; -1 before the first version) and
 *  its version. */
TE_API int te_wt_receiver_live_set(const te_wt_receiver *r, uint32_t *version);
TE_API void te_wt_receiver_destroy(te_wt_receiver *r);

#ifdef __cplusplus
}
#endif
#endif /* TE_WEIGHTS_H */
