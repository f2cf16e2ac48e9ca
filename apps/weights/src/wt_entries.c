/*
 * Registration of caller-owned memory, one registration per entry. The
 * trainer's tensor parts and the engine's parameter slices are separate
 * allocations of the framework (a torch tensor each), so there is no one
 * buffer to register; overlapping registrations are allowed by the core,
 * so entries inside one buffer (the safetensors convenience) work too.
 * An entry is re-registered only when its range changes: a framework that
 * keeps its tensors in place pays for registration once.
 *
 * Tables: "TEWT" | u32 version | u32 n | n x (u32 len | descriptor bytes),
 * written to a temporary name and renamed (a reader sees a whole table or
 * none), read as untrusted bytes.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wt_entries.h"

int wt_entries_init(wt_entries *s, te_engine *e, uint32_t n, uint32_t access)
{
    *s = (wt_entries){.e = e, .n = n, .access = access};
    s->v = calloc(n + 1, sizeof(wt_entry));
    return s->v ? 0 : wt_fail(-ENOMEM, "out of memory");
}

int wt_entries_set(wt_entries *s, uint32_t i, void *addr, uint64_t len,
                   uint32_t mem, const char *what)
{
    wt_entry *x = &s->v[i];
    if (x->mr && x->addr == addr && x->len == len && x->mem == mem)
        return 0;
    if (!x->mr && !len) {
        *x = (wt_entry){addr, 0, mem, NULL};
        return 0;
    }
    te_mr *mr = NULL;
    if (len) {
        int rc = te_mr_reg(s->e, 0, addr, len, s->access, mem, &mr);
        if (rc)
            return wt_fail(rc, "%s: cannot register [%p, +%llu): %s", what, addr,
                           (unsigned long long)len, te_last_error());
        s->registrations++;
    }
    if (x->mr && te_mr_dereg(s->e, x->mr))
        return wt_fail(-EBUSY, "%s: its previous registration is still in use "
                       "(%s)", what, te_last_error());
    *x = (wt_entry){addr, len, mem, mr};
    return 0;
}

int wt_entries_revoke(wt_entries *s, char *why, size_t len)
{
    int first = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        int rc = s->v[i].mr ? te_mr_revoke(s->e, s->v[i].mr, NULL) : 0;
        if (rc && !first) {
            first = rc;
            snprintf(why, len, "%s", te_last_error());
        }
    }
    return first;
}

int wt_entries_release(wt_entries *s)
{
    int first = 0;
    for (uint32_t i = 0; s->v && i < s->n; i++) {
        if (!s->v[i].mr)
            continue;
        int rc = te_mr_dereg(s->e, s->v[i].mr);
        if (rc == -EBUSY && !first)
            first = rc;
        if (rc != -EBUSY)
            s->v[i].mr = NULL;
    }
    if (!first) {
        free(s->v);
        s->v = NULL;
    }
    return first;
}

int wt_entries_cover(const wt_entries *s, const void *p, uint64_t len)
{
    const uint8_t *a = p;
    for (uint32_t i = 0; i < s->n; i++) {
        const uint8_t *b = s->v[i].addr;
        if (s->v[i].len && a >= b && a + len <= b + s->v[i].len)
            return 1;
    }
    return 0;
}

static void path_of(char *out, size_t n, const char *dir, const char *role,
                    uint32_t rank)
{
    snprintf(out, n, "%s/%s-%u.table", dir, role, rank);
}

int wt_table_publish(const char *dir, const char *role, uint32_t rank,
                     uint32_t version, const wt_entries *s)
{
    size_t cap = 12 + (size_t)s->n * (4 + TE_DESC_MAX), n = 12;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return wt_fail(-ENOMEM, "out of memory");
    memcpy(buf, "TEWT", 4);
    memcpy(buf + 4, &version, 4);
    memcpy(buf + 8, &s->n, 4);
    int rc = 0;
    for (uint32_t i = 0; i < s->n && !rc; i++) {
        size_t dlen = TE_DESC_MAX;
        te_mr_desc d;
        if (!s->v[i].mr)
            dlen = 0;
        else if ((rc = te_mr_describe(s->v[i].mr, &d)) ||
                 (rc = te_desc_serialize(&d, buf + n + 4, &dlen)))
            rc = wt_fail(rc, "table %s-%u: %s", role, rank, te_last_error());
        uint32_t d32 = (uint32_t)dlen;
        memcpy(buf + n, &d32, 4);
        n += 4 + dlen;
    }
    char path[4096], tmp[4200];
    path_of(path, sizeof(path), dir, role, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = rc ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (!rc && fd < 0)
        rc = wt_fail(-errno, "publish %s: %s", tmp, strerror(errno));
    if (fd >= 0) {
        ssize_t w = write(fd, buf, n);
        close(fd);
        if (w != (ssize_t)n || rename(tmp, path)) {
            unlink(tmp);
            rc = wt_fail(-EIO, "publish %s: cannot write the table", path);
        }
    }
    free(buf);
    return rc;
}

int wt_table_read(const char *dir, const char *role, uint32_t rank,
                  uint32_t version, uint32_t n, te_mr_desc *out)
{
    char path[4096];
    path_of(path, sizeof(path), dir, role, rank);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        if (fd >= 0)
            close(fd);
        return wt_fail(-ENOENT, "%s: no table (%s)", path, strerror(errno));
    }
    size_t len = (size_t)st.st_size;
    uint8_t *buf = malloc(len + 1);
    ssize_t got = buf ? read(fd, buf, len) : -1;
    close(fd);
    int rc = 0;
    uint32_t v, cnt;
    if (got != (ssize_t)len || len < 12 || memcmp(buf, "TEWT", 4))
        rc = wt_fail(-EBADMSG, "%s: not a descriptor table", path);
    if (!rc) {
        memcpy(&v, buf + 4, 4);
        memcpy(&cnt, buf + 8, 4);
        if (v != version)
            rc = wt_fail(-ESTALE, "%s: table of state %u, expected %u", path, v,
                         version);
        else if (cnt != n)
            rc = wt_fail(-EBADMSG, "%s: %u entries, expected %u", path, cnt, n);
    }
    size_t off = 12;
    for (uint32_t i = 0; i < n && !rc; i++) {
        uint32_t dlen = 0;
        if (off + 4 > len || (memcpy(&dlen, buf + off, 4), dlen > len - off - 4))
            rc = wt_fail(-EBADMSG, "%s: entry %u truncated", path, i);
        else if (!dlen)
            memset(&out[i], 0, sizeof(out[i]));
        else if (te_desc_parse(buf + off + 4, dlen, &out[i]))
            rc = wt_fail(-EBADMSG, "%s: entry %u: %s", path, i, te_last_error());
        off += 4 + (rc ? 0 : dlen);
    }
    free(buf);
    return rc;
}
