/*
 * Writes the seed corpus of fuzz_kv_msg: one valid encoding of each message
 * type (version-1 and version-2 CACHE_REQUESTs, a CACHE_DESCS) into the
 * directory given. Run by hand when the wire format changes:
 *   cc -Iapps/kvcache/include -Iinclude apps/kvcache/fuzz/gen_seeds_kv_msg.c \
 *      apps/kvcache/src/kv_msg.c apps/kvcache/src/kv_error.c -o /tmp/gen && \
 *   /tmp/gen apps/kvcache/fuzz/corpus/kv_msg
 */
#include <stdio.h>
#include <string.h>

#include "te/kv.h"

static te_kv_msg m;
static unsigned char buf[TE_KV_MSG_MAX];

static int put(const char *dir, const char *name)
{
    int n = te_kv_msg_encode(&m, buf, sizeof buf);
    if (n <= 0) {
        fprintf(stderr, "%s: encode failed (%d): %s\n", name, n, te_kv_last_error());
        return 1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, (size_t)n, f) != (size_t)n || fclose(f)) {
        perror(path);
        return 1;
    }
    return 0;
}

static void request_fields(void)
{
    memset(&m, 0, sizeof m);
    m.sender = 0x1122334455667788ull;
    m.request_id = 42;
    m.tokens = 100;
    m.layers = 2;
    m.page_bytes = 4096;
    m.imm = 0x80000001u;
    m.npages = 3;
    for (uint32_t i = 0; i < m.npages; i++)
        m.pages[i] = 7 + i;
    m.hidden_off = 65536;
    m.hidden_bytes = 512;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *d = argv[1];
    int bad = 0;
    request_fields();
    m.type = TE_KV_MSG_REQUEST;
    m.layer_stride = 1 << 20;
    m.desc_len = 40;
    memset(m.desc, 0xd5, m.desc_len);
    bad |= put(d, "request");
    memset(&m, 0, sizeof m);
    m.type = TE_KV_MSG_ACCEPT;
    m.request_id = 42;
    m.expected_imms = 12;
    bad |= put(d, "accept");
    m.type = TE_KV_MSG_REJECT;
    m.status = 22;
    bad |= put(d, "reject");
    m.type = TE_KV_MSG_CANCEL;
    m.status = 0;
    bad |= put(d, "cancel");
    m.type = TE_KV_MSG_CANCELLED;
    bad |= put(d, "cancelled");
    m.type = TE_KV_MSG_LAYER;
    m.status = 1;
    bad |= put(d, "layer");
    memset(&m, 0, sizeof m);
    m.type = TE_KV_MSG_HELLO;
    m.sender = 9;
    m.addr_len = 24;
    memset(m.addr, 0xad, m.addr_len);
    bad |= put(d, "hello");
    /* CACHE_REQUEST, version 1 (one allocation, its descriptor inline). */
    request_fields();
    m.type = TE_KV_MSG_CACHE_REQUEST;
    m.kv_factor = 2;
    m.elem_bytes = 2;
    m.tokens_per_page = 16;
    m.flags = TE_KV_REQ_LAYER_NOTES;
    m.nregions = 4;
    for (uint32_t r = 0; r < m.nregions; r++)
        m.regions[r] = (te_kv_region){r * 65536ull, 4096, 0, 0};
    m.desc_len = 40;
    memset(m.desc, 0xd5, m.desc_len);
    bad |= put(d, "cache_request_v1");
    /* Version 2: regions in three allocations, no inline descriptor. */
    m.desc_len = 0;
    m.layout = 1;
    m.nallocs = 3;
    for (uint32_t r = 0; r < m.nregions; r++)
        m.regions[r].alloc = r % 2;
    m.hidden_alloc = 2;
    bad |= put(d, "cache_request_v2");
    memset(&m, 0, sizeof m);
    m.type = TE_KV_MSG_CACHE_DESCS;
    m.sender = 9;
    m.layout = 1;
    m.nallocs = 3;
    m.first = 0;
    m.ndescs = 3;
    for (uint32_t i = 0; i < m.ndescs; i++) {
        m.desc_lens[i] = 40 + i;
        memset(m.descs[i], 0xd0 + (int)i, m.desc_lens[i]);
    }
    bad |= put(d, "cache_descs");
    return bad;
}
