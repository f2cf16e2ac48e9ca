/*
 * The plugin ABI's promise about struct sizes (include/te/plugin.h):
 * structs with a struct_size grow only by appending (1.0 fields keep their
 * offsets), and the structs without one are fixed byte for byte for the
 * whole major version. Offsets are pinned for LP64 (x86_64, aarch64), the
 * only data model the core builds for; a change here breaks every plugin
 * built before it and needs a new major version.
 */
#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"
#include "te_test.h"

#define PIN(type, field, off) ck_assert_uint_eq(offsetof(type, field), (off))

START_TEST(fixed_op)
{
    PIN(struct te_plugin_op, kind, 0);
    PIN(struct te_plugin_op, flags, 4);
    PIN(struct te_plugin_op, peer, 8);
    PIN(struct te_plugin_op, mr, 16);
    PIN(struct te_plugin_op, local_addr, 24);
    PIN(struct te_plugin_op, len, 32);
    PIN(struct te_plugin_op, remote_addr, 40);
    PIN(struct te_plugin_op, rkey, 48);
    PIN(struct te_plugin_op, imm, 56);
    PIN(struct te_plugin_op, context, 64);
    ck_assert_uint_eq(sizeof(struct te_plugin_op), 72);
}
END_TEST

START_TEST(fixed_cq_entry)
{
    PIN(struct te_plugin_cq_entry, kind, 0);
    PIN(struct te_plugin_cq_entry, status, 4);
    PIN(struct te_plugin_cq_entry, context, 8);
    PIN(struct te_plugin_cq_entry, len, 16);
    PIN(struct te_plugin_cq_entry, imm, 24);
    PIN(struct te_plugin_cq_entry, peer, 32);
    ck_assert_uint_eq(sizeof(struct te_plugin_cq_entry), 40);
}
END_TEST

START_TEST(fixed_small)
{
    PIN(struct te_plugin_mr_info, rkey, 0);
    PIN(struct te_plugin_mr_info, remote_base, 8);
    ck_assert_uint_eq(sizeof(struct te_plugin_mr_info), 16);
    PIN(struct te_plugin_path, kind, 0);
    PIN(struct te_plugin_path, caps, 4);
    PIN(struct te_plugin_path, relevant, 8);
    PIN(struct te_plugin_path, text, 16);
    ck_assert_uint_eq(sizeof(struct te_plugin_path), 208);
    PIN(struct te_plugin_config_key, name, 0);
    PIN(struct te_plugin_config_key, default_value, 8);
    PIN(struct te_plugin_config_key, doc, 16);
    ck_assert_uint_eq(sizeof(struct te_plugin_config_key), 24);
}
END_TEST

/* The growing structs: struct_size first, and the 1.0 fields where 1.0
 * put them (a 1.0 plugin reads them there). */
START_TEST(growing_prefixes)
{
    PIN(struct te_plugin_ops, abi_major, 0);
    PIN(struct te_plugin_ops, struct_size, 8);
    PIN(struct te_plugin_ops, name, 16);
    PIN(struct te_plugin_ops, config_keys, 40);
    PIN(struct te_plugin_ops, init, 48);
    PIN(struct te_plugin_ops, poll, 144);
    ck_assert_uint_eq(TE_PLUGIN_OPS_MIN_SIZE_1_0, 152);
    PIN(struct te_plugin_host, struct_size, 0);
    PIN(struct te_plugin_host, host_ctx, 8);
    PIN(struct te_plugin_host, config_get, 16);
    PIN(struct te_plugin_host, set_error, 24);
    PIN(struct te_plugin_host, log, 32);
    PIN(struct te_plugin_device_info, struct_size, 0);
    PIN(struct te_plugin_nic_attr, struct_size, 0);
    PIN(struct te_plugin_config_param, struct_size, 0);
    PIN(struct te_plugin_config_param, type, 4);
    PIN(struct te_plugin_config_param, name, 8);
}
END_TEST

/* Appended fields come after every older one. */
START_TEST(appended_in_order)
{
    ck_assert_uint_gt(offsetof(struct te_plugin_ops, describe_paths),
                      offsetof(struct te_plugin_ops, poll));
    ck_assert_uint_gt(offsetof(struct te_plugin_ops, wait_fd),
                      offsetof(struct te_plugin_ops, describe_paths));
    ck_assert_uint_gt(offsetof(struct te_plugin_ops, config_params),
                      offsetof(struct te_plugin_ops, wait_arm));
    ck_assert_uint_gt(offsetof(struct te_plugin_host, config_u64),
                      offsetof(struct te_plugin_host, progressed));
    ck_assert_uint_gt(offsetof(struct te_plugin_host, auth_verify),
                      offsetof(struct te_plugin_host, config_enum));
}
END_TEST

TE_TEST_MAIN("plugin_layout",
             TE_TCASE("layout", fixed_op, fixed_cq_entry, fixed_small,
                      growing_prefixes, appended_in_order))
