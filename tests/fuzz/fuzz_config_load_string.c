/*
 * Fuzz target: INI configuration parsing (core/config.c over inih):
 * te_config_load_string(), te_config_load_file() on the same bytes, and the
 * typed getters and validators on whatever was loaded.
 *
 * Properties:
 *  - no memory error, no leak (LeakSanitizer), every loop terminates;
 *  - a failed load returns -EINVAL (or -ENOMEM/-EIO), names the cause in
 *    te_last_error(), and leaves the configuration exactly as it was;
 *  - loading the text from a string and from a file gives the same result
 *    and the same entries (unless it holds a NUL byte: the string stops
 *    there, the file load must refuse the line);
 *  - getters and validators return 0 or -EINVAL with a message;
 *  - te_config_clone() copies every entry.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "te/te.h"
#include "config.h"
#include "fuzz_check.h"

/* A flat image of the entries (section, key, value), for comparisons. */
struct snap {
    char *buf;
    size_t len, cap;
    size_t n;
};

static void snap_add(struct snap *s, const char *str)
{
    size_t l = strlen(str) + 1;
    if (s->len + l > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + l)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        FUZZ_CHECK(nb != NULL);
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, str, l);
    s->len += l;
}

static void snap_fn(const char *section, const char *key, const char *value,
                    void *arg)
{
    struct snap *s = arg;
    snap_add(s, section);
    snap_add(s, key);
    snap_add(s, value);
    s->n++;
}

static struct snap snap_of(const te_config *cfg)
{
    struct snap s = {0};
    te_config_foreach(cfg, snap_fn, &s);
    return s;
}

static int snap_eq(const struct snap *a, const struct snap *b)
{
    return a->n == b->n && a->len == b->len &&
           (a->len == 0 || memcmp(a->buf, b->buf, a->len) == 0);
}

static te_config *base_config(void)
{
    te_config *cfg = te_config_new();
    FUZZ_CHECK(cfg != NULL);
    FUZZ_CHECK(te_config_set(cfg, "engine", "plugin", "loopback") == 0);
    FUZZ_CHECK(te_config_set(cfg, "loopback", "devices", "4") == 0);
    return cfg;
}

/* Exercise every getter on every stored key. */
static void getters_fn(const char *section, const char *key, const char *value,
                       void *arg)
{
    const te_config *cfg = arg;
    uint64_t u;
    int b, rc;
    double d;
    char origin[600];

    FUZZ_CHECK(te_config_get(cfg, section, key) != NULL);
    FUZZ_CHECK(te_config_get_stored(cfg, section, key) != NULL);
    FUZZ_CHECK(te_config_origin(cfg, section, key, origin, sizeof origin) != NULL);
    FUZZ_CHECK(te_config_get_str(cfg, section, key, NULL) != NULL);
    rc = te_config_get_u64(cfg, section, key, 7, 0, UINT64_MAX, &u);
    FUZZ_CHECK(rc == 0 || (rc == -EINVAL && te_last_error()[0]));
    rc = te_config_get_u64(cfg, section, key, 7, 16, 4096, &u);
    FUZZ_CHECK(rc == 0 ? (u >= 16 && u <= 4096) : (rc == -EINVAL && te_last_error()[0]));
    rc = te_config_get_bool(cfg, section, key, 0, &b);
    FUZZ_CHECK(rc == 0 ? (b == 0 || b == 1) : (rc == -EINVAL && te_last_error()[0]));
    rc = te_config_get_double(cfg, section, key, 0.5, -1e6, 1e6, &d);
    FUZZ_CHECK(rc == 0 ? (d >= -1e6 && d <= 1e6) : (rc == -EINVAL && te_last_error()[0]));
    char env[200];
    rc = te_config_env_name(section, key, env, sizeof env);
    FUZZ_CHECK(rc == 0 || rc == -ENAMETOOLONG);
    (void)value;
}

static int load_via_file(te_config *cfg, const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-config", MFD_CLOEXEC);
    FUZZ_CHECK(fd >= 0);
    size_t off = 0;
    while (off < size) {
        ssize_t k = write(fd, data + off, size - off);
        FUZZ_CHECK(k > 0);
        off += (size_t)k;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rc = te_config_load_file(cfg, path);
    close(fd);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    int has_nul = memchr(data, 0, size) != NULL;

    /* 1. From a string. */
    te_config *cfg = base_config();
    struct snap s0 = snap_of(cfg);
    int rc_s = te_config_load_string(cfg, text);
    struct snap s1 = snap_of(cfg);
    if (rc_s != 0) {
        FUZZ_CHECK(rc_s == -EINVAL || rc_s == -ENOMEM || rc_s == -EIO);
        FUZZ_CHECK(te_last_error()[0] != '\0');
        FUZZ_CHECK(snap_eq(&s0, &s1));
    } else {
        te_config_foreach(cfg, getters_fn, cfg);
        static const char *const sections[] = {"engine", "loopback", NULL};
        int rc = te_config_validate_sections(cfg, sections);
        FUZZ_CHECK(rc == 0 || (rc == -EINVAL && te_last_error()[0]));
        rc = te_config_validate_section(cfg, "engine", te_engine_keys);
        FUZZ_CHECK(rc == 0 || (rc == -EINVAL && te_last_error()[0]));
        static const struct te_config_key none[] = {{NULL, NULL, NULL}};
        rc = te_config_validate_section(cfg, "loopback", none);
        FUZZ_CHECK(rc == 0 || (rc == -EINVAL && te_last_error()[0]));
        te_config *c2 = te_config_clone(cfg);
        FUZZ_CHECK(c2 != NULL);
        struct snap s2 = snap_of(c2);
        FUZZ_CHECK(snap_eq(&s1, &s2));
        free(s2.buf);
        te_config_free(c2);
    }

    /* 2. The same bytes from a file. */
    te_config *cf = base_config();
    int rc_f = load_via_file(cf, data, size);
    struct snap sf = snap_of(cf);
    if (rc_f != 0) {
        FUZZ_CHECK(rc_f == -EINVAL || rc_f == -ENOMEM || rc_f == -EIO);
        FUZZ_CHECK(te_last_error()[0] != '\0');
        FUZZ_CHECK(snap_eq(&s0, &sf));
    }
    if (!has_nul) {
        FUZZ_CHECK(rc_f == rc_s);
        FUZZ_CHECK(snap_eq(&s1, &sf));
    } else {
        /* A NUL byte ends the string there; the file load refuses it unless
         * inih stopped reading earlier (a syntax error before it). */
        FUZZ_CHECK(rc_f != 0);
    }
    free(sf.buf);
    te_config_free(cf);

    free(s0.buf);
    free(s1.buf);
    te_config_free(cfg);
    free(text);
    return 0;
}
