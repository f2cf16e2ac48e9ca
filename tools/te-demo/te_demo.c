/*
 * te-demo: the main job on the default (loopback) transport. A "prefiller"
 * pushes a KV cache, layer by layer, into a "decoder" with paged writes;
 * each layer carries its own immediate and the decoder's ImmCounter fires a
 * callback when the layer is complete (the count is the signal; no "done"
 * message). The decoder then checks every byte. Runs the two endpoints in
 * one process or in two (--two-process), and prints a readable report with
 * a memcpy reference measured in the same run.
 *
 * Uses the public API only (te/te.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "te/te.h"
#include "te_args.h"

struct opts {
    uint32_t layers, pages, page_kib;
    int two_process;
    const char *config;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pattern(uint64_t off, uint32_t layer)
{
    uint64_t x = off * 0x9E3779B97F4A7C15ull + (layer + 1) * 0xBF58476D1CE4E5B9ull;
    return (uint8_t)(x >> 56);
}

static int die(const char *what, int rc)
{
    fprintf(stderr, "te-demo: %s: %s (%s)\n", what, te_strerror(rc),
            te_last_error());
    return 1;
}

static int make_engine(const struct opts *o, te_engine **e)
{
    te_config *cfg = te_config_new();
    int rc = 0;
    if (o->config)
        rc = te_config_load_file(cfg, o->config);
    if (!rc)
        rc = te_engine_create(cfg, e);
    te_config_free(cfg);
    return rc;
}

static int xwrite(int fd, const void *b, size_t n)
{
    return write(fd, b, n) == (ssize_t)n ? 0 : -EIO;
}

static int xread(int fd, void *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)b + got, n - got);
        if (r <= 0)
            return -EIO;
        got += (size_t)r;
    }
    return 0;
}

/* ------------------------------------------------------------ decoder */

struct layer_done {
    atomic_int done;
    double t;
};

static struct layer_done *g_layers;

static void on_layer(uint32_t imm, int status, void *arg)
{
    struct layer_done *l = arg;
    l->t = now_s();
    atomic_store(&l->done, status == 0 ? 1 : -1);
}

static uint64_t region_size(const struct opts *o)
{
    return (uint64_t)o->layers * o->pages * o->page_kib * 1024u;
}

/* Publishes address+descriptor on fd, arms one expectation per layer,
 * waits (bounded) for all layers, then verifies the bytes. */
static int decoder(const struct opts *o, int fd, uint32_t imm_base,
                   uint64_t expected_per_layer)
{
    te_engine *e;
    int rc = make_engine(o, &e);
    if (rc)
        return die("decoder engine", rc);
    uint64_t size = region_size(o);
    uint8_t *kv = aligned_alloc(4096, size);
    memset(kv, 0, size);
    te_mr *mr;
    if ((rc = te_mr_reg(e, 0, kv, size, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &mr)))
        return die("decoder registration", rc);
    te_mr_desc d;
    te_mr_describe(mr, &d);
    uint8_t addr[TE_ADDR_MAX], desc[TE_DESC_MAX];
    uint64_t alen = sizeof(addr), dlen = sizeof(desc);
    size_t al = alen, dl = dlen;
    te_engine_address(e, 0, addr, &al);
    te_desc_serialize(&d, desc, &dl);
    alen = al;
    dlen = dl;
    /* Arm before anything can arrive; arrivals would be banked anyway. */
    g_layers = calloc(o->layers, sizeof(*g_layers));
    for (uint32_t l = 0; l < o->layers; l++)
        if ((rc = te_imm_expect(e, imm_base + l, expected_per_layer, on_layer,
                                &g_layers[l])))
            return die("te_imm_expect", rc);
    if (xwrite(fd, &alen, 8) || xwrite(fd, addr, alen) || xwrite(fd, &dlen, 8) ||
        xwrite(fd, desc, dlen))
        return die("publish address", -EIO);
    double deadline = now_s() + 60;
    for (uint32_t l = 0; l < o->layers; l++)
        while (!atomic_load(&g_layers[l].done) && now_s() < deadline)
            usleep(100);
    int bad = 0;
    uint64_t wrong = 0;
    uint32_t missing = 0, first = 0;
    for (uint32_t l = 0; l < o->layers; l++)
        if (atomic_load(&g_layers[l].done) != 1 && !missing++)
            first = l;
    if (missing) { /* one line, not one per layer */
        fprintf(stderr, "te-demo: %u of %u layers never completed (the first: "
                "layer %u)\n", missing, o->layers, first);
        bad = 1;
    }
    uint64_t layer_bytes = (uint64_t)o->pages * o->page_kib * 1024u;
    /* Page p of layer l lands at slot (p * 7919) % pages of that layer. */
    for (uint32_t l = 0; l < o->layers && !bad; l++)
        for (uint32_t p = 0; p < o->pages; p++) {
            uint64_t page = (uint64_t)o->page_kib * 1024u;
            uint64_t dst = l * layer_bytes + ((uint64_t)p * 7919 % o->pages) * page;
            uint64_t src = l * layer_bytes + (uint64_t)p * page;
            for (uint64_t b = 0; b < page; b += 61)
                wrong += kv[dst + b] != pattern(src + b, l);
        }
    int32_t verdict = bad ? 2 : wrong ? 3 : 0;
    xwrite(fd, &verdict, sizeof(verdict));
    /* The prefiller times warm pushes into our memory next: keep it
     * registered until it says goodbye (or the channel closes). */
    char bye;
    if (xread(fd, &bye, 1)) {}
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    free(kv);
    free(g_layers);
    if (wrong)
        fprintf(stderr, "te-demo: %llu sampled bytes (every 61st) wrong\n",
                (unsigned long long)wrong);
    return verdict ? 1 : 0;
}

/* ------------------------------------------------------------ prefiller */

struct sent {
    atomic_int done;
    int status;
    char reason[96];
};

static void on_sent(const te_completion *c, void *arg)
{
    struct sent *s = arg;
    s->status = c->status;
    memcpy(s->reason, c->reason, sizeof(s->reason));
    atomic_store(&s->done, 1);
}

/* The same work done by memcpy: every page of every layer copied to its
 * destination slot, from the same source into a buffer of the same size.
 * One warm-up, then the median of `reps`, like the warm pushes. */
static int cmp_double(const void *a, const void *b);
static double memcpy_pages_seconds(const struct opts *o, const uint8_t *src,
                                   const uint32_t *dst_idx, int reps)
{
    uint64_t page = (uint64_t)o->page_kib * 1024u;
    uint64_t layer = o->pages * page, size = layer * o->layers;
    uint8_t *dst = aligned_alloc(4096, size);
    double t[16];
    if (reps > 15)
        reps = 15;
    for (int r = 0; r <= reps; r++) {
        double t0 = now_s();
        for (uint32_t l = 0; l < o->layers; l++)
            for (uint32_t p = 0; p < o->pages; p++)
                memcpy(dst + l * layer + dst_idx[p] * page,
                       src + l * layer + p * page, page);
        t[r] = now_s() - t0; /* t[0] is the warm-up */
    }
    free(dst);
    qsort(t + 1, (size_t)reps, sizeof(t[0]), cmp_double);
    return t[1 + reps / 2];
}

/* One push of every layer: what the prefiller sends. */
struct push {
    const struct opts *o;
    te_engine *e;
    te_peer peer;
    te_mr *mr;
    const te_mr_desc *d;
    const uint32_t *src_idx, *dst_idx;
    struct sent *sent;
    uint32_t imm_base;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Submits every layer (with its imm when flags has TE_F_IMM) and waits,
 * bounded, for all completions: the seconds it took, or -1 on failure. */
static double push_all(struct push *c, uint32_t flags)
{
    const struct opts *o = c->o;
    uint64_t page = (uint64_t)o->page_kib * 1024u;
    uint64_t layer_bytes = o->pages * page;
    double t0 = now_s();
    for (uint32_t l = 0; l < o->layers; l++) {
        te_request r;
        te_request_init(&r, TE_OP_PAGED);
        r.flags = flags;
        r.imm = c->imm_base + l;
        r.u.paged.peer = c->peer;
        r.u.paged.src = c->mr;
        r.u.paged.src_off = l * layer_bytes;
        r.u.paged.src_stride = page;
        r.u.paged.src_idx = c->src_idx;
        r.u.paged.dst = c->d;
        r.u.paged.dst_off = l * layer_bytes;
        r.u.paged.dst_stride = page;
        r.u.paged.dst_idx = c->dst_idx;
        r.u.paged.page_len = page;
        r.u.paged.count = o->pages;
        r.done = on_sent;
        r.done_arg = &c->sent[l];
        int64_t id;
        while ((id = te_submit(c->e, &r)) == -EAGAIN)
            usleep(10);
        if (id < 0) {
            die("te_submit", (int)id);
            return -1;
        }
    }
    double deadline = now_s() + 60;
    for (uint32_t l = 0; l < o->layers; l++)
        while (!atomic_load(&c->sent[l].done) && now_s() < deadline)
            usleep(50);
    double t = now_s() - t0;
    int failed = 0;
    for (uint32_t l = 0; l < o->layers; l++)
        if (!atomic_load(&c->sent[l].done) || c->sent[l].status) {
            fprintf(stderr, "te-demo: layer %u: %s\n", l,
                    atomic_load(&c->sent[l].done) ? c->sent[l].reason
                                                  : "timed out");
            failed = 1;
        }
    return failed ? -1 : t;
}

static int prefiller(const struct opts *o, int fd, uint32_t imm_base)
{
    te_engine *e;
    int rc = make_engine(o, &e);
    if (rc)
        return die("prefiller engine", rc);
    uint64_t size = region_size(o);
    uint8_t *kv = aligned_alloc(4096, size);
    for (uint64_t i = 0; i < size; i++)
        kv[i] = pattern(i, (uint32_t)(i / ((uint64_t)o->pages * o->page_kib * 1024u)));
    te_mr *mr;
    if ((rc = te_mr_reg(e, 0, kv, size, 0, TE_MEM_HOST, &mr)))
        return die("prefiller registration", rc);
    uint64_t alen, dlen;
    uint8_t addr[TE_ADDR_MAX], desc[TE_DESC_MAX];
    if (xread(fd, &alen, 8) || alen > sizeof(addr) || xread(fd, addr, alen) ||
        xread(fd, &dlen, 8) || dlen > sizeof(desc) || xread(fd, desc, dlen))
        return die("decoder address", -EIO);
    te_peer peer;
    te_mr_desc d;
    if ((rc = te_peer_add(e, 0, addr, alen, &peer)))
        return die("te_peer_add", rc);
    if ((rc = te_desc_parse(desc, dlen, &d)))
        return die("te_desc_parse", rc);

    uint32_t *src_idx = malloc(o->pages * sizeof(uint32_t));
    uint32_t *dst_idx = malloc(o->pages * sizeof(uint32_t));
    struct sent *sent = calloc(o->layers, sizeof(*sent));
    printf("te-demo: transport %s, %d NIC(s), %s\n", te_engine_plugin_name(e),
           te_engine_nic_count(e, 0),
           o->two_process ? "prefiller and decoder in two processes"
                          : "prefiller and decoder in one process");
    printf("  KV cache: %u layers x %u pages x %u KiB = %.1f MiB\n", o->layers,
           o->pages, o->page_kib, (double)size / (1 << 20));
    for (uint32_t p = 0; p < o->pages; p++) {
        src_idx[p] = p;
        dst_idx[p] = (uint32_t)((uint64_t)p * 7919 % o->pages);
    }
    struct push ctx = {o, e, peer, mr, &d, src_idx, dst_idx, sent, imm_base};
    double t = push_all(&ctx, TE_F_IMM);
    int failed = t < 0;
    int32_t verdict = -1;
    if (xread(fd, &verdict, sizeof(verdict)))
        verdict = -1;
    /* Warm pushes (no imm): the first push pays page faults and first
     * touches, which say nothing about the transport. */
    enum { WARM = 5 };
    double warm[WARM];
    int nwarm = 0;
    for (int i = 0; i < WARM && !failed && verdict == 0; i++) {
        memset(sent, 0, o->layers * sizeof(*sent));
        double w = push_all(&ctx, 0);
        if (w < 0)
            failed = 1;
        else
            warm[nwarm++] = w;
    }
    char bye = 0;
    xwrite(fd, &bye, 1);
    double gbps = t > 0 ? (double)size / t / 1e9 : 0;
    double ref = (double)size / memcpy_pages_seconds(o, kv, dst_idx, WARM) / 1e9;
    if (!failed) /* a failed push moved nothing worth a rate */
        printf("  first push: %.2f ms, %.2f GB/s of payload (%.1f Gbps), %u "
               "paged writes with imm (cold: includes page faults)\n", t * 1e3,
               gbps, gbps * 8, o->layers);
    else
        printf("  first push: FAILED (no rate)\n");
    if (nwarm) {
        qsort(warm, (size_t)nwarm, sizeof(warm[0]), cmp_double);
        double wg = (double)size / warm[nwarm / 2] / 1e9;
        printf("  warm pushes (median of %d): %.2f ms, %.2f GB/s = %.2f x "
               "memcpy of the same pages here (%.2f GB/s)\n", nwarm,
               warm[nwarm / 2] * 1e3, wg, wg / ref, ref);
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        printf("  (a demo, not a benchmark: two engines whose workers "
               "busy-poll share %ld CPU(s) here;\n   te-bench pins them and "
               "measures the ratios: docs/benchmarks.md)\n", cpus);
    }
    printf("  decoder: %s\n", verdict == 0 ? "every layer's ImmCounter fired, "
           "every 61st byte of every page checked"
           : verdict == 2 ? "a layer never completed" : verdict == 3
           ? "bytes differ" : "no verdict");
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    free(kv);
    free(src_idx);
    free(dst_idx);
    free(sent);
    int ok = !failed && verdict == 0;
    printf("%s\n", ok ? "te-demo: OK" : "te-demo: FAILED");
    return ok ? 0 : 1;
}

struct dec_args {
    const struct opts *o;
    int fd;
    uint32_t imm;
    uint64_t per_layer;
    int rc;
};

static void *dec_thread(void *p)
{
    struct dec_args *a = p;
    a->rc = decoder(a->o, a->fd, a->imm, a->per_layer);
    return NULL;
}

int main(int argc, char **argv)
{
    struct opts o = {.layers = 8, .pages = 256, .page_kib = 32};
    static const struct option lo[] = {
        {"layers", required_argument, 0, 'l'},
        {"pages", required_argument, 0, 'p'},
        {"page-kib", required_argument, 0, 'k'},
        {"two-process", no_argument, 0, 't'},
        {"config", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c, bad = 0;
    opterr = 0; /* te_arg_bad_option names the option */
    while ((c = getopt_long(argc, argv, ":l:p:k:tc:h", lo, NULL)) != -1) {
        switch (c) {
        case 'l': bad |= te_arg_u32("te-demo", "--layers", optarg, 1, 4096,
                                    &o.layers); break;
        case 'p': bad |= te_arg_u32("te-demo", "--pages", optarg, 1, 1u << 20,
                                    &o.pages); break;
        case 'k': bad |= te_arg_u32("te-demo", "--page-kib", optarg, 1, 65536,
                                    &o.page_kib); break;
        case 't': o.two_process = 1; break;
        case 'c': o.config = optarg; break;
        case 'h':
            printf("usage: te-demo [--layers N] [--pages N] [--page-kib N] "
                   "[--two-process] [--config FILE]\n"
                   "Pushes a KV cache layer by layer with paged WriteImm and "
                   "checks it at the receiver.\nDefaults: 8 layers x 256 pages "
                   "x 32 KiB, one process, loopback (or $TE_CONFIG).\n");
            return 0;
        default:
            te_arg_getopt_error("te-demo", c, argv, optind, optopt);
            return 2;
        }
    }
    if (bad || te_arg_no_operands("te-demo", argc, argv, optind))
        return 2;
    if (region_size(&o) > (4ull << 30)) {
        /* Two regions of this size (source and destination) are allocated. */
        fprintf(stderr, "te-demo: --layers %u x --pages %u x --page-kib %u = "
                "%.1f GiB, at most 4 GiB\n", o.layers, o.pages, o.page_kib,
                (double)region_size(&o) / (1 << 30));
        return 2;
    }
    /* Each paged layer carries its imm on every page: count = pages. */
    uint64_t per_layer = o.pages;
    uint32_t imm_base = 0x7e000000u;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return 1;
    if (o.two_process) {
        pid_t pid = fork();
        if (pid == 0) {
            close(sv[0]);
            _exit(decoder(&o, sv[1], imm_base, per_layer));
        }
        close(sv[1]);
        int rc = prefiller(&o, sv[0], imm_base);
        int st = 0;
        waitpid(pid, &st, 0);
        return rc || !WIFEXITED(st) || WEXITSTATUS(st);
    }
    struct dec_args a = {&o, sv[1], imm_base, per_layer, 0};
    pthread_t th;
    pthread_create(&th, NULL, dec_thread, &a);
    int rc = prefiller(&o, sv[0], imm_base);
    pthread_join(th, NULL);
    return rc || a.rc;
}
