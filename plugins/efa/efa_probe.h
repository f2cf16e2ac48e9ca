/*
 * Quirk probing: what a libfabric provider really does, measured at start
 * with two endpoints of this process writing to each other, instead of what
 * it advertises. Depends on libfabric only, so tests/unit/test_efa_probe.c
 * runs it directly. docs/efa.md lists the quirks found on libfabric 1.17.
 */
#ifndef EFA_PROBE_H
#define EFA_PROBE_H

#include <stdint.h>
#include <rdma/fabric.h>

/* Completion level asked of writes (efa.completion). */
enum efa_completion {
    EFA_COMPL_AUTO = 0,     /* chosen by the probe */
    EFA_COMPL_DEFAULT = 1,  /* the provider's default (no flag) */
    EFA_COMPL_TRANSMIT = 2, /* FI_TRANSMIT_COMPLETE */
    EFA_COMPL_DELIVERY = 3, /* FI_DELIVERY_COMPLETE */
};

/* Each verdict: 1 = works, 0 = broken (measured), -1 = not measured. */
struct efa_probe_result {
    int imm_write;     /* 8-byte write with remote CQ data: bytes and data */
    int imm_zero;      /* zero-length write with remote CQ data delivered */
    int read;          /* 8-byte fi_read returns the remote bytes */
    int inject_data;   /* fi_inject_writedata: bytes right after clobbering */
    int inject_zero;   /* zero-length fi_inject_writedata: data delivered */
    int inject_send;   /* fi_inject of 8-byte messages: bytes after
                        * clobbering, each received once */
    int source;        /* remote CQ entries name the sender (FI_SOURCE) */
    int zero[4];       /* per enum efa_completion: zero-length write done */
    int key_error[4];  /* per level: a forged-key write completes in error */
    int emulated_write; /* efa: FI_OPT_EFA_EMULATED_WRITE (-1 unknown) */
    int completion;    /* chosen enum efa_completion (never AUTO) */
    int key_errors_reported; /* at the chosen level */
    char notes[1024];  /* the quirks found, "; "-separated */
};

/*
 * Probe the provider of `info` (an FI_EP_RDM entry with FI_RMA). timeout_ms
 * bounds each wait for an event that a working provider delivers at once.
 * `completion` forces the level (EFA_COMPL_AUTO: measure and choose).
 * Returns 0 with *r filled, or a negative errno when no endpoint pair could
 * be built (message in err).
 */
int efa_probe_run(const struct fi_info *info, uint32_t timeout_ms,
                  int completion, struct efa_probe_result *r, char *err,
                  size_t errlen);

/* FI_ flag for a completion level. */
uint64_t efa_completion_flag(int completion);
const char *efa_completion_name(int completion);

#endif
