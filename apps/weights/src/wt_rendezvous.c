/*
 * Rendezvous records: how trainers and receivers find each other. A record
 * is a file <dir>/<role>-<rank> holding
 *   "TEWR" | u32 ready_version | u32 imm_base | u32 addr_len | addr |
 *   u32 desc_len | desc (desc_len 0: the descriptors are in the table)
 * written to a temporary name and renamed, so a reader sees a whole record
 * or none. Readers treat the bytes as untrusted (lengths checked, the
 * descriptor parsed by te_desc_parse).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wt_runtime.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double wt_now(void) { return now_s(); }

int wt_publish(const char *dir, const char *role, uint32_t rank,
               uint32_t ready_version, uint32_t imm_base, te_engine *e,
               const te_mr *mr)
{
    uint8_t buf[20 + TE_ADDR_MAX + TE_DESC_MAX];
    size_t alen = TE_ADDR_MAX, dlen = TE_DESC_MAX;
    te_mr_desc d;
    int rc = te_engine_address(e, 0, buf + 16, &alen);
    /* No mr: the entries' descriptors travel in the table (wt_entries.c). */
    if (!mr)
        dlen = 0;
    else if (!rc)
        rc = te_mr_describe(mr, &d);
    if (!rc && mr)
        rc = te_desc_serialize(&d, buf + 20 + alen, &dlen);
    if (rc)
        return wt_fail(rc, "publish %s-%u: %s", role, rank, te_last_error());
    memcpy(buf, "TEWR", 4);
    uint32_t a = (uint32_t)alen, dl = (uint32_t)dlen;
    memcpy(buf + 4, &ready_version, 4);
    memcpy(buf + 8, &imm_base, 4);
    memcpy(buf + 12, &a, 4);
    memcpy(buf + 16 + alen, &dl, 4);
    size_t n = 20 + alen + dlen;
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s-%u", dir, role, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return wt_fail(-errno, "publish %s: %s", tmp, strerror(errno));
    ssize_t w = write(fd, buf, n);
    close(fd);
    if (w != (ssize_t)n || rename(tmp, path)) {
        unlink(tmp);
        return wt_fail(-EIO, "publish %s: cannot write the record", path);
    }
    return 0;
}

int wt_lookup(const char *dir, const char *role, uint32_t rank,
              uint32_t min_version, int timeout_ms, wt_endpoint *out)
{
    return wt_lookup_progress(dir, role, rank, min_version, timeout_ms, out, NULL);
}

int wt_lookup_progress(const char *dir, const char *role, uint32_t rank,
                       uint32_t min_version, int timeout_ms, wt_endpoint *out,
                       te_engine *e)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s-%u", dir, role, rank);
    double deadline = now_s() + timeout_ms / 1000.0;
    const char *why = "no record yet";
    for (;;) {
        uint8_t buf[20 + TE_ADDR_MAX + TE_DESC_MAX + 1];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
        if (fd >= 0)
            close(fd);
        uint32_t ready, base, alen, dlen;
        if (n >= 20 && !memcmp(buf, "TEWR", 4)) {
            memcpy(&ready, buf + 4, 4);
            memcpy(&base, buf + 8, 4);
            memcpy(&alen, buf + 12, 4);
            if (alen > TE_ADDR_MAX || (size_t)n < 20 + (size_t)alen)
                return wt_fail(-EBADMSG, "%s: address length %u out of range", path, alen);
            memcpy(&dlen, buf + 16 + alen, 4);
            if (dlen > TE_DESC_MAX || (size_t)n != 20 + (size_t)alen + dlen)
                return wt_fail(-EBADMSG, "%s: record of %zd bytes, lengths say %u+%u",
                               path, n, alen, dlen);
            if (ready >= min_version) {
                out->ready_version = ready;
                out->imm_base = base;
                out->addr_len = alen;
                memcpy(out->addr, buf + 16, alen);
                memset(&out->desc, 0, sizeof(out->desc));
                if (dlen && te_desc_parse(buf + 20 + alen, dlen, &out->desc))
                    return wt_fail(-EBADMSG, "%s: descriptor: %s", path, te_last_error());
                return 0;
            }
            why = "its record is for an older version";
        } else if (n >= 0) {
            return wt_fail(-EBADMSG, "%s: not a rendezvous record", path);
        }
        if (now_s() > deadline)
            return wt_fail(-ETIMEDOUT, "%s: %s after %d ms (is that rank running?)",
                           path, why, timeout_ms);
        if (!wt_progress_caller(e, 2)) /* between two looks: 2 ms */
            usleep(2000);
    }
}
