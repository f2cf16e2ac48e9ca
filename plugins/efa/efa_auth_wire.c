/*
 * Authentication messages of the efa plugin: validation and MAC input
 * (efa_auth_wire.h). No libfabric, no state.
 */
#include <errno.h>
#include <string.h>

#include "efa_auth_wire.h"

int efa_auth_msg_parse(const void *buf, size_t len, struct efa_auth_msg *out)
{
    if (!buf || len != sizeof(*out))
        return -EPROTO;
    memcpy(out, buf, sizeof(*out));
    if (out->magic != EFA_AUTH_MAGIC || out->version != EFA_AUTH_VERSION ||
        out->type < EFA_AUTH_HELLO || out->type > EFA_AUTH_FORGOT)
        return -EPROTO;
    if (out->type == EFA_AUTH_HELLO
            ? out->addr_len == 0 || out->addr_len > sizeof(out->addr)
            : out->addr_len != 0)
        return -EPROTO;
    return 0;
}

static uint8_t *put(uint8_t *p, const void *src, size_t len)
{
    memcpy(p, src, len);
    return p + len;
}

size_t efa_auth_bind(uint8_t *buf, uint32_t role, const uint8_t *n_i,
                     const uint8_t *n_t, const void *ia, size_t ia_len,
                     const void *ta, size_t ta_len)
{
    if (ia_len > TE_PLUGIN_MAX_ADDR_LEN || ta_len > TE_PLUGIN_MAX_ADDR_LEN)
        return 0;
    static const char label[16] = "te-efa-auth-v1";
    uint32_t il = (uint32_t)ia_len, tl = (uint32_t)ta_len, zero = 0;
    uint8_t *p = put(buf, label, sizeof(label));
    p = put(p, &role, sizeof(role));
    p = put(p, &zero, sizeof(zero));
    p = put(p, n_i, EFA_AUTH_NONCE_LEN);
    p = put(p, n_t, EFA_AUTH_NONCE_LEN);
    /* Lengths first: no two address pairs give the same bytes. */
    p = put(p, &il, sizeof(il));
    p = put(p, ia, ia_len);
    p = put(p, &tl, sizeof(tl));
    p = put(p, ta, ta_len);
    return (size_t)(p - buf);
}

bool efa_auth_keeps_initiator(const void *mine, size_t mine_len,
                              const void *theirs, size_t theirs_len)
{
    size_t n = mine_len < theirs_len ? mine_len : theirs_len;
    int c = memcmp(mine, theirs, n);
    return c ? c > 0 : mine_len > theirs_len;
}

const char *efa_auth_reason_text(uint8_t reason)
{
    switch (reason) {
    case EFA_AUTH_R_BAD_MAC:
        return "it refused our proof (a different engine.auth_key)";
    case EFA_AUTH_R_BUSY:
        return "it has too many authentications in progress";
    default:
        return "it refused us";
    }
}
