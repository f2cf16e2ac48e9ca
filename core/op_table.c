/* Posted operations' contexts per NIC (see op_table.h for why). */
#include "op_table.h"

#include <stdlib.h>
#include "te_hot.h"

#define TE_OP_TABLE_FIRST 256u

TE_HOT
uint32_t te_op_table_room(struct te_op_table *t, uint32_t want)
{
    uint32_t have = t->cap - t->used;
    while (have < want && t->cap < TE_OP_TABLE_MAX) {
        uint32_t cap = t->cap ? t->cap * 2 : TE_OP_TABLE_FIRST;
        struct te_op_slot *s = realloc(t->slot, (size_t)cap * sizeof(*s));
        if (!s)
            break; /* post fewer now; the queue keeps the rest */
        /* New slots go on the free list, generation 0 (free). */
        for (uint32_t i = t->cap; i < cap; i++) {
            s[i].ctx = 0;
            s[i].gen = 0;
            s[i].next = i + 1 < cap ? i + 2 : t->free1;
        }
        t->free1 = t->cap + 1;
        t->slot = s;
        have += cap - t->cap;
        t->cap = cap;
    }
    return have < want ? have : want;
}

void te_op_table_free(struct te_op_table *t)
{
    free(t->slot);
    t->slot = NULL;
    t->cap = t->free1 = t->used = 0;
}
