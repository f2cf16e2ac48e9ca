/*
 * Tiny plugins for the ABI negotiation tests (tests/unit/test_abi.c), one
 * source built several times by tests/extra.cmake with one TP_* switch:
 *   (none)          a minimal valid 1.x table ("good")
 *   TP_OLDMINOR     abi_minor 0, struct_size exactly TE_PLUGIN_OPS_MIN_SIZE_1_0
 *   TP_NEWMINOR     abi_minor 7, table embedded in a larger struct
 *   TP_NEWMAJOR     abi_major 2
 *   TP_SHORT        struct_size 16
 *   TP_NOSYM        exports no entry symbol
 *   TP_NULLFN       post == NULL
 *   TP_ENTRYNULL    entry returns NULL with a reason
 *   TP_CFG_*        a malformed typed key table (ABI 1.4), one flaw each:
 *                   DUP, NODEFAULT, RANGE, CHOICES, SIZE, NAME, TYPE
 * TP_NAME and TP_VERSION set the table's name and version strings. Every
 * other variant declares a good typed table (an integer and an enum).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "te/plugin.h"

#ifndef TP_NAME
#define TP_NAME "good"
#endif
#ifndef TP_VERSION
#define TP_VERSION "1.2.3"
#endif

#define TP_EXPORT __attribute__((visibility("default")))

static int tp_init(const struct te_plugin_host *host, te_plugin_ctx **out)
{
    *out = NULL;
    return 0;
}
static void tp_fini(te_plugin_ctx *ctx) {}
static int tp_device_count(te_plugin_ctx *ctx) { return 0; }
static int tp_query_device(te_plugin_ctx *ctx, int idx,
                           struct te_plugin_device_info *info)
{
    return -ENODEV;
}
static int tp_nic_open(te_plugin_ctx *ctx, int idx,
                       const struct te_plugin_nic_attr *attr, te_plugin_nic **out)
{
    return -ENODEV;
}
static void tp_nic_close(te_plugin_nic *nic) {}
static int tp_nic_address(te_plugin_nic *nic, void *buf, size_t *len)
{
    return -ENOSYS;
}
static int tp_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
                     uint32_t mem_type, int device_id, te_plugin_mr **mr,
                     struct te_plugin_mr_info *info)
{
    return -ENOSYS;
}
static int tp_mr_dereg(te_plugin_nic *nic, te_plugin_mr *mr) { return -ENOSYS; }
static int tp_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                       te_plugin_peer *out)
{
    return -ENOSYS;
}
static int tp_peer_remove(te_plugin_nic *nic, te_plugin_peer peer) { return -ENOSYS; }
#ifndef TP_NULLFN
static int tp_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n)
{
    return -ENOSYS;
}
#endif
static int tp_poll(te_plugin_nic *nic, struct te_plugin_cq_entry *out, int max)
{
    return 0;
}

#if defined(TP_NEWMINOR)
/* A table from a future 1.7 header: 1.0 fields followed by appended ones. */
struct tp_ops_1_7 {
    struct te_plugin_ops base;
    int (*future_op)(te_plugin_nic *nic, int arg);
    uint64_t future_flags;
    char future_pad[40];
};
#define TP_ABI_MAJOR TE_PLUGIN_ABI_MAJOR
#define TP_ABI_MINOR 7
#define TP_SIZE sizeof(struct tp_ops_1_7)
#elif defined(TP_OLDMINOR)
#define TP_ABI_MAJOR TE_PLUGIN_ABI_MAJOR
#define TP_ABI_MINOR 0
#define TP_SIZE TE_PLUGIN_OPS_MIN_SIZE_1_0
#elif defined(TP_NEWMAJOR)
#define TP_ABI_MAJOR 2
#define TP_ABI_MINOR 0
#define TP_SIZE sizeof(struct te_plugin_ops)
#elif defined(TP_SHORT)
#define TP_ABI_MAJOR TE_PLUGIN_ABI_MAJOR
#define TP_ABI_MINOR TE_PLUGIN_ABI_MINOR
#define TP_SIZE 16
#else
#define TP_ABI_MAJOR TE_PLUGIN_ABI_MAJOR
#define TP_ABI_MINOR TE_PLUGIN_ABI_MINOR
#define TP_SIZE sizeof(struct te_plugin_ops)
#endif

/* Each malformed table differs from the good one by its one flaw. */
#define TP_DEPTH TE_PCFG_U64_KEY("depth", "4", 1, 64, "queue depth")
#define TP_MODE TE_PCFG_ENUM_KEY("mode", "auto", "auto|on|off", "a mode")
static const struct te_plugin_config_param tp_params[] = {
#if defined(TP_CFG_DUP)
    TP_DEPTH, TE_PCFG_BOOL_KEY("depth", "true", "declared twice"),
#elif defined(TP_CFG_NODEFAULT)
    TE_PCFG_U64_KEY("depth", NULL, 1, 64, "no default"), TP_MODE,
#elif defined(TP_CFG_RANGE)
    TE_PCFG_U64_KEY("depth", "65", 1, 64, "default above max"), TP_MODE,
#elif defined(TP_CFG_CHOICES)
    TP_DEPTH, TE_PCFG_ENUM_KEY("mode", "auto", "auto||off", "empty word"),
#elif defined(TP_CFG_NAME)
    TP_DEPTH, TE_PCFG_BOOL_KEY("two words", "true", "blank in the name"),
#elif defined(TP_CFG_TYPE)
    TP_DEPTH, {sizeof(struct te_plugin_config_param), 9, "odd", "1", "type 9",
               0, 0, 0, 0, NULL},
#elif defined(TP_CFG_SIZE)
    {8, TE_PCFG_U64, "depth", "4", "struct_size 8", 1, 64, 0, 0, NULL},
#else
    TP_DEPTH, TP_MODE,
#endif
    TE_PCFG_END};

#define TP_OPS_INIT                                                          \
    {                                                                        \
        .abi_major = TP_ABI_MAJOR,                                           \
        .abi_minor = TP_ABI_MINOR,                                           \
        .struct_size = (uint32_t)(TP_SIZE),                                  \
        .name = TP_NAME,                                                     \
        .version = TP_VERSION,                                               \
        .description = "ABI test plugin",                                    \
        .config_keys = NULL,                                                 \
        .init = tp_init,                                                     \
        .fini = tp_fini,                                                     \
        .device_count = tp_device_count,                                     \
        .query_device = tp_query_device,                                     \
        .nic_open = tp_nic_open,                                             \
        .nic_close = tp_nic_close,                                           \
        .nic_address = tp_nic_address,                                       \
        .mr_reg = tp_mr_reg,                                                 \
        .mr_dereg = tp_mr_dereg,                                             \
        .peer_add = tp_peer_add,                                             \
        .peer_remove = tp_peer_remove,                                       \
        .post = TP_POST,                                                     \
        .poll = tp_poll,                                                     \
        .config_params = tp_params,                                          \
    }

#ifdef TP_NULLFN
#define TP_POST NULL
#else
#define TP_POST tp_post
#endif

#if defined(TP_NEWMINOR)
static int tp_future_op(te_plugin_nic *nic, int arg) { return arg; }
static const struct tp_ops_1_7 tp_table = {
    .base = TP_OPS_INIT,
    .future_op = tp_future_op,
    .future_flags = 0xfeedu,
};
#define TP_TABLE (&tp_table.base)
#else
static const struct te_plugin_ops tp_table = TP_OPS_INIT;
#define TP_TABLE (&tp_table)
#endif

#ifdef TP_NOSYM
/* Looks like a plugin but exports the wrong symbol. */
TP_EXPORT const struct te_plugin_ops *te_plugin_entry_v0(void) { return TP_TABLE; }
#else
TP_EXPORT const struct te_plugin_ops *te_plugin_entry(uint32_t core_major,
                                                      uint32_t core_minor,
                                                      char *err, size_t errlen)
{
#ifdef TP_ENTRYNULL
    (void)TP_TABLE; /* a real table exists, but this "hardware" is absent */
    snprintf(err, errlen, "needs hardware X");
    return NULL;
#else
    return TP_TABLE;
#endif
}
#endif
