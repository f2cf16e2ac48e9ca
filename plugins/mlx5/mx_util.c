/*
 * The mlx5 plugin's u64-keyed hash map (remote NIC id -> conn, QP number ->
 * conn), so that lookups stay O(1) with thousands of peers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"

/* ------------------------------------------------------------------- map */

static uint32_t mx_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static int mx_map_grow(struct mx_map *m)
{
    uint32_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *keys = calloc(cap, sizeof(*keys));
    void **vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        uint32_t j = mx_hash(m->keys[i]) & (cap - 1);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int mx_map_put(struct mx_map *m, uint64_t key, void *val)
{
    if (!key)
        return -EINVAL;
    /* Load factor <= 1/2 keeps probe sequences short and loops finite. */
    if ((m->count + 1) * 2 > m->cap && mx_map_grow(m))
        return -ENOMEM;
    uint32_t j = mx_hash(key) & (m->cap - 1);
    while (m->keys[j] && m->keys[j] != key)
        j = (j + 1) & (m->cap - 1);
    if (!m->keys[j])
        m->count++;
    m->keys[j] = key;
    m->vals[j] = val;
    return 0;
}

void *mx_map_get(const struct mx_map *m, uint64_t key)
{
    if (!m->cap || !key)
        return NULL;
    uint32_t j = mx_hash(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (m->keys[j] == key)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void mx_map_del(struct mx_map *m, uint64_t key)
{
    if (!m->cap || !key)
        return;
    uint32_t mask = m->cap - 1, j = mx_hash(key) & mask;
    while (m->keys[j] && m->keys[j] != key)
        j = (j + 1) & mask;
    if (!m->keys[j])
        return;
    /* Backward-shift deletion: no tombstones, lookups stay exact. */
    uint32_t hole = j;
    for (uint32_t k = (j + 1) & mask; m->keys[k]; k = (k + 1) & mask) {
        uint32_t home = mx_hash(m->keys[k]) & mask;
        /* Move k into the hole unless its home lies in (hole, k]. */
        bool stays = hole <= k ? (home > hole && home <= k)
                               : (home > hole || home <= k);
        if (!stays) {
            m->keys[hole] = m->keys[k];
            m->vals[hole] = m->vals[k];
            hole = k;
        }
    }
    m->keys[hole] = 0;
    m->vals[hole] = NULL;
    m->count--;
}

void mx_map_free(struct mx_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
