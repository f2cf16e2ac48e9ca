/*
 * process_vm_readv/process_vm_writev for programs run under qemu-user, which
 * does not emulate these two system calls (qemu 7.2 answers ENOSYS). Test
 * harness only: scripts/test-arm64.sh builds this for aarch64 and preloads
 * it into the emulated tests (LD_PRELOAD through QEMU_SET_ENV), so the
 * loopback plugin's cross-process path (plugins/loopback/lb_engine.c) runs
 * on arm64 code; docs/arm64.md. Never linked into the library.
 *
 * The real system call is tried first; only when it answers ENOSYS are the
 * bytes moved through /proc/PID/mem (the same kernel access check as
 * process_vm_*: PTRACE_MODE_ATTACH_REALCREDS). That works because qemu-user
 * maps a 64-bit guest on a 64-bit host at guest address == host address
 * (guest_base 0); were it not so, the copies would land elsewhere and the
 * tests, which verify every byte, would fail. One difference remains:
 * /proc/PID/mem writes into read-only pages that process_vm_writev refuses
 * with EFAULT (no test of ours relies on that refusal).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static ssize_t via_proc_mem(pid_t pid, const struct iovec *l, unsigned long ln,
                            const struct iovec *r, unsigned long rn, int wr)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    int fd = open(path, (wr ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        errno = errno == ENOENT ? ESRCH : errno;
        return -1;
    }
    ssize_t total = 0;
    unsigned long li = 0, ri = 0;
    size_t lo = 0, ro = 0;
    while (li < ln && ri < rn) {
        size_t n = l[li].iov_len - lo, m = r[ri].iov_len - ro;
        if (n > m)
            n = m;
        if (n) {
            char *lp = (char *)l[li].iov_base + lo;
            off_t at = (off_t)((uintptr_t)r[ri].iov_base + ro);
            ssize_t k = wr ? pwrite(fd, lp, n, at) : pread(fd, lp, n, at);
            if (k <= 0) {
                /* EIO: an unmapped remote address (process_vm_*: EFAULT);
                 * 0: the process is exiting. */
                int e = k < 0 ? (errno == EIO ? EFAULT : errno) : ESRCH;
                close(fd);
                if (total)
                    return total;
                errno = e;
                return -1;
            }
            total += k;
            lo += (size_t)k;
            ro += (size_t)k;
            if ((size_t)k < n)
                break;
        }
        if (lo == l[li].iov_len) {
            li++;
            lo = 0;
        }
        if (ro == r[ri].iov_len) {
            ri++;
            ro = 0;
        }
    }
    close(fd);
    return total;
}

static ssize_t pvm(long nr, pid_t pid, const struct iovec *l, unsigned long ln,
                   const struct iovec *r, unsigned long rn, unsigned long flags,
                   int wr)
{
    long rc = syscall(nr, pid, l, ln, r, rn, flags);
    if (rc >= 0 || errno != ENOSYS)
        return (ssize_t)rc;
    if (flags) {
        errno = EINVAL;
        return -1;
    }
    return via_proc_mem(pid, l, ln, r, rn, wr);
}

ssize_t process_vm_readv(pid_t pid, const struct iovec *l, unsigned long ln,
                         const struct iovec *r, unsigned long rn,
                         unsigned long flags)
{
    return pvm(SYS_process_vm_readv, pid, l, ln, r, rn, flags, 0);
}

ssize_t process_vm_writev(pid_t pid, const struct iovec *l, unsigned long ln,
                          const struct iovec *r, unsigned long rn,
                          unsigned long flags)
{
    return pvm(SYS_process_vm_writev, pid, l, ln, r, rn, flags, 1);
}
