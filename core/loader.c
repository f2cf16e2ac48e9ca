/*
 * Plugin discovery and ABI negotiation (see loader.h and docs/plugin-guide.md).
 *
 * Error codes:
 *   -EINVAL        bad name, NULL argument, table missing a mandatory field
 *   -ENOENT        no file found anywhere on the search path
 *   -ENAMETOOLONG  a candidate path does not fit struct te_loaded_plugin.path
 *   -ENOEXEC       dlopen() failed, or the object has no entry symbol
 *   -ENOTSUP       the entry point returned NULL (the plugin declined)
 *   -EPROTO        ABI major mismatch or a table shorter than the 1.0 layout
 *   other          stat() failure on a candidate (e.g. -EACCES)
 */
#define _GNU_SOURCE
#include "loader.h"
#include "plugin_config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "te_error.h"

#ifndef TE_PLUGIN_RELATIVE_DIR /* the plugin dir relative to the prefix */
#define TE_PLUGIN_RELATIVE_DIR "lib/transferengine"
#endif
#ifndef TE_PLUGIN_INSTALL_DIR
#define TE_PLUGIN_INSTALL_DIR "/usr/local/lib/transferengine"
#endif

#define PLUGIN_PREFIX "libte-plugin-"
#define PLUGIN_SUFFIX ".so"
#define WHY_LEN 1024

/* Copy prefix and src into dst (size bytes), truncating quietly. */
static void copy_trunc(char *dst, size_t size, const char *prefix, const char *src)
{
    size_t pl = strnlen(prefix, size - 1);
    memcpy(dst, prefix, pl);
    size_t n = strnlen(src, size - 1 - pl);
    memcpy(dst + pl, src, n);
    dst[pl + n] = '\0';
}

/* ------------------------------------------------------------ ABI checks */

/* A mandatory 1.0 function pointer, by field name, for the message. */
#define MANDATORY(f) { #f, offsetof(struct te_plugin_ops, f) }
static const struct {
    const char *name;
    size_t off;
} mandatory_fns[] = {
    MANDATORY(init),     MANDATORY(fini),        MANDATORY(device_count),
    MANDATORY(query_device), MANDATORY(nic_open), MANDATORY(nic_close),
    MANDATORY(nic_address),  MANDATORY(mr_reg),   MANDATORY(mr_dereg),
    MANDATORY(peer_add),     MANDATORY(peer_remove), MANDATORY(post),
    MANDATORY(poll),
};
#undef MANDATORY

/*
 * Check a table; on refusal write the reason (without the plugin's
 * location) to why and return -errno. Fields are read in an order that
 * never touches memory past what struct_size promises.
 */
static int check_ops(const struct te_plugin_ops *ops, char *why, size_t len)
{
    if (!ops) {
        snprintf(why, len, "entry point returned no ops table");
        return -EINVAL;
    }
    if (ops->abi_major != TE_PLUGIN_ABI_MAJOR) {
        snprintf(why, len,
                 "plugin speaks ABI %u.%u, core speaks %u.%u (major versions differ)",
                 (unsigned)ops->abi_major, (unsigned)ops->abi_minor,
                 (unsigned)TE_PLUGIN_ABI_MAJOR, (unsigned)TE_PLUGIN_ABI_MINOR);
        return -EPROTO;
    }
    if (ops->struct_size < TE_PLUGIN_OPS_MIN_SIZE_1_0) {
        snprintf(why, len,
                 "ops table too small: %u bytes < %zu bytes required by ABI 1.0",
                 (unsigned)ops->struct_size, (size_t)TE_PLUGIN_OPS_MIN_SIZE_1_0);
        return -EPROTO;
    }
    if (!ops->name || !ops->name[0]) {
        snprintf(why, len, "ops table has no name (field 'name' is %s)",
                 ops->name ? "empty" : "NULL");
        return -EINVAL;
    }
    for (size_t i = 0; i < sizeof mandatory_fns / sizeof mandatory_fns[0]; i++) {
        void (*fn)(void);
        memcpy(&fn, (const char *)ops + mandatory_fns[i].off, sizeof fn);
        if (!fn) {
            snprintf(why, len, "mandatory function '%s' is NULL in plugin \"%s\"",
                     mandatory_fns[i].name, ops->name);
            return -EINVAL;
        }
    }
    struct te_pcfg keys;
    char kwhy[256];
    int rc = te_pcfg_read(ops, &keys, kwhy, sizeof kwhy);
    if (rc) {
        snprintf(why, len, "plugin \"%s\" declares a malformed configuration "
                 "key table: %s", ops->name, kwhy);
        return rc;
    }
    te_pcfg_free(&keys);
    return 0;
}

int te_plugin_check_ops(const struct te_plugin_ops *ops, const char *where)
{
    char why[WHY_LEN];
    int rc = check_ops(ops, why, sizeof why);
    if (rc)
        return te_fail(rc, "plugin %s refused: %s", where ? where : "(unknown)", why);
    return 0;
}

/* ----------------------------------------------------------- one file */

/* Outcome of trying one candidate file. */
enum try_result {
    TRY_OK,
    TRY_MISSING, /* nothing there: the search may go on */
    TRY_REFUSED, /* a file was there but cannot be used: the search stops */
};

/*
 * Load one file. On failure, why receives a phrase that follows the path
 * ("refused: ...", "cannot be opened: ...", ...) and tag a short form for
 * the list of places tried.
 */
static enum try_result try_path(const char *path, struct te_loaded_plugin *out,
                                int *err, char *why, size_t whylen,
                                const char **tag, unsigned abi[2])
{
    struct stat st;
    memset(out, 0, sizeof *out);
    *tag = "loaded";
    if (strlen(path) >= sizeof out->path) {
        *err = -ENAMETOOLONG;
        *tag = "path too long";
        snprintf(why, whylen, "cannot be used: path longer than %zu bytes",
                 sizeof out->path - 1);
        return TRY_REFUSED;
    }
    if (stat(path, &st) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR) {
            *err = -ENOENT;
            *tag = "no such file";
            snprintf(why, whylen, "not found (no such file)");
            return TRY_MISSING;
        }
        *err = -e;
        *tag = "cannot stat";
        snprintf(why, whylen, "cannot be accessed: %s", strerror(e));
        return TRY_REFUSED;
    }

    dlerror();
    /*
     * RTLD_NODELETE: dlclose() drops the handle but never unmaps the object.
     * Transport libraries are not all unload-safe: Debian's libfabric 1.17
     * leaks 62 bytes per dlopen/dlclose cycle (LeakSanitizer, see
     * docs/reliability.md), so listing plugins or creating and destroying
     * engines would leak each time; and a library that left a thread or an
     * atexit handler behind would run unmapped code. Kept mapped, plugins and
     * their dependencies are also symbolized in sanitizer reports at exit.
     */
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!dl) {
        const char *de = dlerror();
        *err = -ENOEXEC;
        *tag = "dlopen failed";
        snprintf(why, whylen, "cannot be opened: %s", de ? de : "dlopen failed");
        return TRY_REFUSED;
    }
    dlerror();
    void *sym = dlsym(dl, TE_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        dlclose(dl);
        *err = -ENOEXEC;
        *tag = "no entry symbol";
        snprintf(why, whylen,
                 "has no symbol " TE_PLUGIN_ENTRY_SYMBOL
                 " (not a TransferEngine plugin?)");
        return TRY_REFUSED;
    }
    te_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object -> function pointer */

    char perr[512] = "";
    const struct te_plugin_ops *ops =
        entry(TE_PLUGIN_ABI_MAJOR, TE_PLUGIN_ABI_MINOR, perr, sizeof perr);
    perr[sizeof perr - 1] = '\0';
    if (!ops) {
        dlclose(dl);
        *err = -ENOTSUP;
        *tag = "refused";
        if (perr[0])
            snprintf(why, whylen, "refused: %s", perr);
        else
            snprintf(why, whylen,
                     "refused: " TE_PLUGIN_ENTRY_SYMBOL
                     "() returned NULL without a reason (core ABI %u.%u)",
                     (unsigned)TE_PLUGIN_ABI_MAJOR, (unsigned)TE_PLUGIN_ABI_MINOR);
        return TRY_REFUSED;
    }
    if (abi) { /* reported by te_plugin_scan() even when refused */
        abi[0] = ops->abi_major;
        abi[1] = ops->abi_minor;
    }
    char cwhy[WHY_LEN];
    int rc = check_ops(ops, cwhy, sizeof cwhy);
    if (rc) {
        dlclose(dl);
        *err = rc;
        *tag = "refused";
        copy_trunc(why, whylen, "refused: ", cwhy);
        return TRY_REFUSED;
    }
    out->dl = dl;
    out->ops = ops;
    snprintf(out->path, sizeof out->path, "%s", path);
    *err = 0;
    return TRY_OK;
}

/* ----------------------------------------------------------- search path */

struct dirlist {
    char **dirs;
    size_t n, cap;
};

static void dirlist_free(struct dirlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->dirs[i]);
    free(l->dirs);
    memset(l, 0, sizeof *l);
}

/* Append dir unless empty or already listed (same text or same real path). */
static int dirlist_add(struct dirlist *l, const char *dir, size_t len)
{
    if (len == 0)
        return 0;
    char *d = strndup(dir, len);
    if (!d)
        return -ENOMEM;
    /* Drop trailing slashes (but keep "/"). */
    for (size_t k = strlen(d); k > 1 && d[k - 1] == '/'; k--)
        d[k - 1] = '\0';
    char *real = realpath(d, NULL);
    for (size_t i = 0; i < l->n; i++) {
        int same = strcmp(l->dirs[i], d) == 0;
        if (!same && real) {
            char *other = realpath(l->dirs[i], NULL);
            same = other && strcmp(other, real) == 0;
            free(other);
        }
        if (same) {
            free(real);
            free(d);
            return 0;
        }
    }
    free(real);
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->dirs, cap * sizeof *p);
        if (!p) {
            free(d);
            return -ENOMEM;
        }
        l->dirs = p;
        l->cap = cap;
    }
    l->dirs[l->n++] = d;
    return 0;
}

static int dirlist_add_colon(struct dirlist *l, const char *list)
{
    if (!list)
        return 0;
    for (const char *p = list;;) {
        const char *c = strchr(p, ':');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        int rc = dirlist_add(l, p, len);
        if (rc)
            return rc;
        if (!c)
            return 0;
        p = c + 1;
    }
}

static const char library_anchor; /* any address inside this object */

/* Where `cmake --install --prefix P` put the plugins, wherever P is, found
 * from the object this code runs in: "<libdir>/transferengine" beside
 * libtransferengine.so, or, for a program linked with the static core (the
 * tools), "<bindir>/../<libdir>/transferengine". An install that was moved
 * or made with another prefix than the configured one still finds its own
 * plugins. */
static int add_beside_library(struct dirlist *l)
{
    Dl_info info;
    char real[PATH_MAX], dir[PATH_MAX + 64];
    if (!dladdr(&library_anchor, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, real))
        return 0;
    char *slash = strrchr(real, '/');
    if (!slash)
        return 0;
    *slash = 0;
    const char *base = slash + 1;
    int is_lib = strncmp(base, "lib", 3) == 0 && strstr(base, ".so");
    int n = is_lib ? snprintf(dir, sizeof(dir), "%s/transferengine", real)
                   : snprintf(dir, sizeof(dir), "%s/../%s", real,
                              TE_PLUGIN_RELATIVE_DIR);
    if (n <= 0 || (size_t)n >= sizeof(dir) ||
        strcmp(dir, TE_PLUGIN_INSTALL_DIR) == 0)
        return 0;
    return dirlist_add(l, dir, (size_t)n);
}

/* TE_PLUGIN_PATH, then config_path, then beside the library, then the
 * configured install directory. */
static int search_dirs(const char *config_path, struct dirlist *l)
{
    memset(l, 0, sizeof *l);
    int rc = dirlist_add_colon(l, getenv("TE_PLUGIN_PATH"));
    if (!rc)
        rc = dirlist_add_colon(l, config_path);
    if (!rc)
        rc = add_beside_library(l);
    if (!rc)
        rc = dirlist_add(l, TE_PLUGIN_INSTALL_DIR, strlen(TE_PLUGIN_INSTALL_DIR));
    if (rc)
        dirlist_free(l);
    return rc;
}

static int valid_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* ----------------------------------------------------------------- load */

int te_plugin_load(const char *name_or_path, const char *config_path,
                   struct te_loaded_plugin *out)
{
    char why[WHY_LEN];
    const char *tag;
    int err;

    if (!out)
        return te_fail(-EINVAL, "te_plugin_load: no output given");
    memset(out, 0, sizeof *out);
    if (!name_or_path)
        return te_fail(-EINVAL, "plugin name is NULL");

    if (strchr(name_or_path, '/')) {
        if (try_path(name_or_path, out, &err, why, sizeof why, &tag, NULL) == TRY_OK)
            return 0;
        return te_fail(err, "plugin %s %s", name_or_path, why);
    }

    if (!valid_name(name_or_path))
        return te_fail(-EINVAL,
                       "invalid plugin name \"%s\": use letters, digits, '_', "
                       "'.', '-' or give a path containing '/'",
                       name_or_path);

    struct dirlist dirs;
    int rc = search_dirs(config_path, &dirs);
    if (rc)
        return te_fail(rc, "plugin \"%s\": out of memory building the search path",
                       name_or_path);

    /* The list of places tried, for the message. */
    char *tried = NULL;
    size_t tried_len = 0;
    FILE *tf = open_memstream(&tried, &tried_len);
    if (!tf) {
        dirlist_free(&dirs);
        return te_fail(-ENOMEM, "plugin \"%s\": out of memory", name_or_path);
    }

    enum try_result res = TRY_MISSING;
    char path[PATH_MAX + 64];
    char failed_path[sizeof path] = "";
    for (size_t i = 0; i < dirs.n; i++) {
        snprintf(path, sizeof path, "%s/" PLUGIN_PREFIX "%s" PLUGIN_SUFFIX,
                 dirs.dirs[i], name_or_path);
        res = try_path(path, out, &err, why, sizeof why, &tag, NULL);
        fprintf(tf, "%s%s (%s)", i ? ", " : "", path, tag);
        if (res == TRY_OK)
            break;
        if (res == TRY_REFUSED) {
            snprintf(failed_path, sizeof failed_path, "%s", path);
            break;
        }
    }
    fclose(tf);
    dirlist_free(&dirs);

    if (res == TRY_OK)
        rc = 0;
    else if (res == TRY_MISSING)
        rc = te_fail(-ENOENT,
                     "plugin \"%s\" not found; tried: %s; set TE_PLUGIN_PATH or "
                     "engine.plugin_path",
                     name_or_path, tried ? tried : "");
    else
        rc = te_fail(err, "plugin \"%s\": %s %s; tried: %s", name_or_path,
                     failed_path, why, tried ? tried : "");
    free(tried);
    return rc;
}

void te_plugin_unload(struct te_loaded_plugin *p)
{
    if (!p)
        return;
    if (p->dl)
        dlclose(p->dl);
    memset(p, 0, sizeof *p);
}

/* ----------------------------------------------------------------- scan */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Plugin file names in dir ("libte-plugin-*.so"), sorted so that the scan
 * is deterministic. Returns the count; *names must be freed (each and all).
 */
static size_t list_plugin_files(const char *dir, char ***names)
{
    *names = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0, cap = 0;
    struct dirent *e;
    const size_t pl = strlen(PLUGIN_PREFIX), sl = strlen(PLUGIN_SUFFIX);
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= pl + sl || strncmp(e->d_name, PLUGIN_PREFIX, pl) != 0 ||
            strcmp(e->d_name + len - sl, PLUGIN_SUFFIX) != 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            char **p = realloc(*names, nc * sizeof *p);
            if (!p)
                break;
            *names = p;
            cap = nc;
        }
        if (!((*names)[n] = strdup(e->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(*names, n, sizeof **names, cmp_str);
    return n;
}

int te_plugin_scan(const char *config_path, struct te_plugin_candidate *out,
                   int max)
{
    if (max < 0 || (max > 0 && !out))
        return te_fail(-EINVAL, "te_plugin_scan: invalid output buffer");
    struct dirlist dirs;
    int rc = search_dirs(config_path, &dirs);
    if (rc)
        return te_fail(rc, "te_plugin_scan: out of memory building the search path");

    int count = 0;
    const size_t pl = strlen(PLUGIN_PREFIX), sl = strlen(PLUGIN_SUFFIX);
    for (size_t i = 0; i < dirs.n && count < max; i++) {
        char **files;
        size_t nf = list_plugin_files(dirs.dirs[i], &files);
        for (size_t f = 0; f < nf; f++) {
            if (count >= max)
                break;
            struct te_plugin_candidate *c = &out[count];
            memset(c, 0, sizeof *c);
            int pn = snprintf(c->path, sizeof c->path, "%s/%s", dirs.dirs[i], files[f]);
            if (pn < 0 || (size_t)pn >= sizeof c->path)
                continue; /* cannot be named, cannot be loaded */
            /* The name a user would load it by (file name minus affixes). */
            size_t nl = strlen(files[f]) - pl - sl;
            snprintf(c->name, sizeof c->name, "%.*s", (int)nl, files[f] + pl);

            const struct te_plugin_candidate *first = NULL;
            for (int k = 0; k < count && !first; k++) {
                /* out[k].name may have been replaced by ops->name; compare
                 * against the file-derived name kept in the path. */
                const char *base = strrchr(out[k].path, '/');
                base = base ? base + 1 : out[k].path;
                if (strcmp(base, files[f]) == 0)
                    first = &out[k];
            }

            struct te_loaded_plugin lp;
            char why[WHY_LEN];
            const char *tag;
            int err;
            unsigned abi[2] = {0, 0};
            enum try_result res =
                try_path(c->path, &lp, &err, why, sizeof why, &tag, abi);
            c->abi_major = abi[0];
            c->abi_minor = abi[1];
            if (res == TRY_OK) {
                copy_trunc(c->name, sizeof c->name, "", lp.ops->name);
                copy_trunc(c->version, sizeof c->version, "",
                           lp.ops->version ? lp.ops->version : "");
                c->usable = 1;
                te_plugin_unload(&lp);
            } else {
                copy_trunc(c->why, sizeof c->why, "", why);
            }
            if (first) {
                c->usable = 0;
                copy_trunc(c->why, sizeof c->why, "shadowed by ", first->path);
            }
            count++;
        }
        for (size_t f = 0; f < nf; f++)
            free(files[f]);
        free(files);
    }
    dirlist_free(&dirs);
    return count;
}
