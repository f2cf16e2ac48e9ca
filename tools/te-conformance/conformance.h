/*
 * The conformance suite: every operation of the public API checked byte
 * for byte against one or more remote engines, in this process or in child
 * processes, with any plugin. Used by te-conformance and by ctest.
 */
#ifndef TE_CONFORMANCE_H
#define TE_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "te/te.h"
#include "mem.h"

#define CONF_MAX_REMOTES 4
#define CONF_REGION (16u << 20) /* bytes of each side's test region */
#define CONF_TIMEOUT_MS 20000   /* any single wait in the suite */

/** One remote engine the local engine talks to. */
struct remote {
    te_peer peer;         /* the remote group, as a peer of local group 0 */
    te_mr_desc desc;      /* its test region (remote write + read) */
    te_peer back;         /* the local engine as a peer of the remote */
    const struct remote_ops *ops;
    void *impl;
};

struct remote_ops {
    /* Fill [off, off+len) of the remote region with pattern(seed). */
    int (*fill)(struct remote *r, uint64_t off, uint64_t len, uint32_t seed);
    /* Copy [off, off+len) of the remote region into out. */
    int (*fetch)(struct remote *r, uint64_t off, uint64_t len, void *out);
    /* te_imm_wait on the remote engine. */
    int (*imm_wait)(struct remote *r, uint32_t imm, uint64_t count,
                    int timeout_ms);
    /* te_imm_poll on the remote engine (banked count). */
    int (*imm_banked)(struct remote *r, uint32_t imm, uint64_t *banked);
    /* te_imm_remove on the remote engine. */
    int (*imm_remove)(struct remote *r, uint32_t imm, uint64_t *surplus);
    /* Wait for the next message the remote received: bytes and sender. */
    int (*recv_wait)(struct remote *r, void *buf, size_t cap, size_t *len,
                     int *from_known, int timeout_ms);
    /* An immediate space of the remote engine (CMD_SPACE_* of wire_cmd.h,
     * side_space()). */
    int (*space)(struct remote *r, uint32_t cmd, uint32_t slot, uint64_t a,
                 uint64_t *v);
    void (*close)(struct remote *r);
    /* Kill the remote abruptly (SIGKILL); NULL where it cannot be done
     * (a remote in this process). */
    int (*kill)(struct remote *r);
};

struct conf {
    te_config *cfg;        /* configuration every engine is built from */
    const char *config_file;      /* --config, may be NULL */
    const char *sets[80];         /* --set, --plugin, --remote-set (child) */
    int nsets;
    const char *remote_sets[17];  /* --remote-set, NULL-terminated */
    int two_process;
    int nremotes;
    te_engine *e;          /* the local engine (group 0) */
    te_mr *src;            /* local region: source of writes, sink of reads */
    uint8_t *src_buf;      /* = src_mem.host (the mirror, see mem.h) */
    struct conf_mem src_mem;
    int inflight;          /* conf_submit()ted, not yet waited for */
    struct remote rem[CONF_MAX_REMOTES];
    int verbose;
    int strict;            /* --strict: a missing optional behaviour fails */
    const char *plugin;
    char err[512];         /* why the last conf_remote_* failed */
    /* Set by conf_skip()/conf_note() during a case, printed by main.c. */
    char why[320];
    char note[320];
};

/* Byte at absolute offset o of the pattern with seed. */
static inline uint8_t conf_pattern(uint64_t o, uint32_t seed)
{
    uint64_t x = o * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
    return (uint8_t)(x >> 56 ^ x >> 23);
}

void conf_fill(uint8_t *buf, uint64_t off, uint64_t len, uint32_t seed);

/* remote.c */
/* Open the suite's remote i (c->rem[i]) and make it a peer of c->e. On
 * failure c->err says which side refused and why. */
int conf_remote_open(struct conf *c, int i);
/* Open one more remote into *r, the same way (a child process under
 * --two-process, else an engine in this process), as a peer of group 0 of
 * `local` (which becomes its peer too). r->ops->close() ends it in order. */
int conf_remote_attach(struct conf *c, te_engine *local, struct remote *r);

/* Result of a case. */
#define CONF_PASS 0
#define CONF_FAIL 1
#define CONF_SKIP 2

struct conf_case {
    const char *name;
    const char *what;
    int (*fn)(struct conf *c);
};

extern const struct conf_case conf_cases_xfer[];
extern const struct conf_case conf_cases_misc[];
extern const struct conf_case conf_cases_fault[];
extern const struct conf_case conf_cases_spaces[];
extern const struct conf_case conf_cases_peer[];

/* A case that cannot run says why: conf_skip() records the reason (one
 * line, printed as "SKIP name: reason") and returns CONF_SKIP. */
int conf_skip(struct conf *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* An optional behaviour (one plugin.h allows a plugin to leave out) is
 * missing: conf_note() records it for a "NOTE name: ..." line and returns
 * CONF_PASS, or CONF_FAIL under --strict. */
int conf_note(struct conf *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Failure reporting helpers for cases. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "    FAILED %s:%d: %s: ", __FILE__, __LINE__,      \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            return CONF_FAIL;                                                  \
        }                                                                      \
    } while (0)

#define CHECK_RC(expr)                                                         \
    do {                                                                       \
        long long rc_ = (long long)(expr);                                     \
        CHECK(rc_ >= 0, "%s returned %lld (%s): %s", #expr, rc_,               \
              te_strerror((int)rc_), te_last_error());                         \
    } while (0)

/* Submit and wait for the request's completion (callback-less queue). */
int conf_run(struct conf *c, te_request *r, te_completion *out);
/* Submit, retrying -EAGAIN within the suite's deadline. */
int64_t conf_submit(struct conf *c, te_request *r);
/* Wait for `n` completions from the queue into out (deadline). */
int conf_wait_completions(struct conf *c, te_completion *out, int n);
/* te_submit on an engine of a case's own, retrying a full queue (-EAGAIN)
 * within the suite's deadline. */
int64_t conf_submit_to(te_engine *e, te_request *r);
/* Up to n completions of an engine of a case's own (not c->e) within the
 * suite's deadline; returns how many arrived, or a negative errno. */
int conf_wait_engine(te_engine *e, te_completion *out, int n);
/* Compare remote bytes with the pattern; prints the first mismatch. */
int conf_expect_remote(struct remote *r, uint64_t off, uint64_t len,
                       uint32_t seed, uint64_t pattern_base);
/* Basic request skeleton on group 0. */
te_request conf_req(uint32_t op);
/* Monotonic milliseconds. */
uint64_t conf_now_ms(void);

/* te_engine_create/destroy; for an engine in caller-driven progress
 * (engine.progress = caller) with a thread that progresses it (pump.c). */
int conf_engine_create(const te_config *cfg, te_engine **out);
void conf_engine_destroy(te_engine *e);
/* A fresh imm value per call (distinct across cases). */
uint32_t conf_imm(void);
/* Build the suite's configuration plus extra "section.key=value" settings
 * (NULL-terminated list, may be NULL). NULL on error (message printed). */
te_config *conf_config_with(const struct conf *c, const char *const *extra);

#endif
