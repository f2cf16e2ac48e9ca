/* Shared helpers of the Check unit tests: see te_test.h. */
#define _GNU_SOURCE
#include "te_test.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

int te_test_run(const char *suite, const te_tcase *cases)
{
    Suite *s = suite_create(suite);
    for (const te_tcase *c = cases; c->name; c++) {
        TCase *t = tcase_create(c->name);
        if (c->setup || c->teardown)
            tcase_add_checked_fixture(t, c->setup, c->teardown);
        if (c->timeout > 0)
            tcase_set_timeout(t, c->timeout);
        for (const TTest *const *p = c->tests; p && *p; p++)
            tcase_add_test(t, *p);
        for (const TTest *const *p = c->loop_tests; p && *p; p++)
            tcase_add_loop_test(t, *p, 0, c->loop_end);
        suite_add_tcase(s, t);
    }
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int te_test_engine_try(const char *ini, te_engine **e)
{
    *e = NULL;
    if (!ini)
        return te_engine_create(NULL, e);
    te_config *c = te_config_new();
    if (!c)
        return -ENOMEM;
    int rc = ini[0] ? te_config_load_string(c, ini) : 0;
    if (rc == 0)
        rc = te_engine_create(c, e);
    te_config_free(c);
    return rc;
}

te_engine *te_test_engine(const char *ini)
{
    te_engine *e;
    int rc = te_test_engine_try(ini, &e);
    ck_assert_msg(rc == 0, "create: %s", te_last_error());
    return e;
}

void te_test_skip_without(te_engine *probe, const char *what)
{
    if (!probe) {
        printf("SKIP: no %s here: %s\n", what, te_last_error());
        exit(77);
    }
    te_engine_destroy(probe);
}

void te_test_require(const char *ini, const char *what)
{
    te_engine *probe = NULL;
    te_test_engine_try(ini, &probe);
    te_test_skip_without(probe, what);
}

te_peer te_test_peer(te_engine *from, te_engine *to)
{
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    ck_assert_int_eq(te_engine_address(to, 0, addr, &len), 0);
    te_peer p;
    ck_assert_msg(te_peer_add(from, 0, addr, len, &p) == 0, "peer: %s",
                  te_last_error());
    return p;
}

te_mr *te_test_reg(te_engine *e, void *buf, size_t len, uint32_t access,
                   te_mr_desc *desc)
{
    te_mr *mr;
    ck_assert_msg(te_mr_reg(e, 0, buf, len, access, TE_MEM_HOST, &mr) == 0,
                  "register: %s", te_last_error());
    if (desc)
        ck_assert_int_eq(te_mr_describe(mr, desc), 0);
    return mr;
}

void te_test_pair_open(te_test_pair *x, const char *a_ini, const char *b_ini,
                       size_t size)
{
    x->a = te_test_engine(a_ini);
    x->b = te_test_engine(b_ini);
    x->size = size;
    x->src = calloc(1, size);
    x->dst = calloc(1, size);
    ck_assert(x->src && x->dst);
    x->smr = te_test_reg(x->a, x->src, size, 0, NULL);
    x->dmr = te_test_reg(x->b, x->dst, size, TE_MR_REMOTE_WRITE, &x->d);
    x->p = te_test_peer(x->a, x->b);
}

void te_test_pair_close(te_test_pair *x)
{
    te_mr_dereg(x->b, x->dmr);
    te_engine_destroy(x->b);
    te_engine_destroy(x->a);
    free(x->src);
    free(x->dst);
}

te_request te_test_write(te_peer peer, te_mr *local, const te_mr_desc *remote,
                         size_t len, int32_t timeout_ms)
{
    te_request r;
    te_request_init(&r, TE_OP_WRITE);
    r.timeout_ms = timeout_ms;
    r.u.xfer.peer = peer;
    r.u.xfer.local = local;
    r.u.xfer.remote = remote;
    r.u.xfer.len = len;
    return r;
}

te_request te_test_pair_write(const te_test_pair *x, size_t len,
                              int32_t timeout_ms)
{
    return te_test_write(x->p, x->smr, &x->d, len, timeout_ms);
}

void te_test_self_open(te_test_self *s, const char *ini, void *buf,
                       size_t len)
{
    s->e = te_test_engine(ini);
    s->peer = te_test_peer(s->e, s->e);
    s->mr = te_test_reg(s->e, buf, len, TE_MR_REMOTE_WRITE, &s->desc);
}

void te_test_self_close(te_test_self *s)
{
    te_mr_dereg(s->e, s->mr);
    te_engine_destroy(s->e);
}

te_completion te_test_completion(te_engine *e, int timeout_ms)
{
    te_completion c;
    int n = te_poll_completions(e, &c, 1, timeout_ms);
    ck_assert_msg(n == 1, "no completion within %d ms (%d): %s", timeout_ms,
                  n, te_last_error());
    return c;
}

void te_test_complete(te_engine *e, int n, int timeout_ms)
{
    for (int i = 0; i < n; i++) {
        te_completion c = te_test_completion(e, timeout_ms);
        ck_assert_msg(c.status == 0, "completion %d of %d: status %d: %s", i,
                      n, c.status, c.reason);
    }
}

void te_test_pair_write_caller(te_test_pair *x, size_t len, int timeout_ms)
{
    te_request r = te_test_pair_write(x, len, 0);
    ck_assert_int_ge(te_submit(x->a, &r), 0);
    te_completion c;
    int64_t end = te_test_now_ms() + timeout_ms;
    int n = 0;
    while (!n && te_test_now_ms() < end) {
        ck_assert_int_ge(te_progress(x->a, -1, 0), 0);
        ck_assert_int_ge(te_progress(x->b, -1, 0), 0);
        n = te_poll_completions(x->a, &c, 1, 0);
    }
    ck_assert_int_eq(n, 1);
    ck_assert_msg(c.status == 0, "status %d: %s", c.status, c.reason);
}

int64_t te_test_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void te_test_sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&t, &t) == -1 && errno == EINTR)
        ;
}

int te_test_threads_named(const char *name, long *tid)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    if (tid)
        *tid = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        if (f)
            fclose(f);
        if (strcmp(comm, name) == 0 && n++ == 0 && tid)
            *tid = strtol(de->d_name, NULL, 10);
    }
    closedir(d);
    return n;
}

long te_test_thread_sleeps(const char *prefix)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    long total = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[300], line[128];
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* the thread ended meanwhile */
        int ours = fgets(line, sizeof(line), f) &&
                   strncmp(line, prefix, strlen(prefix)) == 0;
        fclose(f);
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
        if (!ours || !(f = fopen(path, "r")))
            continue;
        while (fgets(line, sizeof(line), f))
            if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
                total += atol(line + 24);
        fclose(f);
    }
    closedir(d);
    return total;
}

int te_test_threads_named_settle(const char *name, int want, int timeout_ms)
{
    int64_t end = te_test_now_ms() + timeout_ms;
    int n;
    while ((n = te_test_threads_named(name, NULL)) != want &&
           te_test_now_ms() < end)
        te_test_sleep_ms(1);
    return n;
}

int te_test_wait_int(atomic_int *v, int want, int timeout_ms)
{
    int64_t end = te_test_now_ms() + timeout_ms;
    while (atomic_load(v) < want && te_test_now_ms() < end)
        te_test_sleep_ms(1);
    return atomic_load(v);
}

uint64_t te_test_wait_banked(te_engine *e, uint32_t imm, uint64_t want,
                             int timeout_ms)
{
    int64_t end = te_test_now_ms() + timeout_ms;
    uint64_t banked = 0;
    for (;;) {
        ck_assert_int_eq(te_imm_poll(e, imm, &banked, NULL), 0);
        if (banked >= want || te_test_now_ms() >= end)
            return banked;
        te_test_sleep_ms(1);
    }
}

int te_test_wait_peer_down(te_engine *e, int group, te_peer peer,
                           int timeout_ms)
{
    int64_t end = te_test_now_ms() + timeout_ms;
    int rc;
    while ((rc = te_peer_status(e, group, peer)) == 0 &&
           te_test_now_ms() < end)
        te_test_sleep_ms(1);
    return rc;
}

pid_t te_test_fork(int *wr, int *rd)
{
    int down[2], up[2]; /* parent to child, child to parent */
    ck_assert_int_eq(pipe(down), 0);
    ck_assert_int_eq(pipe(up), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    close(pid ? down[0] : down[1]);
    close(pid ? up[1] : up[0]);
    *wr = pid ? down[1] : up[1];
    *rd = pid ? up[0] : down[0];
    return pid;
}

void te_test_imm_target_start(te_test_imm_target *t, const char *ini,
                              uint32_t imm, uint64_t count, int wait_ms)
{
    t->pid = te_test_fork(&t->wr, &t->rd);
    if (t->pid == 0) {
        te_engine *e;
        uint8_t *buf = calloc(1, 4096);
        te_mr *mr = NULL;
        te_mr_desc d;
        if (te_test_engine_try(ini, &e) ||
            te_mr_reg(e, 0, buf, 4096, TE_MR_REMOTE_WRITE, TE_MEM_HOST,
                      &mr) ||
            te_mr_describe(mr, &d) || te_test_send_endpoint(t->wr, e, &d))
            _exit(2);
        int rc = te_imm_wait(e, imm, count, wait_ms);
        char b;
        te_test_read_all(t->rd, &b, 1); /* the parent is done */
        te_mr_dereg(e, mr);
        te_engine_destroy(e);
        _exit(rc ? 3 : 0);
    }
    ck_assert_int_eq(te_test_recv_endpoint(t->rd, t->addr, &t->alen,
                                           &t->desc), 0);
}

int te_test_imm_target_end(te_test_imm_target *t)
{
    char b = 1;
    ck_assert_int_eq(te_test_write_all(t->wr, &b, 1), 0);
    int st;
    ck_assert_int_eq(waitpid(t->pid, &st, 0), t->pid);
    close(t->wr);
    close(t->rd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int te_test_write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)p + done, n - done);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

int te_test_read_all(int fd, void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = read(fd, (char *)p + done, n - done);
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* On the pipe: the two lengths (uint32_t each), the address, the
 * serialized descriptor. */
int te_test_send_endpoint(int fd, te_engine *e, const te_mr_desc *d)
{
    uint8_t msg[8 + TE_ADDR_MAX + TE_DESC_MAX];
    size_t alen = TE_ADDR_MAX, dlen = TE_DESC_MAX;
    if (te_engine_address(e, 0, msg + 8, &alen) ||
        te_desc_serialize(d, msg + 8 + alen, &dlen))
        return -1;
    uint32_t lens[2] = {(uint32_t)alen, (uint32_t)dlen};
    memcpy(msg, lens, 8);
    return te_test_write_all(fd, msg, 8 + alen + dlen);
}

te_peer te_test_recv_peer(int fd, te_engine *e, te_mr_desc *d)
{
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    ck_assert_int_eq(te_test_recv_endpoint(fd, addr, &alen, d), 0);
    te_peer p;
    ck_assert_msg(te_peer_add(e, 0, addr, alen, &p) == 0, "%s",
                  te_last_error());
    return p;
}

int te_test_child_peer(int fd, te_engine *e, void *buf, size_t len,
                       te_mr **mr, te_peer *p, te_mr_desc *d)
{
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    if (te_test_recv_endpoint(fd, addr, &alen, d))
        return -1;
    *mr = NULL;
    if (!e || te_mr_reg(e, 0, buf, len, 0, TE_MEM_HOST, mr) ||
        te_peer_add(e, 0, addr, alen, p)) {
        fprintf(stderr, "child: %s\n", te_last_error());
        return -1;
    }
    return 0;
}

int te_test_recv_endpoint(int fd, uint8_t addr[TE_ADDR_MAX], size_t *alen,
                          te_mr_desc *d)
{
    uint32_t lens[2];
    uint8_t desc[TE_DESC_MAX];
    if (te_test_read_all(fd, lens, 8) || lens[0] > TE_ADDR_MAX ||
        lens[1] > TE_DESC_MAX || te_test_read_all(fd, addr, lens[0]) ||
        te_test_read_all(fd, desc, lens[1]) ||
        te_desc_parse(desc, lens[1], d))
        return -1;
    *alen = lens[0];
    return 0;
}
