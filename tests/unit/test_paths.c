/* Paths and engine.require (te.h "paths", docs/paths.md) on the loopback
 * plugin: what it reports, each degraded capability refused by the policy
 * with an error naming it, and the policy's parsing. (efa: tests/efa.cmake
 * efa_paths_*; mlx5 on rxe: tests/vm/guest-mlx5.sh.) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "te_test.h"

/* An engine with engine.require = require (none when NULL). */
static int create(const char *require, te_engine **e)
{
    char ini[128] = "";
    if (require)
        snprintf(ini, sizeof(ini), "[engine]\nrequire = %s\n", require);
    return te_test_engine_try(ini, e);
}

static const te_path_info *find(const te_path_info *p, int n, uint32_t kind)
{
    for (int i = 0; i < n; i++)
        if (p[i].kind == kind)
            return &p[i];
    return NULL;
}

START_TEST(loopback_reports_its_paths)
{
    te_engine *e;
    ck_assert_int_eq(create(NULL, &e), 0);
    te_path_info p[8];
    int n = te_engine_paths(e, 0, 0, p, 8);
    ck_assert_int_eq(n, 5);
    const te_path_info *w = find(p, n, TE_PATH_WRITE_IMM);
    ck_assert_ptr_nonnull(w);
    ck_assert_uint_eq(w->caps, TE_CAP_ZERO_COPY | TE_CAP_NATIVE_IMM);
    ck_assert_uint_eq(w->missing, TE_CAP_NATIVE_RMA | TE_CAP_HARDWARE |
                                      TE_CAP_AUTO_PROGRESS);
    ck_assert_uint_eq(w->refused, 0);
    ck_assert_ptr_nonnull(strstr(w->text, "ring entry"));
    ck_assert_ptr_nonnull(find(p, n, TE_PATH_READ));
    ck_assert_ptr_nonnull(find(p, n, TE_PATH_SEND));
    ck_assert_ptr_nonnull(find(p, n, TE_PATH_MEM_HOST));
    ck_assert_ptr_null(find(p, n, TE_PATH_MEM_CUDA));
    /* max smaller than the count: the count, only max written */
    memset(p, 0xa5, sizeof(p));
    ck_assert_int_eq(te_engine_paths(e, 0, 0, p, 2), 5);
    ck_assert_uint_eq(p[2].kind, 0xa5a5a5a5u);
    ck_assert_int_eq(te_engine_paths(e, 0, 0, NULL, 0), 5);
    ck_assert_int_eq(te_engine_paths(e, 0, 1, p, 8), -EINVAL);
    ck_assert_int_eq(te_engine_paths(e, 1, 0, p, 8), -EINVAL);
    ck_assert_int_eq(te_engine_paths(e, 0, 0, NULL, 3), -EINVAL);
    te_engine_destroy(e);
}
END_TEST

/* Every capability the loopback lacks is refused by name. */
START_TEST(each_missing_capability_is_refused)
{
    static const char *const caps[] = {"native_rma", "hardware",
                                       "auto_progress", "fast"};
    static const char *const named[] = {"native_rma", "hardware",
                                        "auto_progress", "native_rma"};
    for (int i = 0; i < 4; i++) {
        te_engine *e;
        ck_assert_int_eq(create(caps[i], &e), -ENOTSUP);
        ck_assert_ptr_null(e);
        ck_assert_msg(strstr(te_last_error(), "engine.require"), "%s",
                      te_last_error());
        ck_assert_msg(strstr(te_last_error(), named[i]), "%s: %s", caps[i],
                      te_last_error());
        ck_assert_ptr_nonnull(strstr(te_last_error(), "lo0"));
    }
}
END_TEST

START_TEST(capabilities_it_has_are_accepted)
{
    te_engine *e;
    ck_assert_int_eq(create("zero_copy, native_imm", &e), 0);
    te_path_info p[8];
    int n = te_engine_paths(e, 0, 0, p, 8);
    ck_assert_int_eq(n, 5);
    for (int i = 0; i < n; i++)
        ck_assert_uint_eq(p[i].refused, 0);
    te_engine_destroy(e);
    ck_assert_int_eq(create("any", &e), 0);
    te_engine_destroy(e);
    /* device_direct concerns CUDA registrations only: not at create. */
    ck_assert_int_eq(create("device_direct", &e), 0);
    te_engine_destroy(e);
}
END_TEST

START_TEST(bad_policy_names_the_word)
{
    te_engine *e;
    ck_assert_int_eq(create("fast,nativ_rma", &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "\"nativ_rma\""));
}
END_TEST

START_TEST(names)
{
    char buf[128];
    ck_assert_str_eq(te_cap_names(TE_CAP_NATIVE_RMA | TE_CAP_HARDWARE, buf,
                                  sizeof(buf)), "native_rma,hardware");
    ck_assert_str_eq(te_cap_names(0, buf, sizeof(buf)), "");
    ck_assert_str_eq(te_cap_names(TE_CAP_FAST, buf, 12), "zero_copy");
    ck_assert_str_eq(te_path_kind_name(TE_PATH_MEM_CUDA), "mem_cuda");
    ck_assert_str_eq(te_path_kind_name(99), "?");
}
END_TEST

TE_TEST_MAIN("paths",
             TE_TCASE("paths",
               loopback_reports_its_paths, each_missing_capability_is_refused,
               capabilities_it_has_are_accepted, bad_policy_names_the_word,
               names))
