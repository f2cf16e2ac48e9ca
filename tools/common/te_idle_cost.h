/*
 * What a process costs while nothing happens: the idle-cost benchmarks of
 * the apps (te-kv-decoder-idle, te-moe-proxy-idle) sleep on the calling
 * thread and read the process's resource usage around the sleep.
 */
#ifndef TE_IDLE_COST_H
#define TE_IDLE_COST_H

/** The process's cost over one sleep of the calling thread. */
struct te_idle_cost {
    double cores;       /* CPU time (user + system, all threads) per wall second */
    double wakes_per_s; /* voluntary context switches per wall second */
};

/**
 * Sleep `seconds` on the calling thread (resumed after signals) and
 * return what the whole process spent meanwhile. The calling thread's own
 * wake-up at the end of the sleep is not counted.
 */
struct te_idle_cost te_idle_cost_measure(unsigned seconds);

/** No exit: te_idle_cost_args() found SECONDS (or none) and the tool goes on. */
#define TE_IDLE_COST_GO_ON (-1)

/**
 * The idle tools' command line, `tool [SECONDS]` (1..60, default kept in
 * *seconds), parsed strictly (te_args.h): TE_IDLE_COST_GO_ON, or the
 * status to exit with: 0 after -h/--help (usage on stderr), TE_ARGS_EXIT
 * for a bad command line (the reason on stderr).
 */
int te_idle_cost_args(const char *tool, int argc, char **argv,
                      unsigned *seconds);

#endif
