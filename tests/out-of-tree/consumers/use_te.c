/* libtransferengine consumer: its version, and an engine on loopback. */
#include "consumer.h"

int main(void)
{
    const char *v = te_version();
    if (!v || !*v)
        return consumer_fail("use_te", "te_version() returned nothing", NULL);
    te_engine *e = consumer_engine("use_te");
    if (!e)
        return 1;
    printf("use_te: OK (libtransferengine %s, %d loopback NIC(s))\n", v,
           te_engine_nic_count(e, 0));
    te_engine_destroy(e);
    return 0;
}
