/*
 * Fuzz target: te_kv_msg_parse() (src/kv_msg.c), the parser of the
 * messages a prefiller, a source and a decoder receive from their peers
 * (every field is untrusted: docs/kvcache.md "Wire format").
 *
 * Properties checked on every input:
 *  - no memory error (ASan/UBSan), never reads outside [data, data+size);
 *  - failure: -EBADMSG or -EPROTO with a non-empty te_kv_last_error();
 *  - success: every count lies within its array (pages, regions, region
 *    allocations, descriptors and their lengths, the address), and the
 *    message re-encodes within TE_KV_MSG_MAX into bytes that parse again
 *    and encode to the same bytes (encode . parse is stable).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "te/kv.h"
#include "fuzz_check.h"

static te_kv_msg m1, m2; /* ~43 KiB each: not on the stack */
static uint8_t b1[TE_KV_MSG_MAX], b2[TE_KV_MSG_MAX];

static void check_bounds(const te_kv_msg *m)
{
    FUZZ_CHECK(m->type >= TE_KV_MSG_REQUEST && m->type <= TE_KV_MSG_CACHE_DESCS);
    FUZZ_CHECK(m->npages <= TE_KV_MAX_PAGES);
    FUZZ_CHECK(m->desc_len <= TE_DESC_MAX);
    FUZZ_CHECK(m->addr_len <= TE_ADDR_MAX);
    FUZZ_CHECK(m->nregions <= TE_KV_MAX_REGIONS);
    FUZZ_CHECK(m->nallocs <= TE_KV_MAX_ALLOCS);
    FUZZ_CHECK(m->ndescs <= TE_KV_DESCS_PER_MSG);
    for (uint32_t i = 0; i < m->ndescs; i++)
        FUZZ_CHECK(m->desc_lens[i] <= TE_DESC_MAX);
    if (m->type == TE_KV_MSG_CACHE_REQUEST && m->nallocs) {
        for (uint32_t r = 0; r < m->nregions; r++)
            FUZZ_CHECK(m->regions[r].alloc < m->nallocs);
        FUZZ_CHECK(m->hidden_alloc < m->nallocs);
    }
    if (m->type == TE_KV_MSG_CACHE_DESCS)
        FUZZ_CHECK(m->ndescs >= 1 && m->first <= TE_KV_MAX_ALLOCS - m->ndescs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = te_kv_msg_parse(data, size, &m1);
    if (rc != 0) {
        FUZZ_CHECK(rc == -EBADMSG || rc == -EPROTO);
        FUZZ_CHECK(te_kv_last_error()[0] != '\0');
        return 0;
    }
    check_bounds(&m1);
    int n1 = te_kv_msg_encode(&m1, b1, sizeof b1);
    FUZZ_CHECK(n1 > 0 && (size_t)n1 <= sizeof b1);
    FUZZ_CHECK(te_kv_msg_parse(b1, (size_t)n1, &m2) == 0);
    check_bounds(&m2);
    int n2 = te_kv_msg_encode(&m2, b2, sizeof b2);
    FUZZ_CHECK(n2 == n1 && memcmp(b1, b2, (size_t)n1) == 0);
    return 0;
}
