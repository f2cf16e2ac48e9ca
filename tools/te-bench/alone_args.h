/*
 * The small command line of te-bench's one-process tests (waitlat,
 * idleturn): --iters, --size, --gap-us, --reps and --set, each test
 * taking the ones it names.
 */
#ifndef TB_ALONE_ARGS_H
#define TB_ALONE_ARGS_H

#define TB_ALONE_MAX_SETS 16

enum {
    TB_ARG_ITERS = 1,  /* --iters N (1..iters_max) */
    TB_ARG_SIZE = 2,   /* --size BYTES (0..64 MiB) */
    TB_ARG_GAP = 4,    /* --gap-us US (0..1000000) */
    TB_ARG_REPS = 8,   /* --reps N (1..64) */
    TB_ARG_SET = 16,   /* --set section.key=value, repeatable */
};

struct tb_alone_args {
    long iters;
    long iters_max;    /* the test's bound on --iters */
    unsigned long long len;
    long gap_us;
    int reps;
    const char *sets[TB_ALONE_MAX_SETS];
    int nsets;
};

/** Parse argv (its --test pair skipped) into *a, whose fields hold the
 *  test's defaults; only the options in `allowed` are accepted. 0, or 2
 *  after printing why (the exit status of a bad argument). */
int tb_alone_parse(int argc, char **argv, const char *test, unsigned allowed,
                   struct tb_alone_args *a);

#endif
