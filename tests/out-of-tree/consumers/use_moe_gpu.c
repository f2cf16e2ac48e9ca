/* libte-moe-gpu consumer (installs built with CUDA only): the library loads
 * and answers without a GPU or a driver (0 devices, reason in
 * te_moe_gpu_last_error()); the count is printed, not checked, since the
 * machine may have no GPU. */
#include <te/moe_gpu.h>

#include "consumer.h"

int main(void)
{
    int n = te_moe_gpu_device_count();
    if (n < 0)
        return consumer_fail("use_moe_gpu", "te_moe_gpu_device_count", te_moe_gpu_last_error());
    printf("use_moe_gpu: OK (%d CUDA device(s)%s%s)\n", n, n ? "" : ": ",
           n ? "" : te_moe_gpu_last_error());
    return 0;
}
