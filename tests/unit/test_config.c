/* Unit tests of core/config.c and core/config_keys.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "te/te.h"
#include "te_error.h"
#include "te_test.h"

#ifndef TE_SOURCE_DIR
#define TE_SOURCE_DIR "."
#endif

static const struct te_config_key lo_keys[] = {
    {"devices", "8", "virtual NICs"},
    {"queue_depth", "1024", "send queue depth"},
    {"fault_reorder", "false", "reorder"},
    {NULL, NULL, NULL},
};

/* Write text to a fresh temporary file; returns its path (free it). */
static char *temp_ini(const char *text)
{
    char *path = strdup("/tmp/te_test_config_XXXXXX.ini");
    int fd = mkstemps(path, 4);
    ck_assert_int_ge(fd, 0);
    size_t n = strlen(text);
    ck_assert_int_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

#define ck_assert_msg_has(needle)                                              \
    ck_assert_msg(strstr(te_last_error(), (needle)) != NULL,                   \
                  "message \"%s\" lacks \"%s\"", te_last_error(), (needle))

/* ------------------------------------------------------------ basics */

START_TEST(set_get_replace)
{
    te_config *cfg = te_config_new();
    ck_assert_ptr_nonnull(cfg);
    ck_assert_ptr_null(te_config_get(cfg, "engine", "plugin"));
    ck_assert_str_eq(te_last_error(), ""); /* unset is not an error */
    ck_assert_int_eq(te_config_set(cfg, "engine", "plugin", "loopback"), 0);
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin"), "loopback");
    /* Case-insensitive sections and keys, stored lower case. */
    ck_assert_str_eq(te_config_get(cfg, "ENGINE", "Plugin"), "loopback");
    ck_assert_int_eq(te_config_set(cfg, "Engine", "PLUGIN", "efa"), 0);
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin"), "efa");
    ck_assert_int_eq(te_config_set(cfg, "engine", "groups", ""), 0);
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "");
    char buf[64];
    ck_assert_str_eq(te_config_origin(cfg, "engine", "plugin", buf, sizeof buf),
                     "te_config_set");
    ck_assert_ptr_null(te_config_origin(cfg, "engine", "nope", buf, sizeof buf));
    te_config_free(cfg);
    te_config_free(NULL);
}
END_TEST

START_TEST(set_rejects_bad_arguments)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_set(NULL, "engine", "plugin", "x"), -EINVAL);
    ck_assert_str_eq(te_last_error(), "te_config_set: cfg is NULL");
    ck_assert_int_eq(te_config_set(cfg, NULL, "plugin", "x"), -EINVAL);
    ck_assert_msg_has("section is NULL");
    ck_assert_int_eq(te_config_set(cfg, "engine", NULL, "x"), -EINVAL);
    ck_assert_msg_has("key is NULL");
    ck_assert_int_eq(te_config_set(cfg, "engine", "plugin", NULL), -EINVAL);
    ck_assert_msg_has("value is NULL");
    ck_assert_int_eq(te_config_set(cfg, "", "plugin", "x"), -EINVAL);
    ck_assert_msg_has("invalid section name \"\"");
    ck_assert_int_eq(te_config_set(cfg, "engine", "a b", "x"), -EINVAL);
    ck_assert_msg_has("invalid key name \"a b\" in section [engine]");
    ck_assert_int_eq(te_config_load_file(NULL, "x"), -EINVAL);
    ck_assert_int_eq(te_config_load_file(cfg, NULL), -EINVAL);
    ck_assert_int_eq(te_config_load_string(cfg, NULL), -EINVAL);
    ck_assert_msg_has("ini_text is NULL");
    ck_assert_ptr_null(te_config_get(NULL, "engine", "plugin"));
    ck_assert_msg_has("cfg is NULL");
    ck_assert_ptr_null(te_config_get(cfg, "engine", NULL));
    ck_assert_msg_has("key is NULL");
    ck_assert_ptr_null(te_config_clone(NULL));
    ck_assert_int_eq(te_config_validate_section(cfg, "engine", NULL), -EINVAL);
    ck_assert_int_eq(te_config_validate_sections(cfg, NULL), -EINVAL);
    uint64_t u;
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "groups", 1, 0, 9, NULL),
                     -EINVAL);
    ck_assert_int_eq(te_config_get_u64(NULL, "engine", "groups", 1, 0, 9, &u),
                     -EINVAL);
    /* A successful public call clears the previous message. */
    ck_assert_int_eq(te_config_set(cfg, "engine", "plugin", "x"), 0);
    ck_assert_str_eq(te_last_error(), "");
    te_config_free(cfg);
}
END_TEST

/* -------------------------------------------------------------- load */

START_TEST(load_string_values_and_origins)
{
    te_config *cfg = te_config_new();
    const char *ini = "; comment\n"
                      "# another\n"
                      "[Engine]\n"
                      "plugin = loopback ; inline comment\n"
                      "  groups=2\n"         /* indented: not a continuation */
                      "group_nics = \"0,1;2,3\"\n"
                      "plugin_path = /a:/b\r\n"
                      "\n"
                      "[ loopback ]\n"
                      "fault_reorder = true\n"
                      "devices: 4\n"
                      "worker_cpus =\n";
    ck_assert_int_eq(te_config_load_string(cfg, ini), 0);
    ck_assert_str_eq(te_last_error(), "");
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin"), "loopback");
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "2");
    ck_assert_str_eq(te_config_get(cfg, "engine", "group_nics"), "0,1;2,3");
    ck_assert_str_eq(te_config_get_stored(cfg, "engine", "plugin_path"), "/a:/b");
    ck_assert_str_eq(te_config_get(cfg, "loopback", "fault_reorder"), "true");
    ck_assert_str_eq(te_config_get(cfg, "loopback", "devices"), "4");
    ck_assert_str_eq(te_config_get(cfg, "loopback", "worker_cpus"), "");
    char buf[128];
    ck_assert_str_eq(te_config_origin(cfg, "engine", "plugin", buf, sizeof buf),
                     "string:4");
    ck_assert_str_eq(te_config_origin(cfg, "engine", "groups", buf, sizeof buf),
                     "string:5");
    ck_assert_str_eq(te_config_origin(cfg, "loopback", "devices", buf, sizeof buf),
                     "string:11");
    te_config_free(cfg);
}
END_TEST

START_TEST(load_file_and_origins)
{
    char *path = temp_ini("[engine]\n"
                          "\n"
                          "groups = 4\n"
                          "groups = 5\n" /* duplicate: later wins */
                          "plugin = efa\n");
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_file(cfg, path), 0);
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "5");
    char buf[256], want[256];
    snprintf(want, sizeof want, "%s:4", path);
    ck_assert_str_eq(te_config_origin(cfg, "engine", "groups", buf, sizeof buf),
                     want);
    snprintf(want, sizeof want, "%s:5", path);
    ck_assert_str_eq(te_config_origin(cfg, "engine", "plugin", buf, sizeof buf),
                     want);
    te_config_free(cfg);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(load_missing_file)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_file(cfg, "/nonexistent/dir/te.ini"), -ENOENT);
    ck_assert_str_eq(te_last_error(),
                     "config file /nonexistent/dir/te.ini: No such file");
    ck_assert_int_eq(te_config_load_file(cfg, "/tmp"), -EISDIR);
    ck_assert_str_eq(te_last_error(), "config file /tmp: is a directory");
    te_config_free(cfg);
}
END_TEST

START_TEST(load_syntax_error_line)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_set(cfg, "engine", "groups", "1"), 0);
    const char *ini = "[engine]\n"
                      "groups = 7\n"
                      "this is not ini\n"
                      "plugin = x\n";
    ck_assert_int_eq(te_config_load_string(cfg, ini), -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "config string:3: syntax error: expected \"[section]\" or "
                     "\"key = value\", got \"this is not ini\"");
    /* A failed load changes nothing. */
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "1");
    ck_assert_ptr_null(te_config_get(cfg, "engine", "plugin"));

    char *path = temp_ini("[engine]\n\n\n[loopback\nx = 1\n");
    ck_assert_int_eq(te_config_load_file(cfg, path), -EINVAL);
    char want[512];
    snprintf(want, sizeof want,
             "config file %s:4: syntax error: section header \"[loopback\" has "
             "no closing ']'",
             path);
    ck_assert_str_eq(te_last_error(), want);
    unlink(path);
    free(path);

    /* The first error wins, whether ours or inih's. */
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\n= 3\nbad\n"), -EINVAL);
    ck_assert_str_eq(te_last_error(), "config string:2: missing key name before '='");
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\nbad\n= 3\n"), -EINVAL);
    ck_assert_msg_has("config string:2: syntax error");
    te_config_free(cfg);
}
END_TEST

START_TEST(load_key_outside_section)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_string(cfg, "; top\nplugin = loopback\n"),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "config string:2: key \"plugin\" is outside any section "
                     "(add a section line such as [engine] above it)");
    ck_assert_int_eq(te_config_load_string(cfg, "[]\nplugin = loopback\n"),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(), "config string:2: empty section name \"[]\"");
    ck_assert_int_eq(te_config_load_string(cfg, "[a b]\nk = v\n"), -EINVAL);
    ck_assert_msg_has("config string:2: invalid section name \"[a b]\"");
    ck_assert_int_eq(te_config_load_string(cfg, "[a]\nk k = v\n"), -EINVAL);
    ck_assert_msg_has("config string:2: invalid key name \"k k\" in section [a]");
    te_config_free(cfg);
}
END_TEST

START_TEST(load_long_line)
{
    te_config *cfg = te_config_new();
    char ini[1024];
    int n = snprintf(ini, sizeof ini, "[engine]\ngroup_nics = ");
    memset(ini + n, '1', 500);
    strcpy(ini + n + 500, "\nplugin = x\n");
    ck_assert_int_eq(te_config_load_string(cfg, ini), -EINVAL);
    ck_assert_msg_has("config string:2: line too long (513 characters; at most");
    ck_assert_ptr_null(te_config_get(cfg, "engine", "plugin"));
    /* 198 characters are fine. */
    n = snprintf(ini, sizeof ini, "[engine]\ngroup_nics = ");
    memset(ini + n, '2', 198 - 13);
    strcpy(ini + n + 198 - 13, "\r\n");
    ck_assert_int_eq(te_config_load_string(cfg, ini), 0);
    ck_assert_uint_eq(strlen(te_config_get(cfg, "engine", "group_nics")), 185);
    te_config_free(cfg);
}
END_TEST

/* -------------------------------------------------------- precedence */

START_TEST(precedence_file_set_env)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\ngroups = 2\n"), 0);
    ck_assert_int_eq(te_config_set(cfg, "engine", "groups", "3"), 0);
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "3");
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\ngroups = 4\n"), 0);
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "4");

    setenv("TE_ENGINE_GROUPS", "5", 1);
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "5");
    ck_assert_str_eq(te_config_get_stored(cfg, "engine", "groups"), "4");
    char buf[128];
    ck_assert_str_eq(te_config_origin(cfg, "engine", "groups", buf, sizeof buf),
                     "environment TE_ENGINE_GROUPS");
    uint64_t g = 0;
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "groups", 1, 1, 64, &g), 0);
    ck_assert_uint_eq(g, 5);
    setenv("TE_ENGINE_GROUPS", "many", 1);
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "groups", 1, 1, 64, &g),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "engine.groups = \"many\" (environment TE_ENGINE_GROUPS): "
                     "expected an integer in [1, 64]");
    unsetenv("TE_ENGINE_GROUPS");
    ck_assert_str_eq(te_config_get(cfg, "engine", "groups"), "4");
    te_config_free(cfg);
}
END_TEST

START_TEST(env_names_and_shorthands)
{
    te_config *cfg = te_config_new();
    char name[64];
    ck_assert_int_eq(te_config_env_name("loopback", "fault_reorder", name,
                                        sizeof name), 0);
    ck_assert_str_eq(name, "TE_LOOPBACK_FAULT_REORDER");
    ck_assert_int_eq(te_config_env_name("my-plug.v2", "a-b.c", name, sizeof name),
                     0);
    ck_assert_str_eq(name, "TE_MY_PLUG_V2_A_B_C");
    ck_assert_int_eq(te_config_env_name("engine", "x", name, 5), -ENAMETOOLONG);

    /* Env overrides keys that were never set, too. */
    setenv("TE_LOOPBACK_FAULT_REORDER", "yes", 1);
    ck_assert_str_eq(te_config_get(cfg, "loopback", "fault_reorder"), "yes");
    int b = 0;
    ck_assert_int_eq(te_config_get_bool(cfg, "loopback", "fault_reorder", 0, &b), 0);
    ck_assert_int_eq(b, 1);
    unsetenv("TE_LOOPBACK_FAULT_REORDER");
    setenv("TE_MY_PLUG_A_B", "1", 1);
    ck_assert_str_eq(te_config_get(cfg, "my-plug", "a.b"), "1");
    unsetenv("TE_MY_PLUG_A_B");

    ck_assert_int_eq(te_config_set(cfg, "engine", "plugin", "efa"), 0);
    ck_assert_int_eq(te_config_set(cfg, "engine", "plugin_path", "/cfg"), 0);
    setenv("TE_PLUGIN", "mlx5", 1);
    setenv("TE_PLUGIN_PATH", "/env", 1);
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin"), "mlx5");
    /* TE_PLUGIN_PATH is the loader's own search path, not a shorthand:
     * engine.plugin_path from the file is searched after it. */
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin_path"), "/cfg");
    ck_assert_str_eq(te_config_get_str(cfg, "engine", "plugin_path", "d"), "/cfg");
    ck_assert_str_eq(te_config_get_stored(cfg, "engine", "plugin_path"), "/cfg");
    char buf[128];
    ck_assert_str_eq(te_config_origin(cfg, "engine", "plugin", buf, sizeof buf),
                     "environment TE_PLUGIN");
    /* The long form wins over the shorthand. */
    setenv("TE_ENGINE_PLUGIN", "loopback", 1);
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin"), "loopback");
    /* Shorthands apply to [engine] only. */
    ck_assert_ptr_null(te_config_get(cfg, "other", "plugin"));
    unsetenv("TE_ENGINE_PLUGIN");
    unsetenv("TE_PLUGIN");
    unsetenv("TE_PLUGIN_PATH");
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin"), "efa");
    ck_assert_str_eq(te_config_get_str(cfg, "engine", "nope", "dflt"), "dflt");
    te_config_free(cfg);
}
END_TEST

/* -------------------------------------------------------- validation */

START_TEST(unknown_key_suggestion)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_string(cfg, "[loopback]\n"
                                                "devices = 2\n"
                                                "qeue_depth = 8\n"),
                     0);
    ck_assert_int_eq(te_config_validate_section(cfg, "loopback", lo_keys), -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "unknown key \"qeue_depth\" in section [loopback] (string:3); "
                     "did you mean \"queue_depth\"?");

    ck_assert_int_eq(te_config_set(cfg, "engine", "submit_queue_dept", "1"), 0);
    ck_assert_int_eq(te_config_validate_section(cfg, "engine", te_engine_keys),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "unknown key \"submit_queue_dept\" in section [engine] "
                     "(te_config_set); did you mean \"submit_queue_depth\"?");
    te_config_free(cfg);

    cfg = te_config_new();
    ck_assert_int_eq(te_config_set(cfg, "loopback", "zzzzzz", "1"), 0);
    ck_assert_int_eq(te_config_validate_section(cfg, "loopback", lo_keys), -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "unknown key \"zzzzzz\" in section [loopback] (te_config_set); "
                     "known keys: devices, queue_depth, fault_reorder");
    /* Other sections are not this call's business. */
    ck_assert_int_eq(te_config_validate_section(cfg, "engine", te_engine_keys), 0);
    te_config_free(cfg);
}
END_TEST

START_TEST(known_keys_validate)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_string(cfg, "[LOOPBACK]\nDevices = 2\n"
                                                "queue_depth = 8\n"),
                     0);
    ck_assert_int_eq(te_config_validate_section(cfg, "loopback", lo_keys), 0);
    static const struct te_config_key none[] = {{NULL, NULL, NULL}};
    ck_assert_int_eq(te_config_validate_section(cfg, "loopback", none), -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "unknown key \"devices\" in section [loopback] (string:2); "
                     "section [loopback] takes no keys");
    te_config_free(cfg);
}
END_TEST

START_TEST(validate_sections)
{
    static const char *const secs[] = {"engine", "loopback", NULL};
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\ngroups = 1\n"
                                                "[loopback]\ndevices = 1\n"),
                     0);
    ck_assert_int_eq(te_config_validate_sections(cfg, secs), 0);
    ck_assert_int_eq(te_config_load_string(cfg, "[enigne]\ngroups = 1\n"), 0);
    ck_assert_int_eq(te_config_validate_sections(cfg, secs), -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "unknown section [enigne] (string:2); did you mean [engine]?");
    te_config_free(cfg);
    cfg = te_config_new();
    ck_assert_int_eq(te_config_set(cfg, "mlx5", "port", "1"), 0);
    ck_assert_int_eq(te_config_validate_sections(cfg, secs), -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "unknown section [mlx5] (te_config_set); known sections: "
                     "[engine], [loopback]");
    te_config_free(cfg);
}
END_TEST

/* ------------------------------------------------------ typed getters */

START_TEST(get_u64_forms)
{
    static const struct {
        const char *text;
        uint64_t want;
    } ok[] = {
        {"0", 0},          {"42", 42},          {" 7 ", 7},
        {"0x10", 16},      {"0XfF", 255},       {"4k", 4096},
        {"4K", 4096},      {"2m", 2u << 20},    {"3M", 3u << 20},
        {"1g", 1u << 30},  {"2G", 2ull << 30},  {"0x10k", 16384},
        {"010", 10},       {"18446744073709551615", UINT64_MAX},
        {"17179869183G", 17179869183ull << 30},
    };
    te_config *cfg = te_config_new();
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1234;
        ck_assert_int_eq(te_config_set(cfg, "t", "v", ok[i].text), 0);
        ck_assert_msg(te_config_get_u64(cfg, "t", "v", 0, 0, UINT64_MAX, &v) == 0,
                      "\"%s\": %s", ok[i].text, te_last_error());
        ck_assert_uint_eq(v, ok[i].want);
    }
    static const char *const bad[] = {"",     "-1",  "+1",   "two", "1.5",
                                      "0x",   "4kb", "4 k",  "1T",  "0x0x1",
                                      "k",    "1e3", "18446744073709551616",
                                      "17179869184G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 1234;
        ck_assert_int_eq(te_config_set(cfg, "t", "v", bad[i]), 0);
        ck_assert_msg(te_config_get_u64(cfg, "t", "v", 0, 0, UINT64_MAX, &v) ==
                          -EINVAL,
                      "\"%s\" accepted", bad[i]);
        ck_assert_uint_eq(v, 1234); /* untouched on error */
        ck_assert_msg_has("expected a non-negative integer");
    }
    uint64_t v;
    ck_assert_int_eq(te_config_set(cfg, "t", "v", "18446744073709551616"), 0);
    ck_assert_int_eq(te_config_get_u64(cfg, "t", "v", 0, 0, UINT64_MAX, &v), -EINVAL);
    ck_assert_msg_has("overflows 64 bits");
    /* Unset: the default. */
    ck_assert_int_eq(te_config_get_u64(cfg, "t", "unset", 77, 0, 10, &v), 0);
    ck_assert_uint_eq(v, 77);
    te_config_free(cfg);
}
END_TEST

START_TEST(get_u64_messages)
{
    te_config *cfg = te_config_new();
    uint64_t v;
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\n\ngroups = two\n"), 0);
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "groups", 1, 1, 64, &v),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "engine.groups = \"two\" (string:3): expected an integer in "
                     "[1, 64]");
    ck_assert_int_eq(te_config_set(cfg, "engine", "groups", "100"), 0);
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "groups", 1, 1, 64, &v),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "engine.groups = \"100\" (te_config_set): expected an "
                     "integer in [1, 64]");
    ck_assert_int_eq(te_config_set(cfg, "engine", "groups", "0"), 0);
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "groups", 1, 1, 64, &v),
                     -EINVAL);
    ck_assert_int_eq(te_config_set(cfg, "engine", "groups", "64"), 0);
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "groups", 1, 1, 64, &v), 0);
    ck_assert_uint_eq(v, 64);
    ck_assert_int_eq(te_config_set(cfg, "engine", "max_msg_size", "1G"), 0);
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "max_msg_size", 4096, 1,
                                       1 << 20, &v),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "engine.max_msg_size = \"1G\" (te_config_set): expected an "
                     "integer in [1, 1048576], got 1073741824");
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "max_msg_size", 4096, 16,
                                       UINT64_MAX, &v),
                     0);
    ck_assert_int_eq(te_config_set(cfg, "engine", "max_msg_size", "8"), 0);
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "max_msg_size", 4096, 16,
                                       UINT64_MAX, &v),
                     -EINVAL);
    ck_assert_msg_has("expected an integer >= 16");
    te_config_free(cfg);
}
END_TEST

START_TEST(get_bool_and_double)
{
    static const char *const t[] = {"true", "TRUE", "yes", "on", "1", " On "};
    static const char *const f[] = {"false", "False", "no", "off", "0", "OFF"};
    te_config *cfg = te_config_new();
    int b;
    for (size_t i = 0; i < 6; i++) {
        te_config_set(cfg, "loopback", "fault_reorder", t[i]);
        b = -1;
        ck_assert_int_eq(te_config_get_bool(cfg, "loopback", "fault_reorder", 0, &b), 0);
        ck_assert_int_eq(b, 1);
        te_config_set(cfg, "loopback", "fault_reorder", f[i]);
        ck_assert_int_eq(te_config_get_bool(cfg, "loopback", "fault_reorder", 1, &b), 0);
        ck_assert_int_eq(b, 0);
    }
    te_config_set(cfg, "loopback", "fault_reorder", "maybe");
    ck_assert_int_eq(te_config_get_bool(cfg, "loopback", "fault_reorder", 0, &b),
                     -EINVAL);
    ck_assert_str_eq(te_last_error(),
                     "loopback.fault_reorder = \"maybe\" (te_config_set): expected "
                     "a boolean (true/false, yes/no, on/off, 1/0)");
    te_config_set(cfg, "loopback", "fault_reorder", "truefalse");
    ck_assert_int_eq(te_config_get_bool(cfg, "loopback", "fault_reorder", 0, &b),
                     -EINVAL);
    ck_assert_int_eq(te_config_get_bool(cfg, "loopback", "unset", 7, &b), 0);
    ck_assert_int_eq(b, 1);

    double d;
    te_config_set(cfg, "x", "ratio", "0.25");
    ck_assert_int_eq(te_config_get_double(cfg, "x", "ratio", 1, 0, 1, &d), 0);
    ck_assert(d == 0.25);
    te_config_set(cfg, "x", "ratio", "1e-1");
    ck_assert_int_eq(te_config_get_double(cfg, "x", "ratio", 1, 0, 1, &d), 0);
    ck_assert(d == 0.1);
    static const char *const bad[] = {"2", "-0.5", "abc", "nan", "inf", "0.5x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        te_config_set(cfg, "x", "ratio", bad[i]);
        ck_assert_msg(te_config_get_double(cfg, "x", "ratio", 1, 0, 1, &d) == -EINVAL,
                      "\"%s\" accepted", bad[i]);
    }
    te_config_set(cfg, "x", "ratio", "2");
    te_config_get_double(cfg, "x", "ratio", 1, 0, 1, &d);
    ck_assert_str_eq(te_last_error(),
                     "x.ratio = \"2\" (te_config_set): expected a number in [0, 1]");
    ck_assert_int_eq(te_config_get_double(cfg, "x", "unset", 0.5, 0, 1, &d), 0);
    ck_assert(d == 0.5);
    te_config_free(cfg);
}
END_TEST

/* --------------------------------------------------- clone / foreach */

struct seen {
    char text[512];
    int n;
};

static void collect(const char *section, const char *key, const char *value,
                    void *arg)
{
    struct seen *s = arg;
    size_t off = strlen(s->text);
    snprintf(s->text + off, sizeof s->text - off, "%s.%s=%s;", section, key, value);
    s->n++;
}

START_TEST(foreach_order)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\nplugin = a\n"
                                                "groups = 2\n[Loopback]\n"
                                                "devices = 3\n"),
                     0);
    ck_assert_int_eq(te_config_set(cfg, "engine", "log_level", "3"), 0);
    ck_assert_int_eq(te_config_set(cfg, "ENGINE", "PLUGIN", "b"), 0); /* keeps place */
    struct seen s = {"", 0};
    te_config_foreach(cfg, collect, &s);
    ck_assert_int_eq(s.n, 4);
    ck_assert_str_eq(s.text, "engine.plugin=b;engine.groups=2;loopback.devices=3;"
                             "engine.log_level=3;");
    te_config_free(cfg);
}
END_TEST

START_TEST(clone_is_deep)
{
    te_config *cfg = te_config_new();
    ck_assert_int_eq(te_config_load_string(cfg, "[engine]\nplugin = a\ngroups = 2\n"), 0);
    te_config *c = te_config_clone(cfg);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(te_config_set(cfg, "engine", "plugin", "changed"), 0);
    te_config_free(cfg);
    ck_assert_str_eq(te_config_get(c, "engine", "plugin"), "a");
    char buf[64];
    ck_assert_str_eq(te_config_origin(c, "engine", "groups", buf, sizeof buf),
                     "string:3");
    struct seen s = {"", 0};
    te_config_foreach(c, collect, &s);
    ck_assert_str_eq(s.text, "engine.plugin=a;engine.groups=2;");
    te_config_free(c);
}
END_TEST

/* ---------------------------------------------- shipped config files */

START_TEST(shipped_default_config_in_sync)
{
    te_config *cfg = te_config_new();
    int rc = te_config_load_file(cfg, TE_SOURCE_DIR "/conf/transferengine.ini");
    ck_assert_msg(rc == 0, "%s", te_last_error());
    rc = te_config_validate_section(cfg, "engine", te_engine_keys);
    ck_assert_msg(rc == 0, "%s", te_last_error());
    static const char *const secs[] = {"engine", NULL};
    ck_assert_int_eq(te_config_validate_sections(cfg, secs), 0);
    /* Every documented key is in the file, set to its default. */
    size_t n = 0;
    for (const struct te_config_key *k = te_engine_keys; k->name != NULL; k++, n++) {
        const char *v = te_config_get_stored(cfg, "engine", k->name);
        ck_assert_msg(v != NULL, "key %s missing from conf/transferengine.ini",
                      k->name);
        ck_assert_ptr_nonnull(k->default_value);
        ck_assert_msg(strcmp(v, k->default_value) == 0,
                      "conf/transferengine.ini: %s = \"%s\", default is \"%s\"",
                      k->name, v, k->default_value);
        ck_assert_msg(k->doc != NULL && k->doc[0] != '\0', "key %s undocumented",
                      k->name);
    }
    ck_assert_uint_ge(n, 16);
    te_config_free(cfg);
    /* Every key is in the reference table of docs/config.md too. */
    FILE *f = fopen(TE_SOURCE_DIR "/docs/config.md", "r");
    ck_assert_ptr_nonnull(f);
    static char doc[1 << 16];
    size_t len = fread(doc, 1, sizeof(doc) - 1, f);
    doc[len] = 0;
    fclose(f);
    for (const struct te_config_key *k = te_engine_keys; k->name != NULL; k++) {
        char cell[80];
        snprintf(cell, sizeof(cell), "| `%s` |", k->name);
        ck_assert_msg(strstr(doc, cell) != NULL,
                      "key %s missing from docs/config.md", k->name);
    }
}
END_TEST

START_TEST(shipped_loopback_2nic)
{
    te_config *cfg = te_config_new();
    int rc = te_config_load_file(cfg, TE_SOURCE_DIR "/conf/loopback-2nic.ini");
    ck_assert_msg(rc == 0, "%s", te_last_error());
    ck_assert_int_eq(te_config_validate_section(cfg, "engine", te_engine_keys), 0);
    uint64_t v;
    ck_assert_int_eq(te_config_get_u64(cfg, "engine", "nics_per_group", 1, 1,
                                       TE_MAX_NICS, &v), 0);
    ck_assert_uint_eq(v, 2);
    ck_assert_str_eq(te_config_get(cfg, "engine", "plugin"), "loopback");
    te_config_free(cfg);
}
END_TEST

/* Tests must not see the caller's TE_* variables (ctest sets TE_PLUGIN_PATH). */
static void clear_te_env(void)
{
    extern char **environ;
    for (;;) {
        char name[256];
        int found = 0;
        for (char **e = environ; e && *e; e++) {
            if (strncmp(*e, "TE_", 3) == 0) {
                const char *eq = strchr(*e, '=');
                size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
                if (n < sizeof name) {
                    memcpy(name, *e, n);
                    name[n] = '\0';
                    found = 1;
                    break;
                }
            }
        }
        if (!found)
            break;
        unsetenv(name);
    }
}

int main(void)
{
    clear_te_env();
    return TE_TEST_RUN("config",
                       TE_TCASE("core",
                         set_get_replace, set_rejects_bad_arguments,
                         load_string_values_and_origins, load_file_and_origins,
                         load_missing_file, load_syntax_error_line,
                         load_key_outside_section, load_long_line,
                         precedence_file_set_env, env_names_and_shorthands,
                         unknown_key_suggestion, known_keys_validate,
                         validate_sections, get_u64_forms, get_u64_messages,
                         get_bool_and_double, foreach_order, clone_is_deep,
                         shipped_default_config_in_sync,
                         shipped_loopback_2nic));
}
