/*
 * Strict command-line values for the tools (te-info, te-bench, te-demo,
 * te-soak, te-kv, te-weights, te-moe). atoi()/strtoul() accept garbage
 * ("abc" -> 0), wrap signs ("-5" -> 4294967291) and truncate overflow
 * (4294967297 -> 1) silently, and a huge count then turns into a huge
 * allocation; these refuse all of that with one line on stderr that names
 * the tool, the option and the accepted range, so the caller can exit 2
 * before starting anything. docs/tools.md lists every tool's ranges.
 */
#ifndef TE_ARGS_H
#define TE_ARGS_H

#include <stdint.h>

/** Exit status of a tool given a bad command line. */
#define TE_ARGS_EXIT 2

/**
 * Parse `v`, the value of option `opt` of tool `tool`, as a decimal whole
 * number in [min, max] (no sign, no spaces, nothing after the digits).
 * Returns 0 and sets *out, or prints "TOOL: OPT: expected a whole number
 * in MIN..MAX, got "V" (why)" and returns -1 (*out untouched).
 */
int te_arg_u64(const char *tool, const char *opt, const char *v,
               uint64_t min, uint64_t max, uint64_t *out);

/** te_arg_u64() for a 32-bit value. */
int te_arg_u32(const char *tool, const char *opt, const char *v,
               uint32_t min, uint32_t max, uint32_t *out);

/** te_arg_u64() for an int (min >= 0). */
int te_arg_int(const char *tool, const char *opt, const char *v,
               int min, int max, int *out);

/**
 * Parse `v` as a finite decimal number in [min, max] (no nan, inf, hex or
 * trailing text). Returns 0 and sets *out, or prints the reason naming
 * the option and returns -1.
 */
int te_arg_double(const char *tool, const char *opt, const char *v,
                  double min, double max, double *out);

/**
 * Print "TOOL: unknown option "ARG"" (or, when `missing_value` is set,
 * "TOOL: option "ARG" needs a value") and a pointer to --help.
 */
void te_arg_bad_option(const char *tool, const char *arg, int missing_value);

/**
 * The message for getopt_long()'s answer `c` (':' a missing value, '?' an
 * unknown option) when the option string starts with ':' and opterr is 0:
 * names the argument (argv[optind - 1], or "-X" for an unknown short
 * option X = optopt) through te_arg_bad_option().
 */
void te_arg_getopt_error(const char *tool, int c, char *const argv[],
                         int optind, int optopt);

/**
 * After option parsing: 0 if no operand is left (optind == argc), else
 * print "TOOL: unexpected argument "ARG"" naming the first and return -1.
 */
int te_arg_no_operands(const char *tool, int argc, char *const argv[],
                       int optind);

#endif
