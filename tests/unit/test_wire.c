/* Unit tests of core/wire.c: addresses and memory descriptors on the wire. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "te_error.h"
#include "wire.h"
#include "te_test.h"

#define ck_assert_msg_has(needle)                                              \
    ck_assert_msg(strstr(te_last_error(), (needle)) != NULL,                   \
                  "message \"%s\" lacks \"%s\"", te_last_error(), (needle))

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

/* Rewrite total_len and checksum after crafting a body by hand. */
static void resign(uint8_t *b, size_t len)
{
    put16(b + 6, (uint16_t)len);
    put32(b + 8, te_fnv1a32(b + 12, len - 12));
}

static te_mr_desc make_desc(uint32_t nics)
{
    te_mr_desc d;
    memset(&d, 0xa5, sizeof d); /* unused entries hold junk */
    d.addr = 0x0123456789abcdefull;
    d.len = 0xfedcba9876543210ull;
    d.access = TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ;
    d.nic_count = nics;
    for (uint32_t i = 0; i < nics; i++) {
        d.nic[i].rkey = 0x1000 + i;
        d.nic[i].remote_base = UINT64_MAX - i;
    }
    return d;
}

static void same_desc(const te_mr_desc *a, const te_mr_desc *b)
{
    ck_assert_uint_eq(a->addr, b->addr);
    ck_assert_uint_eq(a->len, b->len);
    ck_assert_uint_eq(a->access, b->access);
    ck_assert_uint_eq(a->nic_count, b->nic_count);
    for (uint32_t i = 0; i < a->nic_count; i++) {
        ck_assert_uint_eq(a->nic[i].rkey, b->nic[i].rkey);
        ck_assert_uint_eq(a->nic[i].remote_base, b->nic[i].remote_base);
    }
}

static struct te_group_addr make_addr(uint32_t nics, uint16_t alen,
                                      const char *name)
{
    struct te_group_addr a;
    memset(&a, 0, sizeof a);
    snprintf(a.transport, sizeof a.transport, "%s", name);
    a.engine_id = 0x8877665544332211ull;
    a.group = 0xdeadbeef;
    a.nic_count = nics;
    for (uint32_t i = 0; i < nics; i++) {
        a.nic_addr_len[i] = (uint16_t)(alen ? alen : 1 + (i * 37) % 128);
        for (unsigned k = 0; k < a.nic_addr_len[i]; k++)
            a.nic_addr[i][k] = (uint8_t)(i * 31 + k);
    }
    return a;
}

static void same_addr(const struct te_group_addr *a, const struct te_group_addr *b)
{
    ck_assert_str_eq(a->transport, b->transport);
    ck_assert_uint_eq(a->engine_id, b->engine_id);
    ck_assert_uint_eq(a->group, b->group);
    ck_assert_uint_eq(a->nic_count, b->nic_count);
    for (uint32_t i = 0; i < a->nic_count; i++) {
        ck_assert_uint_eq(a->nic_addr_len[i], b->nic_addr_len[i]);
        ck_assert(memcmp(a->nic_addr[i], b->nic_addr[i], a->nic_addr_len[i]) == 0);
    }
}

/* ------------------------------------------------------------- FNV */

START_TEST(fnv_vectors)
{
    ck_assert_uint_eq(te_fnv1a32("", 0), 0x811c9dc5u);
    ck_assert_uint_eq(te_fnv1a32("a", 1), 0xe40c292cu);
    ck_assert_uint_eq(te_fnv1a32("foobar", 6), 0xbf9cf968u);
}
END_TEST

/* ------------------------------------------------------- descriptors */

START_TEST(desc_layout)
{
    te_mr_desc d = make_desc(1);
    uint8_t b[TE_DESC_MAX];
    size_t len = sizeof b;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
    ck_assert_uint_eq(len, 48);
    static const uint8_t want[48] = {
        0x54, 0x45, 0x44, 0x31, /* "TED1" */
        0x01, 0x00,             /* version 1 */
        0x30, 0x00,             /* total_len 48 */
        0, 0, 0, 0,             /* checksum, checked below */
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, /* addr */
        0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, /* len */
        0x03, 0x00,             /* access */
        0x01, 0x00,             /* nic_count */
        0x00, 0x10, 0, 0, 0, 0, 0, 0,                   /* rkey */
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* remote_base */
    };
    ck_assert(memcmp(b, want, 8) == 0);
    ck_assert(memcmp(b + 12, want + 12, 36) == 0);
    uint32_t sum = te_fnv1a32(b + 12, 36);
    ck_assert_uint_eq(b[8] | b[9] << 8 | b[10] << 16 | (uint32_t)b[11] << 24, sum);
}
END_TEST

START_TEST(desc_round_trip)
{
    for (uint32_t n = 1; n <= TE_MAX_NICS; n++) {
        te_mr_desc d = make_desc(n), p;
        uint8_t b[TE_DESC_MAX];
        size_t len = sizeof b;
        ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
        ck_assert_uint_eq(len, 32 + 16 * n);
        memset(&p, 0x5a, sizeof p);
        ck_assert_int_eq(te_desc_parse(b, len, &p), 0);
        ck_assert_str_eq(te_last_error(), "");
        same_desc(&d, &p);
        for (uint32_t i = n; i < TE_MAX_NICS; i++) /* unused entries zeroed */
            ck_assert_uint_eq(p.nic[i].rkey | p.nic[i].remote_base, 0);
    }
    /* The largest descriptor fills TE_DESC_MAX exactly. */
    te_mr_desc d = make_desc(TE_MAX_NICS);
    d.access = 0;
    d.addr = d.len = UINT64_MAX;
    uint8_t b[TE_DESC_MAX];
    size_t len = sizeof b;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
    ck_assert_uint_eq(len, TE_DESC_MAX);
    te_mr_desc p;
    ck_assert_int_eq(te_desc_parse(b, len, &p), 0);
    same_desc(&d, &p);
}
END_TEST

START_TEST(desc_enospc)
{
    te_mr_desc d = make_desc(2);
    uint8_t b[TE_DESC_MAX];
    size_t len = 63;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), -ENOSPC);
    ck_assert_uint_eq(len, 64);
    ck_assert_str_eq(te_last_error(),
                     "descriptor buffer too small: 63 bytes, 64 needed");
    len = 0;
    ck_assert_int_eq(te_desc_serialize(&d, NULL, &len), -ENOSPC);
    ck_assert_uint_eq(len, 64);
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
    ck_assert_uint_eq(len, 64);
    ck_assert_int_eq(te_desc_serialize(&d, b, NULL), -EINVAL);
    ck_assert_int_eq(te_desc_serialize(NULL, b, &len), -EINVAL);
}
END_TEST

START_TEST(desc_serialize_rejects)
{
    uint8_t b[TE_DESC_MAX];
    size_t len = sizeof b;
    te_mr_desc d = make_desc(1);
    d.nic_count = 0;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), -EINVAL);
    ck_assert_str_eq(te_last_error(), "descriptor NIC count 0 out of range 1..16");
    d.nic_count = TE_MAX_NICS + 1;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), -EINVAL);
    d = make_desc(1);
    d.access = 0x10;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), -EINVAL);
    ck_assert_msg_has("unknown bits");
}
END_TEST

START_TEST(desc_truncations)
{
    te_mr_desc d = make_desc(3), p;
    uint8_t b[TE_DESC_MAX];
    size_t len = sizeof b;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
    for (size_t l = 0; l < len; l++) {
        /* Copy to an exact-size heap block so a read past it is caught. */
        uint8_t *c = malloc(l ? l : 1);
        memcpy(c, b, l);
        int rc = te_desc_parse(c, l, &p);
        ck_assert_msg(rc < 0, "length %zu accepted", l);
        if (l == 0)
            ck_assert_int_eq(rc, -EINVAL);
        else
            ck_assert_int_eq(rc, -EBADMSG);
        free(c);
    }
    ck_assert_int_eq(te_desc_parse(b, 0, &p), -EINVAL);
    ck_assert_str_eq(te_last_error(), "empty descriptor (0 bytes)");
    ck_assert_int_eq(te_desc_parse(b, 7, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "descriptor truncated: 7 of 12 header bytes");
    ck_assert_int_eq(te_desc_parse(b, 12, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "descriptor truncated: 12 of 80 bytes");
    ck_assert_int_eq(te_desc_parse(NULL, 12, &p), -EINVAL);
    ck_assert_int_eq(te_desc_parse(b, len, NULL), -EINVAL);
}
END_TEST

START_TEST(desc_trailing_bytes)
{
    te_mr_desc d = make_desc(1), p;
    uint8_t b[TE_DESC_MAX + 8];
    size_t len = sizeof b;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
    ck_assert_int_eq(te_desc_parse(b, len + 4, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(),
                     "descriptor has 4 trailing bytes after its 48-byte length "
                     "(52 bytes given)");
}
END_TEST

START_TEST(desc_every_byte_corruption)
{
    static const uint8_t flips[] = {0x01, 0x80, 0xff, 0x10};
    for (uint32_t n = 1; n <= TE_MAX_NICS; n += 15) {
        te_mr_desc d = make_desc(n), p;
        uint8_t b[TE_DESC_MAX];
        size_t len = sizeof b;
        ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
        for (size_t i = 0; i < len; i++)
            for (size_t f = 0; f < sizeof flips; f++) {
                uint8_t *c = malloc(len);
                memcpy(c, b, len);
                c[i] ^= flips[f];
                memset(&p, 0x33, sizeof p);
                int rc = te_desc_parse(c, len, &p);
                ck_assert_msg(rc < 0, "flip 0x%02x at byte %zu accepted", flips[f], i);
                if (i >= TE_WIRE_HEADER_LEN || (i >= 8 && i < 12))
                    ck_assert_msg(rc == -EBADMSG, "byte %zu: rc %d", i, rc);
                ck_assert(te_last_error()[0] != '\0');
                ck_assert_uint_eq(p.addr, 0x3333333333333333ull); /* untouched */
                free(c);
            }
    }
}
END_TEST

START_TEST(desc_version_and_magic)
{
    te_mr_desc d = make_desc(1), p;
    uint8_t b[TE_DESC_MAX];
    size_t len = sizeof b;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);
    b[4] = 2;
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EPROTO);
    ck_assert_str_eq(te_last_error(),
                     "unsupported descriptor version 2 (this library reads version 1)");
    b[4] = 0;
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EPROTO);
    b[4] = 1;
    ck_assert_int_eq(te_desc_parse(b, len, &p), 0);

    put32(b, 0xdeadbeef);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(),
                     "not a TransferEngine descriptor (magic 0xdeadbeef)");
    put32(b, TE_WIRE_ADDR_MAGIC);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "not a TransferEngine descriptor (magic "
                                      "0x31414554: this is an engine address)");

    /* Checksum mismatch message. */
    put32(b, TE_WIRE_DESC_MAGIC);
    b[20] ^= 1;
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);
    ck_assert_msg_has("descriptor checksum mismatch (stored 0x");
}
END_TEST

START_TEST(desc_crafted_counts)
{
    te_mr_desc d = make_desc(2), p;
    uint8_t b[TE_DESC_MAX + 64];
    size_t len = TE_DESC_MAX;
    ck_assert_int_eq(te_desc_serialize(&d, b, &len), 0);

    put16(b + 30, 17); /* nic_count */
    resign(b, len);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "descriptor NIC count 17 out of range 1..16");
    put16(b + 30, 0);
    resign(b, len);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);
    ck_assert_msg_has("NIC count 0 out of range");
    put16(b + 30, 0xffff);
    resign(b, len);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);

    /* Count says 3, length is that of 2. */
    put16(b + 30, 3);
    resign(b, len);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "descriptor length 64 does not match its 3 "
                                      "NICs (80 bytes expected)");
    /* Count says 1, length is that of 2. */
    put16(b + 30, 1);
    resign(b, len);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);

    /* Unknown access bits. */
    put16(b + 30, 2);
    put16(b + 28, 0x8001);
    resign(b, len);
    ck_assert_int_eq(te_desc_parse(b, len, &p), -EBADMSG);
    ck_assert_msg_has("access flags 0x8001 hold unknown bits");
    put16(b + 28, 1);
    resign(b, len);
    ck_assert_int_eq(te_desc_parse(b, len, &p), 0);

    /* Oversize total_len (beyond 16 NICs), with a matching buffer. */
    memset(b + len, 0, 64);
    resign(b, TE_DESC_MAX + 16);
    ck_assert_int_eq(te_desc_parse(b, TE_DESC_MAX + 16, &p), -EBADMSG);
    ck_assert_msg_has("above the 288-byte maximum");
    /* Undersize total_len. */
    resign(b, 40);
    ck_assert_int_eq(te_desc_parse(b, 40, &p), -EBADMSG);
    ck_assert_msg_has("below the 48-byte minimum");
}
END_TEST

/* --------------------------------------------------------- addresses */

START_TEST(addr_round_trip)
{
    for (uint32_t n = 1; n <= TE_MAX_NICS; n++) {
        struct te_group_addr a = make_addr(n, 0, "loopback"), p;
        uint8_t b[TE_ADDR_MAX];
        size_t len = sizeof b;
        ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);
        memset(&p, 0x77, sizeof p);
        ck_assert_int_eq(te_wire_addr_decode(b, len, &p), 0);
        same_addr(&a, &p);
    }
    /* Largest: 31-character name, 16 NICs of 128 bytes. */
    char name[32];
    memset(name, 'z', 31);
    name[31] = '\0';
    struct te_group_addr a = make_addr(TE_MAX_NICS, TE_PLUGIN_MAX_ADDR_LEN, name), p;
    a.engine_id = UINT64_MAX;
    a.group = UINT32_MAX;
    uint8_t b[TE_ADDR_MAX];
    size_t len = sizeof b;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);
    ck_assert_uint_eq(len, 12 + 1 + 31 + 8 + 4 + 1 + 16 * (2 + 128));
    ck_assert_uint_le(len, TE_ADDR_MAX);
    ck_assert_int_eq(te_wire_addr_decode(b, len, &p), 0);
    same_addr(&a, &p);
    /* Smallest. */
    a = make_addr(1, 1, "x");
    len = sizeof b;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);
    ck_assert_uint_eq(len, 30);
    ck_assert_int_eq(te_wire_addr_decode(b, len, &p), 0);
    same_addr(&a, &p);
}
END_TEST

START_TEST(addr_layout)
{
    struct te_group_addr a = make_addr(1, 2, "lo");
    uint8_t b[64];
    size_t len = sizeof b;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);
    static const uint8_t want[] = {
        0x54, 0x45, 0x41, 0x31, 0x01, 0x00, 0x20, 0x00, /* "TEA1", v1, 32 */
        0, 0, 0, 0,                                     /* checksum */
        0x02, 'l', 'o',                                 /* name */
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, /* engine_id */
        0xef, 0xbe, 0xad, 0xde,                         /* group */
        0x01,                                           /* nic_count */
        0x02, 0x00, 0x00, 0x01,                         /* NIC 0: len 2 */
    };
    ck_assert_uint_eq(len, sizeof want);
    ck_assert(memcmp(b, want, 8) == 0);
    ck_assert(memcmp(b + 12, want + 12, sizeof want - 12) == 0);
}
END_TEST

START_TEST(addr_enospc_and_encode_errors)
{
    struct te_group_addr a = make_addr(2, 10, "efa");
    uint8_t b[TE_ADDR_MAX];
    size_t len = 10;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -ENOSPC);
    size_t need = 12 + 1 + 3 + 8 + 4 + 1 + 2 * 12;
    ck_assert_uint_eq(len, need);
    ck_assert_str_eq(te_last_error(), "address buffer too small: 10 bytes, 53 needed");
    len = 0;
    ck_assert_int_eq(te_wire_addr_encode(&a, NULL, &len), -ENOSPC);
    ck_assert_uint_eq(len, need);
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);

    len = sizeof b;
    a.transport[0] = '\0';
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -EINVAL);
    ck_assert_msg_has("transport name \"\" is empty or not printable");
    strcpy(a.transport, "e fa");
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -EINVAL);
    memset(a.transport, 'x', sizeof a.transport);
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -EINVAL);
    ck_assert_msg_has("not NUL terminated");
    a = make_addr(2, 10, "efa");
    a.nic_count = 0;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -EINVAL);
    a.nic_count = 17;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -EINVAL);
    a.nic_count = 2;
    a.nic_addr_len[1] = 129;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -EINVAL);
    ck_assert_str_eq(te_last_error(), "address NIC 1: length 129 out of range 1..128");
    a.nic_addr_len[1] = 0;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), -EINVAL);
    ck_assert_int_eq(te_wire_addr_encode(NULL, b, &len), -EINVAL);
    ck_assert_int_eq(te_wire_addr_encode(&a, b, NULL), -EINVAL);
}
END_TEST

START_TEST(addr_truncations_and_trailing)
{
    struct te_group_addr a = make_addr(3, 0, "mlx5"), p;
    uint8_t b[TE_ADDR_MAX + 8];
    size_t len = TE_ADDR_MAX;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);
    for (size_t l = 0; l < len; l++) {
        uint8_t *c = malloc(l ? l : 1);
        memcpy(c, b, l);
        int rc = te_wire_addr_decode(c, l, &p);
        ck_assert_msg(rc < 0, "length %zu accepted", l);
        free(c);
    }
    ck_assert_int_eq(te_wire_addr_decode(b, 0, &p), -EINVAL);
    ck_assert_str_eq(te_last_error(), "empty address (0 bytes)");
    ck_assert_int_eq(te_wire_addr_decode(b, 7, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "address truncated: 7 of 12 header bytes");
    char want[64];
    snprintf(want, sizeof want, "address truncated: 40 of %zu bytes", len);
    ck_assert_int_eq(te_wire_addr_decode(b, 40, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), want);
    ck_assert_int_eq(te_wire_addr_decode(b, len + 1, &p), -EBADMSG);
    ck_assert_msg_has("1 trailing bytes");
    ck_assert_int_eq(te_wire_addr_decode(NULL, len, &p), -EINVAL);
    ck_assert_int_eq(te_wire_addr_decode(b, len, NULL), -EINVAL);
}
END_TEST

START_TEST(addr_every_byte_corruption)
{
    static const uint8_t flips[] = {0x01, 0x80, 0xff};
    struct te_group_addr a = make_addr(2, 5, "loopback"), p;
    uint8_t b[TE_ADDR_MAX];
    size_t len = sizeof b;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);
    for (size_t i = 0; i < len; i++)
        for (size_t f = 0; f < sizeof flips; f++) {
            uint8_t *c = malloc(len);
            memcpy(c, b, len);
            c[i] ^= flips[f];
            int rc = te_wire_addr_decode(c, len, &p);
            ck_assert_msg(rc < 0, "flip 0x%02x at byte %zu accepted", flips[f], i);
            if (i >= TE_WIRE_HEADER_LEN)
                ck_assert_msg(rc == -EBADMSG, "byte %zu: rc %d", i, rc);
            free(c);
        }
}
END_TEST

START_TEST(addr_version_and_magic)
{
    struct te_group_addr a = make_addr(1, 4, "loopback"), p;
    uint8_t b[TE_ADDR_MAX];
    size_t len = sizeof b;
    ck_assert_int_eq(te_wire_addr_encode(&a, b, &len), 0);
    b[4] = 2;
    ck_assert_int_eq(te_wire_addr_decode(b, len, &p), -EPROTO);
    ck_assert_str_eq(te_last_error(),
                     "unsupported address version 2 (this library reads version 1)");
    b[4] = 1;
    put32(b, TE_WIRE_DESC_MAGIC);
    ck_assert_int_eq(te_wire_addr_decode(b, len, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "not a TransferEngine address (magic "
                                      "0x31444554: this is a memory descriptor)");
}
END_TEST

START_TEST(addr_crafted)
{
    /* Hand-built body: name, engine_id, group, count, NICs. */
    uint8_t b[TE_ADDR_MAX + 300];
    struct te_group_addr p;
    size_t n;
#define BEGIN() (memset(b, 0, sizeof b), put32(b, TE_WIRE_ADDR_MAGIC), \
                 put16(b + 4, 1), n = 12)
#define BYTE(v) (b[n++] = (uint8_t)(v))
#define BYTES(v, k) (memset(b + n, (v), (k)), n += (k))

    /* Valid baseline. */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(1); BYTE(3); BYTE(0); BYTES(9, 3);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), 0);
    ck_assert_str_eq(p.transport, "ll");

    /* Empty name. */
    BEGIN(); BYTE(0); BYTES(0, 12); BYTE(1); BYTE(3); BYTE(0); BYTES(9, 3);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(),
                     "address transport name length 0 out of range 1..31");
    /* Too long a name. */
    BEGIN(); BYTE(32); BYTES('a', 32); BYTES(0, 12); BYTE(1); BYTE(3); BYTE(0); BYTES(9, 3);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    /* Name running past the end. */
    BEGIN(); BYTE(25); BYTES('a', 20);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_msg_has("too short");
    /* Unprintable name. */
    BEGIN(); BYTE(3); BYTE('a'); BYTE(0x07); BYTE('b'); BYTES(0, 12); BYTE(1); BYTE(3);
    BYTE(0); BYTES(9, 3);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(),
                     "address transport name is not printable (byte 1 is 0x07)");
    BEGIN(); BYTE(3); BYTE('a'); BYTE(' '); BYTE('b'); BYTES(0, 12); BYTE(1); BYTE(3);
    BYTE(0); BYTES(9, 3);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    /* NIC count 0 and 17. */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(0); BYTES(0, 5);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "address NIC count 0 out of range 1..16");
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(17);
    for (int i = 0; i < 17; i++) {
        BYTE(1); BYTE(0); BYTE(i);
    }
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "address NIC count 17 out of range 1..16");
    /* NIC address longer than TE_PLUGIN_MAX_ADDR_LEN. */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(1); BYTE(129); BYTE(0);
    BYTES(1, 129);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "address NIC 0: length 129 out of range 1..128");
    /* Empty NIC address. */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(1); BYTE(0); BYTE(0); BYTE(1);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    /* NIC address overrunning the message. */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(1); BYTE(100); BYTE(0);
    BYTES(1, 10);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "address NIC 0: 100-byte address overruns "
                                      "the message (10 bytes left)");
    /* Missing NIC entries. */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(3); BYTE(1); BYTE(0); BYTE(1);
    BYTE(1);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "address ends before NIC 1 of 3");
    /* Unused bytes after the last NIC (inside total_len). */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(1); BYTE(1); BYTE(0); BYTE(1);
    BYTES(0, 4);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_str_eq(te_last_error(), "address has 4 unused bytes after its last NIC");
    /* total_len above TE_ADDR_MAX. */
    BEGIN(); BYTE(2); BYTES('l', 2); BYTES(0, 12); BYTE(1); BYTE(1); BYTE(0); BYTE(1);
    BYTES(0, TE_ADDR_MAX);
    resign(b, n);
    ck_assert_int_eq(te_wire_addr_decode(b, n, &p), -EBADMSG);
    ck_assert_msg_has("above the 2200-byte maximum");
#undef BEGIN
#undef BYTE
#undef BYTES
}
END_TEST

/* Random mutations of valid messages: never accepted unless unchanged,
 * never a crash (run under valgrind to check reads). */
START_TEST(mutation_fuzz)
{
    unsigned seed = 12345;
    uint8_t db[TE_DESC_MAX], ab[TE_ADDR_MAX];
    te_mr_desc d = make_desc(4), dp;
    struct te_group_addr a = make_addr(4, 0, "loopback"), ap;
    size_t dl = sizeof db, al = sizeof ab;
    ck_assert_int_eq(te_desc_serialize(&d, db, &dl), 0);
    ck_assert_int_eq(te_wire_addr_encode(&a, ab, &al), 0);
    for (int it = 0; it < 4000; it++) {
        int which = it & 1;
        const uint8_t *src = which ? ab : db;
        size_t sl = which ? al : dl;
        size_t l = (size_t)rand_r(&seed) % (sl + 8);
        uint8_t *c = malloc(l ? l : 1);
        for (size_t i = 0; i < l; i++)
            c[i] = i < sl ? src[i] : (uint8_t)rand_r(&seed);
        int changes = 1 + rand_r(&seed) % 4;
        for (int k = 0; k < changes && l > 0; k++)
            c[(size_t)rand_r(&seed) % l] ^= (uint8_t)(1 + rand_r(&seed) % 255);
        int rc = which ? te_wire_addr_decode(c, l, &ap) : te_desc_parse(c, l, &dp);
        if (rc == 0)
            ck_assert(l == sl && memcmp(c, src, l) == 0);
        else
            ck_assert(te_last_error()[0] != '\0');
        free(c);
    }
}
END_TEST

TE_TEST_MAIN("wire",
             TE_TCASE_FULL("core", 120, NULL, NULL,
               fnv_vectors, desc_layout, desc_round_trip, desc_enospc,
               desc_serialize_rejects, desc_truncations, desc_trailing_bytes,
               desc_every_byte_corruption, desc_version_and_magic,
               desc_crafted_counts, addr_round_trip, addr_layout,
               addr_enospc_and_encode_errors, addr_truncations_and_trailing,
               addr_every_byte_corruption, addr_version_and_magic,
               addr_crafted, mutation_fuzz))
