/*
 * Unit tests for auth and login: digests, the constant-time comparison,
 * logins as Redis answers them (default user, named users, disabled
 * default), and the words of each server in login.c's table (the replies
 * themselves are compared with the live servers by
 * tests/integration/test_auth.py).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "identify.h"
#include "login.h"

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

/* ---- login: which server's words ------------------------------------------ */

static const char *words_for(const char *server)
{
    struct server_id id;
    cr_assert_eq(server_id_parse(server, &id), 0, "%s", server);
    return login_words_name(login_words_for(&id));
}

Test(login, words_by_server)
{
    cr_assert_str_eq(words_for("redis:7.0.15"), "redis 7.0");
    cr_assert_str_eq(words_for("redis:6.2.14"), "redis 7.0");     /* older than every row */
    cr_assert_str_eq(words_for("redis:7.4.2"), "redis 7.0");      /* the newest not newer */
    cr_assert_str_eq(words_for("redis:8.0.6"), "redis 8.0");
    cr_assert_str_eq(words_for("redis:8.2.1"), "redis 8.0");
    cr_assert_str_eq(words_for("redis:8.6.3"), "redis 8.6");
    cr_assert_str_eq(words_for("redis:9.0.0"), "redis 8.6");
    cr_assert_str_eq(words_for("valkey:7.2.4"), "valkey 8.1");
    cr_assert_str_eq(words_for("valkey:8.1.1"), "valkey 8.1");
    cr_assert_str_eq(words_for("valkey:9.0.0"), "valkey 8.1");
    cr_assert_str_eq(words_for("valkey:9.1.2"), "valkey 9.1");
}

/* ---- login: replies -------------------------------------------------------- */

/* COMMAND as a server answers it: GET, AUTH, HELLO, and CONFIG with GET. */
static const char command_reply[] =
    "*4\r\n"
    "*10\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n"
    "*10\r\n$4\r\nauth\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*0\r\n"
    "*10\r\n$5\r\nhello\r\n:-1\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*0\r\n"
    "*10\r\n$6\r\nconfig\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*1\r\n"
    "*10\r\n$10\r\nconfig|get\r\n:-3\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*0\r\n";

Test(login, arities_from_command)
{
    struct cmd_arities t = { 0 };
    cr_assert_eq(identify_arities(command_reply, sizeof command_reply - 1, &t), 0);
    cr_assert_eq(t.n, 5);
    const struct cmd_arity *get = arities_find(&t, "GeT", 3);
    cr_assert(get != NULL && get->arity == 2 && !get->container);
    cr_assert_null(arities_find(&t, "get\0x", 5), "every byte of the name counts");
    cr_assert_null(arities_find(&t, "config|get", 10), "a subcommand is no command");
    const struct cmd_arity *config = arities_find(&t, "CONFIG", 6);
    cr_assert(config != NULL && config->container);
    const struct cmd_arity *sub = arities_find_sub(&t, config, "Get", 3);
    cr_assert(sub != NULL && sub->arity == -3);
    cr_assert_eq(sub->len, 10);
    cr_assert_eq(memcmp(sub->name, "config|get", 10), 0);
    cr_assert_null(arities_find_sub(&t, config, "set", 3));
    cr_assert_eq(identify_arities("+OK\r\n", 5, &t), -1);
    cr_assert_eq(t.n, 0);
    arities_free(&t);
}

struct judged {
    struct login lg;
    struct slice argv[8];
    struct request req;
};

/* login_judge() for argv (NULL-terminated), before any login, in front of
 * `server` (words and command set), with COMMAND read or not. */
static void judge(struct judged *j, const char *server, int with_command,
                  const struct auth_users *users, int pending, const char **argv, size_t *lens)
{
    static struct login_backend lb;
    struct server_id id;
    cr_assert_eq(server_id_parse(server, &id), 0);
    lb.words = login_words_for(&id);
    if (with_command)
        identify_arities(command_reply, sizeof command_reply - 1, &lb.cmds);
    else
        arities_free(&lb.cmds);
    j->req.argc = 0;
    for (int i = 0; argv[i] != NULL; i++) {
        j->argv[i] = (struct slice){ argv[i], lens != NULL ? lens[i] : strlen(argv[i]) };
        j->req.argc++;
    }
    j->req.argv = j->argv;
    struct command_set *set = command_set_new(&id);
    struct login_ctx cx = { .users = users, .backend = &lb, .replies_pending = pending };
    const struct cmd_info *ci = command_resolve(set, argv[0], j->argv[0].len);
    struct cmd_words w = command_words(ci != NULL ? ci->id : CID_OTHER, j->req.argc, j->argv);
    login_judge(&cx, &j->req, ci, &w, &j->lg);
    command_set_free(set);
}

static void assert_reply(const struct judged *j, const char *want)
{
    cr_assert_eq(j->lg.verdict, LV_REPLY);
    cr_assert_eq(j->lg.reply.len, strlen(want), "got %.*s", (int)j->lg.reply.len, j->lg.reply.p);
    cr_assert_eq(memcmp(j->lg.reply.p, want, strlen(want)), 0, "got %.*s",
                 (int)j->lg.reply.len, j->lg.reply.p);
}

#define NOAUTH "-NOAUTH Authentication required.\r\n"

Test(login, before_the_login_in_each_servers_order)
{
    static struct judged j;
    struct auth_user v[1] = { user("default", "pw") };
    struct auth_users users = { v, 1 };
    const char *get[] = { "GET", NULL }, *foo[] = { "FOO", NULL };
    const char *config_foo[] = { "CONFIG", "FOO", NULL }, *config_get[] = { "config", "get", NULL };

    judge(&j, "redis:7.0.15", 1, &users, 0, get, NULL);
    assert_reply(&j, "-ERR wrong number of arguments for 'get' command\r\n");
    judge(&j, "redis:7.0.15", 0, &users, 0, get, NULL);
    assert_reply(&j, NOAUTH);           /* no COMMAND: GET's arity is not known */
    judge(&j, "valkey:9.1.2", 1, &users, 0, get, NULL);
    assert_reply(&j, NOAUTH);           /* Valkey 9: NOAUTH first */
    judge(&j, "valkey:9.1.2", 1, &users, 0, foo, NULL);
    assert_reply(&j, NOAUTH);
    judge(&j, "valkey:8.1.1", 1, &users, 0, foo, NULL);
    assert_reply(&j, "-ERR unknown command 'FOO', with args beginning with: \r\n");
    judge(&j, "redis:8.6.3", 1, &users, 0, foo, NULL);
    assert_reply(&j, "-ERR unknown command 'FOO'\r\n");
    judge(&j, "redis:8.0.6", 1, &users, 0, config_foo, NULL);
    assert_reply(&j, "-ERR unknown subcommand 'FOO'. Try CONFIG HELP.\r\n");
    judge(&j, "redis:8.0.6", 1, &users, 0, config_get, NULL);
    assert_reply(&j, "-ERR wrong number of arguments for 'config|get' command\r\n");
    free(v[0].name);
    free(j.lg.reply.p);
}

Test(login, unknown_command_args_as_redis_prints_them)
{
    static struct judged j;
    struct auth_users users = { NULL, 0 };
    const char *argv[] = { "FO\0O", "a\r\nb\0c", "d", NULL };
    size_t lens[] = { 4, 6, 1 };
    judge(&j, "redis:7.0.15", 1, &users, 0, argv, lens);
    assert_reply(&j, "-ERR unknown command 'FO', with args beginning with: 'a  b' 'd' \r\n");
    free(j.lg.reply.p);
}

Test(login, hello_before_the_login)
{
    static struct judged j;
    struct auth_user v[1] = { user("default", "pw") };
    struct auth_users users = { v, 1 };
    const char *hello[] = { "HELLO", "3", NULL };
    const char *bad_name[] = { "HELLO", "3", "AUTH", "default", "pw", "SETNAME", "a b", NULL };

    judge(&j, "redis:7.0.15", 1, &users, 0, hello, NULL);
    assert_reply(&j, "-NOAUTH HELLO must be called with the client already authenticated, "
                 "otherwise the HELLO AUTH <user> <pass> option can be used to authenticate "
                 "the client and select the RESP protocol version at the same time\r\n");
    judge(&j, "valkey:8.1.1", 1, &users, 0, hello, NULL);
    assert_reply(&j, "-NOAUTH HELLO must be called with the client already authenticated, "
                 "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                 "authenticate the client and select the RESP protocol version at the same "
                 "time\r\n");
    /* Redis 7.0 logs in at the AUTH option, before the bad SETNAME; 8.0
     * checks every option first and logs in with none. */
    judge(&j, "redis:7.0.15", 1, &users, 0, bad_name, NULL);
    cr_assert(j.lg.who != NULL);
    judge(&j, "redis:8.0.6", 1, &users, 0, bad_name, NULL);
    cr_assert_null(j.lg.who);
    assert_reply(&j, "-ERR Client names cannot contain spaces, newlines or special "
                 "characters.\r\n");
    free(v[0].name);
    free(j.lg.reply.p);
}

Test(login, failed_login_with_a_reply_pending)
{
    static struct judged j;
    struct auth_user v[1] = { user("default", "pw") };
    struct auth_users users = { v, 1 };
    const char *wrong[] = { "AUTH", "nope", NULL }, *too_many[] = { "AUTH", "x", "y", "z", NULL };

    judge(&j, "redis:8.0.6", 1, &users, 1, wrong, NULL);
    cr_assert_eq(j.lg.verdict, LV_SILENT);
    cr_assert(j.lg.failed);
    judge(&j, "redis:8.0.6", 1, &users, 0, wrong, NULL);
    assert_reply(&j, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    judge(&j, "redis:7.0.15", 1, &users, 1, wrong, NULL);
    assert_reply(&j, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    judge(&j, "valkey:9.1.2", 1, &users, 1, wrong, NULL);
    assert_reply(&j, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    judge(&j, "valkey:8.1.1", 1, &users, 1, too_many, NULL);
    assert_reply(&j, "-ERR syntax error\r\n");      /* only the wrong password goes unanswered */
    free(v[0].name);
    free(j.lg.reply.p);
}

Test(login, http_requests_are_closed)
{
    static struct judged j;
    struct auth_users users = { NULL, 0 };
    const char *post[] = { "post", "/", NULL }, *host[] = { "Host:", "x", NULL };
    judge(&j, "valkey:9.1.2", 1, &users, 0, post, NULL);
    cr_assert_eq(j.lg.verdict, LV_CLOSE);
    judge(&j, "redis:7.0.15", 0, &users, 0, host, NULL);
    cr_assert_eq(j.lg.verdict, LV_CLOSE);
    free(j.lg.reply.p);
}

Test(login, denied_in_the_servers_words)
{
    struct login_backend lb = { 0 };
    struct server_id id = { SRV_VALKEY, SRV_VERSION(9, 1, 2) };
    size_t n;
    cr_assert_not(login_parses_ahead(NULL));
    cr_assert(strncmp(login_denied(NULL, &n), "-DENIED Redis is running in protected mode", 42)
              == 0);
    lb.words = login_words_for(&id);
    const char *d = login_denied(&lb, &n);
    cr_assert(strncmp(d, "-DENIED Running in protected mode", 33) == 0);
    cr_assert_eq(n, strlen(d));
    cr_assert(strcmp(d + n - 2, "\r\n") == 0);
    cr_assert(login_parses_ahead(&lb), "Valkey 9 reads the requests it has before it runs them");
}
