/*
 * Small-file readers for sysfs and fixture trees (see sysfs_util.h).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sysfs_util.h"

void te_sysfs_warn(struct te_sysfs_log *log, const char *fmt, ...)
{
    if (!log)
        return;
    if (*log->n >= log->cap) {
        (*log->dropped)++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log->msg[*log->n], sizeof(log->msg[0]), fmt, ap);
    va_end(ap);
    (*log->n)++;
}

int te_sysfs_path(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

int te_sysfs_read(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    for (;;) {
        if (got + 1 >= len) {
            /* Full buffer: fine only if the file ends here. */
            char c;
            ssize_t r = read(fd, &c, 1);
            if (r > 0) {
                close(fd);
                return -EFBIG;
            }
            break;
        }
        ssize_t r = read(fd, buf + got, len - 1 - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            close(fd);
            return e;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    while (got > 0 && isspace((unsigned char)buf[got - 1]))
        got--;
    buf[got] = '\0';
    if (memchr(buf, '\0', got))
        return -EINVAL; /* binary junk */
    return (int)got;
}

int te_sysfs_read_long(struct te_sysfs_log *log, const char *path, int base,
                       long *out)
{
    char buf[64];
    int n = te_sysfs_read(path, buf, sizeof(buf));
    if (n == -ENOENT || n == -ENOTDIR || n == 0)
        return 0;
    if (n < 0) {
        te_sysfs_warn(log, "%s: cannot read: %s", path, strerror(-n));
        return -1;
    }
    const char *p = buf;
    while (isspace((unsigned char)*p))
        p++;
    int neg = 0;
    if (*p == '-' && base == 10) {
        neg = 1;
        p++;
    }
    if (base == 16 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        p += 2;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, base);
    if (end == p || *end != '\0' || errno || !isxdigit((unsigned char)*p) ||
        v > (unsigned long long)0x7fffffffffffffffll) {
        te_sysfs_warn(log, "%s: expected %s number, got \"%.40s\"", path,
                      base == 16 ? "a hexadecimal" : "a decimal", buf);
        return -1;
    }
    *out = neg ? -(long)v : (long)v;
    return 1;
}

int te_cpulist_parse(const char *text, struct te_topo_cpuset *out,
                     int *beyond_max)
{
    memset(out, 0, sizeof(*out));
    if (beyond_max)
        *beyond_max = 0;
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        return 0;
    for (;;) {
        if (!isdigit((unsigned char)*p))
            return -1;
        char *end;
        long a = strtol(p, &end, 10), b = a;
        p = end;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p))
                return -1;
            b = strtol(p, &end, 10);
            p = end;
        }
        if (b < a || a < 0 || b > 1000000)
            return -1;
        for (long c = a; c <= b; c++) {
            if (c < TE_TOPO_MAX_CPUS)
                te_topo_cpuset_add(out, (int)c);
            else if (beyond_max)
                (*beyond_max)++;
        }
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            return 0;
        if (*p != ',')
            return -1;
        p++;
    }
}

int te_sysfs_read_cpulist(struct te_sysfs_log *log, const char *path,
                          struct te_topo_cpuset *out)
{
    char buf[4096];
    memset(out, 0, sizeof(*out));
    int n = te_sysfs_read(path, buf, sizeof(buf));
    if (n == -ENOENT || n == -ENOTDIR)
        return 0;
    if (n < 0) {
        te_sysfs_warn(log, "%s: cannot read: %s", path, strerror(-n));
        return -1;
    }
    int beyond = 0;
    if (te_cpulist_parse(buf, out, &beyond)) {
        te_sysfs_warn(log, "%s: expected a CPU list such as \"0-3,8\", got "
                      "\"%.40s\"", path, buf);
        memset(out, 0, sizeof(*out));
        return -1;
    }
    if (beyond)
        te_sysfs_warn(log, "%s: %d CPUs numbered %d or more ignored", path,
                      beyond, TE_TOPO_MAX_CPUS);
    return 1;
}
