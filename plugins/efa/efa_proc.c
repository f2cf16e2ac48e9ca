/* Process identity: which host (boot id) and which incarnation of a pid
 * (its start time), for same-host liveness and for our shm names. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "efa_proc.h"

uint64_t efa_host_id(void)
{
    char buf[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(buf, sizeof(buf), f))
            buf[0] = 0;
        fclose(f);
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *p = buf; *p && *p != '\n'; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return buf[0] ? h : 0;
}

uint64_t efa_proc_start_time(uint32_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    /* Field 22 (starttime), counted after the ')' that ends comm. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    unsigned long long v = 0;
    int field = 2;
    char *save = NULL; /* peer_add runs on several workers at once */
    for (char *tok = strtok_r(p + 1, " ", &save); tok;
         tok = strtok_r(NULL, " ", &save))
        if (++field == 22) {
            v = strtoull(tok, NULL, 10);
            break;
        }
    return v;
}

bool efa_proc_running(uint64_t our_host, uint64_t host_id, uint32_t pid,
                      uint64_t start_time)
{
    return host_id && host_id == our_host && pid && start_time &&
           efa_proc_start_time(pid) == start_time;
}

bool efa_pidfd_exited(int pidfd)
{
    struct pollfd pf = {.fd = pidfd, .events = POLLIN};
    return pidfd >= 0 && poll(&pf, 1, 0) > 0;
}
