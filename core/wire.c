/*
 * Serialized engine (group) addresses and memory descriptors.
 * Layout and versioning: docs/wire-format.md. Everything is packed byte by
 * byte in little-endian order; parsers treat the input as hostile and never
 * read outside [buf, buf+len).
 */
#include <errno.h>
#include <string.h>

#include "te_error.h"
#include "wire.h"

/* Descriptor body: u64 addr, u64 len, u16 access, u16 nic_count, then
 * nic_count x (u64 rkey, u64 remote_base). */
#define TE_DESC_FIXED (TE_WIRE_HEADER_LEN + 8 + 8 + 2 + 2)
#define TE_DESC_PER_NIC 16
#define TE_DESC_ACCESS_KNOWN (TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ)

_Static_assert(TE_DESC_FIXED + TE_DESC_PER_NIC * TE_MAX_NICS <= TE_DESC_MAX,
               "a full descriptor must fit TE_DESC_MAX");
/* Address: name (u8 len + up to 31 bytes), u64 engine_id, u32 group,
 * u8 nic_count, per NIC u16 len + bytes. */
_Static_assert(TE_WIRE_HEADER_LEN + 1 + (TE_TRANSPORT_NAME_MAX - 1) + 8 + 4 + 1 +
                       TE_MAX_NICS * (2 + TE_PLUGIN_MAX_ADDR_LEN) <=
                   TE_ADDR_MAX,
               "a full address must fit TE_ADDR_MAX");
_Static_assert(TE_ADDR_MAX <= 0xffff, "total_len is a u16");

uint32_t te_fnv1a32(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

/* ------------------------------------------------------ byte packing */

static void put_u8(uint8_t **p, uint8_t v) { *(*p)++ = v; }

static void put_u16(uint8_t **p, uint16_t v)
{
    put_u8(p, (uint8_t)v);
    put_u8(p, (uint8_t)(v >> 8));
}

static void put_u32(uint8_t **p, uint32_t v)
{
    put_u16(p, (uint16_t)v);
    put_u16(p, (uint16_t)(v >> 16));
}

static void put_u64(uint8_t **p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p, (uint32_t)(v >> 32));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)get_u16(p) | ((uint32_t)get_u16(p + 2) << 16);
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | ((uint64_t)get_u32(p + 4) << 32);
}

/* Bounded reader over [p, end). */
struct cursor {
    const uint8_t *p, *end;
};

static int cur_has(const struct cursor *c, size_t n)
{
    return (size_t)(c->end - c->p) >= n;
}

/* Header: magic, version, total_len, checksum over [12, total_len). */
static void put_header(uint8_t *buf, uint32_t magic, uint16_t total)
{
    uint8_t *p = buf;
    put_u32(&p, magic);
    put_u16(&p, TE_WIRE_VERSION);
    put_u16(&p, total);
    put_u32(&p, te_fnv1a32(buf + TE_WIRE_HEADER_LEN, total - TE_WIRE_HEADER_LEN));
}

/*
 * Check everything the header promises: length, magic, version, total_len
 * equal to len, checksum. what: "address"/"descriptor"; min_total: the
 * smallest valid message.
 */
static int check_header(const uint8_t *b, size_t len, uint32_t magic,
                        const char *what, size_t min_total, size_t max_total)
{
    if (len < TE_WIRE_HEADER_LEN)
        return te_fail(-EBADMSG, "%s truncated: %zu of %d header bytes", what,
                       len, TE_WIRE_HEADER_LEN);
    uint32_t m = get_u32(b);
    if (m != magic) {
        const char *hint = "";
        if (m == TE_WIRE_ADDR_MAGIC)
            hint = ": this is an engine address";
        else if (m == TE_WIRE_DESC_MAGIC)
            hint = ": this is a memory descriptor";
        return te_fail(-EBADMSG, "not a TransferEngine %s (magic 0x%08x%s)",
                       what, m, hint);
    }
    unsigned version = get_u16(b + 4);
    if (version != TE_WIRE_VERSION)
        return te_fail(-EPROTO,
                       "unsupported %s version %u (this library reads version %d)",
                       what, version, TE_WIRE_VERSION);
    size_t total = get_u16(b + 6);
    if (total < min_total)
        return te_fail(-EBADMSG, "%s header claims %zu bytes, below the "
                       "%zu-byte minimum", what, total, min_total);
    if (total > max_total)
        return te_fail(-EBADMSG, "%s header claims %zu bytes, above the "
                       "%zu-byte maximum", what, total, max_total);
    if (len < total)
        return te_fail(-EBADMSG, "%s truncated: %zu of %zu bytes", what, len,
                       total);
    if (len > total)
        return te_fail(-EBADMSG, "%s has %zu trailing bytes after its %zu-byte "
                       "length (%zu bytes given)", what, len - total, total, len);
    uint32_t stored = get_u32(b + 8);
    uint32_t computed = te_fnv1a32(b + TE_WIRE_HEADER_LEN, total - TE_WIRE_HEADER_LEN);
    if (stored != computed)
        return te_fail(-EBADMSG, "%s checksum mismatch (stored 0x%08x, computed "
                       "0x%08x): corrupted in transit?", what, stored, computed);
    return 0;
}

static int name_ok(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

/* -------------------------------------------------------- addresses */

int te_wire_addr_encode(const struct te_group_addr *a, void *buf, size_t *len)
{
    if (a == NULL || len == NULL)
        return te_fail(-EINVAL, "te_wire_addr_encode: %s is NULL",
                       a == NULL ? "address" : "len");
    size_t nl = strnlen(a->transport, sizeof a->transport);
    if (nl == sizeof a->transport)
        return te_fail(-EINVAL, "address transport name is not NUL terminated "
                       "within %d bytes", TE_TRANSPORT_NAME_MAX);
    if (!name_ok(a->transport, nl))
        return te_fail(-EINVAL, "address transport name \"%s\" is empty or not "
                       "printable", a->transport);
    if (a->nic_count == 0 || a->nic_count > TE_MAX_NICS)
        return te_fail(-EINVAL, "address NIC count %u out of range 1..%d",
                       a->nic_count, TE_MAX_NICS);
    size_t need = TE_WIRE_HEADER_LEN + 1 + nl + 8 + 4 + 1;
    for (uint32_t i = 0; i < a->nic_count; i++) {
        if (a->nic_addr_len[i] == 0 || a->nic_addr_len[i] > TE_PLUGIN_MAX_ADDR_LEN)
            return te_fail(-EINVAL, "address NIC %u: length %u out of range "
                           "1..%d", i, a->nic_addr_len[i], TE_PLUGIN_MAX_ADDR_LEN);
        need += 2 + a->nic_addr_len[i];
    }
    if (buf == NULL || *len < need) {
        size_t have = *len;
        *len = need;
        return te_fail(-ENOSPC, "address buffer too small: %zu bytes, %zu needed",
                       buf == NULL ? (size_t)0 : have, need);
    }
    uint8_t *b = buf, *p = b + TE_WIRE_HEADER_LEN;
    put_u8(&p, (uint8_t)nl);
    memcpy(p, a->transport, nl);
    p += nl;
    put_u64(&p, a->engine_id);
    put_u32(&p, a->group);
    put_u8(&p, (uint8_t)a->nic_count);
    for (uint32_t i = 0; i < a->nic_count; i++) {
        put_u16(&p, a->nic_addr_len[i]);
        memcpy(p, a->nic_addr[i], a->nic_addr_len[i]);
        p += a->nic_addr_len[i];
    }
    put_header(b, TE_WIRE_ADDR_MAGIC, (uint16_t)need);
    *len = need;
    return 0;
}

int te_wire_addr_decode(const void *buf, size_t len, struct te_group_addr *out)
{
    /* Smallest: 1-byte name and one 1-byte NIC address. */
    const size_t min_total = TE_WIRE_HEADER_LEN + 1 + 1 + 8 + 4 + 1 + 2 + 1;
    static struct te_group_addr zero;

    if (buf == NULL || out == NULL)
        return te_fail(-EINVAL, "te_wire_addr_decode: %s is NULL",
                       buf == NULL ? "address buffer" : "out");
    if (len == 0)
        return te_fail(-EINVAL, "empty address (0 bytes)");
    int rc = check_header(buf, len, TE_WIRE_ADDR_MAGIC, "address", min_total,
                          TE_ADDR_MAX);
    if (rc != 0)
        return rc;

    struct te_group_addr a = zero;
    const uint8_t *b = buf;
    struct cursor c = {b + TE_WIRE_HEADER_LEN, b + len};

    size_t nl = *c.p++; /* min_total guarantees the first byte */
    if (nl == 0 || nl >= TE_TRANSPORT_NAME_MAX)
        return te_fail(-EBADMSG, "address transport name length %zu out of "
                       "range 1..%d", nl, TE_TRANSPORT_NAME_MAX - 1);
    if (!cur_has(&c, nl + 8 + 4 + 1))
        return te_fail(-EBADMSG, "address body too short for a %zu-byte "
                       "transport name (%zu bytes)", nl, len);
    for (size_t i = 0; i < nl; i++)
        if (c.p[i] < 0x21 || c.p[i] > 0x7e)
            return te_fail(-EBADMSG, "address transport name is not printable "
                           "(byte %zu is 0x%02x)", i, c.p[i]);
    memcpy(a.transport, c.p, nl);
    a.transport[nl] = '\0';
    c.p += nl;
    a.engine_id = get_u64(c.p);
    c.p += 8;
    a.group = get_u32(c.p);
    c.p += 4;
    a.nic_count = *c.p++;
    if (a.nic_count == 0 || a.nic_count > TE_MAX_NICS)
        return te_fail(-EBADMSG, "address NIC count %u out of range 1..%d",
                       a.nic_count, TE_MAX_NICS);
    for (uint32_t i = 0; i < a.nic_count; i++) {
        if (!cur_has(&c, 2))
            return te_fail(-EBADMSG, "address ends before NIC %u of %u", i,
                           a.nic_count);
        unsigned al = get_u16(c.p);
        c.p += 2;
        if (al == 0 || al > TE_PLUGIN_MAX_ADDR_LEN)
            return te_fail(-EBADMSG, "address NIC %u: length %u out of range "
                           "1..%d", i, al, TE_PLUGIN_MAX_ADDR_LEN);
        if (!cur_has(&c, al))
            return te_fail(-EBADMSG, "address NIC %u: %u-byte address overruns "
                           "the message (%zu bytes left)", i, al,
                           (size_t)(c.end - c.p));
        a.nic_addr_len[i] = (uint16_t)al;
        memcpy(a.nic_addr[i], c.p, al);
        c.p += al;
    }
    if (c.p != c.end)
        return te_fail(-EBADMSG, "address has %zu unused bytes after its last "
                       "NIC", (size_t)(c.end - c.p));
    *out = a;
    return 0;
}

/* ------------------------------------------------------ descriptors */

int te_desc_serialize(const te_mr_desc *d, void *buf, size_t *len)
{
    te_error_clear();
    if (d == NULL || len == NULL)
        return te_fail(-EINVAL, "te_desc_serialize: %s is NULL",
                       d == NULL ? "descriptor" : "len");
    if (d->nic_count == 0 || d->nic_count > TE_MAX_NICS)
        return te_fail(-EINVAL, "descriptor NIC count %u out of range 1..%d",
                       d->nic_count, TE_MAX_NICS);
    if (d->access & ~(uint32_t)TE_DESC_ACCESS_KNOWN)
        return te_fail(-EINVAL, "descriptor access flags 0x%x hold unknown bits "
                       "(known: 0x%x)", d->access, TE_DESC_ACCESS_KNOWN);
    size_t need = TE_DESC_FIXED + (size_t)TE_DESC_PER_NIC * d->nic_count;
    if (buf == NULL || *len < need) {
        size_t have = *len;
        *len = need;
        return te_fail(-ENOSPC, "descriptor buffer too small: %zu bytes, %zu "
                       "needed", buf == NULL ? (size_t)0 : have, need);
    }
    uint8_t *b = buf, *p = b + TE_WIRE_HEADER_LEN;
    put_u64(&p, d->addr);
    put_u64(&p, d->len);
    put_u16(&p, (uint16_t)d->access);
    put_u16(&p, (uint16_t)d->nic_count);
    for (uint32_t i = 0; i < d->nic_count; i++) {
        put_u64(&p, d->nic[i].rkey);
        put_u64(&p, d->nic[i].remote_base);
    }
    put_header(b, TE_WIRE_DESC_MAGIC, (uint16_t)need);
    *len = need;
    return 0;
}

int te_desc_parse(const void *buf, size_t len, te_mr_desc *out)
{
    static te_mr_desc zero;

    te_error_clear();
    if (buf == NULL || out == NULL)
        return te_fail(-EINVAL, "te_desc_parse: %s is NULL",
                       buf == NULL ? "descriptor buffer" : "out");
    if (len == 0)
        return te_fail(-EINVAL, "empty descriptor (0 bytes)");
    int rc = check_header(buf, len, TE_WIRE_DESC_MAGIC, "descriptor",
                          TE_DESC_FIXED + TE_DESC_PER_NIC,
                          TE_DESC_FIXED + TE_DESC_PER_NIC * TE_MAX_NICS);
    if (rc != 0)
        return rc;

    const uint8_t *p = (const uint8_t *)buf + TE_WIRE_HEADER_LEN;
    te_mr_desc d = zero;
    d.addr = get_u64(p);
    d.len = get_u64(p + 8);
    d.access = get_u16(p + 16);
    d.nic_count = get_u16(p + 18);
    p += 20;
    if (d.nic_count == 0 || d.nic_count > TE_MAX_NICS)
        return te_fail(-EBADMSG, "descriptor NIC count %u out of range 1..%d",
                       d.nic_count, TE_MAX_NICS);
    size_t expect = TE_DESC_FIXED + (size_t)TE_DESC_PER_NIC * d.nic_count;
    if (len != expect)
        return te_fail(-EBADMSG, "descriptor length %zu does not match its %u "
                       "NICs (%zu bytes expected)", len, d.nic_count, expect);
    if (d.access & ~(uint32_t)TE_DESC_ACCESS_KNOWN)
        return te_fail(-EBADMSG, "descriptor access flags 0x%x hold unknown "
                       "bits (known: 0x%x)", d.access, TE_DESC_ACCESS_KNOWN);
    for (uint32_t i = 0; i < d.nic_count; i++) {
        d.nic[i].rkey = get_u64(p);
        d.nic[i].remote_base = get_u64(p + 8);
        p += 16;
    }
    *out = d;
    return 0;
}
