/*
 * Fuzz target: te_wire_addr_decode() (core/wire.c), the parser of engine
 * (group) addresses that te_peer_add() feeds with untrusted bytes.
 *
 * Properties:
 *  - no memory error, no read outside [data, data+size);
 *  - failure: -EBADMSG/-EPROTO/-EINVAL, a message, *out untouched;
 *  - success: a well-formed address (printable NUL-terminated transport
 *    name, 1..TE_MAX_NICS NICs of 1..TE_PLUGIN_MAX_ADDR_LEN bytes) that
 *    encodes back to exactly the input bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "te/te.h"
#include "wire.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct te_group_addr a, before;
    memset(&a, 0xa5, sizeof a);
    before = a;
    int rc = te_wire_addr_decode(data, size, &a);
    if (rc != 0) {
        FUZZ_CHECK(rc == -EBADMSG || rc == -EPROTO || rc == -EINVAL);
        FUZZ_CHECK(te_last_error()[0] != '\0');
        FUZZ_CHECK(memcmp(&a, &before, sizeof a) == 0);
        return 0;
    }
    size_t nl = strnlen(a.transport, sizeof a.transport);
    FUZZ_CHECK(nl >= 1 && nl < sizeof a.transport);
    for (size_t i = 0; i < nl; i++)
        FUZZ_CHECK(a.transport[i] > 0x20 && a.transport[i] < 0x7f);
    FUZZ_CHECK(a.nic_count >= 1 && a.nic_count <= TE_MAX_NICS);
    for (uint32_t i = 0; i < a.nic_count; i++)
        FUZZ_CHECK(a.nic_addr_len[i] >= 1 &&
                   a.nic_addr_len[i] <= TE_PLUGIN_MAX_ADDR_LEN);
    static uint8_t buf[TE_ADDR_MAX];
    size_t len = sizeof buf;
    FUZZ_CHECK(te_wire_addr_encode(&a, buf, &len) == 0);
    FUZZ_CHECK(len == size && memcmp(buf, data, size) == 0);
    /* Decoding the re-encoded bytes gives the same address. */
    static struct te_group_addr b;
    FUZZ_CHECK(te_wire_addr_decode(buf, len, &b) == 0);
    FUZZ_CHECK(memcmp(&a, &b, sizeof a) == 0);
    return 0;
}
