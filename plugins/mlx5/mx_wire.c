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
 * Datagram layout, version 1 (88 bytes):
 *   0 magic u32 | 4 version u8 | 5 type u8 | 6 flags u8 | 7 keysel u8
 *   8 src_id u64 | 16 dst_id u64 | 24 src_gid[16] | 40 src_lid u16
 *  42 src_mtu u8 | 43 src_link_layer u8 | 44 src_ud_qpn u32
 *  48 src_msg_size u32 | 52 qpn u32 | 56 psn u32 | 60 epoch u32
 *  64 echo_qpn u32 | 68 echo_epoch u32 | 72 reserved u64
 *  80 mac u64 = SipHash-2-4(key, bytes 0..79)
 * Version 2 (152 bytes): bytes 0..71 as version 1, then
 *  72 reason u8 | 73 reserved[7] | 80 nonce[16] | 96 echo_nonce[16]
 * 112 proof[32] | 144 mac u64 = SipHash-2-4(key, bytes 0..143)
 */
static int mx_hs_v2(const struct mx_hs_wire *m)
{
    return (m->flags & MX_HS_F_AUTH) || m->type == MX_HS_T_REFUSE ||
           m->type == MX_HS_T_CHALLENGE;
}

size_t mx_hs_encode(const struct mx_hs_wire *m, const uint8_t key[16],
                    uint8_t out[MX_HS_MAX])
{
    int v2 = mx_hs_v2(m);
    size_t macoff = v2 ? MX_HS_MAC_OFF_AUTH : MX_HS_MAC_OFF;
    memset(out, 0, MX_HS_MAX);
    put32(out, MX_HS_MAGIC);
    out[4] = v2 ? MX_HS_VERSION_AUTH : MX_HS_VERSION;
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
    if (v2) {
        out[72] = m->reason;
        memcpy(out + 80, m->nonce, MX_NONCE_LEN);
        memcpy(out + 96, m->echo_nonce, MX_NONCE_LEN);
        memcpy(out + 112, m->proof, MX_PROOF_LEN);
    }
    put64(out + macoff, mx_siphash24(key, out, macoff));
    return macoff + 8;
}

int mx_hs_decode(const void *buf, size_t len, struct mx_hs_wire *m,
                 const char **why)
{
    const uint8_t *p = buf;
    const char *w = NULL;
    unsigned v = buf && len >= MX_HS_LEN ? p[4] : 0;
    if (!buf || len < MX_HS_LEN)
        w = "truncated handshake datagram";
    else if (get32(p) != MX_HS_MAGIC ||
             (v != MX_HS_VERSION && v != MX_HS_VERSION_AUTH))
        w = "not a handshake datagram of this version";
    else if (v == MX_HS_VERSION_AUTH && len < MX_HS_LEN_AUTH)
        w = "truncated handshake datagram";
    else if (p[5] != MX_HS_T_HELLO && p[5] != MX_HS_T_BYE &&
             (v == MX_HS_VERSION ||
              (p[5] != MX_HS_T_REFUSE && p[5] != MX_HS_T_CHALLENGE)))
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
    if (v == MX_HS_VERSION_AUTH) {
        m->reason = p[72];
        memcpy(m->nonce, p + 80, MX_NONCE_LEN);
        memcpy(m->echo_nonce, p + 96, MX_NONCE_LEN);
        memcpy(m->proof, p + 112, MX_PROOF_LEN);
    }
    unsigned authf = MX_HS_F_AUTH | MX_HS_F_PROOF;
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
    else if (v == MX_HS_VERSION && (m->flags & authf))
        w = "version 1 handshake datagram with authentication flags";
    else if (v == MX_HS_VERSION_AUTH &&
             (m->type == MX_HS_T_HELLO || m->type == MX_HS_T_BYE ||
              m->type == MX_HS_T_CHALLENGE) &&
             !(m->flags & MX_HS_F_AUTH))
        w = "version 2 handshake datagram without its nonce";
    else if ((m->flags & MX_HS_F_PROOF) && !(m->flags & MX_HS_F_AUTH))
        w = "handshake datagram with a proof but no nonce";
    else if (m->type == MX_HS_T_CHALLENGE && !(m->flags & MX_HS_F_PROOF))
        w = "handshake challenge without a proof";
    else if (m->type == MX_HS_T_REFUSE &&
             (m->reason < MX_REFUSE_NO_KEY || m->reason > MX_REFUSE_BAD_PROOF))
        w = "handshake refusal with an unknown reason";
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
    size_t off = p[4] == MX_HS_VERSION_AUTH ? MX_HS_MAC_OFF_AUTH : MX_HS_MAC_OFF;
    /* Compare without an early exit: the time taken says nothing. */
    uint64_t d = get64(p + off) ^ mx_siphash24(key, p, off);
    return d == 0;
}

/* ------------------------------------------------------- job secret MAC */

static void mx_ident_fill(uint64_t id, const uint8_t gid[16], uint16_t lid,
                          uint32_t ud_qpn, uint8_t ll,
                          uint8_t out[MX_IDENT_LEN])
{
    memset(out, 0, MX_IDENT_LEN);
    put64(out, id);
    memcpy(out + 8, gid, 16);
    put32(out + 24, ud_qpn);
    put16(out + 28, lid);
    out[30] = ll;
}

void mx_ident(const struct mx_addr *a, uint8_t out[MX_IDENT_LEN])
{
    mx_ident_fill(a->nic_id, a->gid, a->lid, a->ud_qpn, a->link_layer, out);
}

void mx_ident_src(const struct mx_hs_wire *m, uint8_t out[MX_IDENT_LEN])
{
    mx_ident_fill(m->src_id, m->src_gid, m->src_lid, m->src_ud_qpn,
                  m->src_link_layer, out);
}

/*
 * Layout (136 bytes): 0 label[16] "te-mlx5-auth-v1\0" | 16 type u8
 * | 17 role u8 | 18 reserved u16 | 20 qpn | 24 psn | 28 epoch
 * | 32 echo_qpn | 36 echo_epoch (u32 each, the maker's datagram)
 * | 40 nonce of the lower id | 56 nonce of the higher id
 * | 72 ident of the lower id | 104 ident of the higher id.
 */
void mx_auth_bind(const struct mx_hs_wire *m, const uint8_t *maker_nonce,
                  const uint8_t *other_nonce, const uint8_t *maker_ident,
                  const uint8_t *other_ident, uint8_t out[MX_BIND_LEN])
{
    uint64_t mi = get64(maker_ident), oi = get64(other_ident);
    int maker_low = mi <= oi;
    memset(out, 0, MX_BIND_LEN);
    memcpy(out, MX_AUTH_LABEL, sizeof(MX_AUTH_LABEL));
    out[16] = m->type;
    out[17] = (uint8_t)(mi < oi ? MX_ROLE_LOW
                                : mi > oi ? MX_ROLE_HIGH : MX_ROLE_SELF);
    put32(out + 20, m->qpn);
    put32(out + 24, m->psn);
    put32(out + 28, m->epoch);
    put32(out + 32, m->echo_qpn);
    put32(out + 36, m->echo_epoch);
    memcpy(out + 40, maker_low ? maker_nonce : other_nonce, MX_NONCE_LEN);
    memcpy(out + 56, maker_low ? other_nonce : maker_nonce, MX_NONCE_LEN);
    memcpy(out + 72, maker_low ? maker_ident : other_ident, MX_IDENT_LEN);
    memcpy(out + 104, maker_low ? other_ident : maker_ident, MX_IDENT_LEN);
}
