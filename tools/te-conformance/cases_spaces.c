/* Immediate spaces (te_imm_space_*) through a real transport: two
 * subsystems of the remote engine use EQUAL indexes in their own spaces
 * while the local side writes both interleaved; each must count exactly its
 * own arrivals. Then one space is retired and late writes of its old life
 * are counted as stale, never banked. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conformance.h"
#include "wire_cmd.h"

enum { VALUES = 16, ROUNDS = 50, STALE = 5 };

/* One zero-length write with immediate imm to r (pinned on NIC nic). */
static te_request imm_write(struct conf *c, struct remote *r, uint32_t imm,
                            uint32_t nic, uint32_t nics)
{
    te_request q = conf_req(TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.route.kind = TE_ROUTE_PIN;
    q.route.nic = nic % nics;
    q.u.xfer.peer = r->peer;
    q.u.xfer.local = c->src;
    q.u.xfer.remote = &r->desc;
    return q;
}

static int submit_all(struct conf *c, struct remote *r, const uint32_t *imms,
                      int n)
{
    int nics = te_engine_nic_count(c->e, 0);
    te_completion *done = calloc((size_t)n, sizeof(*done));
    for (int i = 0; i < n; i++) {
        te_request q = imm_write(c, r, imms[i], (uint32_t)i, (uint32_t)nics);
        int64_t id = conf_submit(c, &q);
        if (id < 0) {
            free(done);
            CHECK_RC(id);
        }
    }
    int rc = conf_wait_completions(c, done, n);
    int bad = 0;
    for (int i = 0; i < n && !rc; i++)
        bad += done[i].status != 0;
    free(done);
    CHECK(rc == 0 && bad == 0, "%d imm writes: rc %d, %d failed", n, rc, bad);
    return CONF_PASS;
}

static int case_imm_spaces(struct conf *c)
{
    struct remote *r = &c->rem[0];
    if (!r->ops->space)
        return conf_skip(c, "this kind of remote cannot create immediate "
                         "spaces");
    uint64_t a0 = 0, b0 = 0;
    CHECK_RC(r->ops->space(r, CMD_SPACE_CREATE, 0, VALUES, &a0));
    CHECK_RC(r->ops->space(r, CMD_SPACE_CREATE, 1, VALUES, &b0));
    CHECK(a0 != b0, "two spaces start at the same raw value %llu",
          (unsigned long long)a0);
    /* Round k: index k % VALUES once in A, twice in B, interleaved. */
    uint32_t *imms = calloc(ROUNDS * 3, sizeof(uint32_t));
    int n = 0;
    for (int k = 0; k < ROUNDS; k++) {
        imms[n++] = (uint32_t)b0 + k % VALUES;
        imms[n++] = (uint32_t)a0 + k % VALUES;
        imms[n++] = (uint32_t)b0 + k % VALUES;
    }
    int rc = submit_all(c, r, imms, n);
    free(imms);
    if (rc)
        return rc;
    for (uint32_t v = 0; v < VALUES; v++) {
        uint64_t per = ROUNDS / VALUES + (v < ROUNDS % VALUES);
        CHECK_RC(r->ops->imm_wait(r, (uint32_t)a0 + v, per, CONF_TIMEOUT_MS));
        CHECK_RC(r->ops->imm_wait(r, (uint32_t)b0 + v, 2 * per, CONF_TIMEOUT_MS));
        uint64_t extra = 1;
        CHECK_RC(r->ops->imm_banked(r, (uint32_t)a0 + v, &extra));
        CHECK(extra == 0, "space A index %u: %llu arrivals of B credited",
              v, (unsigned long long)extra);
        CHECK_RC(r->ops->imm_banked(r, (uint32_t)b0 + v, &extra));
        CHECK(extra == 0, "space B index %u: %llu surplus", v,
              (unsigned long long)extra);
    }
    /* Retire A; writes to its old life arrive late: stale, never banked. */
    uint64_t a1 = 0;
    CHECK_RC(r->ops->space(r, CMD_SPACE_RETIRE, 0, 0, &a1));
    CHECK(a1 != a0, "retirement kept the raw values");
    uint32_t late[STALE];
    for (int i = 0; i < STALE; i++)
        late[i] = (uint32_t)a0 + 3;
    if ((rc = submit_all(c, r, late, STALE)))
        return rc;
    uint64_t stale = 0, deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    while (conf_now_ms() < deadline) {
        CHECK_RC(r->ops->space(r, CMD_SPACE_STALE, 0, 0, &stale));
        if (stale >= STALE)
            break;
        usleep(1000);
    }
    CHECK(stale == STALE, "%llu stale arrivals counted, want %d",
          (unsigned long long)stale, STALE);
    uint64_t banked = 1;
    CHECK_RC(r->ops->imm_banked(r, (uint32_t)a0 + 3, &banked));
    CHECK(banked == 0, "%llu late arrivals banked on a retired value",
          (unsigned long long)banked);
    CHECK_RC(r->ops->imm_banked(r, (uint32_t)a1 + 3, &banked));
    CHECK(banked == 0, "%llu late arrivals credited to the new life",
          (unsigned long long)banked);
    int wrc = r->ops->imm_wait(r, (uint32_t)a0 + 3, 1, 10);
    CHECK(wrc == -ESTALE, "waiting on a retired value: %d, want -ESTALE", wrc);
    return CONF_PASS;
}

const struct conf_case conf_cases_spaces[] = {
    {"imm_spaces", "two immediate spaces with equal indexes count apart; a "
     "retired life's late arrivals are stale, never credited",
     case_imm_spaces},
    {NULL, NULL, NULL}};
