/* See moe_job.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_job.h"

int moe_job_open(struct moe_job *j, const te_moe_config *c,
                 const char *const *settings)
{
    memset(j, 0, sizeof(*j));
    j->c = *c;
    for (uint32_t i = 0; i < c->ranks; i++) {
        te_config *cfg = te_config_new();
        if (!cfg) {
            fprintf(stderr, "moe job: out of memory\n");
            return -ENOMEM;
        }
        int rc = 0;
        for (const char *const *s = settings; !rc && s && *s; s++) {
            char b[256];
            snprintf(b, sizeof(b), "%s", *s);
            char *dot = strchr(b, '.'), *eq = strchr(b, '=');
            if (!dot || !eq || eq < dot) {
                fprintf(stderr, "moe job: setting \"%s\" is not "
                        "section.key=value\n", *s);
                rc = -EINVAL;
            } else {
                *dot = *eq = 0;
                if ((rc = te_config_set(cfg, b, dot + 1, eq + 1)))
                    fprintf(stderr, "moe job: setting \"%s\": %s\n", *s,
                            te_last_error());
            }
        }
        if (rc) {
            te_config_free(cfg);
            return rc;
        }
        rc = te_engine_create(cfg, &j->e[i]);
        te_config_free(cfg);
        if (rc) {
            fprintf(stderr, "moe job: engine %u: %s\n", i, te_last_error());
            return rc;
        }
        if ((rc = te_moe_rank_new(j->e[i], c, i, &j->r[i]))) {
            fprintf(stderr, "moe job: rank %u: %s\n", i, te_moe_last_error());
            return rc;
        }
    }
    static uint8_t blob[8192];
    for (uint32_t i = 0; i < c->ranks; i++) {
        size_t len = sizeof(blob);
        int rc = te_moe_rank_blob(j->r[i], blob, &len);
        for (uint32_t k = 0; !rc && k < c->ranks; k++)
            if (k != i)
                rc = te_moe_rank_connect(j->r[k], i, blob, len);
        if (rc) {
            fprintf(stderr, "moe job: connect: %s\n", te_moe_last_error());
            return rc;
        }
    }
    return 0;
}

void moe_job_inputs(struct moe_job *j, const uint32_t *tokens, uint64_t seed,
                    uint32_t skew)
{
    const te_moe_config *c = &j->c;
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    for (uint32_t i = 0; i < c->ranks; i++) {
        uint32_t t = tokens[i];
        j->tokens[i] = t;
        free(j->experts[i]);
        free(j->weights[i]);
        free(j->out[i]);
        if (!j->inplace || !j->x[i]) {
            free(j->x[i]);
            size_t n = j->inplace ? c->max_tokens : (t ? t : 1);
            j->x[i] = malloc(n * c->hidden * elem);
            if (j->inplace && j->x[i] &&
                te_moe_rank_input(j->r[i], j->x[i], n * c->hidden * elem))
                fprintf(stderr, "moe job: rank %u: input: %s\n", i,
                        te_moe_last_error());
        }
        j->experts[i] = malloc((size_t)(t ? t : 1) * c->topk * 2);
        j->weights[i] = malloc((size_t)(t ? t : 1) * c->topk * 4);
        j->out[i] = malloc((size_t)(t ? t : 1) * c->hidden * 4);
        uint64_t s = seed * 1000003u + i;
        for (size_t k = 0; k < (size_t)t * c->hidden; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float v = (float)((int)(s >> 41) % 2000 - 1000) / 512.0f;
            if (c->dtype == TE_MOE_BF16) {
                uint32_t u;
                memcpy(&u, &v, 4);
                ((uint16_t *)j->x[i])[k] = (uint16_t)(u >> 16);
            } else {
                ((float *)j->x[i])[k] = v;
            }
        }
        te_moe_route_random(c, t, seed * 7919 + i, skew, j->experts[i],
                            j->weights[i]);
    }
    uint32_t rows[TE_MOE_MAX_EXPERTS] = {0};
    j->capacity = 1;
    for (uint32_t i = 0; i < c->ranks; i++)
        for (size_t k = 0; k < (size_t)j->tokens[i] * c->topk; k++)
            if (++rows[j->experts[i][k]] > j->capacity)
                j->capacity = rows[j->experts[i][k]];
}

struct arg {
    struct moe_job *j;
    uint32_t i;
    uint64_t b;
};

static void *run_rank(void *p)
{
    struct arg *a = p;
    struct moe_job *j = a->j;
    j->bufs[a->i].index = j->index;
    j->rc[a->i] = moe_ref_batch(j->r[a->i], &j->bufs[a->i], a->b,
                                j->tokens[a->i], j->x[a->i], j->experts[a->i],
                                j->weights[a->i], j->capacity, j->out[a->i]);
    snprintf(j->why[a->i], sizeof(j->why[0]), "%s",
             j->rc[a->i] ? te_moe_last_error() : "");
    return NULL;
}

int moe_job_batch(struct moe_job *j, uint64_t b)
{
    pthread_t th[TE_MOE_MAX_RANKS];
    struct arg args[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < j->c.ranks; i++) {
        args[i] = (struct arg){j, i, b};
        pthread_create(&th[i], NULL, run_rank, &args[i]);
    }
    int rc = 0;
    for (uint32_t i = 0; i < j->c.ranks; i++) {
        pthread_join(th[i], NULL);
        if (j->rc[i] && !rc)
            rc = j->rc[i];
    }
    return rc;
}

uint64_t moe_job_check(struct moe_job *j)
{
    uint64_t bad = 0;
    for (uint32_t i = 0; i < j->c.ranks; i++) {
        size_t n = (size_t)j->tokens[i] * j->c.hidden;
        float *ref = malloc((n ? n : 1) * sizeof(float));
        moe_ref_dense(&j->c, j->tokens[i], j->x[i], j->experts[i],
                      j->weights[i], ref);
        for (size_t k = 0; k < n; k++)
            bad += ref[k] != j->out[i][k];
        free(ref);
    }
    return bad;
}

void moe_job_close(struct moe_job *j)
{
    /* Every rank's peers go before any engine: over efa/shm a write (a
     * heartbeat) to an in-process peer whose engine is gone crashes. */
    for (uint32_t i = 0; i < j->c.ranks; i++)
        if (j->r[i])
            te_moe_rank_disconnect(j->r[i]);
    for (uint32_t i = 0; i < j->c.ranks; i++) {
        te_moe_rank_free(j->r[i]);
        free(j->x[i]);
        free(j->experts[i]);
        free(j->weights[i]);
        free(j->out[i]);
        moe_ref_bufs_free(&j->bufs[i]);
    }
    for (uint32_t i = 0; i < j->c.ranks; i++)
        if (j->e[i])
            te_engine_destroy(j->e[i]);
}

void moe_job_describe(const struct moe_job *j, char *buf, size_t len)
{
    int n = j->e[0] ? te_engine_nic_count(j->e[0], 0) : 0;
    size_t at = (size_t)snprintf(buf, len, "plugin %s, %d NIC%s:",
                                 j->e[0] ? te_engine_plugin_name(j->e[0]) : "?",
                                 n, n == 1 ? "" : "s");
    for (int k = 0; k < n && at < len; k++) {
        te_nic_info info;
        if (te_engine_nic_info(j->e[0], 0, k, &info))
            break;
        at += (size_t)snprintf(buf + at, len - at, "%s%s", k ? "," : " ",
                               info.name);
    }
}
