/*
 * The job secret and the host's authentication services (auth.h).
 *
 * Why libcrypto: HMAC-SHA256 and a constant-time compare are exactly what
 * a challenge-response needs, and a home-made MAC would be the weakest
 * link. The secret lives in one malloc'd block that is wiped with
 * OPENSSL_cleanse (which the compiler may not elide) before it is freed;
 * messages name the key's source and the cause, never the secret.
 *
 * The HMAC key schedule is done once: a keyed EVP_MAC context is kept and
 * duplicated per MAC (OpenSSL 3's one-shot HMAC() fetches the algorithm
 * and keys it on every call: 1.5 us natively, 64-74 us in an emulated
 * guest, three or four per connection set-up). The keyed context holds
 * derived key material; OpenSSL wipes it when it is freed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include "auth.h"
#include "config.h"
#include "engine_internal.h"
#include "te_error.h"

struct te_auth {
    EVP_MAC_CTX *keyed;  /* HMAC-SHA256 under key, never updated itself */
    size_t len;
    unsigned char key[]; /* len bytes */
};

/* NULL if libcrypto cannot make one: te_auth_mac() then keys each MAC. */
static EVP_MAC_CTX *keyed_hmac(const unsigned char *key, size_t len)
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context holds its own reference */
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end()};
    if (c && !EVP_MAC_init(c, key, len, params)) {
        EVP_MAC_CTX_free(c);
        c = NULL;
    }
    return c;
}

struct te_auth *te_auth_new(const void *key, size_t len)
{
    struct te_auth *a = malloc(sizeof(*a) + len);
    if (!a)
        return NULL;
    a->len = len;
    memcpy(a->key, key, len);
    a->keyed = keyed_hmac(a->key, len);
    return a;
}

void te_auth_free(struct te_auth *a)
{
    if (!a)
        return;
    EVP_MAC_CTX_free(a->keyed);
    OPENSSL_cleanse(a->key, a->len);
    free(a);
}

/* Drop trailing newlines (an editor's or `echo`'s): the secret is the
 * file's text without them, as engine.auth_key holds it. */
static size_t trim_newlines(const char *s, size_t n)
{
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    return n;
}

static int check_len(const char *source, size_t n)
{
    if (n < TE_AUTH_KEY_MIN)
        return te_fail(-EINVAL, "%s: the secret has %zu bytes, at least %d "
                       "are required", source, n, TE_AUTH_KEY_MIN);
    return 0;
}

/* Like ssh with a private key: a secret that others can read is no
 * secret, so such a file is refused rather than used. */
static int read_key_file(const char *path, struct te_auth **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return te_fail(-errno, "engine.auth_key_file %s: cannot open: %s",
                       path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0) {
        rc = te_fail(-errno, "engine.auth_key_file %s: %s", path,
                     strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = te_fail(-EINVAL, "engine.auth_key_file %s is not a regular file",
                     path);
    } else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        rc = te_fail(-EINVAL, "engine.auth_key_file %s is accessible by "
                     "group or others (mode %04o): refused, the secret must "
                     "be private (chmod 600 %s)", path,
                     (unsigned)(st.st_mode & 07777), path);
    } else if (st.st_size > TE_AUTH_KEY_MAX) {
        rc = te_fail(-EINVAL, "engine.auth_key_file %s has %lld bytes, at "
                     "most %d are read", path, (long long)st.st_size,
                     TE_AUTH_KEY_MAX);
    }
    if (rc) {
        close(fd);
        return rc;
    }
    char buf[TE_AUTH_KEY_MAX + 1];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf && (r = read(fd, buf + n, sizeof buf - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = te_fail(-errno, "engine.auth_key_file %s: read: %s", path,
                         strerror(errno));
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    if (!rc && n > TE_AUTH_KEY_MAX)
        rc = te_fail(-EINVAL, "engine.auth_key_file %s grew past %d bytes "
                     "while being read", path, TE_AUTH_KEY_MAX);
    n = trim_newlines(buf, n);
    if (!rc)
        rc = check_len("engine.auth_key_file", n);
    if (!rc && !(*out = te_auth_new(buf, n)))
        rc = te_fail(-ENOMEM, "engine.auth_key_file: out of memory");
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}

int te_auth_load(const te_config *cfg, struct te_auth **out)
{
    *out = NULL;
    const char *key = te_config_get_str(cfg, "engine", "auth_key", "");
    const char *file = te_config_get_str(cfg, "engine", "auth_key_file", "");
    if (key[0] && file[0])
        return te_fail(-EINVAL, "engine.auth_key and engine.auth_key_file "
                       "are both set: set one of them (the file keeps the "
                       "secret out of configuration and environment)");
    if (file[0])
        return read_key_file(file, out);
    if (!key[0])
        return 0;
    size_t n = strlen(key);
    int rc = check_len("engine.auth_key", n);
    if (rc)
        return rc;
    if (!(*out = te_auth_new(key, n)))
        return te_fail(-ENOMEM, "engine.auth_key: out of memory");
    return 0;
}

int te_auth_mac(const struct te_auth *a, const void *msg, size_t len,
                uint8_t *mac)
{
    if (!a)
        return -ENOKEY;
    if (a->keyed) {
        /* A copy per call: the plugins' threads may MAC at once. */
        EVP_MAC_CTX *c = EVP_MAC_CTX_dup(a->keyed);
        size_t n = 0;
        int ok = c && EVP_MAC_update(c, msg, len) &&
                 EVP_MAC_final(c, mac, &n, TE_PLUGIN_AUTH_MAC_LEN) &&
                 n == TE_PLUGIN_AUTH_MAC_LEN;
        EVP_MAC_CTX_free(c);
        return ok ? 0 : -EIO;
    }
    unsigned int n = 0;
    if (!HMAC(EVP_sha256(), a->key, (int)a->len, msg, len, mac, &n) ||
        n != TE_PLUGIN_AUTH_MAC_LEN)
        return -EIO;
    return 0;
}

int te_auth_verify(const struct te_auth *a, const void *msg, size_t len,
                   const uint8_t *mac)
{
    uint8_t want[TE_PLUGIN_AUTH_MAC_LEN];
    int rc = te_auth_mac(a, msg, len, want);
    if (rc)
        return rc;
    rc = CRYPTO_memcmp(want, mac, sizeof want) ? -EACCES : 0;
    OPENSSL_cleanse(want, sizeof want);
    return rc;
}

/* ------------------------------------------------ plugin host services */

static int host_auth_required(void *ctx)
{
    return ((struct te_engine *)ctx)->auth != NULL;
}

static int host_auth_mac(void *ctx, const void *msg, size_t len, uint8_t *mac)
{
    return te_auth_mac(((struct te_engine *)ctx)->auth, msg, len, mac);
}

static int host_auth_verify(void *ctx, const void *msg, size_t len,
                            const uint8_t *mac)
{
    return te_auth_verify(((struct te_engine *)ctx)->auth, msg, len, mac);
}

void te_auth_host_install(struct te_plugin_host *host)
{
    host->auth_required = host_auth_required;
    host->auth_mac = host_auth_mac;
    host->auth_verify = host_auth_verify;
}
