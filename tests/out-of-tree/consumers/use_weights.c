/* libte-weights consumer: the tensor table of the smallest preset. */
#include <te/weights.h>

#include "consumer.h"

int main(void)
{
    te_wt_preset preset;
    te_wt_model *m;
    if (te_wt_preset_parse("small", &preset) != 0)
        return consumer_fail("use_weights", "te_wt_preset_parse", te_wt_last_error());
    if (te_wt_preset_model(preset, &m) != 0)
        return consumer_fail("use_weights", "te_wt_preset_model", te_wt_last_error());
    unsigned long long params = te_wt_model_params(m);
    te_wt_model_free(m);
    if (params == 0)
        return consumer_fail("use_weights", "the preset has no parameters", NULL);
    printf("use_weights: OK (preset %s, %llu parameters)\n", te_wt_preset_name(preset), params);
    return 0;
}
