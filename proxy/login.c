/*
 * login: AUTH, HELLO ... AUTH and what else a client may send before it
 * has logged in (see login.h). The replies are redis-server 7.0.15's, byte
 * for byte (tests/integration/test_auth.py compares them with a real one
 * started with --requirepass).
 */
#include <stdio.h>
#include <string.h>

#include "login.h"

static void reply(struct login *out, const char *text)
{
    out->verdict = LV_REPLY;
    out->reply_len = (size_t)snprintf(out->reply, sizeof out->reply, "%s", text);
}

/* Bytes of an argument in an error line: CR and LF become spaces, as Redis
 * does to every error it sends. */
static size_t put_sanitized(char *dst, size_t room, const char *p, size_t n)
{
    size_t k = n < room ? n : room;
    for (size_t i = 0; i < k; i++)
        dst[i] = p[i] == '\r' || p[i] == '\n' ? ' ' : p[i];
    return k;
}

static void reply_fmt_arg(struct login *out, const char *before, struct slice arg,
                          size_t max, const char *after)
{
    char *o = out->reply;
    size_t room = sizeof out->reply - 1;
    size_t n = (size_t)snprintf(o, room, "%s", before);
    n += put_sanitized(o + n, room - n, arg.p, arg.len < max ? arg.len : max);
    n += (size_t)snprintf(o + n, room - n, "%s", after);
    out->verdict = LV_REPLY;
    out->reply_len = n < room ? n : room;
}

/* "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' ": the
 * arguments quoted while the list is under 128 bytes, the last one cut to
 * what is left of them (Redis's commandCheckExistence). */
static void unknown_command(const struct request *req, struct login *out)
{
    char args[160];
    size_t alen = 0;
    for (int i = 1; i < req->argc && alen < 128; i++) {
        size_t k = req->argv[i].len < 128 - alen ? req->argv[i].len : 128 - alen;
        args[alen++] = '\'';
        alen += put_sanitized(args + alen, k, req->argv[i].p, k);
        args[alen++] = '\'';
        args[alen++] = ' ';
    }
    char *o = out->reply;
    size_t room = sizeof out->reply - 1;
    size_t n = (size_t)snprintf(o, room, "-ERR unknown command '");
    n += put_sanitized(o + n, room - n, req->argv[0].p,
                       req->argv[0].len < 128 ? req->argv[0].len : 128);
    n += (size_t)snprintf(o + n, room - n, "', with args beginning with: %.*s\r\n",
                          (int)alen, args);
    out->verdict = LV_REPLY;
    out->reply_len = n < room ? n : room;
}

static void check_login(const struct auth_users *users, const struct slice *user,
                        struct slice pass, struct login *out)
{
    const struct auth_user *who = NULL;
    switch (auth_check(users, user, pass, &who)) {
    case AUTH_OK:
        out->who = who;
        break;
    case AUTH_WRONGPASS:
        reply(out, AUTH_ERR_WRONGPASS);
        out->failed = 1;
        break;
    case AUTH_NOPASS:
        reply(out, AUTH_ERR_NOPASS);
        out->failed = 1;
        break;
    }
}

/* AUTH [user] password. */
static void judge_auth(const struct auth_users *users, const struct request *req,
                       struct login *out)
{
    if (req->argc < 2) {
        reply(out, "-ERR wrong number of arguments for 'auth' command\r\n");
        return;
    }
    if (req->argc > 3) {
        reply(out, "-ERR syntax error\r\n");
        return;
    }
    check_login(users, req->argc == 3 ? &req->argv[1] : NULL, req->argv[req->argc - 1], out);
    if (out->who != NULL)
        reply(out, "+OK\r\n");
}

/* A client name Redis accepts: printable ASCII without spaces. */
static int valid_client_name(struct slice name)
{
    for (size_t i = 0; i < name.len; i++)
        if (name.p[i] < '!' || name.p[i] > '~')
            return 0;
    return 1;
}

/* The options of HELLO, in order, as Redis 7.0 takes them: an AUTH logs in
 * at once (and stays logged in whatever follows), a bad SETNAME or an
 * unknown option ends it with an error. Returns 0 when HELLO goes on, with
 * the arguments for Redis in out->argv: the AUTH left out, the last
 * SETNAME kept (Redis sets the last one). */
static int hello_options(const struct auth_users *users, const struct request *req,
                         struct login *out)
{
    for (int j = 2; j < req->argc; j++) {
        int more = req->argc - 1 - j;
        struct slice opt = req->argv[j];
        if (slice_eq_nocase(opt, "auth") && more >= 2) {
            check_login(users, &req->argv[j + 1], req->argv[j + 2], out);
            if (out->verdict == LV_REPLY)
                return -1;
            j += 2;
        } else if (slice_eq_nocase(opt, "setname") && more >= 1) {
            if (!valid_client_name(req->argv[j + 1])) {
                reply(out, "-ERR Client names cannot contain spaces, newlines or special "
                      "characters.\r\n");
                return -1;
            }
            int at = out->argc >= 2 && slice_eq_nocase(out->argv[out->argc - 2], "setname")
                     ? out->argc - 2 : out->argc;       /* the last SETNAME wins */
            out->argv[at] = opt;
            out->argv[at + 1] = req->argv[++j];
            out->argc = at + 2;
        } else {
            reply_fmt_arg(out, "-ERR Syntax error in HELLO option '", opt, 128, "'\r\n");
            return -1;
        }
    }
    return 0;
}

/* HELLO [protover [AUTH user pass] [SETNAME name]]. */
static void judge_hello(const struct auth_users *users, const struct request *req,
                        int logged_in, struct login *out)
{
    long long ver;
    out->argv[out->argc++] = req->argv[0];
    if (req->argc >= 2) {
        if (slice_to_ll(req->argv[1], &ver) < 0) {
            reply(out, "-ERR Protocol version is not an integer or out of range\r\n");
            return;
        }
        if (ver < 2 || ver > 3) {
            reply(out, "-NOPROTO unsupported protocol version\r\n");
            return;
        }
        out->argv[out->argc++] = req->argv[1];
    }
    if (hello_options(users, req, out) < 0)
        return;
    if (!logged_in && out->who == NULL) {
        reply(out, AUTH_ERR_HELLO);
        return;
    }
    out->verdict = LV_HELLO;
}

int login_carries_auth(const struct request *req, enum cmd_id id)
{
    if (id == CID_AUTH)
        return 1;
    if (id != CID_HELLO)
        return 0;
    for (int i = 2; i < req->argc; i++)
        if (slice_eq_nocase(req->argv[i], "auth"))
            return 1;
    return 0;
}

/* Before the login: what Redis answers to a client that has not
 * authenticated (commands it does not know are refused first). */
static void judge_unauthenticated(const struct request *req, const struct cmd_info *ci,
                                  struct login *out)
{
    if (ci == NULL) {
        unknown_command(req, out);
    } else if (ci->id == CID_QUIT) {
        reply(out, "+OK\r\n");
        out->verdict = LV_QUIT;
    } else if (ci->id == CID_RESET) {
        reply(out, req->argc == 1 ? "+RESET\r\n"
                                  : "-ERR wrong number of arguments for 'reset' command\r\n");
    } else {
        reply(out, AUTH_ERR_NOAUTH);
    }
}

void login_judge(const struct auth_users *users, const struct request *req,
                 const struct cmd_info *ci, int logged_in, struct login *out)
{
    enum cmd_id id = ci != NULL ? ci->id : CID_OTHER;
    out->verdict = LV_PASS;
    out->who = NULL;
    out->failed = 0;
    out->argc = 0;
    out->reply_len = 0;
    if (id == CID_AUTH)
        judge_auth(users, req, out);
    else if (id == CID_HELLO && (!logged_in || login_carries_auth(req, id)))
        judge_hello(users, req, logged_in, out);
    else if (!logged_in)
        judge_unauthenticated(req, ci, out);
}
