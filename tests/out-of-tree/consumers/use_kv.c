/* libte-kv consumer: a preset shape and a page pool. */
#include <stdint.h>
#include <te/kv.h>

#include "consumer.h"

int main(void)
{
    te_kv_shape s;
    if (te_kv_shape_preset("llama-3.1-70b", 0, &s) != 0)
        return consumer_fail("use_kv", "te_kv_shape_preset", te_kv_last_error());
    te_kv_pool *p;
    if (te_kv_pool_new(4, &p) != 0)
        return consumer_fail("use_kv", "te_kv_pool_new", te_kv_last_error());
    uint32_t idx[3], free_pages = 0, used = 0, fencing = 0;
    int rc = te_kv_pool_alloc(p, 3, idx);
    te_kv_pool_counts(p, &free_pages, &used, &fencing);
    te_kv_pool_free(p);
    if (rc != 0 || free_pages != 1 || used != 3)
        return consumer_fail("use_kv", "a pool of 4 pages after allocating 3 is not 1 free, 3 used", NULL);
    printf("use_kv: OK (%llu bytes per token)\n", (unsigned long long)te_kv_token_bytes(&s));
    return 0;
}
