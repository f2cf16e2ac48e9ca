/*
 * Shared by the consumer programs (tests/out-of-tree/consumers): each is
 * built against an INSTALLED TransferEngine, once with pkg-config and once
 * with find_package(TransferEngine), and run by tests/out-of-tree/run.sh.
 * An engine is created with no configuration and no TE_PLUGIN_PATH, so the
 * installed library must find the installed loopback plugin on its own.
 */
#ifndef TE_CONSUMER_H
#define TE_CONSUMER_H

#include <stdio.h>
#include <string.h>

#include <te/te.h>

/* Prints "NAME: FAIL: what (te_last_error())" and returns 1, for main(). */
static inline int consumer_fail(const char *name, const char *what, const char *why)
{
    fprintf(stderr, "%s: FAIL: %s%s%s%s\n", name, what, why ? " (" : "",
            why ? why : "", why ? ")" : "");
    return 1;
}

/* An engine on the default transport, which must be the installed loopback
 * with at least one NIC; NULL after printing why. */
static inline te_engine *consumer_engine(const char *name)
{
    te_engine *e = NULL;
    if (te_engine_create(NULL, &e) != 0) {
        consumer_fail(name, "te_engine_create", te_last_error());
        return NULL;
    }
    const char *plugin = te_engine_plugin_name(e);
    if (!plugin || strcmp(plugin, "loopback") != 0 || te_engine_nic_count(e, 0) < 1) {
        consumer_fail(name, "the engine did not open the loopback plugin", plugin);
        te_engine_destroy(e);
        return NULL;
    }
    return e;
}

#endif
