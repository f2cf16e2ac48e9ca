/* te-conformance's command line: parsed and checked in full before
 * anything starts (no engine, no child, no file opened). */
#ifndef TE_CONFORMANCE_ARGS_H
#define TE_CONFORMANCE_ARGS_H

#include "conformance.h"

#define CONF_MAX_SETS 63       /* --set (one slot stays for --plugin) */
#define CONF_MAX_REMOTE_SETS 16
#define CONF_MAX_ONLY 64       /* --case */

/* What main.c needs besides struct conf. */
struct conf_args {
    const char *only[CONF_MAX_ONLY]; /* --case names, all known cases */
    int nonly;
    const char *left_out[CONF_MAX_ONLY]; /* --skip names, known cases */
    int nleft_out;
    int list;                        /* --list */
    int help;                        /* --help */
    int serve_fd;                    /* --serve FD (internal), else -1 */
    char plugin_set[4200];           /* "engine.plugin=..." or "" */
};

/* The cases, by suite, NULL-terminated (main.c). */
extern const struct conf_case *const conf_suites[];

/*
 * Parse argv into c and a. Every number is checked strictly (digits only:
 * no sign, no spaces, no suffix, no overflow, inside its range), every
 * --set/--remote-set has the form section.key=value, every --case and
 * --skip names a case, and the lists have room. Returns 0, or 2 after printing one line
 * "te-conformance: --OPTION VALUE: what is wrong" to stderr.
 */
int conf_args_parse(int argc, char **argv, struct conf *c,
                    struct conf_args *a);

/* The --help text. */
void conf_usage(FILE *f);

#endif
