/*
 * Writes seed inputs for the fuzz targets: valid encodings produced by the
 * library's own encoders (descriptors, addresses), valid loopback addresses,
 * hellos and ring entries in the harnesses' input formats, and a few
 * near-misses. Usage: fuzz_gen_seeds OUTDIR (creates OUTDIR/<target>/).
 * The INI seeds are the files of conf/ plus the strings below.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "te/te.h"
#include "wire.h"
#include "lb_internal.h"

static const char *outdir;
static int nfiles;

static void emit(const char *target, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outdir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "gen_seeds: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    nfiles++;
}

/* ------------------------------------------------------------ byte sink */

struct buf {
    uint8_t b[8192];
    size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void put8(struct buf *b, uint8_t v) { put(b, &v, 1); }
static void put32(struct buf *b, uint32_t v) { put(b, &v, 4); }

/* -------------------------------------------------------------- targets */

static void desc_seeds(void)
{
    static const uint32_t nics[] = {1, 2, 4, 16};
    for (size_t k = 0; k < 4; k++) {
        for (uint32_t acc = 0; acc < 4; acc++) {
            te_mr_desc d;
            memset(&d, 0, sizeof d);
            d.addr = 0x7f0012340000ull + k;
            d.len = (acc == 3) ? UINT64_MAX : 4096u << k;
            d.access = acc;
            d.nic_count = nics[k];
            for (uint32_t i = 0; i < nics[k]; i++) {
                d.nic[i].rkey = 0x5eed000000000001ull + i;
                d.nic[i].remote_base = d.addr;
            }
            uint8_t b[TE_DESC_MAX];
            size_t n = sizeof b;
            if (te_desc_serialize(&d, b, &n) != 0)
                exit(1);
            char name[64];
            snprintf(name, sizeof name, "valid-%unic-acc%u", nics[k], acc);
            emit("desc_parse", name, b, n);
            if (acc == 1) { /* near misses */
                emit("desc_parse", "truncated", b, n - 1);
                b[4] = 2; /* version 2 */
                emit("desc_parse", "version2", b, n);
            }
        }
    }
}

static void addr_seeds(void)
{
    static const uint32_t nics[] = {1, 2, 4, 16};
    static const uint16_t alen[] = {64, 1, 128, 20};
    static const char *names[] = {"loopback", "efa", "mlx5", "x"};
    for (size_t k = 0; k < 4; k++) {
        struct te_group_addr a;
        memset(&a, 0, sizeof a);
        snprintf(a.transport, sizeof a.transport, "%s", names[k]);
        a.engine_id = 0x0123456789abcdefull;
        a.group = (uint32_t)k;
        a.nic_count = nics[k];
        for (uint32_t i = 0; i < nics[k]; i++) {
            a.nic_addr_len[i] = alen[k];
            for (uint32_t j = 0; j < alen[k]; j++)
                a.nic_addr[i][j] = (uint8_t)(i + j);
        }
        static uint8_t b[TE_ADDR_MAX];
        size_t n = sizeof b;
        if (te_wire_addr_encode(&a, b, &n) != 0)
            exit(1);
        char name[64];
        snprintf(name, sizeof name, "valid-%s-%unic", names[k], nics[k]);
        emit("wire_addr_decode", name, b, n);
        if (k == 0) {
            emit("wire_addr_decode", "truncated", b, n - 3);
            b[0] ^= 1;
            emit("wire_addr_decode", "badmagic", b, n);
        }
    }
}

static void config_seeds(void)
{
    static const char *const s[] = {
        "[engine]\nplugin = loopback\ngroups = 2\nnics_per_group = 4\n",
        "; comment\n[engine]\n  plugin=\"loopback\"\n[loopback]\ndevices=8\n"
        "queue_depth = 0x400\nlink_gbps = 100\nfault_reorder = yes\n",
        "[engine]\nsubmit_queue_depth = 4k\nworker_cpus = 0,1\ngroup_nics = 0,1;2,3\n",
        "[ engine ]\r\nplugin = loopback\r\n",
        "[engine\nplugin = x\n",
        "plugin = outside\n",
        "[]\nkey = v\n",
        "[engine]\nnics_per_grop = 2\n",
        "[engine]\ngroups = 18446744073709551616\ntimeout = 1e309\nflag = maybe\n",
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "text-%02zu", i);
        emit("config_load_string", name, s[i], strlen(s[i]));
    }
}

static void lb_addr_seeds(void)
{
    struct lb_addr a;
    memset(&a, 0, sizeof a);
    a.magic = LB_ADDR_MAGIC;
    a.version = LB_ADDR_VERSION;
    a.size = sizeof a;
    a.pid = 1; /* not the fuzzer: the cross-process path */
    a.nic_index = 1;
    a.nic_id = 0x1122334455667788ull;
    snprintf(a.sock_name, sizeof a.sock_name, "te-lb-fuzz-peer");
    emit("lb_addr", "remote-listening", &a, sizeof a);
    snprintf(a.sock_name, sizeof a.sock_name, "te-lb-1-1122334455667788");
    emit("lb_addr", "remote-nobody", &a, sizeof a);
    struct lb_addr b = a;
    b.version = 2;
    emit("lb_addr", "version2", &b, sizeof b);
    b = a;
    memset(b.sock_name, 'x', sizeof b.sock_name);
    emit("lb_addr", "unterminated", &b, sizeof b);
    emit("lb_addr", "short", &a, sizeof a - 1);
}

/* fuzz_lb_hello input: flags, lensel, size, hello, memory image. */
static void lb_hello_seeds(void)
{
    static const uint32_t caps[] = {1, 16, 128};
    for (size_t k = 0; k < 3; k++) {
        struct buf b = {.n = 0};
        uint32_t size = (uint32_t)lb_shm_size(caps[k]);
        put8(&b, 0x1 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40); /* fd, sealed, fixed */
        put8(&b, 0);
        put32(&b, size);
        struct lb_hello h = {.magic = LB_HELLO_MAGIC,
                             .version = LB_ADDR_VERSION, .pid = 1,
                             .nic_id = 0x99aabbccddeeff00ull,
                             .target_nic_id = 0x1122334455667788ull,
                             .shm_size = size};
        put(&b, &h, sizeof h);
        /* Memory image: header (rewritten by the harness, indices kept)
         * with two requests published (lap stamp 1: the first lap). */
        struct lb_shm shm;
        memset(&shm, 0, sizeof shm);
        put(&b, &shm, sizeof shm);
        struct lb_req r = {.kind = TE_POP_WRITE, .flags = TE_POP_F_IMM,
                           .lap = 1, .imm = 7, .len = 0};
        put(&b, &r, sizeof r);
        r.kind = TE_POP_SEND;
        r.len = 16;
        r.local_addr = 0x3f008000u; /* FZ_BASE + FZ_SRC_OFF */
        put(&b, &r, sizeof r);
        char name[32];
        snprintf(name, sizeof name, "valid-cap%u", caps[k]);
        emit("lb_hello", name, b.b, b.n);
    }
    /* Not sealed; wrong id; no fd; short. */
    static const uint8_t variants[] = {0x1 | 0x8 | 0x10 | 0x20 | 0x40,
                                       0x1 | 0x4 | 0x10 | 0x20 | 0x40,
                                       0x4 | 0x8 | 0x10 | 0x20,
                                       0x3 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40,
                                       0x1 | 0x80 | 0x8 | 0x10 | 0x20 | 0x40};
    for (size_t k = 0; k < sizeof variants; k++) {
        struct buf b = {.n = 0};
        uint32_t size = (uint32_t)lb_shm_size(4);
        put8(&b, variants[k]);
        put8(&b, k == 2 ? 0x90 : 0);
        put32(&b, size);
        struct lb_hello h = {.magic = LB_HELLO_MAGIC,
                             .version = LB_ADDR_VERSION, .pid = 1,
                             .nic_id = 1, .target_nic_id = 2,
                             .shm_size = size};
        put(&b, &h, sizeof h);
        char name[32];
        snprintf(name, sizeof name, "variant-%zu", k);
        emit("lb_hello", name, b.b, b.n);
    }
}

/* Relocation bits of fuzz_lb_ring.c. */
#define RL_KEY 0x8000u
#define RL_LOCAL 0x4000u

static struct lb_req rq(uint8_t kind, uint8_t flags, uint64_t key_index,
                        int32_t off, uint64_t len, int32_t local_off)
{
    struct lb_req r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    r.flags = flags;
    r.lap = RL_KEY | RL_LOCAL; /* relocations, not a stamp: see the harness */
    r.rkey = key_index; /* 0 rw, 1 write-only, 2 read-only, 3 stale, 4 none */
    r.remote_addr = (uint64_t)(uint32_t)off;
    r.len = len;
    r.local_addr = (uint64_t)(uint32_t)local_off;
    r.imm = 0x100 + (uint32_t)key_index;
    return r;
}

static void lb_ring_seeds(void)
{
    /* Target side: byte0 even, cap selector, receives, rounds. */
    struct {
        const char *name;
        struct lb_req r[4];
        int n;
    } cases[] = {
        {"write-imm-ok", {rq(1, 1, 0, 0, 4096, 0), rq(1, 1, 0, 4095, 1, 8)}, 2},
        {"write-oob", {rq(1, 1, 0, 1, 4096, 0), rq(1, 1, 0, -1, 1, 0),
                       rq(1, 0, 0, 4097, 0, 0)}, 3},
        {"write-zero-nokey", {rq(1, 1, 4, 0, 0, 0), rq(1, 1, 4, 0, 1, 0)}, 2},
        {"wrong-access", {rq(1, 1, 2, 0, 16, 0), rq(2, 0, 1, 0, 16, 0)}, 2},
        {"stale-key", {rq(1, 1, 3, 0, 16, 0), rq(2, 0, 3, 0, 16, 0)}, 2},
        {"read-ok", {rq(2, 0, 2, 0, 512, 0), rq(2, 0, 0, 100, 100, 64)}, 2},
        {"send-recv", {rq(3, 0, 4, 0, 16, 0), rq(3, 0, 4, 0, 300, 0),
                       rq(3, 0, 4, 0, 0, 0), rq(3, 0, 4, 0, 8, 0)}, 4},
        {"bad-kind", {rq(0, 0, 0, 0, 0, 0), rq(4, 0, 0, 0, 16, 0),
                      rq(9, 0, 0, 0, 16, 0)}, 3},
        {"huge-len", {rq(1, 1, 0, 0, 0xffffffffu, 0), rq(2, 0, 0, 0, 0x100000000ull, 0)}, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct buf b = {.n = 0};
        put8(&b, 0);     /* target */
        put8(&b, 4);     /* cap 16 */
        put8(&b, 2);     /* two receives */
        put8(&b, 200);   /* of 200 bytes */
        put8(&b, 255);   /* and 255 */
        put8(&b, (uint8_t)cases[k].n); /* round 0: n requests */
        for (int i = 0; i < cases[k].n; i++)
            put(&b, &cases[k].r[i], sizeof cases[k].r[i]);
        emit("lb_ring", cases[k].name, b.b, b.n);
    }
    /* Target side, inline SENDs: 8, 76 and 136 bytes in the ring (one and
     * two continuation entries, whose payload follows each entry in the
     * input), and one inline SEND claiming more than fits. */
    {
        static const uint64_t lens[] = {8, 76, 136, 137};
        struct buf b = {.n = 0};
        put8(&b, 0);   /* target */
        put8(&b, 4);   /* cap 16 */
        put8(&b, 4);   /* four receives */
        for (int i = 0; i < 4; i++)
            put8(&b, 200);
        put8(&b, 4);   /* round 0: 4 requests */
        for (int i = 0; i < 4; i++) {
            struct lb_req r = rq(3, 0, 4, 0, lens[i], 0);
            r.lap = 0; /* no relocation: remote_addr and rkey are payload */
            r.remote_addr = 0x0706050403020100ull;
            r.rkey = 0x0f0e0d0c0b0a0908ull;
            r.mem = LB_MEM_INLINE;
            put(&b, &r, sizeof r);
            for (uint64_t j = 16; j < lens[i] && lens[i] <= LB_INLINE_MAX; j++)
                put8(&b, (uint8_t)j);
        }
        emit("lb_ring", "send-inline", b.b, b.n);
    }
    /* Initiator side: byte0 odd, qd selector, ops, rounds of responses. */
    for (int variant = 0; variant < 4; variant++) {
        struct buf b = {.n = 0};
        put8(&b, 1);
        put8(&b, 3); /* qd 8 */
        put8(&b, 5); /* 5 ops */
        for (int i = 0; i < 5; i++) {
            put8(&b, (uint8_t)(i % 3 | (i & 1) << 2));
            put8(&b, (uint8_t)(16 * i));
        }
        /* Round: answer 3 with relocated slots; variant decides status. */
        put8(&b, variant == 3 ? 0x10 | 0x20 | 3 : 3);
        for (int i = 0; i < 3; i++) {
            struct lb_resp r;
            memset(&r, 0, sizeof r);
            r.slot = (uint32_t)(variant == 2 ? 0 : i); /* 2: replay one slot */
            r.status = variant == 1 ? -EACCES : 0;
            r.reason = variant == 1 ? LB_R_BOUNDS : LB_R_NONE;
            r.a = 16;
            r.b = 4090;
            r.c = 4096;
            r.reserved[0] = 1;
            put(&b, &r, sizeof r);
        }
        if (variant == 3)
            put8(&b, LB_ST_DEAD);
        put8(&b, 2);
        for (int i = 0; i < 2; i++) {
            struct lb_resp r;
            memset(&r, 0, sizeof r);
            r.slot = (uint32_t)(3 + i);
            r.reserved[0] = 1;
            put(&b, &r, sizeof r);
        }
        char name[32];
        snprintf(name, sizeof name, "initiator-%d", variant);
        emit("lb_ring", name, b.b, b.n);
    }
}


/* fuzz_submit input: op, flags, imm, group, route (3), nulls, then per op
 * fields; a value is (selector, lo, hi): selector 2 = lo | hi << 8. */
static void v16(struct buf *b, uint16_t x)
{
    put8(b, 2);
    put8(b, (uint8_t)x);
    put8(b, (uint8_t)(x >> 8));
}

static void submit_head(struct buf *b, uint8_t op, uint8_t flags)
{
    put8(b, op);
    put8(b, flags);
    put8(b, 0x42); /* imm */
    put8(b, 0);    /* group 0 */
    put8(b, 0);    /* route: shard */
    put8(b, 0);    /* over all NICs */
    put8(b, 0);
    put8(b, 0);    /* no NULL pointers */
}

static void submit_seeds(void)
{
    struct buf b = {.n = 0};
    submit_head(&b, TE_OP_WRITE, TE_F_IMM);
    put8(&b, 2); /* peer: self */
    v16(&b, 0);
    put8(&b, 0); /* d_dst */
    v16(&b, 100);
    v16(&b, 4096);
    emit("submit", "write-imm", b.b, b.n);

    b.n = 0;
    submit_head(&b, TE_OP_READ, 0);
    put8(&b, 2);
    v16(&b, 8);
    put8(&b, 2); /* read-only region */
    v16(&b, 0);
    v16(&b, 4000);
    emit("submit", "read", b.b, b.n);

    b.n = 0;
    submit_head(&b, TE_OP_PAGED, TE_F_IMM);
    put8(&b, 2);
    put8(&b, 4); /* 4 pages */
    for (int k = 0; k < 16; k++) {
        put8(&b, 0);
        put8(&b, (uint8_t)k);
        put8(&b, 0);
        put8(&b, (uint8_t)(15 - k));
    }
    v16(&b, 0);    /* src_off */
    v16(&b, 1024); /* src_stride */
    put8(&b, 0);
    v16(&b, 0);
    v16(&b, 1024);
    v16(&b, 512); /* page_len */
    emit("submit", "paged", b.b, b.n);

    for (int split = 0; split < 2; split++) {
        b.n = 0;
        submit_head(&b, TE_OP_SCATTER, TE_F_IMM);
        put8(&b, (uint8_t)split);
        put8(&b, 3);
        for (int k = 0; k < 8; k++) {
            put8(&b, 2);
            put8(&b, 0);
            v16(&b, (uint16_t)(k * 2048));
            v16(&b, (uint16_t)(k * 100));
            v16(&b, 1500);
        }
        emit("submit", split ? "scatter-bytes" : "scatter-peers", b.b, b.n);
    }

    b.n = 0;
    submit_head(&b, TE_OP_BARRIER, 0);
    put8(&b, 3);
    for (int k = 0; k < 8; k++) {
        put8(&b, 2);
        put8(&b, 0);
    }
    emit("submit", "barrier", b.b, b.n);

    b.n = 0;
    submit_head(&b, TE_OP_SEND, 0);
    put8(&b, 2);
    v16(&b, 64);
    emit("submit", "send", b.b, b.n);

    b.n = 0;
    submit_head(&b, TE_OP_WRITE, TE_F_IMM);
    put8(&b, 2);
    v16(&b, 0);
    put8(&b, 0);
    put8(&b, 5); /* remote_off = RLEN + 1 */
    put8(&b, 0);
    put8(&b, 0);
    v16(&b, 1);
    emit("submit", "write-oob", b.b, b.n);

    b.n = 0;
    submit_head(&b, 0, 0);
    emit("submit", "bad-op", b.b, b.n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    mkdir(outdir, 0755);
    desc_seeds();
    addr_seeds();
    config_seeds();
    lb_addr_seeds();
    lb_hello_seeds();
    lb_ring_seeds();
    submit_seeds();
    printf("gen_seeds: %d files in %s\n", nfiles, outdir);
    return 0;
}
