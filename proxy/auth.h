/*
 * auth: the passwords ttlguard checks itself (client authentication and the
 * admin token), kept and compared as SHA-256 digests.
 *
 * A password is never stored: the config holds its digest (client_password
 * and admin_token are hashed when the file is read; [user] sections give the
 * digest as password_sha256). A candidate is hashed and the two digests are
 * compared with CRYPTO_memcmp, so the time taken tells nothing about how
 * much of it was right, nor its length. An unknown user name costs the same
 * hash as a known one.
 *
 * The users are the ones Redis would have: `default` (client_password, or
 * [user "default"]) and the named [user] sections. With users configured
 * and no default password, `default` is off, as in Redis after
 * `ACL SETUSER default off`.
 */
#ifndef TTLG_AUTH_H
#define TTLG_AUTH_H

#include <stddef.h>

#include "util.h"

#define AUTH_DIGEST_LEN 32

/* A secret of the config, as its digest. */
struct secret {
    int set;
    unsigned char sha[AUTH_DIGEST_LEN];
};

/* One user clients may log in as. */
struct auth_user {
    char *name;                     /* "default" or the [user "NAME"] */
    struct secret password;
    char *backend_username;         /* what its backend connection logs in as; both NULL: */
    char *backend_password;         /* the [proxy] backend_username / backend_password */
    int line;                       /* of its section (or of client_password) */
};

/* Every user of one config. */
struct auth_users {
    struct auth_user *v;
    size_t n;
};

enum auth_result {
    AUTH_OK,
    AUTH_WRONGPASS,     /* unknown user, disabled user or wrong password */
    AUTH_NOPASS,        /* AUTH <password> with no password for `default` */
};

/* SHA-256 of n bytes. */
void auth_digest(const void *p, size_t n, unsigned char out[AUTH_DIGEST_LEN]);

/* 1 when the digest of candidate equals s (constant time); 0 when not, or
 * when s is not set. */
int auth_secret_matches(const struct secret *s, const void *candidate, size_t n);

/* 64 hex digits (either case) to a digest: 0, or -1. */
int auth_parse_hex_digest(const char *hex, unsigned char out[AUTH_DIGEST_LEN]);

/* Check a login: user NULL is the one-argument AUTH <password> (the
 * `default` user). On AUTH_OK *who is the user. */
enum auth_result auth_check(const struct auth_users *users, const struct slice *user,
                            struct slice pass, const struct auth_user **who);

const struct auth_user *auth_find(const struct auth_users *users, const char *name, size_t len);

void auth_users_free(struct auth_users *users);

#endif
