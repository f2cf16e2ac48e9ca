/* The serving side of a remote: an engine, a registered test region and a
 * queue of received messages. Runs in this process or in a child. */
#ifndef TE_CONFORMANCE_SIDE_H
#define TE_CONFORMANCE_SIDE_H

#include <pthread.h>
#include "conformance.h"

#define SIDE_SPACES 2

struct side_msg {
    struct side_msg *next;
    size_t len;
    int from_known;
    uint8_t data[];
};

struct side {
    te_engine *e;
    uint8_t *buf;          /* = mem.host, the mirror (mem.h) */
    struct conf_mem mem;
    te_mr *mr;
    te_mr_desc desc;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct side_msg *head, *tail;
    te_imm_space *space[SIDE_SPACES]; /* CMD_SPACE_* */
};

/* One CMD_SPACE_* on space slot `slot` (a: size for CREATE); *v as the
 * command says. */
int side_space(struct side *s, uint32_t cmd, uint32_t slot, uint64_t a,
               uint64_t *v);

int side_open(struct side *s, const te_config *cfg);
void side_close(struct side *s);
int side_recv_wait(struct side *s, void *buf, size_t cap, size_t *len,
                   int *from_known, int timeout_ms);
/* Child-process server on fd; returns the exit status. */
int side_serve(const te_config *cfg, int fd);

#endif
