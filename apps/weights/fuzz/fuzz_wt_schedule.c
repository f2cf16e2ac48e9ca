/*
 * Fuzz target: te_wt_schedule_parse() on untrusted bytes, alone and against
 * the small model's sharding. An accepted schedule must serialise back to
 * the same bytes, and one accepted against the model must name each slice
 * exactly once with in-bounds staging ranges.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "te/weights.h"

static te_wt_model *model;
static te_wt_sharding *sharding;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    te_wt_infer_layout l = {2, 2, 0, 1};
    if (te_wt_preset_model(TE_WT_SMALL_MOE, &model) ||
        te_wt_sharding_build(model, &l, &sharding))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    te_wt_schedule *s = NULL;
    if (te_wt_schedule_parse(data, size, NULL, NULL, &s) == 0) {
        void *buf;
        size_t len;
        FUZZ_CHECK(te_wt_schedule_serialize(s, &buf, &len) == 0);
        FUZZ_CHECK(len == size && memcmp(buf, data, len) == 0);
        free(buf);
        te_wt_schedule_free(s);
    } else {
        FUZZ_CHECK(te_wt_last_error()[0] != 0);
    }
    if (te_wt_schedule_parse(data, size, model, sharding, &s) == 0) {
        for (uint64_t w = 0; w < s->nwrites; w++) {
            const te_wt_slice *sl = &sharding->slices[s->writes[w].slice];
            FUZZ_CHECK(s->writes[w].staging_off + sl->bytes <= s->staging_bytes);
        }
        te_wt_schedule_free(s);
    }
    return 0;
}
