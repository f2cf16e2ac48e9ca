/*
 * Assertion for fuzz targets: unlike assert() it is never compiled out, and
 * it aborts (libFuzzer and the replay driver report the input).
 */
#ifndef TE_FUZZ_CHECK_H
#define TE_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__,   \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/*
 * A property that a known, reported and not yet fixed bug violates
 * (docs/reliability.md lists them by id). Tolerated (reported once per id on
 * stderr) so that fuzzing and the corpus replay go on; FUZZ_STRICT=1 in the
 * environment makes it fatal, to check a fix against the stored reproducers.
 */
#define FUZZ_KNOWN(cond, id)                                                   \
    do {                                                                       \
        if (!(cond))                                                           \
            fuzz_known_issue(id, __FILE__, __LINE__, #cond);                   \
    } while (0)

/* FUZZ_STRICT=1: known issues are fatal and their triggers are not masked. */
static inline int fuzz_strict(void)
{
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("FUZZ_STRICT");
        v = s && s[0] == '1';
    }
    return v;
}

static inline void fuzz_known_issue(const char *id, const char *file, int line,
                                    const char *what)
{
    static const char *seen[16];
    static int nseen;
    if (fuzz_strict()) {
        fprintf(stderr, "%s:%d: known issue %s: property violated: %s\n", file,
                line, id, what);
        abort();
    }
    for (int i = 0; i < nseen; i++)
        if (seen[i] == id)
            return;
    if (nseen < 16)
        seen[nseen++] = id;
    if (!getenv("FUZZ_LB_QUIET"))
        fprintf(stderr, "%s:%d: known issue %s (tolerated; FUZZ_STRICT=1 makes "
                "it fatal): %s\n", file, line, id, what);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
