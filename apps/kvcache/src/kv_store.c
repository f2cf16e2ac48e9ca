/*
 * Membership (te/kv.h "membership"): record text, an embedded directory
 * store and an etcd store (v3 JSON gateway over libcurl, jansson for JSON).
 *
 * Record (the value): lines "key=value": role, capacity, pid, expires
 * (unix ms, the directory store only), addr (hex). Parsed as untrusted
 * input: every field checked, a bad record is named and skipped.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "kv_internal.h"

struct te_kv_store {
    int etcd;
    char base[512];          /* dir: the cluster directory; etcd: URL */
    char prefix[128];        /* etcd key prefix */
    char name[64];
    char record[TE_ADDR_MAX * 2 + 256];
    int ttl_s;
    int64_t lease;
    CURL *curl;
};

/* Wall-clock time on purpose: a membership record's expiry is read by
 * other processes (on other hosts, through a shared directory), where only
 * the wall clock means the same thing. It is a lease, not a wait: no
 * thread sleeps until it (the core's waits are monotonic, core/te_clock.h). */
static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int valid_name(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (!n || n >= max)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
            return 0;
    return 1;
}

/* -------------------------------------------------------------- record */

static void make_record(te_kv_store *s, const char *role, const void *addr,
                        size_t len, uint32_t capacity, uint64_t expires)
{
    int n = snprintf(s->record, sizeof(s->record),
                     "role=%s\ncapacity=%u\npid=%d\nexpires=%" PRIu64 "\naddr=",
                     role, capacity, (int)getpid(), expires);
    for (size_t i = 0; i < len && n + 3 < (int)sizeof(s->record); i++)
        n += snprintf(s->record + n, sizeof(s->record) - (size_t)n, "%02x",
                      ((const uint8_t *)addr)[i]);
    snprintf(s->record + n, sizeof(s->record) - (size_t)n, "\n");
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : -1;
}

/* Parse a record; 0, or -EBADMSG with why. *expires = 0 if absent. */
static int parse_record(const char *text, size_t len, te_kv_member *m,
                        uint64_t *expires, char *why, size_t wlen)
{
    char buf[TE_ADDR_MAX * 2 + 512];
    if (len >= sizeof(buf)) {
        snprintf(why, wlen, "record of %zu bytes is too long", len);
        return -EBADMSG;
    }
    memcpy(buf, text, len);
    buf[len] = 0;
    int have_role = 0, have_addr = 0;
    *expires = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq) {
            snprintf(why, wlen, "line without '=': \"%.40s\"", line);
            return -EBADMSG;
        }
        *eq = 0;
        const char *k = line, *v = eq + 1;
        char *end;
        if (!strcmp(k, "role")) {
            if (strcmp(v, "decode") && strcmp(v, "prefill")) {
                snprintf(why, wlen, "role \"%.20s\" is not decode/prefill", v);
                return -EBADMSG;
            }
            snprintf(m->role, sizeof(m->role), "%s", v);
            have_role = 1;
        } else if (!strcmp(k, "capacity")) {
            unsigned long c = strtoul(v, &end, 10);
            if (*end || end == v || c > UINT32_MAX) {
                snprintf(why, wlen, "capacity \"%.20s\" is not a number", v);
                return -EBADMSG;
            }
            m->capacity = (uint32_t)c;
        } else if (!strcmp(k, "expires")) {
            *expires = strtoull(v, &end, 10);
            if (*end || end == v) {
                snprintf(why, wlen, "expires \"%.20s\" is not a number", v);
                return -EBADMSG;
            }
        } else if (!strcmp(k, "addr")) {
            size_t n = strlen(v);
            if (!n || n % 2 || n / 2 > TE_ADDR_MAX) {
                snprintf(why, wlen, "addr has %zu hex digits (even, at most "
                         "%d)", n, 2 * TE_ADDR_MAX);
                return -EBADMSG;
            }
            for (size_t i = 0; i < n / 2; i++) {
                int hi = hexval(v[2 * i]), lo = hexval(v[2 * i + 1]);
                if (hi < 0 || lo < 0) {
                    snprintf(why, wlen, "addr: not hex at digit %zu", 2 * i);
                    return -EBADMSG;
                }
                m->addr[i] = (uint8_t)(hi << 4 | lo);
            }
            m->addr_len = (uint32_t)(n / 2);
            have_addr = 1;
        } /* pid and unknown keys: ignored (newer writers may add keys) */
    }
    if (!have_role || !have_addr) {
        snprintf(why, wlen, "missing %s", !have_role ? "role" : "addr");
        return -EBADMSG;
    }
    return 0;
}

/* --------------------------------------------------------- directory */

static int dir_write(te_kv_store *s)
{
    char path[700], tmp[720];
    snprintf(path, sizeof(path), "%s/%s.member", s->base, s->name);
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return kv_fail(-errno, "store %s: %s", tmp, strerror(errno));
    int ok = fputs(s->record, f) >= 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return kv_fail(-EIO, "store: cannot write %s", path);
    }
    return 0;
}

static int dir_list(te_kv_store *s, const char *role, te_kv_member *out,
                    int max)
{
    DIR *dir = opendir(s->base);
    if (!dir)
        return kv_fail(-errno, "store %s: %s", s->base, strerror(errno));
    int n = 0;
    uint64_t now = unix_ms();
    struct dirent *de;
    while ((de = readdir(dir))) {
        size_t L = strlen(de->d_name);
        if (L < 8 || strcmp(de->d_name + L - 7, ".member"))
            continue;
        char path[800], text[TE_ADDR_MAX * 2 + 512];
        snprintf(path, sizeof(path), "%s/%s", s->base, de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(text, 1, sizeof(text), f);
        fclose(f);
        te_kv_member m;
        memset(&m, 0, sizeof(m));
        snprintf(m.name, sizeof(m.name), "%.*s", (int)(L - 7), de->d_name);
        uint64_t expires;
        char why[160];
        if (parse_record(text, len, &m, &expires, why, sizeof(why))) {
            te_log_printf(TE_LOG_WARN, "te-kv",
                    "store: member %s skipped: %s", m.name,
                    why);
            continue;
        }
        if (expires && expires < now)
            continue; /* its owner stopped keeping it alive */
        if (role && strcmp(role, m.role))
            continue;
        if (n < max)
            out[n] = m;
        n++;
    }
    closedir(dir);
    return n;
}

/* --------------------------------------------------------------- etcd */

struct buf {
    char *p;
    size_t len;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct buf *b = arg;
    size_t n = size * nmemb;
    if (b->len + n > (1u << 24))
        return 0;
    char *q = realloc(b->p, b->len + n + 1);
    if (!q)
        return 0;
    memcpy(q + b->len, data, n);
    b->p = q;
    b->len += n;
    b->p[b->len] = 0;
    return n;
}

static const char B64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64(const void *data, size_t len)
{
    const uint8_t *d = data;
    char *o = malloc(4 * ((len + 2) / 3) + 1), *w = o;
    if (!o)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < len ? d[i + 1] << 8 : 0) |
                     (i + 2 < len ? d[i + 2] : 0);
        *w++ = B64[v >> 18 & 63];
        *w++ = B64[v >> 12 & 63];
        *w++ = i + 1 < len ? B64[v >> 6 & 63] : '=';
        *w++ = i + 2 < len ? B64[v & 63] : '=';
    }
    *w = 0;
    return o;
}

/* Decode base64 (untrusted): length or -1. */
static long unb64(const char *s, uint8_t *out, size_t cap)
{
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(B64, *s);
        if (!p || !*s)
            return -1;
        acc = acc << 6 | (uint32_t)(p - B64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return -1;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return (long)n;
}

/* POST a JSON body to the gateway: the parsed reply or NULL (kv_fail). */
static json_t *etcd_call(te_kv_store *s, const char *path, json_t *body)
{
    char url[700];
    snprintf(url, sizeof(url), "%s%s", s->base, path);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct buf b = {NULL, 0};
    curl_easy_reset(s->curl);
    curl_easy_setopt(s->curl, CURLOPT_URL, url);
    curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, text ? text : "{}");
    curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(s->curl, CURLOPT_TIMEOUT_MS, 3000L);
    curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(s->curl);
    free(text);
    long code = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK || code != 200) {
        kv_fail(-EHOSTUNREACH, "etcd %s%s: %s (HTTP %ld)", s->base, path,
                rc != CURLE_OK ? curl_easy_strerror(rc) : "refused", code);
        free(b.p);
        return NULL;
    }
    json_error_t err;
    json_t *j = json_loadb(b.p ? b.p : "", b.len, 0, &err);
    free(b.p);
    if (!j)
        kv_fail(-EBADMSG, "etcd %s: reply is not JSON: %s", path, err.text);
    return j;
}

static int64_t json_int(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v))
        return json_integer_value(v);
    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    return 0;
}

static int etcd_put(te_kv_store *s)
{
    char key[256];
    snprintf(key, sizeof(key), "%s%s", s->prefix, s->name);
    char *k = b64(key, strlen(key)), *v = b64(s->record, strlen(s->record));
    json_t *body = json_pack("{s:s, s:s, s:s}", "key", k ? k : "", "value",
                             v ? v : "", "lease", "");
    char lease[32];
    snprintf(lease, sizeof(lease), "%" PRId64, s->lease);
    json_object_set_new(body, "lease", json_string(lease));
    free(k);
    free(v);
    json_t *r = etcd_call(s, "/v3/kv/put", body);
    if (!r)
        return -EHOSTUNREACH;
    json_decref(r);
    return 0;
}

static int etcd_list(te_kv_store *s, const char *role, te_kv_member *out,
                     int max)
{
    size_t pl = strlen(s->prefix);
    char end[128];
    memcpy(end, s->prefix, pl + 1);
    end[pl - 1]++; /* prefix ends with '/': range [prefix, prefix+1) */
    char *k = b64(s->prefix, pl), *e = b64(end, pl);
    json_t *r = etcd_call(s, "/v3/kv/range",
                          json_pack("{s:s, s:s}", "key", k ? k : "",
                                    "range_end", e ? e : ""));
    free(k);
    free(e);
    if (!r)
        return -EHOSTUNREACH;
    int n = 0;
    size_t i;
    json_t *kv;
    json_array_foreach(json_object_get(r, "kvs"), i, kv) {
        uint8_t key[256], val[TE_ADDR_MAX * 2 + 512];
        const char *ks = json_string_value(json_object_get(kv, "key"));
        const char *vs = json_string_value(json_object_get(kv, "value"));
        long kl = ks ? unb64(ks, key, sizeof(key) - 1) : -1;
        long vl = vs ? unb64(vs, val, sizeof(val) - 1) : -1;
        if (kl <= (long)pl || vl < 0) {
            te_log_printf(TE_LOG_WARN, "te-kv",
                    "store: an etcd entry under %s does not "
                    "decode: skipped", s->prefix);
            continue;
        }
        key[kl] = 0;
        te_kv_member m;
        memset(&m, 0, sizeof(m));
        snprintf(m.name, sizeof(m.name), "%s", (char *)key + pl);
        uint64_t expires;
        char why[160];
        if (parse_record((char *)val, (size_t)vl, &m, &expires, why,
                         sizeof(why))) {
            te_log_printf(TE_LOG_WARN, "te-kv",
                    "store: member %s skipped: %s", m.name,
                    why);
            continue;
        }
        if (role && strcmp(role, m.role))
            continue;
        if (n < max)
            out[n] = m;
        n++;
    }
    json_decref(r);
    return n;
}

/* ---------------------------------------------------------------- API */

int te_kv_store_open(const char *url, const char *cluster, te_kv_store **out)
{
    kv_clear();
    if (!cluster || !valid_name(cluster, 64) || !out)
        return kv_fail(-EINVAL, "store: cluster name \"%s\" (letters, digits, "
                       "-_. only)", cluster ? cluster : "(null)");
    te_kv_store *s = calloc(1, sizeof(*s));
    if (!s)
        return kv_fail(-ENOMEM, "store: out of memory");
    if (url && !strncmp(url, "etcd://", 7)) {
        s->etcd = 1;
        snprintf(s->base, sizeof(s->base), "http://%s", url + 7);
        snprintf(s->prefix, sizeof(s->prefix), "/te-kv/%s/", cluster);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        s->curl = curl_easy_init();
        json_t *r = s->curl ? etcd_call(s, "/v3/maintenance/status",
                                        json_object()) : NULL;
        if (!r) {
            int rc = s->curl ? -EHOSTUNREACH : -ENOMEM;
            if (s->curl)
                curl_easy_cleanup(s->curl);
            free(s);
            return rc; /* message from etcd_call: which URL, why */
        }
        json_decref(r);
    } else {
        const char *dir = url && !strncmp(url, "dir:", 4) ? url + 4 : NULL;
        if (url && !dir) {
            free(s);
            return kv_fail(-EINVAL, "store: \"%s\": want etcd://HOST:PORT or "
                           "dir:PATH", url);
        }
        char def[128];
        if (!dir && !(dir = getenv("TE_KV_STORE"))) {
            snprintf(def, sizeof(def), "/tmp/te-kv-%u", (unsigned)getuid());
            dir = def;
        }
        mkdir(dir, 0700);
        snprintf(s->base, sizeof(s->base), "%s/%s", dir, cluster);
        if (mkdir(s->base, 0700) && errno != EEXIST) {
            int e = errno;
            free(s);
            return kv_fail(-e, "store: cannot create %s/%s: %s", dir, cluster,
                           strerror(e));
        }
    }
    *out = s;
    return 0;
}

int te_kv_store_register(te_kv_store *s, const char *name, const char *role,
                         const void *addr, size_t len, uint32_t capacity,
                         int ttl_s)
{
    kv_clear();
    if (!valid_name(name, sizeof(s->name)) || !role ||
        (strcmp(role, "decode") && strcmp(role, "prefill")) || !addr || !len ||
        len > TE_ADDR_MAX || ttl_s <= 0)
        return kv_fail(-EINVAL, "store: register \"%s\" role \"%s\": bad "
                       "name, role, address or ttl", name ? name : "",
                       role ? role : "");
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->ttl_s = ttl_s;
    if (s->etcd) {
        json_t *r = etcd_call(s, "/v3/lease/grant",
                              json_pack("{s:I}", "TTL", (json_int_t)ttl_s));
        if (!r)
            return -EHOSTUNREACH;
        s->lease = json_int(r, "ID");
        json_decref(r);
        make_record(s, role, addr, len, capacity, 0);
        return etcd_put(s);
    }
    make_record(s, role, addr, len, capacity, unix_ms() + 1000ull * ttl_s);
    return dir_write(s);
}

int te_kv_store_keepalive(te_kv_store *s)
{
    kv_clear();
    if (!s->name[0])
        return kv_fail(-EINVAL, "store: keepalive before register");
    if (s->etcd) {
        char id[32];
        snprintf(id, sizeof(id), "%" PRId64, s->lease);
        json_t *r = etcd_call(s, "/v3/lease/keepalive",
                              json_pack("{s:s}", "ID", id));
        if (!r)
            return -EHOSTUNREACH;
        json_t *res = json_object_get(r, "result");
        int64_t ttl = json_int(res ? res : r, "TTL");
        json_decref(r);
        if (ttl > 0)
            return 0;
        /* etcd answers the keepalive of an expired lease with HTTP 200 and
         * no TTL; the record went with the lease. A new lease, the same
         * record. */
        r = etcd_call(s, "/v3/lease/grant",
                      json_pack("{s:I}", "TTL", (json_int_t)s->ttl_s));
        if (!r)
            return -EHOSTUNREACH;
        s->lease = json_int(r, "ID");
        json_decref(r);
        int rc = etcd_put(s);
        return rc ? rc : 1;
    }
    char *e = strstr(s->record, "expires=");
    if (!e)
        return kv_fail(-EINVAL, "store: no record");
    /* Rewrite the record with a new expiry (same length field width). */
    te_kv_member m;
    uint64_t old;
    char why[64];
    if (parse_record(s->record, strlen(s->record), &m, &old, why, sizeof(why)))
        return kv_fail(-EINVAL, "store: own record: %s", why);
    int expired = old <= unix_ms(); /* readers had dropped it */
    make_record(s, m.role, m.addr, m.addr_len, m.capacity,
                unix_ms() + 1000ull * s->ttl_s);
    int rc = dir_write(s);
    return rc ? rc : expired;
}

/* A record left behind is listed as live until its ttl runs out: the
 * caller must hear that (and may retry: the name is kept). */
int te_kv_store_unregister(te_kv_store *s)
{
    kv_clear();
    if (!s->name[0])
        return 0;
    if (s->etcd) {
        char id[32];
        snprintf(id, sizeof(id), "%" PRId64, s->lease);
        json_t *r = etcd_call(s, "/v3/lease/revoke",
                              json_pack("{s:s}", "ID", id));
        if (!r)
            return -EHOSTUNREACH; /* etcd_call named the cause */
        json_decref(r);
    } else {
        char path[700];
        snprintf(path, sizeof(path), "%s/%s.member", s->base, s->name);
        /* ENOENT: already gone, which is what was asked. */
        if (unlink(path) && errno != ENOENT)
            return kv_fail(-errno, "store: removing %s: %s", path,
                           strerror(errno));
    }
    s->name[0] = 0;
    return 0;
}

int te_kv_store_list(te_kv_store *s, const char *role, te_kv_member *out,
                     int max)
{
    kv_clear();
    if (max < 0 || (max && !out))
        return kv_fail(-EINVAL, "store: list: bad output");
    return s->etcd ? etcd_list(s, role, out, max) : dir_list(s, role, out, max);
}

void te_kv_store_close(te_kv_store *s)
{
    if (!s)
        return;
    if (s->curl)
        curl_easy_cleanup(s->curl);
    free(s);
}
