/*
 * GPU-visible completion on a real device: an ImmCounter expectation that a
 * spinning kernel observes through a te_gpu_flag, its failure value on
 * timeout, and the watcher driven by a kernel inside a replayed CUDA graph.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_gpu.h"

/* Launch a kernel spinning on f (10 s of GPU time at most). */
static struct te_k_spin_result *spin_on(te_gpu_flag *f, cudaStream_t s)
{
    struct te_k_spin_result *res = NULL;
    CUDA_OK(cudaMallocManaged((void **)&res, sizeof(*res), cudaMemAttachGlobal));
    memset(res, 0, sizeof(*res));
    CUDA_OK((cudaError_t)te_k_spin_flag(te_gpu_flag_device_ptr(f),
                                        10ull * 1000 * 1000 * 1000, res, NULL,
                                        s));
    return res;
}

START_TEST(flag_completion_seen_by_kernel)
{
    te_engine *a = gpu_engine(1), *b = gpu_engine(1);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    ck_assert_int_eq(te_engine_address(b, 0, addr, &alen), 0);
    te_peer pb;
    ck_assert_int_eq(te_peer_add(a, 0, addr, alen, &pb), 0);
    char *sbuf = calloc(1, 4096), *dbuf = calloc(1, 4096);
    te_mr *smr, *dmr;
    te_mr_desc dd;
    ck_assert_int_eq(te_mr_reg(a, 0, sbuf, 4096, 0, TE_MEM_HOST, &smr), 0);
    ck_assert_int_eq(te_mr_reg(b, 0, dbuf, 4096, TE_MR_REMOTE_WRITE,
                               TE_MEM_HOST, &dmr), 0);
    ck_assert_int_eq(te_mr_describe(dmr, &dd), 0);

    te_gpu_flag *f = NULL;
    ck_assert_msg(te_gpu_flag_create(0, &f) == 0, "%s", te_last_error());
    ck_assert_uint_eq(te_gpu_flag_read(f), 0);
    ck_assert_int_eq(te_imm_expect_gpu_flag(b, 77, 2, 10000, f, 0), -EINVAL);
    ck_assert_int_eq(te_imm_expect_gpu_flag(b, 77, 2, 10000, f,
                                            TE_GPU_FLAG_FAILED), -EINVAL);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct te_k_spin_result *res = spin_on(f, s);
    ck_assert_int_eq(te_imm_expect_gpu_flag(b, 77, 2, 10000, f, 7), 0);
    ck_assert_int_eq(te_imm_expect_gpu_flag(b, 78, 1, 10000, f, 7), -EBUSY);
    ck_assert_int_eq(te_gpu_flag_destroy(f), -EBUSY);
    for (int i = 0; i < 2; i++) {
        te_request q;
        te_request_init(&q, TE_OP_WRITE);
        q.flags = TE_F_IMM;
        q.imm = 77;
        q.u.xfer.peer = pb;
        q.u.xfer.local = smr;
        q.u.xfer.remote = &dd;
        q.u.xfer.len = 64;
        ck_assert_int_ge(te_submit(a, &q), 0);
    }
    te_completion c[2];
    int got = 0;
    for (int tries = 0; got < 2 && tries < 10; tries++)
        got += te_poll_completions(a, c + got, 2 - got, 2000);
    ck_assert_int_eq(got, 2);
    CUDA_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(res->timed_out, 0);
    ck_assert_uint_eq(res->value, 7);
    ck_assert_uint_eq(te_gpu_flag_read(f), 7);

    /* Nobody sends imm 79: the deadline stores the failure value, and the
     * spinning kernel finishes with it instead of spinning forever. */
    te_gpu_flag_store(f, 0);
    memset(res, 0, sizeof(*res));
    CUDA_OK((cudaError_t)te_k_spin_flag(te_gpu_flag_device_ptr(f),
                                        10ull * 1000 * 1000 * 1000, res, NULL,
                                        s));
    ck_assert_int_eq(te_imm_expect_gpu_flag(b, 79, 1, 100, f, 9), 0);
    CUDA_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(res->timed_out, 0);
    ck_assert_uint_eq(res->value, TE_GPU_FLAG_FAILED);
    ck_assert_int_eq(te_gpu_flag_destroy(f), 0);

    CUDA_OK(cudaFree(res));
    CUDA_OK(cudaStreamDestroy(s));
    te_mr_dereg(a, smr);
    te_mr_dereg(b, dmr);
    te_engine_destroy(a);
    te_engine_destroy(b);
    free(sbuf);
    free(dbuf);
}
END_TEST

struct watch_log {
    uint64_t calls, last, sum, bad;
    te_gpu_watcher *self;
    int destroy_rc;
};

static void on_change(uint64_t old_value, uint64_t new_value, void *arg)
{
    struct watch_log *l = arg;
    if (old_value != l->last || new_value <= old_value)
        l->bad++;
    if (l->calls == 0 && l->self)
        l->destroy_rc = te_gpu_watcher_destroy(l->self);
    l->calls++;
    l->sum += new_value - old_value;
    l->last = new_value;
}

START_TEST(watcher_in_replayed_graph)
{
    enum { REPLAYS = 200 };
    struct watch_log log = {0};
    te_gpu_watcher *w = NULL;
    ck_assert_msg(te_gpu_watcher_create(0, TE_GPU_WATCH_EACH_STEP, on_change,
                                        &log, &w) == 0,
                  "%s", te_last_error());
    log.self = w;
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CUDA_OK((cudaError_t)te_k_bump_watcher(te_gpu_watcher_device_ptr(w), s));
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < REPLAYS; i++)
        CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    ck_assert_msg(te_gpu_watcher_wait(w, REPLAYS, 10000) == 0, "%s",
                  te_last_error());
    /* One callback per bump, in order, none merged or missed. */
    ck_assert_uint_eq(log.calls, REPLAYS);
    ck_assert_uint_eq(log.sum, REPLAYS);
    ck_assert_uint_eq(log.bad, 0);
    ck_assert_int_eq(log.destroy_rc, -EDEADLK);
    ck_assert_uint_eq(te_gpu_watcher_delivered(w), REPLAYS);
    ck_assert_int_eq(te_gpu_watcher_wait(w, REPLAYS + 1, 50), -ETIMEDOUT);
    /* A bump after a pause past the watcher's doze threshold (100 ms
     * without a change: it then looks every 1 ms) is still delivered. */
    usleep(250000);
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(te_gpu_watcher_wait(w, REPLAYS + 1, 10000), 0);
    ck_assert_uint_eq(log.calls, REPLAYS + 1);
    ck_assert_uint_eq(log.bad, 0);
    ck_assert_int_eq(te_gpu_watcher_destroy(w), 0);
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    CUDA_OK(cudaStreamDestroy(s));
}
END_TEST

START_TEST(watcher_sees_every_change)
{
    /* Observed-change mode: bumps may land between two looks, but the
     * (old, new) pairs chain and add up to every bump. */
    enum { BUMPS = 2000 };
    struct watch_log log = {0};
    te_gpu_watcher *w = NULL;
    ck_assert_int_eq(te_gpu_watcher_create(0, TE_GPU_WATCH_SPIN, on_change,
                                           &log, &w), 0);
    for (int i = 0; i < BUMPS; i++)
        CUDA_OK((cudaError_t)te_k_bump_watcher(te_gpu_watcher_device_ptr(w),
                                               NULL));
    CUDA_OK(cudaDeviceSynchronize());
    ck_assert_int_eq(te_gpu_watcher_wait(w, BUMPS, 10000), 0);
    ck_assert_uint_eq(log.sum, BUMPS);
    ck_assert_uint_eq(log.last, BUMPS);
    ck_assert_uint_eq(log.bad, 0);
    ck_assert_uint_ge(log.calls, 1);
    ck_assert_int_eq(te_gpu_watcher_destroy(w), 0);
}
END_TEST

TCase *cuda_gpu_flag_cases(void)
{
    TCase *t = tcase_create("flag");
    tcase_set_timeout(t, 100);
    tcase_add_test(t, flag_completion_seen_by_kernel);
    return t;
}

TCase *cuda_gpu_watcher_cases(void)
{
    TCase *t = tcase_create("watcher");
    tcase_set_timeout(t, 100);
    tcase_add_test(t, watcher_in_replayed_graph);
    tcase_add_test(t, watcher_sees_every_change);
    return t;
}
