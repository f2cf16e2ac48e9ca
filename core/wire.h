/*
 * Serialized engine addresses (one per group) and memory descriptors.
 * Format (docs/wire-format.md): little-endian; header
 *   u32 magic, u16 version, u16 total_len, u32 checksum (FNV-1a over the
 *   bytes after the header)
 * followed by a type-specific body. Parsers never read outside the input
 * and fail with a message naming the problem.
 */
#ifndef TE_CORE_WIRE_H
#define TE_CORE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "te/te.h"
#include "te/plugin.h"

#define TE_WIRE_ADDR_MAGIC 0x31414554u /* "TEA1" */
#define TE_WIRE_DESC_MAGIC 0x31444554u /* "TED1" */
#define TE_WIRE_VERSION 1
#define TE_WIRE_HEADER_LEN 12
#define TE_TRANSPORT_NAME_MAX 32

/** A group's address, parsed. */
struct te_group_addr {
    char transport[TE_TRANSPORT_NAME_MAX]; /* plugin name, NUL terminated */
    uint64_t engine_id;                    /* random per engine instance */
    uint32_t group;                        /* group index at the owner */
    uint32_t nic_count;                    /* 1..TE_MAX_NICS */
    uint16_t nic_addr_len[TE_MAX_NICS];
    uint8_t nic_addr[TE_MAX_NICS][TE_PLUGIN_MAX_ADDR_LEN];
};

/** Serialize; *len in: capacity, out: bytes (or needed size with -ENOSPC). */
int te_wire_addr_encode(const struct te_group_addr *a, void *buf, size_t *len);
/** Parse untrusted bytes. */
int te_wire_addr_decode(const void *buf, size_t len, struct te_group_addr *out);

/* te_desc_serialize() / te_desc_parse() of te.h are implemented in wire.c. */

/** FNV-1a 32-bit hash. */
uint32_t te_fnv1a32(const void *data, size_t len);

#endif
