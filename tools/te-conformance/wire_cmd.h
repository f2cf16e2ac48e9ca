/* The suite's parent/child command protocol over a socketpair. */
#ifndef TE_CONFORMANCE_WIRE_CMD_H
#define TE_CONFORMANCE_WIRE_CMD_H

#include <stddef.h>
#include <stdint.h>
#include "te/te.h"

enum {
    CMD_FILL = 1,      /* a = off, b = len, imm = seed */
    CMD_FETCH = 2,     /* a = off, b = len -> payload */
    CMD_IMM_WAIT = 3,  /* imm, a = count, b = timeout ms */
    CMD_IMM_BANKED = 4,/* imm -> v */
    CMD_IMM_REMOVE = 5,/* imm -> v */
    CMD_RECV_WAIT = 6, /* b = timeout ms -> payload, v = from_known */
    CMD_QUIT = 7,
    /* Immediate spaces of the remote (side_space()): imm = slot 0..1. */
    CMD_SPACE_CREATE = 8,  /* a = size -> v = raw value of index 0 */
    CMD_SPACE_RETIRE = 9,  /* -> v = raw value of index 0 of the new life */
    CMD_SPACE_STALE = 10,  /* -> v = stale arrivals */
};

struct cmd_hello {
    int32_t rc;
    char error[256];
    uint64_t addr_len, desc_len;
    uint8_t addr[TE_ADDR_MAX];
    uint8_t desc[TE_DESC_MAX];
};

struct cmd_addr {
    uint64_t len;
    uint8_t addr[TE_ADDR_MAX];
};

/* The child's answer to cmd_addr: te_peer_add's result and, when it
 * refused, te_last_error() there (the plugin's own words). */
struct cmd_peer_reply {
    int32_t rc;
    char error[256];
};

struct cmd_req {
    uint32_t cmd, imm;
    uint64_t a, b;
};

struct cmd_reply {
    int32_t rc;
    uint32_t pad;
    uint64_t v, len;
};

/* Whole-buffer I/O; timeout_ms < 0 waits forever (child side only). */
int cmd_write(int fd, const void *buf, size_t len);
int cmd_read(int fd, void *buf, size_t len, int timeout_ms);

#endif
