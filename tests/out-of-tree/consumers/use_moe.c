/* libte-moe consumer: one rank of a two-rank layer on a loopback engine. */
#include <te/moe.h>

#include "consumer.h"

int main(void)
{
    te_moe_config c = {.ranks = 2, .experts = 4, .topk = 2, .hidden = 64,
                       .dtype = TE_MOE_FP32, .max_tokens = 8, .private_rows = 4};
    te_engine *e = consumer_engine("use_moe");
    if (!e)
        return 1;
    te_moe_rank *r;
    if (te_moe_rank_new(e, &c, 0, &r) != 0) {
        consumer_fail("use_moe", "te_moe_rank_new", te_moe_last_error());
        te_engine_destroy(e);
        return 1;
    }
    te_moe_rank_free(r);
    te_engine_destroy(e);
    printf("use_moe: OK\n");
    return 0;
}
