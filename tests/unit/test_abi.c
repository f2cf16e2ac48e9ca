/*
 * Plugin loader and ABI negotiation: the tiny plugins of tests/abi/ (built
 * by tests/extra.cmake into TE_ABI_PLUGIN_DIR) loaded by path and by name,
 * the search order, the messages, and te_plugin_scan().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"
#include "te/te.h"
#include "te_test.h"

/* The core's plugin ABI as messages print it, e.g. "1.1". */
#define STR_(x) #x
#define STR(x) STR_(x)
#define CORE_ABI STR(TE_PLUGIN_ABI_MAJOR) "." STR(TE_PLUGIN_ABI_MINOR)

#ifndef TE_ABI_PLUGIN_DIR
#error "TE_ABI_PLUGIN_DIR must be defined (tests/extra.cmake)"
#endif

#define DIR0 TE_ABI_PLUGIN_DIR
#define DIR1 TE_ABI_PLUGIN_DIR "/first"
#define DIR2 TE_ABI_PLUGIN_DIR "/second"
#define DIRJ TE_ABI_PLUGIN_DIR "/junk"
#define PLUGIN(dir, name) dir "/libte-plugin-" name ".so"

/* The message must contain needle; show both when it does not. */
#define ck_msg_has(needle)                                                    \
    do {                                                                      \
        const char *m_ = te_last_error();                                     \
        ck_assert_msg(m_ && strstr(m_, (needle)),                             \
                      "message lacks \"%s\": \"%s\"", (needle), m_ ? m_ : "(null)"); \
    } while (0)

static void only_env(const char *v)
{
    if (v)
        setenv("TE_PLUGIN_PATH", v, 1);
    else
        unsetenv("TE_PLUGIN_PATH");
}

/* ------------------------------------------------------ refusal table */

struct refusal {
    const char *name;
    int err;
    const char *msg[3];
};

static const struct refusal refusals[] = {
    {"newmajor", -EPROTO, {"refused", "plugin speaks ABI 2.0, core speaks " CORE_ABI,
                           "major versions differ"}},
    {"short", -EPROTO, {"ops table too small: 16 bytes < ", "bytes required by ABI 1.0", NULL}},
    {"nosym", -ENOEXEC, {"has no symbol te_plugin_entry", "not a TransferEngine plugin?", NULL}},
    {"nullfn", -EINVAL, {"refused", "'post'", NULL}},
    {"entrynull", -ENOTSUP, {"refused", "needs hardware X", NULL}},
#define MALFORMED "declares a malformed configuration key table: "
    {"cfgdup", -EINVAL, {MALFORMED "key \"depth\" is declared twice", NULL, NULL}},
    {"cfgnodef", -EINVAL, {MALFORMED "key \"depth\" is typed but has no default",
                           NULL, NULL}},
    {"cfgrange", -EINVAL, {MALFORMED "cfgrange.depth = \"65\" (default declared "
                           "by plugin cfgrange): expected an integer in [1, 64]",
                           NULL, NULL}},
    {"cfgchoice", -EINVAL, {MALFORMED "key \"mode\": enum choices \"auto||off\"",
                            NULL, NULL}},
    {"cfgname", -EINVAL, {MALFORMED "key \"two words\": a name is", NULL, NULL}},
    {"cfgtype", -EINVAL, {MALFORMED "key \"odd\": unknown type 9", NULL, NULL}},
    {"cfgsize", -EINVAL, {MALFORMED "config_params: struct_size 8 is smaller",
                          NULL, NULL}},
};
#define N_REFUSALS (int)(sizeof refusals / sizeof refusals[0])

/* ------------------------------------------------------ loads by path */

static void expect_loaded(struct te_loaded_plugin *p, const char *name,
                          const char *version, unsigned minor, const char *path)
{
    ck_assert_ptr_nonnull(p->dl);
    ck_assert_ptr_nonnull(p->ops);
    ck_assert_str_eq(p->ops->name, name);
    ck_assert_str_eq(p->ops->version, version);
    ck_assert_uint_eq(p->ops->abi_major, TE_PLUGIN_ABI_MAJOR);
    ck_assert_uint_eq(p->ops->abi_minor, minor);
    ck_assert_str_eq(p->path, path);
    /* The table's functions are callable. */
    te_plugin_ctx *ctx = (te_plugin_ctx *)1;
    ck_assert_int_eq(p->ops->init(NULL, &ctx), 0);
    ck_assert_int_eq(p->ops->device_count(ctx), 0);
    ck_assert_int_eq(p->ops->poll(NULL, NULL, 0), 0);
    p->ops->fini(ctx);
}

START_TEST(load_good_by_path)
{
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load(PLUGIN(DIR0, "good"), NULL, &p), 0);
    expect_loaded(&p, "good", "1.2.3", TE_PLUGIN_ABI_MINOR, PLUGIN(DIR0, "good"));
    ck_assert_uint_eq(p.ops->struct_size, sizeof(struct te_plugin_ops));
    te_plugin_unload(&p);
    ck_assert_ptr_null(p.dl);
    ck_assert_ptr_null(p.ops);
    ck_assert_str_eq(p.path, "");
}
END_TEST

START_TEST(load_oldminor_by_path)
{
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load(PLUGIN(DIR0, "oldminor"), NULL, &p), 0);
    expect_loaded(&p, "oldminor", "1.0.0", 0, PLUGIN(DIR0, "oldminor"));
    ck_assert_uint_eq(p.ops->struct_size, TE_PLUGIN_OPS_MIN_SIZE_1_0);
    te_plugin_unload(&p);
}
END_TEST

START_TEST(load_newminor_by_path)
{
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load(PLUGIN(DIR0, "newminor"), NULL, &p), 0);
    expect_loaded(&p, "newminor", "1.7.0", 7, PLUGIN(DIR0, "newminor"));
    ck_assert_uint_gt(p.ops->struct_size, sizeof(struct te_plugin_ops));
    te_plugin_unload(&p);
}
END_TEST

/* Loop test over refusals[]: by path, the message names the path. */
START_TEST(refused_by_path)
{
    const struct refusal *r = &refusals[_i];
    char path[4096];
    snprintf(path, sizeof path, DIR0 "/libte-plugin-%s.so", r->name);
    struct te_loaded_plugin p;
    memset(&p, 0xab, sizeof p);
    ck_assert_int_eq(te_plugin_load(path, NULL, &p), r->err);
    ck_assert_ptr_null(p.dl);
    ck_assert_ptr_null(p.ops);
    ck_msg_has(path);
    for (int k = 0; k < 3 && r->msg[k]; k++)
        ck_msg_has(r->msg[k]);
}
END_TEST

/* Same, found by name through TE_PLUGIN_PATH: also lists the places tried. */
START_TEST(refused_by_name)
{
    const struct refusal *r = &refusals[_i];
    char path[4096];
    snprintf(path, sizeof path, DIR1 "/libte-plugin-%s.so", r->name);
    only_env(DIR1 ":" DIR0);
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load(r->name, NULL, &p), r->err);
    ck_assert_ptr_null(p.dl);
    snprintf(path, sizeof path, "tried: " DIR1 "/libte-plugin-%s.so (no such file), "
             DIR0 "/libte-plugin-%s.so", r->name, r->name);
    ck_msg_has(path);
    ck_msg_has("\"");
    for (int k = 0; k < 3 && r->msg[k]; k++)
        ck_msg_has(r->msg[k]);
}
END_TEST

START_TEST(accepted_by_name)
{
    static const char *const names[] = {"good", "oldminor", "newminor"};
    only_env(DIR0);
    for (int i = 0; i < 3; i++) {
        struct te_loaded_plugin p;
        char path[4096];
        snprintf(path, sizeof path, DIR0 "/libte-plugin-%s.so", names[i]);
        ck_assert_int_eq(te_plugin_load(names[i], NULL, &p), 0);
        ck_assert_str_eq(p.ops->name, names[i]);
        ck_assert_str_eq(p.path, path);
        te_plugin_unload(&p);
    }
}
END_TEST

START_TEST(not_an_elf_file)
{
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load(PLUGIN(DIRJ, "junk"), NULL, &p), -ENOEXEC);
    ck_msg_has(PLUGIN(DIRJ, "junk"));
    ck_msg_has("cannot be opened");
}
END_TEST

START_TEST(missing_path)
{
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load(PLUGIN(DIR0, "absent"), NULL, &p), -ENOENT);
    ck_msg_has(PLUGIN(DIR0, "absent"));
    ck_msg_has("no such file");
    /* A path is used as given: a relative one with '/' too. */
    ck_assert_int_eq(te_plugin_load("./libte-plugin-good.so", NULL, &p), -ENOENT);
    ck_msg_has("./libte-plugin-good.so");
}
END_TEST

START_TEST(load_same_twice)
{
    struct te_loaded_plugin a, b;
    ck_assert_int_eq(te_plugin_load(PLUGIN(DIR0, "good"), NULL, &a), 0);
    ck_assert_int_eq(te_plugin_load(PLUGIN(DIR0, "good"), NULL, &b), 0);
    te_plugin_unload(&a);
    /* b still holds its reference. */
    ck_assert_str_eq(b.ops->name, "good");
    ck_assert_int_eq(b.ops->device_count(NULL), 0);
    te_plugin_unload(&b);
    te_plugin_unload(&b); /* idempotent on a zeroed struct */
    te_plugin_unload(NULL);
}
END_TEST

/* ------------------------------------------------------ search order */

static const char *load_version(const char *name, const char *config_path)
{
    static char v[64];
    struct te_loaded_plugin p;
    int rc = te_plugin_load(name, config_path, &p);
    ck_assert_msg(rc == 0, "load %s: %d %s", name, rc, te_last_error());
    snprintf(v, sizeof v, "%s", p.ops->version);
    te_plugin_unload(&p);
    return v;
}

START_TEST(first_directory_wins)
{
    only_env(DIR1 ":" DIR2);
    ck_assert_str_eq(load_version("dup", NULL), "first");
    only_env(DIR2 ":" DIR1);
    ck_assert_str_eq(load_version("dup", NULL), "second");
    only_env(NULL);
    ck_assert_str_eq(load_version("dup", DIR1 ":" DIR2), "first");
    ck_assert_str_eq(load_version("dup", DIR2 ":" DIR1), "second");
}
END_TEST

START_TEST(env_before_config)
{
    only_env(DIR2);
    ck_assert_str_eq(load_version("dup", DIR1), "second");
    only_env(DIR1);
    ck_assert_str_eq(load_version("dup", DIR2), "first");
    /* Missing from the env directories: the config path is searched next. */
    only_env(DIR0);
    ck_assert_str_eq(load_version("dup", DIR2), "second");
    ck_assert_str_eq(load_version("only2", DIR1 ":" DIR2), "second");
}
END_TEST

START_TEST(empty_components_ignored)
{
    only_env("::" DIR1 "::");
    ck_assert_str_eq(load_version("dup", ""), "first");
    only_env("");
    ck_assert_str_eq(load_version("dup", ":" DIR2 ":"), "second");
    /* Trailing slashes are fine. */
    only_env(DIR2 "/");
    ck_assert_str_eq(load_version("dup", NULL), "second");
}
END_TEST

START_TEST(refusal_stops_search)
{
    /* first/stop is ABI 2.0; second/stop is valid but must not be used. */
    only_env(DIR1 ":" DIR2);
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load("stop", NULL, &p), -EPROTO);
    ck_assert_ptr_null(p.dl);
    ck_msg_has(PLUGIN(DIR1, "stop") " refused: plugin speaks ABI 2.0, core speaks " CORE_ABI);
    const char *m = te_last_error();
    ck_assert_msg(strstr(m, DIR2) == NULL, "searched past a refusal: %s", m);
    /* Same via the config path. */
    only_env(NULL);
    ck_assert_int_eq(te_plugin_load("stop", DIR1 ":" DIR2, &p), -EPROTO);
}
END_TEST

START_TEST(not_found_lists_places)
{
    only_env("/nonexistent-te-a:/nonexistent-te-b");
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load("absent-xyz", "/nonexistent-te-c", &p), -ENOENT);
    ck_msg_has("plugin \"absent-xyz\" not found; tried: "
               "/nonexistent-te-a/libte-plugin-absent-xyz.so (no such file), "
               "/nonexistent-te-b/libte-plugin-absent-xyz.so (no such file), "
               "/nonexistent-te-c/libte-plugin-absent-xyz.so (no such file), ");
    ck_msg_has("/libte-plugin-absent-xyz.so (no such file); set TE_PLUGIN_PATH or "
               "engine.plugin_path");
    /* The install directory is last. */
    const char *m = te_last_error();
    const char *c = strstr(m, "/nonexistent-te-c/");
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_nonnull(strstr(c + 1, "/libte-plugin-absent-xyz.so (no such file); set"));

    /* Nothing set at all: only the install directory is tried. */
    only_env(NULL);
    ck_assert_int_eq(te_plugin_load("surely-absent-plugin", NULL, &p), -ENOENT);
    ck_msg_has("tried: ");
    ck_msg_has("/libte-plugin-surely-absent-plugin.so (no such file); set");
}
END_TEST

START_TEST(invalid_names)
{
    static const char *const bad[] = {"", "a b", "x;y", "$HOME", "ef*", "n\xc3\xa4me",
                                      "tab\t", "q?", "a:b"};
    only_env(DIR0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct te_loaded_plugin p;
        ck_assert_int_eq(te_plugin_load(bad[i], NULL, &p), -EINVAL);
        ck_msg_has("invalid plugin name");
    }
    struct te_loaded_plugin p;
    ck_assert_int_eq(te_plugin_load(NULL, NULL, &p), -EINVAL);
    ck_assert_int_eq(te_plugin_load("good", NULL, NULL), -EINVAL);
    /* Every allowed character: a valid name that is simply not there. */
    ck_assert_int_eq(te_plugin_load("Az09_.-x", NULL, &p), -ENOENT);
    ck_msg_has("libte-plugin-Az09_.-x.so (no such file)");
}
END_TEST

/* ------------------------------------------------------ check_ops */

static int dummy_fn(void) { return 0; }

static void fill_valid(struct te_plugin_ops *o)
{
    memset(o, 0, sizeof *o);
    o->abi_major = TE_PLUGIN_ABI_MAJOR;
    o->abi_minor = TE_PLUGIN_ABI_MINOR;
    o->struct_size = sizeof *o;
    o->name = "mem";
    o->version = "0";
    /* Every function pointer from init to poll. */
    char *first = (char *)&o->init;
    char *end = (char *)o + TE_PLUGIN_OPS_MIN_SIZE_1_0;
    int (*f)(void) = dummy_fn;
    for (char *q = first; q < end; q += sizeof f)
        memcpy(q, &f, sizeof f);
}

START_TEST(check_ops_direct)
{
    struct te_plugin_ops o;
    fill_valid(&o);
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), 0);

    ck_assert_int_eq(te_plugin_check_ops(NULL, "memnull"), -EINVAL);
    ck_msg_has("memnull");

    o.abi_major = 3;
    o.abi_minor = 4;
    ck_assert_int_eq(te_plugin_check_ops(&o, "memmaj"), -EPROTO);
    ck_msg_has("plugin memmaj refused: plugin speaks ABI 3.4, core speaks " CORE_ABI " "
               "(major versions differ)");
    o.abi_major = 0;
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem0"), -EPROTO);
    ck_msg_has("ABI 0.4");

    fill_valid(&o);
    o.abi_minor = 99; /* newer minor: accepted */
    o.struct_size = sizeof o + 64;
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), 0);
    o.abi_minor = 0;
    o.struct_size = TE_PLUGIN_OPS_MIN_SIZE_1_0;
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), 0);
    o.struct_size = TE_PLUGIN_OPS_MIN_SIZE_1_0 - 1;
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), -EPROTO);
    char want[128];
    snprintf(want, sizeof want, "ops table too small: %zu bytes < %zu bytes required by ABI 1.0",
             (size_t)TE_PLUGIN_OPS_MIN_SIZE_1_0 - 1, (size_t)TE_PLUGIN_OPS_MIN_SIZE_1_0);
    ck_msg_has(want);

    fill_valid(&o);
    o.name = NULL;
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), -EINVAL);
    ck_msg_has("name");
    o.name = "";
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), -EINVAL);
    ck_msg_has("name");

    /* Optional fields may be NULL. */
    fill_valid(&o);
    o.version = NULL;
    o.description = NULL;
    o.config_keys = NULL;
    ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), 0);
}
END_TEST

/* Each mandatory function pointer NULL in turn: refused, field named. */
START_TEST(check_ops_each_mandatory)
{
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
#define F(x) {#x, offsetof(struct te_plugin_ops, x)}
        F(init), F(fini), F(device_count), F(query_device), F(nic_open),
        F(nic_close), F(nic_address), F(mr_reg), F(mr_dereg), F(peer_add),
        F(peer_remove), F(post), F(poll),
#undef F
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        struct te_plugin_ops o;
        fill_valid(&o);
        void *nul = NULL;
        memcpy((char *)&o + fields[i].off, &nul, sizeof nul);
        ck_assert_int_eq(te_plugin_check_ops(&o, "mem"), -EINVAL);
        char want[64];
        snprintf(want, sizeof want, "'%s'", fields[i].name);
        ck_msg_has(want);
    }
}
END_TEST

/* ------------------------------------------------------ scan */

static const struct te_plugin_candidate *find_cand(const struct te_plugin_candidate *c,
                                                   int n, const char *path)
{
    for (int i = 0; i < n; i++)
        if (strcmp(c[i].path, path) == 0)
            return &c[i];
    return NULL;
}

static int index_of(const struct te_plugin_candidate *c, int n, const char *path)
{
    const struct te_plugin_candidate *p = find_cand(c, n, path);
    return p ? (int)(p - c) : -1;
}

#define MAXC 256

START_TEST(scan_reports_each)
{
    static struct te_plugin_candidate c[MAXC];
    only_env(DIR0);
    int n = te_plugin_scan(DIR1 ":" DIR2, c, MAXC);
    ck_assert_int_ge(n, 13);

    const struct te_plugin_candidate *g = find_cand(c, n, PLUGIN(DIR0, "good"));
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->usable, 1);
    ck_assert_str_eq(g->name, "good");
    ck_assert_str_eq(g->version, "1.2.3");
    ck_assert_uint_eq(g->abi_major, 1);
    ck_assert_uint_eq(g->abi_minor, TE_PLUGIN_ABI_MINOR);
    ck_assert_str_eq(g->why, "");

    g = find_cand(c, n, PLUGIN(DIR0, "oldminor"));
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->usable, 1);
    ck_assert_uint_eq(g->abi_minor, 0);

    g = find_cand(c, n, PLUGIN(DIR0, "newminor"));
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->usable, 1);
    ck_assert_str_eq(g->version, "1.7.0");
    ck_assert_uint_eq(g->abi_minor, 7);

    g = find_cand(c, n, PLUGIN(DIR0, "newmajor"));
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->usable, 0);
    ck_assert_uint_eq(g->abi_major, 2);
    ck_assert_ptr_nonnull(strstr(g->why, "major versions differ"));
    ck_assert_str_eq(g->name, "newmajor");

    static const struct {
        const char *name, *why;
    } refused[] = {
        {"short", "too small"},
        {"nosym", "has no symbol te_plugin_entry"},
        {"nullfn", "'post'"},
        {"entrynull", "needs hardware X"},
    };
    for (int i = 0; i < 4; i++) {
        char path[4096];
        snprintf(path, sizeof path, DIR0 "/libte-plugin-%s.so", refused[i].name);
        g = find_cand(c, n, path);
        ck_assert_msg(g != NULL, "%s not scanned", path);
        ck_assert_int_eq(g->usable, 0);
        ck_assert_msg(strstr(g->why, refused[i].why), "%s: why=\"%s\"", path, g->why);
        ck_assert_str_eq(g->name, refused[i].name);
    }

    /* dup: first usable, second shadowed; order follows the search path. */
    int i1 = index_of(c, n, PLUGIN(DIR1, "dup"));
    int i2 = index_of(c, n, PLUGIN(DIR2, "dup"));
    ck_assert_int_ge(i1, 0);
    ck_assert_int_gt(i2, i1);
    ck_assert_int_lt(index_of(c, n, PLUGIN(DIR0, "good")), i1);
    ck_assert_int_eq(c[i1].usable, 1);
    ck_assert_str_eq(c[i1].version, "first");
    ck_assert_int_eq(c[i2].usable, 0);
    ck_assert_str_eq(c[i2].why, "shadowed by " PLUGIN(DIR1, "dup"));
    ck_assert_str_eq(c[i2].version, "second"); /* still described */

    /* stop: first refused, second shadowed by the refused one (as load). */
    g = find_cand(c, n, PLUGIN(DIR1, "stop"));
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->usable, 0);
    g = find_cand(c, n, PLUGIN(DIR2, "stop"));
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->usable, 0);
    ck_assert_str_eq(g->why, "shadowed by " PLUGIN(DIR1, "stop"));

    g = find_cand(c, n, PLUGIN(DIR2, "only2"));
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(g->usable, 1);

    /* Not a plugin file name: ignored. The junk dir is not on the path. */
    ck_assert_ptr_null(find_cand(c, n, PLUGIN(DIRJ, "junk")));
}
END_TEST

START_TEST(scan_junk_and_duplicate_dirs)
{
    static struct te_plugin_candidate c[MAXC];
    /* The same directory twice (spelled differently) is scanned once. */
    only_env(DIRJ ":" DIRJ "/:" DIR1);
    int n = te_plugin_scan(DIRJ "/../junk", c, MAXC);
    ck_assert_int_ge(n, 3);
    const struct te_plugin_candidate *j = find_cand(c, n, PLUGIN(DIRJ, "junk"));
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(j->usable, 0);
    ck_assert_ptr_nonnull(strstr(j->why, "cannot be opened"));
    int junks = 0;
    for (int i = 0; i < n; i++)
        if (strstr(c[i].path, "libte-plugin-junk.so"))
            junks++;
    ck_assert_int_eq(junks, 1);
}
END_TEST

START_TEST(scan_max)
{
    static struct te_plugin_candidate c[4];
    only_env(DIR0);
    ck_assert_int_eq(te_plugin_scan(NULL, c, 2), 2);
    ck_assert_int_eq(te_plugin_scan(NULL, NULL, 0), 0);
    ck_assert_int_eq(te_plugin_scan(NULL, NULL, 3), -EINVAL);
    ck_assert_int_eq(te_plugin_scan(NULL, c, -1), -EINVAL);
    /* An empty or missing directory yields nothing from it. */
    only_env("/nonexistent-te-dir");
    int n = te_plugin_scan("/nonexistent-te-dir2", c, 4);
    ck_assert_int_ge(n, 0);
    for (int i = 0; i < n; i++)
        ck_assert_ptr_null(strstr(c[i].path, "nonexistent-te-dir"));
}
END_TEST

/* "load": refused_by_path and refused_by_name once per refusal. */
TE_TEST_MAIN("abi",
             {"load",
              TE_TESTS(load_good_by_path, load_oldminor_by_path,
                       load_newminor_by_path, accepted_by_name,
                       not_an_elf_file, missing_path, load_same_twice),
              .loop_tests = TE_TESTS(refused_by_path, refused_by_name),
              .loop_end = N_REFUSALS},
             TE_TCASE("search",
               first_directory_wins, env_before_config,
               empty_components_ignored, refusal_stops_search,
               not_found_lists_places, invalid_names),
             TE_TCASE("check_ops",
               check_ops_direct, check_ops_each_mandatory),
             TE_TCASE("scan",
               scan_reports_each, scan_junk_and_duplicate_dirs, scan_max))
