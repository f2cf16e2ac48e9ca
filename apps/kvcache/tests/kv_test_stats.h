/* Prefiller counters as a test may assert them.
 *
 * A prefiller counts a request as completed, failed or cancelled only after
 * all its writes completed at the initiator; the decoder can see the last
 * immediate (and the test go on) before that. Reading the counters once is
 * a race under load, so a test waits, bounded, until `finished` requests
 * are counted, then asserts on what it got. */
#ifndef KV_TEST_STATS_H
#define KV_TEST_STATS_H

#include <unistd.h>

#include "te/kv.h"

static inline te_kv_prefiller_stats kv_test_stats_after(te_kv_prefiller *p,
                                                        uint64_t finished)
{
    te_kv_prefiller_stats st;
    for (int i = 0; i < 10000; i++) { /* 10 s at most */
        te_kv_prefiller_stats_get(p, &st);
        if (st.completed + st.failed + st.cancelled >= finished)
            break;
        usleep(1000);
    }
    return st;
}

#endif
