/*
 * The job secret (engine.auth_key / engine.auth_key_file) and the plugin
 * host's authentication services of ABI 1.4 (auth_required, auth_mac,
 * auth_verify): HMAC-SHA256 under the secret, from OpenSSL's libcrypto.
 * The secret is never logged and is wiped when the engine goes away
 * (docs/security.md).
 */
#ifndef TE_CORE_AUTH_H
#define TE_CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"
#include "te/te.h"

/** A job secret; opaque. */
struct te_auth;

/** Fewest bytes a secret may have (a shorter one is refused). */
#define TE_AUTH_KEY_MIN 16
/** Most bytes a secret may have (a key file is read up to this). */
#define TE_AUTH_KEY_MAX 4096

/**
 * Read the secret configured in cfg: engine.auth_key (the text; env
 * TE_ENGINE_AUTH_KEY overrides) or engine.auth_key_file (a path; the file
 * must be a regular file not readable or writable by group or others,
 * trailing newlines are dropped). *out is NULL when neither is set (no
 * authentication). -EINVAL with a message naming the key and the cause
 * (both set, too short, file mode), -errno for a file that cannot be read.
 */
int te_auth_load(const te_config *cfg, struct te_auth **out);

/** Build a secret from bytes (tests, and te_auth_load). NULL on ENOMEM. */
struct te_auth *te_auth_new(const void *key, size_t len);

/** Wipe and free (NULL is ignored). */
void te_auth_free(struct te_auth *a);

/** HMAC-SHA256 of msg into mac (TE_PLUGIN_AUTH_MAC_LEN bytes): 0, or
 *  -ENOKEY when a is NULL, -EIO if libcrypto fails. */
int te_auth_mac(const struct te_auth *a, const void *msg, size_t len,
                uint8_t *mac);

/** Constant-time check of mac against msg: 0 if it matches, -EACCES if
 *  not, -ENOKEY when a is NULL. */
int te_auth_verify(const struct te_auth *a, const void *msg, size_t len,
                   const uint8_t *mac);

/** Point the host's auth_required/auth_mac/auth_verify at the engine's
 *  secret (host->host_ctx is the engine; its auth field, NULL = none). */
void te_auth_host_install(struct te_plugin_host *host);

#endif
