/* Our shm endpoint names and the removal of dead processes' regions
 * (efa_shm_name.h says why). */
#define _GNU_SOURCE
#include "efa_shm_name.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "efa_proc.h"

#define NAME_PREFIX "te-"

int efa_shm_name_endpoint(struct fid_ep *ep, const struct fi_info *info)
{
    if (!info->fabric_attr || !info->fabric_attr->prov_name ||
        strcmp(info->fabric_attr->prov_name, "shm"))
        return 0;
    static atomic_uint seq;
    uint32_t pid = (uint32_t)getpid();
    /* Fixed width: peers' endpoint names must have one length (the
     * address check and the batched fi_av_insert compare them), and pids,
     * start times and counters of various digit counts did not (a process
     * of pid 9999 could not reach one of pid 10000, nor an engine its
     * process's 11th). */
    char name[48];
    snprintf(name, sizeof(name), NAME_PREFIX "%010u-%016llx-%08u", pid,
             (unsigned long long)efa_proc_start_time(pid),
             atomic_fetch_add(&seq, 1));
    return fi_setname(&ep->fid, name, strlen(name) + 1);
}

int efa_shm_reap_stale(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned pid, n;
        unsigned long long start;
        int end = 0;
        if (sscanf(de->d_name, NAME_PREFIX "%u-%llx-%u%n", &pid, &start, &n,
                   &end) != 3)
            continue;
        /* The region, or its doorbell's files (efa_shm_bell.h). */
        const char *tail = de->d_name + end;
        if (*tail && strcmp(tail, ".bell") && strcmp(tail, ".sock"))
            continue;
        if (!start || efa_proc_start_time(pid) == start)
            continue; /* its process lives (or we cannot tell) */
        char path[300];
        snprintf(path, sizeof(path), "/%s", de->d_name);
        removed += shm_unlink(path) == 0;
    }
    closedir(d);
    return removed;
}

/* "/dev/shm/NAME" for one of our names (NUL-terminated within raw_len),
 * or false. */
static bool region_path(const uint8_t *raw, size_t raw_len, char *path,
                        size_t len)
{
    size_t n = strnlen((const char *)raw, raw_len);
    if (n == raw_len || n < sizeof(NAME_PREFIX) - 1 ||
        memcmp(raw, NAME_PREFIX, sizeof(NAME_PREFIX) - 1) || memchr(raw, '/', n))
        return false;
    return snprintf(path, len, "/dev/shm/%s", (const char *)raw) < (int)len;
}

bool efa_shm_region_gone(const uint8_t *raw, size_t raw_len)
{
    char path[96];
    return region_path(raw, raw_len, path, sizeof(path)) &&
           access(path, F_OK) != 0 && errno == ENOENT;
}

bool efa_shm_region_visible(const uint8_t *raw, size_t raw_len)
{
    char path[96];
    return region_path(raw, raw_len, path, sizeof(path)) &&
           access(path, F_OK) == 0;
}
