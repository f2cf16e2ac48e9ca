/*
 * Random ids and secrets of a plugin (NIC ids, first rkeys, QP PSNs,
 * handshake secrets): the kernel's getrandom(), never blocking.
 */
#ifndef TPC_RNG_H
#define TPC_RNG_H

#include <stddef.h>
#include <stdint.h>

/*
 * Fill buf with len random bytes. Where the kernel has no entropy yet
 * (early boot, a fresh guest) the bytes mix the clock, the pid and a
 * counter: unique in practice, but then a secret made of them guards only
 * against accidents, not attackers.
 */
void tpc_random_bytes(void *buf, size_t len);

/* A random 64-bit id, never 0 (0 means "none" in the plugins' tables). */
uint64_t tpc_random64(void);

#endif
