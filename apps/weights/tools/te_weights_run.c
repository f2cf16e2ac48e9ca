/* placeholder: replaced by the runtime commands */
#include <stdio.h>
#include <string.h>
#include "te_weights_cli.h"

void wt_fill_weights(const te_wt_model *m, uint64_t seed, uint8_t *data)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i + 1 < m->data_bytes; i += 2) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        data[i] = (uint8_t)x;
        data[i + 1] = (uint8_t)(0x3c + ((x >> 8) & 1) * 0x80 + ((x >> 9) & 3));
    }
}
int wt_cmd_train(const struct wt_cli *o) { (void)o; return 2; }
int wt_cmd_infer(const struct wt_cli *o) { (void)o; return 2; }
int wt_cmd_bench(const struct wt_cli *o, const char *self) { (void)o; (void)self; return 2; }
