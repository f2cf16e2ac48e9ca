/* Engine life cycle and API edge cases through the public API, on the
 * loopback plugin (found through TE_PLUGIN_PATH, set by ctest). */
#define _GNU_SOURCE /* pthread_getaffinity_np */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

static te_engine *make(const char *ini)
{
    return te_test_engine(ini ? ini : ""); /* "": defaults, not $TE_CONFIG */
}

static int create_err(const char *ini)
{
    te_engine *e;
    int rc = te_test_engine_try(ini, &e);
    ck_assert_ptr_null(e);
    return rc;
}

START_TEST(defaults)
{
    te_engine *e = make(NULL);
    ck_assert_int_eq(te_engine_group_count(e), 1);
    ck_assert_int_eq(te_engine_nic_count(e, 0), 1);
    ck_assert_int_eq(te_engine_nic_count(e, 1), -EINVAL);
    ck_assert_str_eq(te_engine_plugin_name(e), "loopback");
    ck_assert_int_eq(te_engine_progress_mode(e), TE_PROGRESS_THREAD);
    ck_assert_int_eq(te_engine_progress_mode(NULL), -EINVAL);
    te_engine *c = make("[engine]\nprogress = caller\n");
    ck_assert_int_eq(te_engine_progress_mode(c), TE_PROGRESS_CALLER);
    te_engine_destroy(c);
    te_nic_info ni;
    ck_assert_int_eq(te_engine_nic_info(e, 0, 0, &ni), 0);
    ck_assert_str_eq(ni.name, "lo0");
    ck_assert_int_eq(te_engine_nic_info(e, 0, 1, &ni), -EINVAL);
    te_engine_destroy(e);
    te_engine_destroy(NULL);
}
END_TEST

START_TEST(config_errors_name_the_cause)
{
    ck_assert_int_eq(create_err("[engine]\nqueue_dept = 3\n"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "qeue_dept") ?
                          strstr(te_last_error(), "qeue_dept") :
                          strstr(te_last_error(), "queue_dept"));
    ck_assert_int_eq(create_err("[engine]\ngroups = two\n"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "groups"));
    ck_assert_int_eq(create_err("[engin]\nx = 1\n"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "did you mean [engine]?"));
    ck_assert_int_eq(create_err("[loopbak]\nx = 1\n"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "did you mean [loopback]?"));
    ck_assert_int_eq(create_err("[loopback]\nfault_reordr = 1\n"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "fault_reordr"));
    ck_assert_int_eq(create_err("[engine]\nplugin = nosuchplugin\n"), -ENOENT);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "libte-plugin-nosuchplugin.so"));
    ck_assert_int_eq(create_err("[engine]\ngroups = 2\ngroup_nics = 0,1\n"),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "group_nics"));
    ck_assert_int_eq(create_err("[engine]\nworker_cpus = 0,1\n"), -EINVAL);
    ck_assert_int_eq(create_err("[engine]\ncallback_cpu = first\n"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "engine.callback_cpu"));
    ck_assert_int_eq(create_err("[engine]\ncallback_cpu = -1\n"), -EINVAL);
    ck_assert_int_eq(create_err("[engine]\nnics_per_group = 4\n"
                                "[loopback]\ndevices = 2\n"), -ENODEV);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "device 2 does not exist"));
}
END_TEST

/* The plugin's declared keys are checked by the core, with the engine's
 * messages, from a file and from the environment (plugin ABI 1.4). */
START_TEST(plugin_keys_checked_by_the_core)
{
    ck_assert_int_eq(create_err("[loopback]\ndevices = 999\n"), -EINVAL);
    ck_assert_str_eq(te_last_error(), "loopback.devices = \"999\" (string:2): "
                                      "expected an integer in [1, 256]");
    ck_assert_int_eq(create_err("[loopback]\nfault_reorder = maybe\n"),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "loopback.fault_reorder"));
    ck_assert_int_eq(create_err("[loopback]\nfault_reordr = 1\n"), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "did you mean \"fault_reorder\""));
    setenv("TE_LOOPBACK_QUEUE_DEPTH", "0x20000", 1);
    ck_assert_int_eq(create_err(""), -EINVAL);
    unsetenv("TE_LOOPBACK_QUEUE_DEPTH");
    ck_assert_ptr_nonnull(strstr(te_last_error(), "environment "
                                 "TE_LOOPBACK_QUEUE_DEPTH"));
    te_engine *e = make("[loopback]\ndevices = 3\n");
    ck_assert_int_eq(te_engine_nic_count(e, 0), 1);
    te_engine_destroy(e);
}
END_TEST

static char section_log[2048];

static void keep_log(int level, const char *origin, const char *msg, void *arg)
{
    size_t n = strlen(section_log);
    snprintf(section_log + n, sizeof section_log - n, "%d %s\n", level, msg);
}

/* One file may configure several transports: the sections of plugins that
 * are not loaded are warned about, not refused. */
START_TEST(other_plugins_sections_are_warned_about)
{
    section_log[0] = 0;
    te_set_log_fn(keep_log, NULL);
    te_engine *e = make("[efa]\nprovider = shm\n[vendorx]\nknob = 3\n");
    te_set_log_fn(NULL, NULL);
    te_engine_destroy(e);
    ck_assert_msg(strstr(section_log, "1 section [efa] (string:2) is ignored: "
                         "no plugin named efa is loaded (this engine uses "
                         "loopback)"), "%s", section_log);
    ck_assert_msg(strstr(section_log, "section [vendorx] (string:4) is "
                         "ignored"), "%s", section_log);
}
END_TEST

START_TEST(groups_and_layout)
{
    te_engine *e = make("[engine]\ngroups = 2\ngroup_nics = \"0,1;3\"\n");
    ck_assert_int_eq(te_engine_group_count(e), 2);
    ck_assert_int_eq(te_engine_nic_count(e, 0), 2);
    ck_assert_int_eq(te_engine_nic_count(e, 1), 1);
    te_nic_info ni;
    ck_assert_int_eq(te_engine_nic_info(e, 1, 0, &ni), 0);
    ck_assert_int_eq(ni.device, 3);
    te_engine_destroy(e);
}
END_TEST

START_TEST(address_and_peers)
{
    te_engine *a = make(NULL), *b = make("[engine]\nnics_per_group = 2\n");
    uint8_t addr[TE_ADDR_MAX];
    size_t len = 4;
    ck_assert_int_eq(te_engine_address(b, 0, addr, &len), -ENOSPC);
    ck_assert_uint_gt(len, 4);
    len = sizeof(addr);
    ck_assert_int_eq(te_engine_address(b, 0, addr, &len), 0);
    te_peer p1, p2;
    ck_assert_int_eq(te_peer_add(a, 0, addr, len, &p1), 0);
    ck_assert_int_eq(te_peer_add(a, 0, addr, len, &p2), 0);
    ck_assert_uint_eq(p1, p2); /* same address, same peer */
    ck_assert_int_lt(te_peer_add(a, 0, addr, len - 1, &p2), 0);
    ck_assert_int_lt(te_peer_add(a, 0, addr, 0, &p2), 0);
    ck_assert_int_eq(te_peer_add(a, 3, addr, len, &p2), -EINVAL);
    ck_assert_int_eq(te_peer_remove(a, 0, p1), 0);
    ck_assert_int_eq(te_peer_remove(a, 0, p1), -ENOENT);
    /* Re-adding after removal gives a new id: ids are never reused. */
    ck_assert_int_eq(te_peer_add(a, 0, addr, len, &p2), 0);
    ck_assert_uint_ne(p1, p2);
    te_engine_destroy(a);
    te_engine_destroy(b);
}
END_TEST

START_TEST(registration_rules)
{
    te_engine *e = make(NULL);
    static uint8_t buf[8192];
    te_mr *mr;
    ck_assert_int_eq(te_mr_reg(e, 0, buf, 0, 0, TE_MEM_HOST, &mr), -EINVAL);
    ck_assert_int_eq(te_mr_reg(e, 0, NULL, 10, 0, TE_MEM_HOST, &mr), -EINVAL);
    ck_assert_int_eq(te_mr_reg(e, 0, buf, 10, 0x80, TE_MEM_HOST, &mr), -EINVAL);
    ck_assert_int_eq(te_mr_reg(e, 0, buf, 10, 0, 7, &mr), -EINVAL);
    ck_assert_int_eq(te_mr_reg(e, 1, buf, 10, 0, TE_MEM_HOST, &mr), -EINVAL);
    ck_assert_int_eq(te_mr_reg(e, 0, buf, sizeof(buf), TE_MR_REMOTE_WRITE,
                               TE_MEM_HOST, &mr), 0);
    te_mr *overlap;
    ck_assert_int_eq(te_mr_reg(e, 0, buf + 100, 100, TE_MR_REMOTE_READ,
                               TE_MEM_HOST, &overlap), 0);
    te_mr_desc d, d2;
    ck_assert_int_eq(te_mr_describe(mr, &d), 0);
    ck_assert_int_eq(te_mr_describe(overlap, &d2), 0);
    ck_assert_uint_eq(d.nic_count, 1);
    ck_assert_uint_ne(d.nic[0].rkey, d2.nic[0].rkey);
    ck_assert_ptr_eq(te_mr_addr(mr), buf);
    ck_assert_uint_eq(te_mr_len(mr), sizeof(buf));
    uint8_t bytes[TE_DESC_MAX];
    size_t n = sizeof(bytes);
    ck_assert_int_eq(te_desc_serialize(&d, bytes, &n), 0);
    te_mr_desc back;
    ck_assert_int_eq(te_desc_parse(bytes, n, &back), 0);
    ck_assert_int_eq(memcmp(&back.nic[0], &d.nic[0], sizeof(d.nic[0])), 0);
    ck_assert_int_eq(te_mr_dereg(e, overlap), 0);
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
}
END_TEST

START_TEST(poll_and_wait_time_out)
{
    te_engine *e = make(NULL);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(e, &c, 1, 0), 0);
    ck_assert_int_eq(te_poll_completions(e, &c, 1, 20), 0);
    ck_assert_int_eq(te_imm_wait(e, 5, 1, 20), -ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "0 of 1"));
    uint64_t banked = 9;
    int armed = 9;
    ck_assert_int_eq(te_imm_poll(e, 5, &banked, &armed), 0);
    ck_assert_uint_eq(banked, 0);
    ck_assert_int_eq(armed, 0);
    ck_assert_int_eq(te_poll_completions(e, NULL, 1, 0), -EINVAL);
    te_engine_destroy(e);
}
END_TEST

static atomic_int cancelled, completed;
static void on_done(const te_completion *c, void *arg)
{
    if (c->status == -ECANCELED)
        atomic_fetch_add(&cancelled, 1);
    atomic_fetch_add(&completed, 1);
}

/* Destroying an engine with requests queued completes each of them once
 * (success or -ECANCELED) before returning. */
START_TEST(destroy_completes_everything)
{
    /* Held operations and a short NIC queue: at destroy time 16 operations
     * are posted (and held for 5 s, longer than destroy's 2 s grace) and the
     * rest are still queued, so every request is cancelled. */
    te_test_pair x;
    te_test_pair_open(&x, "[loopback]\nfault_delay_us = 5000000\n"
                          "queue_depth = 16\n", "", 4u << 20);
    atomic_store(&cancelled, 0);
    atomic_store(&completed, 0);
    int submitted = 0;
    for (int i = 0; i < 500; i++) {
        te_request r = te_test_pair_write(&x, x.size, 0);
        r.done = on_done;
        if (te_submit(x.a, &r) > 0)
            submitted++;
    }
    ck_assert_int_eq(submitted, 500);
    ck_assert_int_eq(te_mr_dereg(x.a, x.smr), -EBUSY);
    te_engine_destroy(x.a); /* registrations released with the engine */
    ck_assert_int_eq(atomic_load(&completed), submitted);
    ck_assert_int_eq(atomic_load(&cancelled), submitted);
    te_mr_dereg(x.b, x.dmr);
    te_engine_destroy(x.b);
    free(x.src);
    free(x.dst);
}
END_TEST

/* Two engines and a peer from a to b (a configured by a_ini), registered
 * regions of `sz` bytes. */
static void pair_open(te_test_pair *x, const char *a_ini, size_t sz)
{
    te_test_pair_open(x, a_ini ? a_ini : "", "", sz);
}

/* te_submit accepts a request while its peer is live; the peer is removed
 * before the (sleeping) worker takes the request, since the worker drains
 * control messages before new submissions. The request fails at once with
 * -ECONNABORTED instead of being posted to the removed peer, where it
 * would wait for its deadline (here: none, so forever). */
START_TEST(request_to_peer_removed_before_posting)
{
    te_test_pair x;
    /* idle_wait = sleep: a blocked worker would be woken by te_submit
     * and could post before the removal arrives. */
    pair_open(&x, "[engine]\nidle_spin_us = 0\nidle_spin_max_us = 0\n"
                  "idle_sleep_us = 200000\n"
                  "idle_wait = sleep\n", 4096);
    usleep(300000); /* the worker is asleep now */
    te_request r = te_test_pair_write(&x, 64, -1);
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    ck_assert_int_eq(te_peer_remove(x.a, 0, x.p), 0);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(x.a, &c, 1, 10000), 1);
    ck_assert_msg(c.status == -ECONNABORTED, "status %d: %s", c.status,
                  c.reason);
    te_test_pair_close(&x);
}
END_TEST

/* Peers come and go for the life of an engine (a decoder whose
 * prefillers restart): more adds than a group has slots succeed once the
 * old peers are removed, and a stale handle never reaches the slot's new
 * peer. */
START_TEST(peer_slots_are_reused_with_fresh_handles)
{
    te_test_pair x;
    pair_open(&x, NULL, 4096);
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    ck_assert_int_eq(te_engine_address(x.b, 0, addr, &len), 0);
    te_peer old = x.p;
    for (int i = 0; i < 1100; i++) { /* the group has 1024 slots */
        ck_assert_int_eq(te_peer_remove(x.a, 0, x.p), 0);
        ck_assert_msg(te_peer_add(x.a, 0, addr, len, &x.p) == 0,
                      "add %d: %s", i, te_last_error());
        ck_assert_uint_ne(x.p, old);
        ck_assert_uint_ne(x.p, TE_PEER_UNKNOWN);
    }
    ck_assert_int_eq(te_peer_status(x.a, 0, old), -ENOENT);
    ck_assert_int_eq(te_peer_status(x.a, 0, x.p), 0);
    ck_assert_int_eq(te_peer_remove(x.a, 0, old), -ENOENT);
    te_request r = te_test_pair_write(&x, 64, 5000);
    r.u.xfer.peer = old;
    ck_assert_int_eq(te_submit(x.a, &r), -ENOENT);
    r.u.xfer.peer = x.p;
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(x.a, &c, 1, 10000), 1);
    ck_assert_msg(c.status == 0, "%s", c.reason);
    te_test_pair_close(&x);
}
END_TEST

/* A request past its deadline fails once with -ETIMEDOUT; its registration
 * stays busy until the transport gives the operation back. */
START_TEST(request_deadline)
{
    te_test_pair x;
    pair_open(&x, "[loopback]\nfault_delay_us = 700000\n"
                  "[engine]\npeer_timeout_ms = 0\n", 4096);
    te_request r = te_test_pair_write(&x, 64, 50);
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    te_completion c[2];
    ck_assert_int_eq(te_poll_completions(x.a, c, 2, 5000), 1);
    ck_assert_int_eq(c[0].status, -ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(c[0].reason, "timed out after 50 ms"));
    ck_assert_int_eq(te_mr_dereg(x.a, x.smr), -EBUSY);
    /* The delayed write lands later; no second completion appears. */
    ck_assert_int_eq(te_poll_completions(x.a, c, 2, 1500), 0);
    int rc = -EBUSY;
    for (int i = 0; i < 500 && rc == -EBUSY; i++) {
        rc = te_mr_dereg(x.a, x.smr);
        if (rc == -EBUSY)
            usleep(10000);
    }
    ck_assert_int_eq(rc, 0);
    te_test_pair_close(&x);
}
END_TEST

/* A peer that stops answering is declared down after peer_timeout_ms: its
 * requests fail, new ones are refused, other peers keep working. */
START_TEST(silent_peer_declared_down)
{
    te_test_pair x;
    pair_open(&x, "[loopback]\nfault_delay_us = 3000000\n"
                  "[engine]\npeer_timeout_ms = 100\n", 4096);
    te_request r = te_test_pair_write(&x, 64, -1);
    ck_assert_int_eq(te_peer_status(x.a, 0, x.p), 0);
    ck_assert_int_eq(te_peer_status(x.a, 0, x.p + 1000), -ENOENT);
    ck_assert_int_eq(te_peer_status(x.a, 7, x.p), -EINVAL);
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(x.a, &c, 1, 5000), 1);
    ck_assert_int_eq(c.status, -ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(c.reason, "no completion"));
    ck_assert_int_eq(te_peer_status(x.a, 0, x.p), -ECONNRESET);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "is down"));
    const char *down = strstr(te_last_error(), "is down: ");
    ck_assert_ptr_nonnull(down);
    char why[256];
    snprintf(why, sizeof(why), "%s", down);
    ck_assert_int_eq(te_submit(x.a, &r), -ECONNRESET);
    /* A submit to the down peer names why, as te_peer_status does. */
    ck_assert_msg(strstr(te_last_error(), why), "%s / %s",
                  te_last_error(), why);
    /* The same engine still serves another, healthy peer: b adds a. */
    te_peer back = te_test_peer(x.b, x.a);
    te_mr *bsrc = te_test_reg(x.b, x.dst, 64, 0, NULL);
    uint8_t *abuf = calloc(1, 64);
    te_mr_desc ad;
    te_test_reg(x.a, abuf, 64, TE_MR_REMOTE_WRITE, &ad);
    te_request w = te_test_write(back, bsrc, &ad, 64, 0);
    ck_assert_int_gt(te_submit(x.b, &w), 0);
    te_test_complete(x.b, 1, 5000);
    te_mr_dereg(x.b, bsrc);
    te_test_pair_close(&x);
    free(abuf);
}
END_TEST

static atomic_int imm_ok, imm_timeout, imm_cancel;
static void on_imm(uint32_t imm, int status, void *arg)
{
    if (status == 0)
        atomic_fetch_add(&imm_ok, 1);
    else if (status == -ETIMEDOUT)
        atomic_fetch_add(&imm_timeout, 1);
    else if (status == -ECANCELED)
        atomic_fetch_add(&imm_cancel, 1);
}

/* A pair for the immediate tests, their counters zeroed. */
static void imm_pair_open(te_test_pair *x)
{
    pair_open(x, NULL, 4096);
    atomic_store(&imm_ok, 0);
    atomic_store(&imm_timeout, 0);
    atomic_store(&imm_cancel, 0);
}

static void barrier_to(te_test_pair *x, uint32_t imm, int n)
{
    te_barrier_dst d = {.peer = x->p, .dst = &x->d};
    te_request r = {.size = sizeof(te_request)};
    r.op = TE_OP_BARRIER;
    r.imm = imm;
    r.u.barrier.count = 1;
    r.u.barrier.dsts = &d;
    for (int i = 0; i < n; i++)
        ck_assert_int_gt(te_submit(x->a, &r), 0);
    te_test_complete(x->a, n, 5000);
}

/* The initiator's completion can come before the target has counted the
 * immediate: wait (bounded) until `want` arrivals of imm are banked. */
static uint64_t banked_soon(te_engine *e, uint32_t imm, uint64_t want)
{
    return te_test_wait_banked(e, imm, want, 5000);
}

static int wait_for(atomic_int *v, int want)
{
    return te_test_wait_int(v, want, 5000);
}

/* te_engine_destroy from one of the engine's own callbacks would join the
 * callback thread from itself and return into freed memory: it is refused
 * and the engine keeps working. */
static atomic_int destroy_tried;

static void destroy_from_callback(const te_completion *c, void *arg)
{
    (void)c;
    te_engine_destroy(arg);
    atomic_store(&destroy_tried, 1);
}

START_TEST(destroy_from_a_callback_is_refused)
{
    te_test_pair x;
    pair_open(&x, NULL, 4096);
    atomic_store(&destroy_tried, 0);
    te_request r = te_test_pair_write(&x, 64, 5000);
    r.done = destroy_from_callback;
    r.done_arg = x.a;
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    ck_assert_int_eq(wait_for(&destroy_tried, 1), 1);
    te_request w = te_test_pair_write(&x, 64, 5000);
    ck_assert_int_gt(te_submit(x.a, &w), 0);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(x.a, &c, 1, 10000), 1);
    ck_assert_int_eq(c.status, 0);
    te_test_pair_close(&x);
}
END_TEST


/* Expectations with a deadline: met in time (callback once, status 0),
 * missed (-ETIMEDOUT once, arrivals stay banked), pending at destroy
 * (-ECANCELED). */
START_TEST(imm_expect_deadlines)
{
    te_test_pair x;
    imm_pair_open(&x);
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 11, 2, 5000, on_imm, NULL), 0);
    barrier_to(&x, 11, 2);
    ck_assert_int_eq(wait_for(&imm_ok, 1), 1);
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 12, 3, 30, on_imm, NULL), 0);
    barrier_to(&x, 12, 1);
    ck_assert_int_eq(wait_for(&imm_timeout, 1), 1);
    uint64_t banked = 0;
    int armed = 1;
    ck_assert_int_eq(te_imm_poll(x.b, 12, &banked, &armed), 0);
    ck_assert_uint_eq(banked, 1);
    ck_assert_int_eq(armed, 0);
    /* Banked arrivals meet a later expectation at once. */
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 12, 1, 30, on_imm, NULL), 0);
    ck_assert_int_eq(wait_for(&imm_ok, 2), 2);
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 13, 1, 0, on_imm, NULL),
                     -EINVAL);
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 13, 1, 60000, on_imm, NULL), 0);
    usleep(100000);
    ck_assert_int_eq(atomic_load(&imm_ok), 2);
    ck_assert_int_eq(atomic_load(&imm_timeout), 1);
    te_mr_dereg(x.b, x.dmr);
    te_engine_destroy(x.b); /* imm 13 still pending */
    ck_assert_int_eq(atomic_load(&imm_cancel), 1);
    te_engine_destroy(x.a);
    free(x.src);
    free(x.dst);
}
END_TEST

/* te_imm_disarm says whether the callback can still run: 1 only when it
 * took an unmet expectation away (the callback never comes); 0 for one
 * already met or timed out (its callback runs exactly once) and for none. */
START_TEST(imm_disarm_says_whether_callback_runs)
{
    te_test_pair x;
    imm_pair_open(&x);
    uint64_t surplus = 99;
    ck_assert_int_eq(te_imm_disarm(NULL, 20, &surplus), -EINVAL);
    ck_assert_int_eq(te_imm_disarm(x.b, 20, &surplus), 0); /* none */
    ck_assert_uint_eq(surplus, 0);
    /* Armed, one of two arrivals in: taken away, the one comes back. */
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 21, 2, 60000, on_imm, NULL), 0);
    barrier_to(&x, 21, 1);
    ck_assert_uint_eq(banked_soon(x.b, 21, 1), 1); /* counted at the target */
    ck_assert_int_eq(te_imm_disarm(x.b, 21, &surplus), 1);
    ck_assert_uint_eq(surplus, 1);
    /* Met: its callback runs, disarm finds nothing to take. */
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 22, 1, 60000, on_imm, NULL), 0);
    barrier_to(&x, 22, 2);
    ck_assert_int_eq(wait_for(&imm_ok, 1), 1);
    ck_assert_uint_eq(banked_soon(x.b, 22, 1), 1);
    ck_assert_int_eq(te_imm_disarm(x.b, 22, &surplus), 0);
    ck_assert_uint_eq(surplus, 1);
    /* Timed out: the -ETIMEDOUT callback ran, nothing left to disarm. */
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 23, 1, 20, on_imm, NULL), 0);
    ck_assert_int_eq(wait_for(&imm_timeout, 1), 1);
    ck_assert_int_eq(te_imm_disarm(x.b, 23, NULL), 0);
    usleep(50000); /* a wrongly surviving 21 would have fired or timed out */
    ck_assert_int_eq(atomic_load(&imm_ok), 1);
    ck_assert_int_eq(atomic_load(&imm_timeout), 1);
    te_mr_dereg(x.b, x.dmr);
    te_engine_destroy(x.b);
    ck_assert_int_eq(atomic_load(&imm_cancel), 0); /* 21's deadline gone */
    te_engine_destroy(x.a);
    free(x.src);
    free(x.dst);
}
END_TEST

/* engine.callback_cpu: request callbacks run on a thread allowed on that
 * CPU only. */
static cpu_set_t seen_affinity;
static atomic_int seen_done;

static void on_done_affinity(const te_completion *c, void *arg)
{
    (void)arg;
    ck_assert_int_eq(c->status, 0);
    pthread_getaffinity_np(pthread_self(), sizeof(seen_affinity),
                           &seen_affinity);
    atomic_store(&seen_done, 1);
}

START_TEST(callback_thread_pinned)
{
    int cpu = (int)sysconf(_SC_NPROCESSORS_ONLN) - 1;
    char ini[64];
    snprintf(ini, sizeof(ini), "[engine]\ncallback_cpu = %d\n", cpu);
    te_test_pair x;
    pair_open(&x, ini, 4096);
    atomic_store(&seen_done, 0);
    te_request r = te_test_pair_write(&x, 64, 0);
    r.done = on_done_affinity;
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    ck_assert_int_eq(wait_for(&seen_done, 1), 1);
    ck_assert_int_eq(CPU_COUNT(&seen_affinity), 1);
    ck_assert(CPU_ISSET(cpu, &seen_affinity));
    te_test_pair_close(&x);
}
END_TEST

/* Revoked keys: writes with the old descriptor fail at the writer with
 * nothing written; the new descriptor works. */
START_TEST(revoke_old_descriptors)
{
    te_test_pair x;
    pair_open(&x, NULL, 4096);
    memset(x.src, 0xAB, 64);
    te_mr_desc old = x.d, fresh;
    ck_assert_int_eq(te_mr_revoke(x.b, x.dmr, &fresh), 0);
    ck_assert_uint_ne(old.nic[0].rkey, fresh.nic[0].rkey);
    te_request r = te_test_pair_write(&x, 64, 0);
    te_completion c;
    ck_assert_int_gt(te_submit(x.a, &r), 0); /* r uses the old descriptor */
    ck_assert_int_eq(te_poll_completions(x.a, &c, 1, 5000), 1);
    ck_assert_int_eq(c.status, -EACCES);
    ck_assert_int_eq(x.dst[0], 0);
    r.u.xfer.remote = &fresh;
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    ck_assert_int_eq(te_poll_completions(x.a, &c, 1, 5000), 1);
    ck_assert_int_eq(c.status, 0);
    ck_assert_int_eq(x.dst[0], 0xAB);
    ck_assert_int_eq(te_mr_revoke(x.b, NULL, NULL), -EINVAL);
    te_test_pair_close(&x);
}
END_TEST

/* Peers with different NIC counts (2 -> 4 and 4 -> 2, 3 -> 1): every shard
 * lands, and the receiver counts what te_expected_imms() says. */
START_TEST(asymmetric_nic_counts)
{
    static const char *cfgs[][2] = {
        {"[engine]\nnics_per_group = 2\n", "[engine]\nnics_per_group = 4\n"},
        {"[engine]\nnics_per_group = 4\n", "[engine]\nnics_per_group = 2\n"},
        {"[engine]\nnics_per_group = 3\n", NULL},
    };
    for (int k = 0; k < 3; k++) {
        te_test_pair x;
        te_test_pair_open(&x, cfgs[k][0], cfgs[k][1] ? cfgs[k][1] : "",
                          1u << 20);
        size_t sz = x.size;
        for (size_t i = 0; i < sz; i++)
            x.src[i] = (uint8_t)(i * 7 + k);
        ck_assert_uint_eq(x.d.nic_count, (uint32_t)te_engine_nic_count(x.b, 0));
        te_request r = te_test_pair_write(&x, sz - 3, 0);
        r.flags = TE_F_IMM;
        r.imm = 77 + (uint32_t)k;
        int64_t want = te_expected_imms(x.a, &r, 0);
        ck_assert_int_eq(want, te_engine_nic_count(x.a, 0));
        ck_assert_int_gt(te_submit(x.a, &r), 0);
        te_test_complete(x.a, 1, 5000);
        ck_assert_int_eq(te_imm_wait(x.b, r.imm, (uint64_t)want, 5000), 0);
        ck_assert_int_eq(memcmp(x.src, x.dst, sz - 3), 0);
        ck_assert_int_eq(x.dst[sz - 1], 0);
        te_test_pair_close(&x);
    }
}
END_TEST

/* NICs of different speeds (loopback.link_gbps list): reported per NIC;
 * shards follow the speeds (core/shard.c, test_shard) and still land every
 * byte with one imm per NIC. engine.shard_min_bytes: a small write goes
 * whole, one imm, on rotating NICs. */
START_TEST(speed_weighted_and_small_whole)
{
    te_test_pair x;
    te_test_pair_open(&x, "[engine]\nnics_per_group = 2\nshard_min_bytes = 64k\n"
                          "[loopback]\nlink_gbps = 8,2\n",
                      "[engine]\nnics_per_group = 2\n", 1u << 20);
    te_engine *a = x.a, *b = x.b;
    te_nic_info ni;
    ck_assert_int_eq(te_engine_nic_info(a, 0, 0, &ni), 0);
    ck_assert_uint_eq(ni.link_gbps, 8);
    ck_assert_int_eq(te_engine_nic_info(a, 0, 1, &ni), 0);
    ck_assert_uint_eq(ni.link_gbps, 2);
    size_t sz = x.size;
    uint8_t *src = x.src, *dst = x.dst;
    for (size_t i = 0; i < sz; i++)
        src[i] = (uint8_t)(i * 13 + 1);
    te_request r = te_test_pair_write(&x, sz - 5, 0);
    r.flags = TE_F_IMM;
    r.imm = 501;
    ck_assert_int_eq(te_expected_imms(a, &r, 0), 2);
    ck_assert_int_gt(te_submit(a, &r), 0);
    te_test_complete(a, 1, 5000);
    ck_assert_int_eq(te_imm_wait(b, 501, 2, 5000), 0);
    ck_assert_int_eq(memcmp(src, dst, sz - 5), 0);
    /* Paged over the 8:2 NICs: pages in blocks, every page once. */
    memset(dst, 0, sz);
    enum { PAGES = 37, PAGE = 4096 };
    uint32_t si[PAGES], di[PAGES];
    for (uint32_t j = 0; j < PAGES; j++) {
        si[j] = j;
        di[j] = (j * 11) % PAGES; /* a permutation: 11 and 37 are coprime */
    }
    te_request pr;
    te_request_init(&pr, TE_OP_PAGED);
    pr.flags = TE_F_IMM;
    pr.imm = 503;
    pr.u.paged.peer = x.p;
    pr.u.paged.src = x.smr;
    pr.u.paged.src_stride = PAGE;
    pr.u.paged.src_idx = si;
    pr.u.paged.dst = &x.d;
    pr.u.paged.dst_stride = PAGE;
    pr.u.paged.dst_idx = di;
    pr.u.paged.page_len = PAGE;
    pr.u.paged.count = PAGES;
    ck_assert_int_eq(te_expected_imms(a, &pr, 0), PAGES);
    ck_assert_int_gt(te_submit(a, &pr), 0);
    te_test_complete(a, 1, 5000);
    ck_assert_int_eq(te_imm_wait(b, 503, PAGES, 5000), 0);
    for (uint32_t j = 0; j < PAGES; j++)
        ck_assert_int_eq(memcmp(dst + (size_t)di[j] * PAGE,
                                src + (size_t)si[j] * PAGE, PAGE), 0);
    /* Four small writes (< 64 KiB): one imm each, every byte lands. */
    memset(dst, 0, sz);
    for (uint32_t i = 0; i < 4; i++) {
        r.imm = 502;
        r.u.xfer.local_off = r.u.xfer.remote_off = (uint64_t)i * 10000;
        r.u.xfer.len = 10000;
        ck_assert_int_eq(te_expected_imms(a, &r, 0), 1);
        ck_assert_int_gt(te_submit(a, &r), 0);
    }
    te_test_complete(a, 4, 5000);
    ck_assert_int_eq(te_imm_wait(b, 502, 4, 5000), 0);
    uint64_t banked = 9;
    int armed = 1;
    ck_assert_int_eq(te_imm_poll(b, 502, &banked, &armed), 0);
    ck_assert_uint_eq(banked, 0); /* exactly 4 arrived, none left over */
    ck_assert_int_eq(memcmp(src, dst, 40000), 0);
    te_test_pair_close(&x);
}
END_TEST

/*
 * engine.heartbeat_ms: a peer that stops answering while nothing is
 * outstanding towards it (a process stopped with SIGSTOP: its socket and
 * pid stay alive, so the transport sees nothing) is found by the heartbeat
 * plus engine.peer_timeout_ms, and the next request to it fails at submit.
 * Without heartbeats nothing notices, and that request is accepted.
 */
static int64_t submit_after_peer_stops(const char *ini)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) { /* the peer: an engine with a writable region */
        close(fds[0]);
        te_engine *b = make(NULL);
        static uint8_t dst[4096];
        te_mr *mr;
        te_mr_reg(b, 0, dst, sizeof(dst), TE_MR_REMOTE_WRITE, TE_MEM_HOST, &mr);
        te_mr_desc d;
        te_mr_describe(mr, &d);
        if (te_test_send_endpoint(fds[1], b, &d))
            _exit(1);
        for (int i = 0; i < 600; i++) /* bounded: killed long before */
            usleep(100000);
        _exit(0);
    }
    close(fds[1]);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    te_mr_desc d;
    ck_assert_int_eq(te_test_recv_endpoint(fds[0], addr, &alen, &d), 0);
    close(fds[0]);
    te_engine *a = make(ini);
    te_peer p;
    ck_assert_int_eq(te_peer_add(a, 0, addr, alen, &p), 0);
    static uint8_t src[64];
    te_mr *smr = te_test_reg(a, src, sizeof(src), 0, NULL);
    te_request r = te_test_write(p, smr, &d, 64, 300);
    ck_assert_int_gt(te_submit(a, &r), 0);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(a, &c, 1, 5000), 1);
    ck_assert_msg(c.status == 0, "%s", c.reason);
    kill(child, SIGSTOP); /* alive, silent */
    usleep(700000);       /* > heartbeat_ms + peer_timeout_ms below */
    int64_t id = te_submit(a, &r);
    char why[256];
    snprintf(why, sizeof(why), "%s", te_last_error());
    if (id > 0) /* it waits for the stopped peer until its deadline */
        ck_assert_int_eq(te_poll_completions(a, &c, 1, 5000), 1);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    te_engine_destroy(a);
    if (id < 0)
        ck_assert_msg(strstr(why, "heartbeat") || strstr(why, "down"), "%s", why);
    return id;
}

START_TEST(heartbeat_finds_silent_peer)
{
    ck_assert_int_eq(submit_after_peer_stops("[engine]\nheartbeat_ms = 100\n"
                                             "peer_timeout_ms = 200\n"),
                     -ECONNRESET);
    ck_assert_int_gt(submit_after_peer_stops("[engine]\nheartbeat_ms = 0\n"
                                             "peer_timeout_ms = 200\n"), 0);
}
END_TEST

/* A worker serving a remote initiator's writes without an immediate gets no
 * completion entry for that work, yet must not count its turn idle and
 * sleep: with 0.5 s idle sleeps and no spinning, 2048 writes of 32 KiB (the
 * loopback target copies at most 1 MiB per poll) took a sleep per MiB (32 s)
 * before plugins could report such progress (te_plugin_host.progressed);
 * now only the sleeps of workers that really ran out of work remain (about
 * 2 s measured). */
START_TEST(idle_worker_serves_writes_without_imm)
{
    enum { PAGE = 32 << 10, PAGES = 2048 };
    /* idle_wait = sleep: the mechanism under test is the one for workers
     * that sleep-poll (a blocking one is rung by the loopback doorbells). */
    const char *sleepy = "[engine]\nidle_spin_us = 0\nidle_spin_max_us = 0\n"
                         "idle_sleep_us = 500000\nidle_wait = sleep\n";
    size_t sz = (size_t)PAGE * PAGES;
    te_test_pair x;
    te_test_pair_open(&x, sleepy, sleepy, sz);
    for (size_t i = 0; i < sz; i++)
        x.src[i] = (uint8_t)(i * 7 + 3);
    for (uint32_t i = 0; i < PAGES; i++) {
        te_request r = te_test_pair_write(&x, PAGE, 0);
        r.u.xfer.local_off = (uint64_t)i * PAGE;
        r.u.xfer.remote_off = (uint64_t)i * PAGE;
        ck_assert_int_gt(te_submit(x.a, &r), 0);
    }
    te_completion c[PAGES];
    /* 12 s: well under the 32 s of a target sleeping per MiB, several times
     * what the idle sleeps add when the workers have nothing to do. */
    int64_t end = te_test_now_ms() + 12000;
    int got = 0;
    while (got < PAGES) {
        long left_ms = (long)(end - te_test_now_ms());
        ck_assert_msg(left_ms > 0, "%d of %d writes done after 12 s", got,
                      PAGES);
        int n = te_poll_completions(x.a, c, PAGES, (int)left_ms);
        ck_assert_int_gt(n, 0);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(c[i].status, 0);
        got += n;
    }
    ck_assert(memcmp(x.src, x.dst, sz) == 0);
    te_test_pair_close(&x);
}
END_TEST

TE_TEST_MAIN("engine",
             TE_TCASE_FULL("api", 60, NULL, NULL,
               defaults, config_errors_name_the_cause,
               plugin_keys_checked_by_the_core,
               other_plugins_sections_are_warned_about, groups_and_layout,
               address_and_peers, registration_rules, poll_and_wait_time_out,
               destroy_completes_everything, request_deadline,
               request_to_peer_removed_before_posting,
               peer_slots_are_reused_with_fresh_handles,
               destroy_from_a_callback_is_refused, silent_peer_declared_down,
               imm_expect_deadlines, imm_disarm_says_whether_callback_runs,
               callback_thread_pinned, speed_weighted_and_small_whole,
               heartbeat_finds_silent_peer, revoke_old_descriptors,
               asymmetric_nic_counts, idle_worker_serves_writes_without_imm))
