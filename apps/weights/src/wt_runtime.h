/* Internal pieces of the trainer / receiver runtime (not installed). */
#ifndef TE_WT_RUNTIME_H
#define TE_WT_RUNTIME_H

#include "te/te.h"
#include "wt_internal.h"

/* A parsed rendezvous record. */
typedef struct wt_endpoint {
    uint32_t ready_version;
    uint32_t imm_base;        /* receivers: raw imm of slice index 0 */
    uint32_t addr_len;
    uint8_t addr[TE_ADDR_MAX];
    te_mr_desc desc;
} wt_endpoint;

double wt_now(void);
/* Publish <dir>/<role>-<rank> with e's group-0 address and mr's descriptor. */
int wt_publish(const char *dir, const char *role, uint32_t rank,
               uint32_t ready_version, uint32_t imm_base, te_engine *e,
               const te_mr *mr);
/* Wait (<= timeout_ms) for a record with ready_version >= min_version. */
int wt_lookup(const char *dir, const char *role, uint32_t rank,
              uint32_t min_version, int timeout_ms, wt_endpoint *out);
/* index of each slice among its rank's slices (TE_WT_IMM's index). */
uint32_t *wt_slice_index(const te_wt_sharding *sh);
/* The WRITE request of slice k as a trainer submits it (for counts). */
void wt_slice_request(const te_wt_schedule *s, const te_wt_slice *sl,
                      uint32_t imm, te_request *r);

#endif
