/* Strict command-line values for the tools (te_args.h). */
#include "te_args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Why v is not a whole number, or NULL if it is one (then *x is set). A
 * sign is refused before strtoull sees it: strtoull negates "-5" into a
 * huge value instead of failing. */
static const char *whole(const char *v, unsigned long long *x)
{
    if (!v || !*v)
        return "empty";
    if (*v < '0' || *v > '9')
        return *v == '-' ? "negative" : "not a number";
    char *end;
    errno = 0;
    *x = strtoull(v, &end, 10);
    if (errno == ERANGE)
        return "too large";
    if (*end)
        return "trailing characters";
    return NULL;
}

int te_arg_u64(const char *tool, const char *opt, const char *v,
               uint64_t min, uint64_t max, uint64_t *out)
{
    unsigned long long x = 0;
    const char *why = whole(v, &x);
    if (!why && (x < min || x > max))
        why = x < min ? "too small" : "too large";
    if (why) {
        fprintf(stderr, "%s: %s: expected a whole number in %llu..%llu, "
                "got \"%s\" (%s)\n", tool, opt, (unsigned long long)min,
                (unsigned long long)max, v ? v : "", why);
        return -1;
    }
    *out = x;
    return 0;
}

int te_arg_u32(const char *tool, const char *opt, const char *v,
               uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t x;
    if (te_arg_u64(tool, opt, v, min, max, &x))
        return -1;
    *out = (uint32_t)x;
    return 0;
}

int te_arg_int(const char *tool, const char *opt, const char *v,
               int min, int max, int *out)
{
    uint64_t x;
    if (te_arg_u64(tool, opt, v, (uint64_t)(min < 0 ? 0 : min),
                   (uint64_t)(max < 0 ? 0 : max), &x))
        return -1;
    *out = (int)x;
    return 0;
}

int te_arg_double(const char *tool, const char *opt, const char *v,
                  double min, double max, double *out)
{
    const char *why = NULL;
    double x = 0;
    if (!v || !*v) {
        why = "empty";
    } else if ((*v < '0' || *v > '9') && *v != '.' && *v != '-') {
        why = "not a number";
    } else {
        char *end;
        x = strtod(v, &end);
        /* strtod takes hex ("0x10") and "inf"/"nan" after a sign. */
        if (*end || end == v)
            why = "trailing characters";
        else if (!isfinite(x) || (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')))
            why = "not a decimal number";
        else if (x < min || x > max)
            why = x < min ? "too small" : "too large";
    }
    if (why) {
        fprintf(stderr, "%s: %s: expected a number in %g..%g, got \"%s\" "
                "(%s)\n", tool, opt, min, max, v ? v : "", why);
        return -1;
    }
    *out = x;
    return 0;
}

void te_arg_bad_option(const char *tool, const char *arg, int missing_value)
{
    if (missing_value)
        fprintf(stderr, "%s: option \"%s\" needs a value (%s --help)\n",
                tool, arg, tool);
    else
        fprintf(stderr, "%s: unknown option \"%s\" (%s --help lists them)\n",
                tool, arg, tool);
}

void te_arg_getopt_error(const char *tool, int c, char *const argv[],
                         int optind, int optopt)
{
    char shortopt[3] = {'-', (char)optopt, 0};
    /* An unknown short option may sit in a cluster ("-xv"): name only it. */
    const char *arg = c != ':' && optopt ? shortopt : argv[optind - 1];
    te_arg_bad_option(tool, arg, c == ':');
}

int te_arg_no_operands(const char *tool, int argc, char *const argv[],
                       int optind)
{
    if (optind >= argc)
        return 0;
    fprintf(stderr, "%s: unexpected argument \"%s\" (%s --help)\n", tool,
            argv[optind], tool);
    return -1;
}
