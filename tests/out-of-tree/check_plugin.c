/*
 * Built by run.sh against the INSTALLED library and headers (pkg-config
 * transferengine): prints the library version and checks that a plugin
 * built out of tree negotiates ABI 1.x using te/plugin.h only.
 * Usage: check_plugin PLUGIN.so EXPECTED_NAME
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <te/plugin.h>
#include <te/te.h>

static int fail(const char *what)
{
    fprintf(stderr, "check_plugin: FAIL: %s\n", what);
    return 1;
}

static void host_err(void *h, const char *fmt, ...) {}
static void host_log(void *h, int level, const char *fmt, ...) {}
static const char *host_get(void *h, const char *key) { return NULL; }
/* Negotiation only: every integer key reads 0 here (the engine's own
 * checks of a plugin's section are run.sh's te-info step). */
static int host_u64(void *h, const char *key, uint64_t *out)
{
    *out = 0;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return fail("usage: check_plugin PLUGIN.so EXPECTED_NAME");
    const char *v = te_version();
    if (!v || !*v)
        return fail("te_version() returned nothing");
    printf("libtransferengine %s\n", v);

    void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return fail(dlerror());
    void *sym = dlsym(dl, TE_PLUGIN_ENTRY_SYMBOL);
    if (!sym)
        return fail("no " TE_PLUGIN_ENTRY_SYMBOL " symbol");
    te_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    char err[256] = "";
    const struct te_plugin_ops *ops =
        entry(TE_PLUGIN_ABI_MAJOR, TE_PLUGIN_ABI_MINOR, err, sizeof err);
    if (!ops)
        return fail(err[0] ? err : "entry returned NULL");
    if (ops->abi_major != TE_PLUGIN_ABI_MAJOR)
        return fail("ABI major differs");
    if (ops->struct_size < TE_PLUGIN_OPS_MIN_SIZE_1_0)
        return fail("ops table shorter than ABI 1.0");
    if (!ops->name || strcmp(ops->name, argv[2]) != 0)
        return fail("unexpected plugin name");
    if (!ops->init || !ops->fini || !ops->device_count || !ops->post || !ops->poll)
        return fail("mandatory function missing");

    struct te_plugin_host host = {.struct_size = sizeof host, .host_ctx = NULL,
        .config_get = host_get, .set_error = host_err, .log = host_log,
        .config_u64 = host_u64};
    te_plugin_ctx *ctx = NULL;
    if (ops->init(&host, &ctx) != 0)
        return fail("init failed");
    int n = ops->device_count(ctx);
    ops->fini(ctx);
    printf("ok: plugin %s %s speaks ABI %u.%u (%u-byte table), %d device(s)\n",
           ops->name, ops->version ? ops->version : "?", (unsigned)ops->abi_major,
           (unsigned)ops->abi_minor, (unsigned)ops->struct_size, n);
    dlclose(dl);
    return 0;
}
