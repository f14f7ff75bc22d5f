/*
 * Unit tests for auth: digests, the constant-time comparison, logins as
 * Redis answers them (default user, named users, disabled default).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"

/* printf %s 'secret' | sha256sum */
static const char secret_hex[] =
    "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

static struct slice sl(const char *s)
{
    return (struct slice){ s, strlen(s) };
}

static struct auth_user user(const char *name, const char *password)
{
    struct auth_user u = { .name = strdup(name), .password = { .set = 1 } };
    auth_digest(password, strlen(password), u.password.sha);
    return u;
}

Test(auth, digest_is_sha256)
{
    unsigned char want[AUTH_DIGEST_LEN], got[AUTH_DIGEST_LEN];
    cr_assert_eq(auth_parse_hex_digest(secret_hex, want), 0);
    auth_digest("secret", 6, got);
    cr_assert_eq(memcmp(want, got, AUTH_DIGEST_LEN), 0);
}

Test(auth, hex_digest_is_strict)
{
    unsigned char d[AUTH_DIGEST_LEN];
    char upper[65];
    for (int i = 0; i < 64; i++)
        upper[i] = (char)(secret_hex[i] >= 'a' ? secret_hex[i] - 32 : secret_hex[i]);
    upper[64] = '\0';
    cr_assert_eq(auth_parse_hex_digest(upper, d), 0);
    cr_assert_eq(auth_parse_hex_digest("2bb80d", d), -1);                 /* short */
    char bad[65];
    memcpy(bad, secret_hex, 65);
    bad[10] = 'g';
    cr_assert_eq(auth_parse_hex_digest(bad, d), -1);
    char longer[67];
    snprintf(longer, sizeof longer, "%s00", secret_hex);
    cr_assert_eq(auth_parse_hex_digest(longer, d), -1);
}

Test(auth, secret_matches_only_its_password)
{
    struct secret s = { .set = 1 };
    auth_digest("secret", 6, s.sha);
    cr_assert(auth_secret_matches(&s, "secret", 6));
    cr_assert_not(auth_secret_matches(&s, "secreT", 6));
    cr_assert_not(auth_secret_matches(&s, "secret ", 7));
    cr_assert_not(auth_secret_matches(&s, "secre", 5));
    cr_assert_not(auth_secret_matches(&s, "", 0));
    struct secret unset = { 0 };
    auth_digest("", 0, unset.sha);
    cr_assert_not(auth_secret_matches(&unset, "", 0), "an unset secret matches nothing");
}

Test(auth, default_and_named_users)
{
    struct auth_user v[2] = { user("default", "pw"), user("app", "apw") };
    struct auth_users users = { v, 2 };
    const struct auth_user *who = NULL;
    struct slice app = sl("app"), dflt = sl("default"), bob = sl("bob");
    cr_assert_eq(auth_check(&users, NULL, sl("pw"), &who), AUTH_OK);
    cr_assert_str_eq(who->name, "default");
    cr_assert_eq(auth_check(&users, &dflt, sl("pw"), &who), AUTH_OK);
    cr_assert_eq(auth_check(&users, &app, sl("apw"), &who), AUTH_OK);
    cr_assert_str_eq(who->name, "app");
    cr_assert_eq(auth_check(&users, NULL, sl("apw"), &who), AUTH_WRONGPASS);
    cr_assert_eq(auth_check(&users, &app, sl("pw"), &who), AUTH_WRONGPASS);
    cr_assert_eq(auth_check(&users, &bob, sl("pw"), &who), AUTH_WRONGPASS);
    free(v[0].name);
    free(v[1].name);
}

Test(auth, default_off_without_client_password)
{
    /* Redis with `user default off` and ACL users: AUTH <password> says the
     * default user has none; AUTH default x is a wrong pair. */
    struct auth_user v[1] = { user("app", "apw") };
    struct auth_users users = { v, 1 };
    const struct auth_user *who = NULL;
    struct slice dflt = sl("default");
    cr_assert_eq(auth_check(&users, NULL, sl("apw"), &who), AUTH_NOPASS);
    cr_assert_eq(auth_check(&users, &dflt, sl("apw"), &who), AUTH_WRONGPASS);
    free(v[0].name);
}

Test(auth, user_names_are_exact)
{
    struct auth_user v[1] = { user("app", "apw") };
    struct auth_users users = { v, 1 };
    const struct auth_user *who = NULL;
    struct slice upper = sl("APP"), prefix = sl("ap"), longer = sl("app2");
    cr_assert_eq(auth_check(&users, &upper, sl("apw"), &who), AUTH_WRONGPASS);
    cr_assert_eq(auth_check(&users, &prefix, sl("apw"), &who), AUTH_WRONGPASS);
    cr_assert_eq(auth_check(&users, &longer, sl("apw"), &who), AUTH_WRONGPASS);
    free(v[0].name);
}
