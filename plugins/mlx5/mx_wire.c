/*
 * Wire formats of the mlx5 plugin (see mx_wire.h). Fixed offsets, explicit
 * little-endian, so two hosts of any byte order and any compiler agree, and
 * a truncated or foreign buffer is refused before a field is trusted.
 */
#include "mx_wire.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------ byte order */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ------------------------------------------------------------- SipHash */

/*
 * SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit PRF designed
 * for short inputs. It lets a NIC check that a handshake datagram was made
 * by someone holding a secret published only in an engine address, with no
 * crypto library dependency.
 */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
    do {                                                                       \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);              \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                 \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                 \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);              \
    } while (0)

uint64_t mx_siphash24(const uint8_t key[16], const void *msg, size_t len)
{
    const uint8_t *in = msg;
    uint64_t k0 = get64(key), k1 = get64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ull ^ k0;
    uint64_t v1 = 0x646f72616e646f6dull ^ k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ k0;
    uint64_t v3 = 0x7465646279746573ull ^ k1;
    size_t full = len & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = get64(in + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < (len & 7); i++)
        b |= (uint64_t)in[full + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ------------------------------------------------------------- address */

/*
 * Address layout (64 bytes):
 *   0 magic u32 | 4 version u16 | 6 size u16 | 8 nic_id u64 | 16 gid[16]
 *  32 lid u16 | 34 port u8 | 35 link_layer u8 | 36 ud_qpn u32
 *  40 msg_size u32 | 44 mtu u8 | 45 gid_index u8 | 46 reserved u16
 *  48 secret[16]
 */
void mx_addr_encode(const struct mx_addr *a, uint8_t out[MX_ADDR_LEN])
{
    memset(out, 0, MX_ADDR_LEN);
    put32(out, MX_ADDR_MAGIC);
    put16(out + 4, MX_ADDR_VERSION);
    put16(out + 6, MX_ADDR_LEN);
    put64(out + 8, a->nic_id);
    memcpy(out + 16, a->gid, 16);
    put16(out + 32, a->lid);
    out[34] = a->port;
    out[35] = a->link_layer;
    put32(out + 36, a->ud_qpn);
    put32(out + 40, a->msg_size);
    out[44] = a->mtu;
    out[45] = a->gid_index;
    memcpy(out + 48, a->secret, MX_SECRET_LEN);
}

int mx_addr_decode(const void *buf, size_t len, struct mx_addr *a,
                   const char **why)
{
    const uint8_t *p = buf;
    const char *w = NULL;
    if (!buf || len != MX_ADDR_LEN)
        w = "wrong length for an mlx5 address";
    else if (get32(p) != MX_ADDR_MAGIC)
        w = "not an mlx5 address (bad magic)";
    else if (get16(p + 4) != MX_ADDR_VERSION || get16(p + 6) != MX_ADDR_LEN)
        w = "unsupported mlx5 address version";
    if (w) {
        if (why)
            *why = w;
        return -EINVAL;
    }
    memset(a, 0, sizeof(*a));
    a->nic_id = get64(p + 8);
    memcpy(a->gid, p + 16, 16);
    a->lid = get16(p + 32);
    a->port = p[34];
    a->link_layer = p[35];
    a->ud_qpn = get32(p + 36);
    a->msg_size = get32(p + 40);
    a->mtu = p[44];
    a->gid_index = p[45];
    memcpy(a->secret, p + 48, MX_SECRET_LEN);
    if (a->nic_id == 0)
        w = "corrupt mlx5 address: NIC id 0";
    else if (a->ud_qpn == 0 || a->ud_qpn > 0xffffffu)
        w = "corrupt mlx5 address: handshake QP number out of range";
    else if (a->link_layer != MX_LL_IB && a->link_layer != MX_LL_ETH)
        w = "corrupt mlx5 address: unknown link layer";
    else if (a->mtu < 1 || a->mtu > 5)
        w = "corrupt mlx5 address: MTU code out of range";
    if (w) {
        if (why)
            *why = w;
        return -EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------ datagram */

/*
 * Datagram layout (88 bytes):
 *   0 magic u32 | 4 version u8 | 5 type u8 | 6 flags u8 | 7 keysel u8
 *   8 src_id u64 | 16 dst_id u64 | 24 src_gid[16] | 40 src_lid u16
 *  42 src_mtu u8 | 43 src_link_layer u8 | 44 src_ud_qpn u32
 *  48 src_msg_size u32 | 52 qpn u32 | 56 psn u32 | 60 epoch u32
 *  64 echo_qpn u32 | 68 echo_epoch u32 | 72 reserved u64
 *  80 mac u64 = SipHash-2-4(key, bytes 0..79)
 */
void mx_hs_encode(const struct mx_hs_wire *m, const uint8_t key[16],
                  uint8_t out[MX_HS_LEN])
{
    memset(out, 0, MX_HS_LEN);
    put32(out, MX_HS_MAGIC);
    out[4] = MX_HS_VERSION;
    out[5] = m->type;
    out[6] = m->flags;
    out[7] = m->keysel;
    put64(out + 8, m->src_id);
    put64(out + 16, m->dst_id);
    memcpy(out + 24, m->src_gid, 16);
    put16(out + 40, m->src_lid);
    out[42] = m->src_mtu;
    out[43] = m->src_link_layer;
    put32(out + 44, m->src_ud_qpn);
    put32(out + 48, m->src_msg_size);
    put32(out + 52, m->qpn);
    put32(out + 56, m->psn);
    put32(out + 60, m->epoch);
    put32(out + 64, m->echo_qpn);
    put32(out + 68, m->echo_epoch);
    put64(out + MX_HS_MAC_OFF, mx_siphash24(key, out, MX_HS_MAC_OFF));
}

int mx_hs_decode(const void *buf, size_t len, struct mx_hs_wire *m,
                 const char **why)
{
    const uint8_t *p = buf;
    const char *w = NULL;
    if (!buf || len < MX_HS_LEN)
        w = "truncated handshake datagram";
    else if (get32(p) != MX_HS_MAGIC || p[4] != MX_HS_VERSION)
        w = "not a handshake datagram of this version";
    else if (p[5] != MX_HS_T_HELLO && p[5] != MX_HS_T_BYE)
        w = "unknown handshake datagram type";
    else if (p[7] != MX_KEY_RECEIVER && p[7] != MX_KEY_SENDER)
        w = "unknown handshake key selector";
    if (w) {
        if (why)
            *why = w;
        return -EINVAL;
    }
    memset(m, 0, sizeof(*m));
    m->type = p[5];
    m->flags = p[6];
    m->keysel = p[7];
    m->src_id = get64(p + 8);
    m->dst_id = get64(p + 16);
    memcpy(m->src_gid, p + 24, 16);
    m->src_lid = get16(p + 40);
    m->src_mtu = p[42];
    m->src_link_layer = p[43];
    m->src_ud_qpn = get32(p + 44);
    m->src_msg_size = get32(p + 48);
    m->qpn = get32(p + 52);
    m->psn = get32(p + 56);
    m->epoch = get32(p + 60);
    m->echo_qpn = get32(p + 64);
    m->echo_epoch = get32(p + 68);
    if (m->src_id == 0 || m->dst_id == 0)
        w = "handshake datagram with NIC id 0";
    else if (m->qpn == 0 || m->qpn > 0xffffffu || m->psn > 0xffffffu ||
             m->echo_qpn > 0xffffffu || m->src_ud_qpn == 0 ||
             m->src_ud_qpn > 0xffffffu)
        w = "handshake datagram with a QP number or PSN out of range";
    else if (m->epoch == 0)
        w = "handshake datagram with epoch 0";
    else if (m->src_mtu < 1 || m->src_mtu > 5 ||
             (m->src_link_layer != MX_LL_IB && m->src_link_layer != MX_LL_ETH))
        w = "handshake datagram with a bad MTU or link layer";
    if (w) {
        if (why)
            *why = w;
        return -EINVAL;
    }
    return 0;
}

int mx_hs_verify(const void *buf, const uint8_t key[16])
{
    const uint8_t *p = buf;
    /* Compare without an early exit: the time taken says nothing. */
    uint64_t d = get64(p + MX_HS_MAC_OFF) ^ mx_siphash24(key, p, MX_HS_MAC_OFF);
    return d == 0;
}
