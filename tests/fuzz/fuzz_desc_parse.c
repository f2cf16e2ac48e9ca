/*
 * Fuzz target: te_desc_parse() (core/wire.c), the parser of memory
 * descriptors that applications receive from remote peers.
 *
 * Properties checked on every input:
 *  - no memory error (ASan/UBSan), never reads outside [data, data+size);
 *  - failure: a negative errno among the documented ones, a non-empty
 *    te_last_error() message, and *out left untouched ("changes nothing");
 *  - success: the descriptor is well formed (1..TE_MAX_NICS NICs, known
 *    access bits) and serializes back to exactly the same bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    te_mr_desc d, before;
    memset(&d, 0xa5, sizeof d);
    before = d;
    /* libFuzzer hands over a buffer of exactly size bytes: any over-read is
     * caught by ASan. The replay driver does the same. */
    int rc = te_desc_parse(data, size, &d);
    if (rc != 0) {
        FUZZ_CHECK(rc == -EBADMSG || rc == -EPROTO || rc == -EINVAL);
        FUZZ_CHECK(te_last_error()[0] != '\0');
        FUZZ_CHECK(memcmp(&d, &before, sizeof d) == 0);
        return 0;
    }
    FUZZ_CHECK(d.nic_count >= 1 && d.nic_count <= TE_MAX_NICS);
    FUZZ_CHECK((d.access & ~(uint32_t)(TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ)) == 0);
    uint8_t buf[TE_DESC_MAX];
    size_t len = sizeof buf;
    FUZZ_CHECK(te_desc_serialize(&d, buf, &len) == 0);
    FUZZ_CHECK(len == size && memcmp(buf, data, size) == 0);
    /* Too small a buffer: -ENOSPC and the size needed, nothing written. */
    uint8_t small[TE_DESC_MAX];
    memset(small, 0x5a, sizeof small);
    size_t slen = len - 1;
    FUZZ_CHECK(te_desc_serialize(&d, small, &slen) == -ENOSPC && slen == len);
    for (size_t i = 0; i < sizeof small; i++)
        FUZZ_CHECK(small[i] == 0x5a);
    return 0;
}
