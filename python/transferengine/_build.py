"""cffi (API mode) build of the binding: compiled against include/te/te.h,
so the C compiler checks every struct layout and constant declared here.

Used three ways:
  * by setup.py (pip install ./python): ffibuilder below;
  * from a build tree: ``python3 python/transferengine/_build.py OUTDIR``
    (CMake's target ``python-binding`` does this into build/python);
  * where te.h and libtransferengine are: TE_INCLUDE_DIR / TE_LIBRARY_DIR,
    else pkg-config transferengine, else the source tree and ./build/core.
"""
import os
import shlex
import subprocess
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))

CDEF = r"""
#define TE_MAX_NICS ...
#define TE_ADDR_MAX ...
#define TE_DESC_MAX ...
#define TE_VERSION_MAJOR ...
#define TE_VERSION_MINOR ...
#define TE_MR_REMOTE_WRITE ...
#define TE_MR_REMOTE_READ ...
#define TE_MR_LOCAL ...
#define TE_MEM_HOST ...
#define TE_MEM_CUDA ...
#define TE_F_IMM ...
#define TE_PEER_UNKNOWN ...
#define TE_IMM_SPACE_FIXED ...
#define TE_IMM_SPACE_REGION_START ...
#define TE_IMM_SPACE_DEFAULT_LIVES ...
#define TE_IMM_SPACE_MAX ...
#define TE_CAP_ZERO_COPY ...
#define TE_CAP_NATIVE_IMM ...
#define TE_CAP_NATIVE_RMA ...
#define TE_CAP_DEVICE_DIRECT ...
#define TE_CAP_HARDWARE ...
#define TE_CAP_AUTO_PROGRESS ...
#define TE_CAP_FAST ...
#define TE_REQUEST_SIZE_V0_2 ...

typedef struct te_engine te_engine;
typedef struct te_config te_config;
typedef struct te_mr te_mr;
typedef uint32_t te_peer;
typedef struct te_imm_space te_imm_space;

enum te_op { TE_OP_WRITE, TE_OP_PAGED, TE_OP_SCATTER, TE_OP_BARRIER,
             TE_OP_READ, TE_OP_SEND, ... };
enum te_route_kind { TE_ROUTE_SHARD, TE_ROUTE_PIN, ... };
enum te_scatter_split { TE_SCATTER_BY_PEER, TE_SCATTER_BY_BYTES, ... };
enum te_path_kind { TE_PATH_WRITE, TE_PATH_WRITE_IMM, TE_PATH_READ,
                    TE_PATH_SEND, TE_PATH_MEM_HOST, TE_PATH_MEM_CUDA, ... };

typedef struct te_nic_info {
    char name[64];
    char pci_path[64];
    int32_t numa_node;
    int32_t device;
    uint64_t link_gbps;
    uint32_t queue_depth;
    ...;
} te_nic_info;

typedef struct te_path_info {
    uint32_t kind;
    uint32_t caps;
    uint32_t missing;
    uint32_t refused;
    char text[192];
    ...;
} te_path_info;

typedef struct te_mr_desc {
    uint64_t addr;
    uint64_t len;
    uint32_t access;
    uint32_t nic_count;
    ...;
} te_mr_desc;

typedef struct te_route {
    uint32_t kind;
    uint32_t nics;
    uint32_t nic;
    ...;
} te_route;

typedef struct te_scatter_dst {
    te_peer peer;
    const te_mr_desc *dst;
    uint64_t dst_off;
    uint64_t src_off;
    uint64_t len;
    ...;
} te_scatter_dst;

typedef struct te_barrier_dst {
    te_peer peer;
    const te_mr_desc *dst;
    ...;
} te_barrier_dst;

typedef struct te_completion {
    uint64_t user_data;
    uint64_t req_id;
    int32_t status;
    uint32_t op;
    char reason[96];
    ...;
} te_completion;

typedef struct te_imm_space_stats {
    uint32_t base;
    uint32_t size;
    uint32_t lives;
    uint32_t life;
    uint64_t epoch;
    uint64_t stale_arrivals;
    uint64_t retired_surplus;
    ...;
} te_imm_space_stats;

typedef void (*te_done_fn)(const te_completion *c, void *arg);
typedef void (*te_imm_fn)(uint32_t imm, int status, void *arg);
typedef void (*te_recv_fn)(int group, te_peer from, const void *data,
                           size_t len, void *arg);

struct te_xfer_args { te_peer peer; te_mr *local; uint64_t local_off;
    const te_mr_desc *remote; uint64_t remote_off; uint64_t len; };
struct te_paged_args { te_peer peer; te_mr *src; uint64_t src_off;
    uint64_t src_stride; const uint32_t *src_idx; const te_mr_desc *dst;
    uint64_t dst_off; uint64_t dst_stride; const uint32_t *dst_idx;
    uint64_t page_len; uint32_t count; };
struct te_scatter_args { te_mr *src; uint32_t split; uint32_t count;
    const te_scatter_dst *dsts; };
struct te_barrier_args { uint32_t count; const te_barrier_dst *dsts; };
struct te_send_args { te_peer peer; const void *buf; uint32_t len; };

typedef struct te_request {
    uint32_t size;
    uint32_t op;
    uint32_t flags;
    uint32_t imm;
    int32_t group;
    int32_t timeout_ms;
    te_route route;
    uint64_t user_data;
    te_done_fn done;
    void *done_arg;
    ...;
} te_request;

const char *te_strerror(int err);
const char *te_last_error(void);
const char *te_version(void);
enum te_log_level { TE_LOG_ERROR = 0, TE_LOG_WARN = 1, TE_LOG_INFO = 2,
                    TE_LOG_DEBUG = 3 };
typedef void (*te_log_fn)(int level, const char *origin, const char *msg,
                          void *arg);
void te_set_log_fn(te_log_fn fn, void *arg);
void te_set_log_level(int level);
void te_log_printf(int level, const char *origin, const char *fmt, ...);
te_config *te_config_new(void);
void te_config_free(te_config *cfg);
int te_config_load_file(te_config *cfg, const char *path);
int te_config_load_string(te_config *cfg, const char *ini_text);
int te_config_set(te_config *cfg, const char *section, const char *key,
                  const char *value);
const char *te_config_get(const te_config *cfg, const char *section,
                          const char *key);
int te_engine_create(const te_config *cfg, te_engine **out);
void te_engine_destroy(te_engine *e);
int te_engine_group_count(const te_engine *e);
int te_engine_nic_count(const te_engine *e, int group);
const char *te_engine_plugin_name(const te_engine *e);
int te_engine_progress_mode(const te_engine *e);
int te_engine_nic_info(const te_engine *e, int group, int nic, te_nic_info *out);
int te_engine_address(te_engine *e, int group, void *buf, size_t *len);
int te_engine_paths(const te_engine *e, int group, int nic, te_path_info *out,
                    int max);
const char *te_path_kind_name(uint32_t kind);
const char *te_cap_names(uint32_t caps, char *buf, size_t len);
int te_peer_add(te_engine *e, int group, const void *addr, size_t len,
                te_peer *out);
int te_peer_remove(te_engine *e, int group, te_peer peer);
int te_peer_status(te_engine *e, int group, te_peer peer);
int te_mr_reg(te_engine *e, int group, void *addr, size_t len, uint32_t access,
              uint32_t mem_kind, te_mr **out);
int te_mr_dereg(te_engine *e, te_mr *mr);
void *te_mr_addr(const te_mr *mr);
size_t te_mr_len(const te_mr *mr);
int te_mr_describe(const te_mr *mr, te_mr_desc *out);
int te_mr_revoke(te_engine *e, te_mr *mr, te_mr_desc *new_desc);
int te_desc_serialize(const te_mr_desc *d, void *buf, size_t *len);
int te_desc_parse(const void *buf, size_t len, te_mr_desc *out);
int64_t te_submit(te_engine *e, const te_request *req);
int64_t te_expected_imms(te_engine *e, const te_request *req, uint32_t target);
int te_poll_completions(te_engine *e, te_completion *out, int max,
                        int timeout_ms);
int te_imm_expect(te_engine *e, uint32_t imm, uint64_t count, te_imm_fn cb,
                  void *arg);
int te_imm_expect_timeout(te_engine *e, uint32_t imm, uint64_t count,
                          int timeout_ms, te_imm_fn cb, void *arg);
int te_imm_poll(te_engine *e, uint32_t imm, uint64_t *banked, int *armed);
int te_imm_wait(te_engine *e, uint32_t imm, uint64_t count, int timeout_ms);
int te_imm_remove(te_engine *e, uint32_t imm, uint64_t *surplus);
int te_imm_disarm(te_engine *e, uint32_t imm, uint64_t *surplus);
int te_imm_space_create(te_engine *e, const char *name, uint32_t size,
                        uint32_t lives, uint32_t flags, uint32_t base,
                        te_imm_space **out);
int te_imm_space_value(const te_imm_space *s, uint32_t index, uint32_t *raw);
int te_imm_space_retire(te_imm_space *s);
int te_imm_space_stats_get(const te_imm_space *s, te_imm_space_stats *out);
int te_imm_space_lookup(te_engine *e, uint32_t imm, const char **name,
                        uint32_t *index, uint32_t *life);
int te_imm_space_destroy(te_imm_space *s);
int te_set_recv_handler(te_engine *e, int group, te_recv_fn fn, void *arg);
int te_progress(te_engine *e, int group, int budget);
int te_progress_wait(te_engine *e, int group, int timeout_ms);
int te_progress_fd(te_engine *e, int group);
int te_progress_arm(te_engine *e, int group);

/* CUDA (te.h's last section; python/transferengine/cuda.py) */
#define TE_CUDA_PTR_HOST 0
#define TE_CUDA_PTR_HOST_PINNED 1
#define TE_CUDA_PTR_DEVICE 2
#define TE_CUDA_PTR_MANAGED 3
#define TE_GPU_FLAG_FAILED 0xffffffff
#define TE_GPU_WATCH_EACH_STEP 0x1
#define TE_GPU_WATCH_SPIN 0x2
typedef struct te_cuda_ptr_info {
    uint32_t kind;
    int32_t device;
    uint64_t alloc_base;
    uint64_t alloc_len;
    uint32_t dmabuf;
    uint32_t reserved;
} te_cuda_ptr_info;
typedef struct te_gpu_flag te_gpu_flag;
typedef struct te_gpu_watcher te_gpu_watcher;
typedef void (*te_gpu_watch_fn)(uint64_t old_value, uint64_t new_value,
                                void *arg);
int te_cuda_status(char *why, size_t len);
int te_cuda_pointer_info(const void *ptr, size_t len, te_cuda_ptr_info *out);
int te_gpu_flag_create(int device, te_gpu_flag **out);
int te_gpu_flag_destroy(te_gpu_flag *f);
void *te_gpu_flag_device_ptr(const te_gpu_flag *f);
uint32_t te_gpu_flag_read(const te_gpu_flag *f);
void te_gpu_flag_store(te_gpu_flag *f, uint32_t v);
int te_imm_expect_gpu_flag(te_engine *e, uint32_t imm, uint64_t count,
                           int timeout_ms, te_gpu_flag *f, uint32_t value);
void te_gpu_flag_disarm(te_gpu_flag *f);
int te_gpu_watcher_create(int device, uint32_t flags, te_gpu_watch_fn cb,
                          void *arg, te_gpu_watcher **out);
void *te_gpu_watcher_device_ptr(const te_gpu_watcher *w);
uint64_t te_gpu_watcher_delivered(const te_gpu_watcher *w);
int te_gpu_watcher_wait(te_gpu_watcher *w, uint64_t value, int timeout_ms);
int te_gpu_watcher_destroy(te_gpu_watcher *w);

/* te_request's union, reached through helpers below (the union's anonymous
 * structs cannot be declared partially). */
struct te_xfer_args *tepy_xfer(te_request *r);
struct te_paged_args *tepy_paged(te_request *r);
struct te_scatter_args *tepy_scatter(te_request *r);
struct te_barrier_args *tepy_barrier(te_request *r);
struct te_send_args *tepy_send(te_request *r);
void tepy_request_init(te_request *r, uint32_t op);
/* One call per request instead of one per field (the hot path of building
 * requests from Python). */
void tepy_request_setup(te_request *r, uint32_t op, uint32_t flags,
                        uint32_t imm, int32_t group, int32_t timeout_ms,
                        uint32_t route_kind, uint32_t route_nics,
                        uint32_t route_nic, uint64_t user_data);
void tepy_set_xfer(te_request *r, te_peer peer, te_mr *local,
                   uint64_t local_off, const te_mr_desc *remote,
                   uint64_t remote_off, uint64_t len);
void tepy_set_paged(te_request *r, te_peer peer, te_mr *src, uint64_t src_off,
                    uint64_t src_stride, const uint32_t *src_idx,
                    const te_mr_desc *dst, uint64_t dst_off,
                    uint64_t dst_stride, const uint32_t *dst_idx,
                    uint64_t page_len, uint32_t count);
size_t tepy_desc_nic_offset(void);

extern "Python" void tepy_on_done(const te_completion *c, void *arg);
extern "Python" void tepy_on_imm(uint32_t imm, int status, void *arg);
extern "Python" void tepy_on_recv(int group, te_peer from, const void *data,
                                  size_t len, void *arg);
extern "Python" void tepy_on_log(int level, const char *origin,
                                 const char *msg, void *arg);
"""

# The union's members as named structs of the same layout; the static
# asserts make any drift from te.h a compile error.
SOURCE = r"""
#include <stddef.h>
#include <te/te.h>

#define TEPY_SAME(T, M) _Static_assert(sizeof(((te_request *)0)->u.M) == \
    sizeof(struct T), "te_request.u." #M " differs from " #T)
struct te_xfer_args { te_peer peer; te_mr *local; uint64_t local_off;
    const te_mr_desc *remote; uint64_t remote_off; uint64_t len; };
struct te_paged_args { te_peer peer; te_mr *src; uint64_t src_off;
    uint64_t src_stride; const uint32_t *src_idx; const te_mr_desc *dst;
    uint64_t dst_off; uint64_t dst_stride; const uint32_t *dst_idx;
    uint64_t page_len; uint32_t count; };
struct te_scatter_args { te_mr *src; uint32_t split; uint32_t count;
    const te_scatter_dst *dsts; };
struct te_barrier_args { uint32_t count; const te_barrier_dst *dsts; };
struct te_send_args { te_peer peer; const void *buf; uint32_t len; };
TEPY_SAME(te_xfer_args, xfer);
TEPY_SAME(te_paged_args, paged);
TEPY_SAME(te_scatter_args, scatter);
TEPY_SAME(te_barrier_args, barrier);
TEPY_SAME(te_send_args, send);
_Static_assert(offsetof(te_request, u.paged.count) ==
               offsetof(te_request, u) + offsetof(struct te_paged_args, count),
               "te_request.u.paged layout");
static struct te_xfer_args *tepy_xfer(te_request *r)
{ return (struct te_xfer_args *)&r->u.xfer; }
static struct te_paged_args *tepy_paged(te_request *r)
{ return (struct te_paged_args *)&r->u.paged; }
static struct te_scatter_args *tepy_scatter(te_request *r)
{ return (struct te_scatter_args *)&r->u.scatter; }
static struct te_barrier_args *tepy_barrier(te_request *r)
{ return (struct te_barrier_args *)&r->u.barrier; }
static struct te_send_args *tepy_send(te_request *r)
{ return (struct te_send_args *)&r->u.send; }
static void tepy_request_init(te_request *r, uint32_t op)
{ te_request_init(r, op); }
static size_t tepy_desc_nic_offset(void) { return offsetof(te_mr_desc, nic); }
static void tepy_request_setup(te_request *r, uint32_t op, uint32_t flags,
                               uint32_t imm, int32_t group, int32_t timeout_ms,
                               uint32_t route_kind, uint32_t route_nics,
                               uint32_t route_nic, uint64_t user_data)
{
    te_request_init(r, op);
    r->flags = flags; r->imm = imm; r->group = group;
    r->timeout_ms = timeout_ms; r->route.kind = route_kind;
    r->route.nics = route_nics; r->route.nic = route_nic;
    r->user_data = user_data;
}
static void tepy_set_xfer(te_request *r, te_peer peer, te_mr *local,
                          uint64_t local_off, const te_mr_desc *remote,
                          uint64_t remote_off, uint64_t len)
{
    r->u.xfer.peer = peer; r->u.xfer.local = local;
    r->u.xfer.local_off = local_off; r->u.xfer.remote = remote;
    r->u.xfer.remote_off = remote_off; r->u.xfer.len = len;
}
static void tepy_set_paged(te_request *r, te_peer peer, te_mr *src,
                           uint64_t src_off, uint64_t src_stride,
                           const uint32_t *src_idx, const te_mr_desc *dst,
                           uint64_t dst_off, uint64_t dst_stride,
                           const uint32_t *dst_idx, uint64_t page_len,
                           uint32_t count)
{
    r->u.paged.peer = peer; r->u.paged.src = src;
    r->u.paged.src_off = src_off; r->u.paged.src_stride = src_stride;
    r->u.paged.src_idx = src_idx; r->u.paged.dst = dst;
    r->u.paged.dst_off = dst_off; r->u.paged.dst_stride = dst_stride;
    r->u.paged.dst_idx = dst_idx; r->u.paged.page_len = page_len;
    r->u.paged.count = count;
}
"""


def _pkg_config(flag):
    try:
        out = subprocess.run(["pkg-config", flag, "transferengine"],
                             check=True, capture_output=True, text=True)
        return shlex.split(out.stdout)
    except (OSError, subprocess.CalledProcessError):
        return None


def locate():
    """(include_dirs, library_dirs) of te.h and libtransferengine."""
    inc = os.environ.get("TE_INCLUDE_DIR")
    lib = os.environ.get("TE_LIBRARY_DIR")
    if inc and lib:
        return [inc], [lib]
    cflags, libs = _pkg_config("--cflags"), _pkg_config("--libs")
    if cflags is not None and libs is not None and not inc:
        return ([f[2:] for f in cflags if f.startswith("-I")],
                [f[2:] for f in libs if f.startswith("-L")])
    return ([inc or os.path.join(SOURCE_ROOT, "include")],
            [lib or os.path.join(SOURCE_ROOT, "build", "core")])


def make_ffibuilder():
    inc, lib = locate()
    builder = FFI()
    builder.cdef(CDEF)
    builder.set_source(
        "transferengine._te", SOURCE, include_dirs=inc, library_dirs=lib,
        libraries=["transferengine"],
        # The extension finds the library where it was linked from.
        extra_link_args=["-Wl,-rpath," + d for d in lib],
        extra_compile_args=["-std=gnu11"])
    return builder


ffibuilder = make_ffibuilder()

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(HERE)
    ffibuilder.compile(tmpdir=out, verbose=False)
