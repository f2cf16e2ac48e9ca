/* Command line of the one-process tests (alone_args.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alone_args.h"

static const struct {
    unsigned bit;
    const char *name, *range;
    long long lo, hi;
} opts[] = {
    {TB_ARG_ITERS, "--iters", NULL, 1, 0}, /* 1..the test's iters_max */
    {TB_ARG_SIZE, "--size", "0..67108864 bytes", 0, 64ll << 20},
    {TB_ARG_GAP, "--gap-us", "0..1000000", 0, 1000000},
    {TB_ARG_REPS, "--reps", "1..64", 1, 64},
    {TB_ARG_SET, "--set", NULL, 0, 0},
};

static void usage(const char *test, unsigned allowed)
{
    fprintf(stderr, "te-bench: %s takes", test);
    for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++)
        if (allowed & opts[k].bit)
            fprintf(stderr, " %s", opts[k].name);
    fprintf(stderr, "\n");
}

static void set_value(struct tb_alone_args *a, unsigned bit, long long v)
{
    switch (bit) {
    case TB_ARG_ITERS: a->iters = (long)v; break;
    case TB_ARG_SIZE: a->len = (unsigned long long)v; break;
    case TB_ARG_GAP: a->gap_us = (long)v; break;
    case TB_ARG_REPS: a->reps = (int)v; break;
    }
}

int tb_alone_parse(int argc, char **argv, const char *test, unsigned allowed,
                   struct tb_alone_args *a)
{
    for (int i = 1; i < argc; i += 2) {
        const char *name = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "te-bench: %s needs a value\n", name);
            return 2;
        }
        if (!strcmp(name, "--test"))
            continue;
        size_t k = 0;
        while (k < sizeof(opts) / sizeof(opts[0]) &&
               (strcmp(name, opts[k].name) || !(allowed & opts[k].bit)))
            k++;
        if (k == sizeof(opts) / sizeof(opts[0])) {
            fprintf(stderr, "te-bench: %s: unknown option %s; ", test, name);
            usage(test, allowed);
            return 2;
        }
        if (opts[k].bit == TB_ARG_SET) {
            const char *dot = strchr(v, '.'), *eq = strchr(v, '=');
            if (!dot || !eq || eq < dot) {
                fprintf(stderr, "te-bench: --set %s: want section.key=value\n",
                        v);
                return 2;
            }
            if (a->nsets == TB_ALONE_MAX_SETS) {
                fprintf(stderr, "te-bench: at most %d --set\n",
                        TB_ALONE_MAX_SETS);
                return 2;
            }
            a->sets[a->nsets++] = v;
            continue;
        }
        long long hi = opts[k].bit == TB_ARG_ITERS ? a->iters_max : opts[k].hi;
        char *end = NULL;
        errno = 0;
        long long n = strtoll(v, &end, 0);
        if (errno || end == v || *end || n < opts[k].lo || n > hi) {
            if (opts[k].range)
                fprintf(stderr, "te-bench: bad value \"%s\" for %s (%s)\n",
                        v, name, opts[k].range);
            else
                fprintf(stderr, "te-bench: bad value \"%s\" for %s (%lld..%lld)"
                        "\n", v, name, opts[k].lo, hi);
            return 2;
        }
        set_value(a, opts[k].bit, n);
    }
    return 0;
}
