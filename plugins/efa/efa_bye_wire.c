/*
 * The goodbye message of the efa plugin: building and validation
 * (efa_bye_wire.h). No libfabric, no state.
 */
#include <errno.h>
#include <string.h>

#include "efa_bye_wire.h"

int efa_bye_msg_build(struct efa_bye_msg *m, const void *raw, size_t raw_len,
                      int keyed)
{
    if (!raw || raw_len == 0 || raw_len > EFA_BYE_RAW_MAX)
        return -EINVAL;
    memset(m, 0, sizeof(*m));
    m->magic = EFA_BYE_MAGIC;
    m->version = EFA_BYE_VERSION;
    m->keyed = keyed ? 1 : 0;
    m->raw_len = (uint8_t)raw_len;
    memcpy(m->raw, raw, raw_len);
    return 0;
}

int efa_bye_msg_parse(const void *buf, size_t len, struct efa_bye_msg *out)
{
    if (!buf || len != sizeof(*out))
        return -EPROTO;
    memcpy(out, buf, sizeof(*out));
    if (out->magic != EFA_BYE_MAGIC || out->version != EFA_BYE_VERSION ||
        out->keyed > 1 || out->reserved || out->raw_len == 0 ||
        out->raw_len > EFA_BYE_RAW_MAX)
        return -EPROTO;
    /* One encoding per message: the name's unused bytes are zero, and an
     * unkeyed message has no MAC. */
    for (size_t i = out->raw_len; i < EFA_BYE_RAW_MAX; i++)
        if (out->raw[i])
            return -EPROTO;
    for (size_t i = 0; !out->keyed && i < sizeof(out->mac); i++)
        if (out->mac[i])
            return -EPROTO;
    return 0;
}
