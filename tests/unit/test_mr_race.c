/*
 * te_mr_dereg / te_mr_revoke against te_submit on other threads (core/mr.c):
 * the claim is one compare-and-swap, so a request either holds the
 * registration first (the claim says -EBUSY) or finds it claimed (the
 * submit says -EBUSY); never a request on a registration being re-keyed or
 * freed. Run under TSan by scripts/sanitize.sh tsan.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"
#include "te/te.h"
#include "te_test.h"

#define SUBMITS 3000
#define REVOKES 100000   /* bound; the submitter ends the race */
#define WINDOW 8          /* writes in flight at most */
#define RUN_MS 20000      /* bound of either thread */

struct race {
    te_test_pair x;
    atomic_int stop;
    int submitted, refused, bad_status, other_error;
    int revoked, busy;
    char first_bad[256];
};

/* Completions of the submitter's writes; any status but 0 means a write
 * ran on a registration re-keyed under it. */
static void note(struct race *rc, int *counter, const char *what,
                 const char *why)
{
    if (!(*counter)++)
        snprintf(rc->first_bad, sizeof rc->first_bad, "%s: %s", what, why);
}

/* Completions of the submitter's writes; any status but 0 means a write
 * ran on a registration re-keyed under it. No Check calls off the test's
 * thread: failures are counted and asserted after the join. */
static int reap(struct race *rc, int min_left, int *inflight)
{
    while (*inflight > min_left) {
        te_completion c[WINDOW];
        int n = te_poll_completions(rc->x.a, c, WINDOW, 10000);
        if (n <= 0) {
            note(rc, &rc->other_error, "te_poll_completions",
                 n < 0 ? te_last_error() : "nothing within 10 s");
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (c[i].status)
                note(rc, &rc->bad_status, "write", te_strerror(c[i].status));
        *inflight -= n;
    }
    return 0;
}

static void *submitter(void *arg)
{
    struct race *rc = arg;
    int inflight = 0;
    int64_t end = te_test_now_ms() + RUN_MS;
    for (int i = 0; i < SUBMITS && te_test_now_ms() < end; i++) {
        te_request r = te_test_pair_write(&rc->x, 256, 5000);
        int64_t id = te_submit(rc->x.a, &r);
        if (id > 0) {
            rc->submitted++;
            inflight++;
        } else if (id == -EBUSY &&
                   strstr(te_last_error(), "being deregistered or revoked")) {
            rc->refused++;
        } else {
            note(rc, &rc->other_error, "te_submit", te_last_error());
        }
        /* Every third write: drain and pause, a window with nothing in
         * flight in which the revoker can win. */
        if (reap(rc, (i % 3) ? WINDOW - 1 : 0, &inflight))
            break;
        if (i % 3 == 0)
            usleep(200);
    }
    reap(rc, 0, &inflight);
    atomic_store(&rc->stop, 1);
    return NULL;
}

static void *revoker(void *arg)
{
    struct race *rc = arg;
    int64_t end = te_test_now_ms() + RUN_MS;
    /* Until the submitter is done: an -EBUSY answer is instant, so a
     * count of attempts would be spent within one burst of writes. */
    while (rc->revoked < REVOKES && !atomic_load(&rc->stop) &&
           te_test_now_ms() < end) {
        int r = te_mr_revoke(rc->x.a, rc->x.smr, NULL);
        if (r == 0) {
            rc->revoked++;
            usleep(50); /* room for the writes */
        } else if (r == -EBUSY) {
            rc->busy++;
            usleep(20);
        } else {
            note(rc, &rc->other_error, "te_mr_revoke", te_last_error());
        }
    }
    return NULL;
}

/* The source registration re-keyed over and over while writes from it are
 * submitted: every write that was admitted completes with status 0. */
START_TEST(revoke_races_submit)
{
    static struct race rc;
    memset(&rc, 0, sizeof rc);
    te_test_pair_open(&rc.x, "", "", 4096);
    pthread_t s, v;
    ck_assert_int_eq(pthread_create(&s, NULL, submitter, &rc), 0);
    ck_assert_int_eq(pthread_create(&v, NULL, revoker, &rc), 0);
    pthread_join(s, NULL);
    pthread_join(v, NULL);
    ck_assert_msg(!rc.bad_status && !rc.other_error, "%d bad completions, %d "
                  "other errors; first: %s", rc.bad_status, rc.other_error,
                  rc.first_bad);
    /* Both sides won sometimes, or the race was not run. */
    ck_assert_int_gt(rc.submitted, 0);
    ck_assert_int_gt(rc.revoked, 0);
    fprintf(stderr, "revoke_races_submit: %d writes, %d refused while "
            "claimed; %d revokes, %d busy\n", rc.submitted, rc.refused,
            rc.revoked, rc.busy);
    /* Nothing in flight: the registration can go. */
    ck_assert_int_eq(te_mr_dereg(rc.x.a, rc.x.smr), 0);
    rc.x.smr = NULL;
    te_test_pair_close(&rc.x);
}
END_TEST

/* The two sides of the claim, made deterministic: a hold blocks the claim,
 * a claim blocks the hold, and a refused submit leaves no reference. */
START_TEST(claim_and_hold_exclude_each_other)
{
    te_test_pair x;
    /* Caller progress: a submitted write stays in flight until polled. */
    te_test_pair_open(&x, "[engine]\nprogress = caller\n", "", 4096);
    ck_assert_int_eq(te_mr_hold(x.smr, "test"), 0);
    ck_assert_int_eq(te_mr_dereg(x.a, x.smr), -EBUSY);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "1 requests in flight"));
    ck_assert_int_eq(te_mr_revoke(x.a, x.smr, NULL), -EBUSY);
    te_mr_unhold(x.smr);

    /* As te_mr_dereg/te_mr_revoke hold it between their claim and the end. */
    atomic_store(&x.smr->users, TE_MR_CLAIMED);
    te_request r = te_test_pair_write(&x, 64, 1000);
    ck_assert_int_eq(te_submit(x.a, &r), -EBUSY);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "being deregistered or "
                                                  "revoked by another thread"));
    ck_assert_int_eq(atomic_load(&x.smr->users), TE_MR_CLAIMED);
    ck_assert_int_eq(te_mr_revoke(x.a, x.smr, NULL), -EBUSY);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "another thread is "
                                                  "deregistering or revoking"));
    atomic_store(&x.smr->users, 0);

    /* Released: a write goes and holds it until its completion is
     * reaped, then the registration can be re-keyed. */
    ck_assert_int_gt(te_submit(x.a, &r), 0);
    ck_assert_int_eq(atomic_load(&x.smr->users), 1);
    ck_assert_int_eq(te_mr_dereg(x.a, x.smr), -EBUSY);
    te_test_complete(x.a, 1, 5000);
    ck_assert_int_eq(te_mr_revoke(x.a, x.smr, NULL), 0);
    ck_assert_int_eq(atomic_load(&x.smr->users), 0);
    te_test_pair_close(&x);
}
END_TEST

TE_TEST_MAIN("mr_race",
             TE_TCASE_FULL("race", 120, NULL, NULL, revoke_races_submit,
                           claim_and_hold_exclude_each_other))
