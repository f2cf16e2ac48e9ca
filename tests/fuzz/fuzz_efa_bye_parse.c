/*
 * Fuzz target: efa_bye_msg_parse() (plugins/efa/efa_bye_wire.c), the parser
 * of the goodbyes an efa NIC receives from anyone on the fabric.
 *
 * Properties:
 *  - no memory error, no read outside [data, data+size);
 *  - failure: -EPROTO;
 *  - success: the input is exactly sizeof(struct efa_bye_msg) bytes, its
 *    fields in range, and efa_bye_msg_build() of its name and keyed flag
 *    (plus its MAC) gives back exactly the input bytes (one encoding per
 *    message).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "efa_bye_wire.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct efa_bye_msg m, again;
    int rc = efa_bye_msg_parse(data, size, &m);
    if (rc != 0) {
        FUZZ_CHECK(rc == -EPROTO);
        return 0;
    }
    FUZZ_CHECK(size == sizeof(m));
    FUZZ_CHECK(m.magic == EFA_BYE_MAGIC && m.version == EFA_BYE_VERSION);
    FUZZ_CHECK(m.keyed <= 1 && m.raw_len >= 1 &&
               m.raw_len <= EFA_BYE_RAW_MAX);
    FUZZ_CHECK(efa_bye_msg_build(&again, m.raw, m.raw_len, m.keyed) == 0);
    memcpy(again.mac, m.mac, sizeof(again.mac));
    FUZZ_CHECK(memcmp(&again, data, sizeof(again)) == 0);
    return 0;
}
