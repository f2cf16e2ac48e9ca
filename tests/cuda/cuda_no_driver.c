/*
 * CUDA memory where CUDA cannot work: no driver library, the toolkit's stub
 * driver, or a build without CUDA. Runs on every host (no GPU needed). ctest
 * runs it with TE_CUDA_DRIVER pointing at the library to try and
 * TE_TEST_EXPECT holding a phrase the reason must contain.
 *
 * Each case checks that the reason reaches the user at every entry point
 * (status, pointer query, registration, flags, watcher), that nothing is
 * left registered, and that host memory keeps working.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"

static const char *expect(void)
{
    const char *e = getenv("TE_TEST_EXPECT");
    return e && *e ? e : "CUDA";
}

#define ASSERT_REASON(msg)                                                   \
    ck_assert_msg(strstr((msg), expect()) != NULL,                           \
                  "reason \"%s\" lacks \"%s\"", (msg), expect())

static te_engine *make_engine(void)
{
    te_config *c = te_config_new();
    ck_assert_ptr_nonnull(c);
    te_engine *e = NULL;
    int rc = te_engine_create(c, &e);
    te_config_free(c);
    ck_assert_msg(rc == 0, "engine: %s", te_last_error());
    return e;
}

START_TEST(status_names_the_cause)
{
    char why[512] = "untouched";
    int rc = te_cuda_status(why, sizeof(why));
    ck_assert_int_lt(rc, 0);
    ASSERT_REASON(why);
    ASSERT_REASON(te_last_error());
    /* Asked again: the same answer, from the kept outcome. */
    char again[512];
    ck_assert_int_eq(te_cuda_status(again, sizeof(again)), rc);
    ck_assert_str_eq(again, why);
    /* A short buffer is truncated, not overrun. */
    char tiny[8];
    memset(tiny, 'x', sizeof(tiny));
    ck_assert_int_eq(te_cuda_status(tiny, 4), rc);
    ck_assert_int_eq((int)strlen(tiny), 3);
    ck_assert_int_eq(tiny[4], 'x');
}
END_TEST

START_TEST(pointer_info_names_the_cause)
{
    char host[64] = {0};
    te_cuda_ptr_info info;
    memset(&info, 0x5a, sizeof(info));
    ck_assert_int_lt(te_cuda_pointer_info(host, sizeof(host), &info), 0);
    ASSERT_REASON(te_last_error());
    ck_assert_int_eq(info.device, -1); /* cleared, not left as garbage */
    ck_assert_int_eq(te_cuda_pointer_info(NULL, 1, &info), -EINVAL);
    ck_assert_int_eq(te_cuda_pointer_info(host, 1, NULL), -EINVAL);
}
END_TEST

START_TEST(cuda_registration_refused_host_still_works)
{
    te_engine *e = make_engine();
    size_t len = 1 << 16;
    void *buf = aligned_alloc(4096, len);
    ck_assert_ptr_nonnull(buf);
    te_mr *mr = (te_mr *)0x1;
    int rc = te_mr_reg(e, 0, buf, len, TE_MR_REMOTE_WRITE, TE_MEM_CUDA, &mr);
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_eq(mr, (te_mr *)0x1); /* nothing handed out */
    ck_assert_msg(strstr(te_last_error(), "TE_MEM_CUDA"), "%s",
                  te_last_error());
    ASSERT_REASON(te_last_error());
    /* Host memory is unaffected by the missing driver. */
    mr = NULL;
    ck_assert_msg(te_mr_reg(e, 0, buf, len, TE_MR_REMOTE_WRITE, TE_MEM_HOST,
                            &mr) == 0, "%s", te_last_error());
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
    free(buf);
}
END_TEST

START_TEST(flag_and_watcher_refused)
{
    te_gpu_flag *f = (te_gpu_flag *)0x1;
    ck_assert_int_lt(te_gpu_flag_create(0, &f), 0);
    ck_assert_ptr_null(f);
    ASSERT_REASON(te_last_error());
    te_gpu_watcher *w = (te_gpu_watcher *)0x1;
    ck_assert_int_lt(te_gpu_watcher_create(0, 0, NULL, NULL, &w), 0);
    ck_assert_int_eq(te_gpu_watcher_create(0, 0x80, NULL, NULL, &w), -EINVAL);
    ck_assert_int_lt(te_gpu_watcher_create(0, 0, (te_gpu_watch_fn)1, NULL, &w),
                     0);
    ck_assert_ptr_null(w);
    ASSERT_REASON(te_last_error());
    /* NULL objects are harmless everywhere. */
    ck_assert_int_eq(te_gpu_flag_destroy(NULL), 0);
    ck_assert_int_eq(te_gpu_watcher_destroy(NULL), 0);
    ck_assert_ptr_null(te_gpu_flag_device_ptr(NULL));
    ck_assert_ptr_null(te_gpu_watcher_device_ptr(NULL));
    ck_assert_int_eq(te_gpu_watcher_wait(NULL, 1, 10), -EINVAL);
    ck_assert_int_eq(te_imm_expect_gpu_flag(NULL, 1, 1, 10, NULL, 1), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_no_driver");
    TCase *t = tcase_create("core");
    tcase_add_test(t, status_names_the_cause);
    tcase_add_test(t, pointer_info_names_the_cause);
    tcase_add_test(t, cuda_registration_refused_host_still_works);
    tcase_add_test(t, flag_and_watcher_refused);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
