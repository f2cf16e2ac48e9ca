/*
 * Plain driver for the fuzz targets when they are built without libFuzzer
 * (TE_BUILD_FUZZERS=OFF, any compiler): runs LLVMFuzzerTestOneInput once on
 * every file named on the command line, or found (non-recursively, in name
 * order) in a directory named there. Each input is copied into a buffer of
 * exactly its size, so sanitizer builds catch over-reads as libFuzzer would.
 * Exit status 0 when every input ran (a property violation aborts).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_check.h"

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf)
            abort();
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0)
            break;
        if (len == cap) {
            if (cap >= (64u << 20)) {
                fprintf(stderr, "replay: %s: larger than 64 MiB\n", path);
                fclose(f);
                free(buf);
                return -1;
            }
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    fclose(f);
    /* Exactly len bytes, like libFuzzer's copy. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact)
        abort();
    memcpy(exact, buf, len);
    free(buf);
    if (getenv("FUZZ_REPLAY_VERBOSE"))
        fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int not_hidden(const struct dirent *d) { return d->d_name[0] != '.'; }

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    size_t runs = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            bad = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]) != 0;
            runs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, not_hidden, alphasort);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            bad = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                bad |= run_file(path) != 0;
                runs++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("replay: %zu inputs ran%s\n", runs, bad ? " (some unreadable)" : "");
    return bad || runs == 0 ? 1 : 0;
}
