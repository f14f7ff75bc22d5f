/*
 * auth: password digests and logins (see auth.h).
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth.h"

void auth_digest(const void *p, size_t n, unsigned char out[AUTH_DIGEST_LEN])
{
    unsigned int len = AUTH_DIGEST_LEN;
    if (EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) != 1 || len != AUTH_DIGEST_LEN) {
        log_error("SHA-256 failed in OpenSSL");
        abort();            /* a login must never pass on a broken hash */
    }
}

int auth_secret_matches(const struct secret *s, const void *candidate, size_t n)
{
    unsigned char got[AUTH_DIGEST_LEN];
    auth_digest(candidate, n, got);
    int same = CRYPTO_memcmp(got, s->sha, AUTH_DIGEST_LEN) == 0;
    OPENSSL_cleanse(got, sizeof got);
    return same && s->set;
}

int auth_parse_hex_digest(const char *hex, unsigned char out[AUTH_DIGEST_LEN])
{
    if (strlen(hex) != 2 * AUTH_DIGEST_LEN)
        return -1;
    for (size_t i = 0; i < AUTH_DIGEST_LEN; i++) {
        int hi = hex_digit_value(hex[2 * i]), lo = hex_digit_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

const struct auth_user *auth_find(const struct auth_users *users, const char *name, size_t len)
{
    for (size_t i = 0; i < users->n; i++) {
        const struct auth_user *u = &users->v[i];
        if (strlen(u->name) == len && memcmp(u->name, name, len) == 0)
            return u;
    }
    return NULL;
}

enum auth_result auth_check(const struct auth_users *users, const struct slice *user,
                            struct slice pass, const struct auth_user **who)
{
    static const struct secret none;   /* matches nothing: unknown users cost a hash too */
    const struct auth_user *u = user != NULL ? auth_find(users, user->p, user->len)
                                             : auth_find(users, "default", 7);
    if (user == NULL && u == NULL)
        return AUTH_NOPASS;             /* Redis: the default user has no password */
    if (!auth_secret_matches(u != NULL ? &u->password : &none, pass.p, pass.len))
        return AUTH_WRONGPASS;
    *who = u;
    return AUTH_OK;
}

static void free_secret_string(char *s)
{
    if (s == NULL)
        return;
    OPENSSL_cleanse(s, strlen(s));
    free(s);
}

void auth_users_free(struct auth_users *users)
{
    for (size_t i = 0; i < users->n; i++) {
        struct auth_user *u = &users->v[i];
        free(u->name);
        free(u->backend_username);
        free_secret_string(u->backend_password);
    }
    free(users->v);
    users->v = NULL;
    users->n = 0;
}
