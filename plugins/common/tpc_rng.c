/* Random ids and secrets (tpc_rng.h). */
#include <stdatomic.h>
#include <sys/random.h>
#include <sys/types.h>
#include <unistd.h>

#include "tpc_clock.h"
#include "tpc_rng.h"

void tpc_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t r = getrandom(p + got, len - got, GRND_NONBLOCK);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got < len) {
        /* No entropy yet: mix what we have (see tpc_rng.h). */
        static _Atomic uint64_t ctr;
        for (; got < len; got++) {
            uint64_t x = tpc_now_ns() ^ ((uint64_t)getpid() << 32) ^
                         atomic_fetch_add(&ctr, 0x9e3779b97f4a7c15ull);
            x ^= x >> 29;
            x *= 0xbf58476d1ce4e5b9ull;
            p[got] = (unsigned char)(x >> 56);
        }
    }
}

uint64_t tpc_random64(void)
{
    uint64_t v = 0;
    tpc_random_bytes(&v, sizeof(v));
    return v ? v : 1;
}
