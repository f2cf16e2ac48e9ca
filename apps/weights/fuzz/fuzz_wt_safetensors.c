/*
 * Fuzz target: te_wt_safetensors_parse() on untrusted bytes, both as a
 * header alone and as a whole file; an accepted header must describe
 * sorted, non-overlapping, in-bounds tensors, and the sharding rules must
 * then either cut it or refuse it with a message (never crash).
 */
#include <string.h>

#include "fuzz_check.h"
#include "te/weights.h"
#include "wt_internal.h"

static void check_model(const te_wt_model *m)
{
    uint64_t end = 0;
    for (uint32_t i = 0; i < m->count; i++) {
        const te_wt_tensor *t = &m->tensors[i];
        FUZZ_CHECK(t->offset == end);
        FUZZ_CHECK(t->nbytes == wt_elements(t) * te_wt_dtype_size(t->dtype));
        end = t->offset + t->nbytes;
    }
    FUZZ_CHECK(end == m->data_bytes);
    te_wt_infer_layout l = {2, 2, 0, 1};
    te_wt_sharding *s = NULL;
    if (te_wt_sharding_build(m, &l, &s) == 0) {
        for (uint64_t k = 0; k < s->nslices; k++)
            FUZZ_CHECK(s->slices[k].dst_off + s->slices[k].bytes <=
                       s->rank_bytes[s->slices[k].rank]);
        te_wt_sharding_free(s);
    } else {
        FUZZ_CHECK(te_wt_last_error()[0] != 0);
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    for (int whole = 0; whole < 2; whole++) {
        te_wt_model *m = NULL;
        int rc = te_wt_safetensors_parse(data, size, whole, &m);
        if (rc == 0) {
            FUZZ_CHECK(m != NULL);
            if (whole)
                FUZZ_CHECK(size >= 8 && m->data_bytes <= size - 8);
            check_model(m);
            te_wt_model_free(m);
        } else {
            FUZZ_CHECK(rc < 0 && te_wt_last_error()[0] != 0);
        }
    }
    return 0;
}
