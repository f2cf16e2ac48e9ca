/*
 * Memory the caller owns, registered entry by entry (one entry per tensor
 * part on a trainer, per slice on a receiver), and the descriptor tables
 * that tell the other side where each entry lives. Not installed.
 */
#ifndef TE_WT_ENTRIES_H
#define TE_WT_ENTRIES_H

#include <stddef.h>

#include "te/te.h"
#include "wt_internal.h"

/* One caller range and its registration (mr NULL when len is 0). */
typedef struct wt_entry {
    void *addr;
    uint64_t len;
    uint32_t mem;
    te_mr *mr;
} wt_entry;

/* n entries registered on group 0 of e with one access mode. */
typedef struct wt_entries {
    te_engine *e;
    uint32_t n;
    uint32_t access;
    wt_entry *v;
    uint64_t registrations; /* te_mr_reg calls made so far (tests, stats) */
} wt_entries;

int wt_entries_init(wt_entries *s, te_engine *e, uint32_t n, uint32_t access);
/* Point entry i at [addr, addr+len): registers it unless it already is
 * registered for exactly that range and kind (re-registration only when an
 * address changes). `what` names the entry in errors. */
int wt_entries_set(wt_entries *s, uint32_t i, void *addr, uint64_t len,
                   uint32_t mem, const char *what);
/* New keys on every registered entry (te_mr_revoke): descriptors handed
 * out before stop working. 0, or the first failure (the others still
 * tried), its reason in why[0..len). */
int wt_entries_revoke(wt_entries *s, char *why, size_t len);
/* Deregister every entry (an -EBUSY one is left registered and reported). */
int wt_entries_release(wt_entries *s);
/* Whether [p, p+len) lies inside one entry's range. */
int wt_entries_cover(const wt_entries *s, const void *p, uint64_t len);

/* Write <dir>/<role>-<rank>.table (atomically): `version` and one
 * descriptor per entry (empty for an entry of length 0). */
int wt_table_publish(const char *dir, const char *role, uint32_t rank,
                     uint32_t version, const wt_entries *s);
/* Read that table; it must be for exactly `version` and hold n entries.
 * out[i] receives entry i's descriptor (len 0 when empty). */
int wt_table_read(const char *dir, const char *role, uint32_t rank,
                  uint32_t version, uint32_t n, te_mr_desc *out);
#endif
