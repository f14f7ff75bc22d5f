/*
 * login: AUTH, HELLO ... AUTH and what else a client may send before it
 * has logged in (see login.h), in the words of the server ttlguard fronts.
 * tests/integration/test_auth.py compares every reply, byte for byte, with
 * that very server started with --requirepass.
 */
#include <string.h>

#include "login.h"

/* ------------------------------------------------------------------------ */
/* The servers' words                                                        */

/* The same on every server in the table. */
#define ERR_NOAUTH      "-NOAUTH Authentication required.\r\n"
#define ERR_WRONGPASS   "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
#define ERR_NOPASS      "-ERR AUTH <password> called without any password configured for the " \
                        "default user. Are you sure your configuration is correct?\r\n"
#define ERR_SYNTAX      "-ERR syntax error\r\n"
#define ERR_PROTOVER    "-ERR Protocol version is not an integer or out of range\r\n"
#define ERR_NOPROTO     "-NOPROTO unsupported protocol version\r\n"

/* HELLO without AUTH before the login (networking.c helloCommand). */
#define HELLO_NOAUTH(form) \
    "-NOAUTH HELLO must be called with the client already authenticated, otherwise the " \
    form " option can be used to authenticate the client and select the RESP protocol " \
    "version at the same time\r\n"

/* Protected mode (networking.c acceptCommonHandler): Redis 7.0 and 8 differ
 * in one typo, Valkey names no server. */
#define DENIED_REDIS(setup) \
    "-DENIED Redis is running in protected mode because protected mode is enabled and no " \
    "password is set for the default user. In this mode connections are only accepted from " \
    "the loopback interface. If you want to connect from external computers to Redis you " \
    "may adopt one of the following solutions: 1) Just disable protected mode sending the " \
    "command 'CONFIG SET protected-mode no' from the loopback interface by connecting to " \
    "Redis from the same host the server is running, however MAKE SURE Redis is not " \
    "publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change " \
    "permanent. 2) Alternatively you can just disable the protected mode by editing the " \
    "Redis configuration file, and setting the protected mode option to 'no', and then " \
    "restarting the server. 3) If you started the server manually just for testing, " \
    "restart it with the '--protected-mode no' option. 4) " setup " an authentication " \
    "password for the default user. NOTE: You only need to do one of the above things in " \
    "order for the server to start accepting connections from the outside.\r\n"
#define DENIED_VALKEY \
    "-DENIED Running in protected mode because protected mode is enabled and no password is " \
    "set for the default user. In this mode connections are only accepted from the loopback " \
    "interface. If you want to connect from external computers, you may adopt one of the " \
    "following solutions: 1) Just disable protected mode sending the command 'CONFIG SET " \
    "protected-mode no' from the loopback interface by connecting from the same host the " \
    "server is running, however MAKE SURE it's not publicly accessible from internet if you " \
    "do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just " \
    "disable the protected mode by editing the configuration file, and setting the " \
    "protected mode option to 'no', and then restarting the server. 3) If you started the " \
    "server manually just for testing, restart it with the '--protected-mode no' option. " \
    "4) Set up an authentication password for the default user. NOTE: You only need to do " \
    "one of the above things in order for the server to start accepting connections from " \
    "the outside.\r\n"

/* AUTH "internal connection" <secret> (Redis 8 acl.c internalAuth). */
#define ERR_INTERNAL_NOT_CLUSTER \
    "-ERR Cannot authenticate as an internal connection on non-cluster instances\r\n"
#define ERR_INTERNAL_WRONGPASS "-WRONGPASS invalid internal password\r\n"

struct login_words {
    const char *name;           /* the release the row was read from (X.Y) */
    unsigned char kind;         /* enum server_kind */
    unsigned version;           /* SRV_VERSION(X, Y, 0) */
    unsigned noauth_first:1;    /* -NOAUTH before the unknown-command and arity checks */
    unsigned hello_auth_last:1; /* HELLO checks every option, then logs in once with the
                                   last AUTH (else each AUTH logs in where it stands) */
    unsigned auth_err_silent:1; /* no reply to a failed login while one is pending */
    unsigned bare_unknown:1;    /* "unknown command 'x'" alone when it has no arguments */
    unsigned internal_auth:1;   /* AUTH "internal connection" is the cluster's own */
    unsigned parses_ahead:1;    /* reads the multibulk requests it has while logged in
                                   before it runs them (login_parses_ahead()) */
    const char *hello_noauth;
    const char *denied;
};

/*
 * Read from each release's source, and checked against it running with
 * requirepass (tests/integration/test_auth.py):
 *   noauth_first     server.c processCommand(): Valkey 9.1.2 checks
 *                    authRequired() before commandCheckExistence() and the
 *                    arity; the others after them
 *   hello_auth_last  networking.c helloCommand(): Redis 7.0.15 calls
 *                    ACLAuthenticateUser() at each AUTH option; the others
 *                    collect the options and authenticate after the loop
 *   auth_err_silent  acl.c addAuthErrReply(): "if (clientHasPendingReplies(c))
 *                    return;" in Redis 8.0.6, 8.6.3 and Valkey 8.1.1; Valkey
 *                    9.1.2 tests c->flag.buffered_reply instead; 7.0.15 has none
 *   bare_unknown     server.c commandCheckExistence(): Redis 8.6.3 adds ", with
 *                    args beginning with: ..." only when argc >= 2
 *   internal_auth    acl.c authCommand(): Redis 8.0.6 and 8.6.3 send
 *                    AUTH "internal connection" to internalAuth()
 *   parses_ahead     networking.c parseMultibulkBuffer(): Valkey 9.1.2 queues
 *                    every multibulk request in the buffer unless the client
 *                    must authenticate, under that one's limits; the others
 *                    parse one request, run it, parse the next
 */
static const struct login_words words[] = {
    /* name        kind        version            noauth_first, hello_auth_last,
                                                   auth_err_silent, bare_unknown,
                                                   internal_auth, parses_ahead */
    { "redis 7.0", SRV_REDIS, SRV_VERSION(7, 0, 0), 0, 0, 0, 0, 0, 0,
      HELLO_NOAUTH("HELLO AUTH <user> <pass>"), DENIED_REDIS("Setup a") },
    { "redis 8.0", SRV_REDIS, SRV_VERSION(8, 0, 0), 0, 1, 1, 0, 1, 0,
      HELLO_NOAUTH("HELLO <proto> AUTH <user> <pass>"), DENIED_REDIS("Set up") },
    { "redis 8.6", SRV_REDIS, SRV_VERSION(8, 6, 0), 0, 1, 1, 1, 1, 0,
      HELLO_NOAUTH("HELLO <proto> AUTH <user> <pass>"), DENIED_REDIS("Set up") },
    { "valkey 8.1", SRV_VALKEY, SRV_VERSION(8, 1, 0), 0, 1, 1, 0, 0, 0,
      HELLO_NOAUTH("HELLO <proto> AUTH <user> <pass>"), DENIED_VALKEY },
    { "valkey 9.1", SRV_VALKEY, SRV_VERSION(9, 1, 0), 1, 1, 0, 0, 0, 1,
      HELLO_NOAUTH("HELLO <proto> AUTH <user> <pass>"), DENIED_VALKEY },
};
#define NWORDS (sizeof words / sizeof words[0])

const struct login_words *login_words_for(const struct server_id *id)
{
    const struct login_words *best = NULL, *oldest = NULL;
    for (size_t i = 0; i < NWORDS; i++) {
        const struct login_words *w = &words[i];
        if (w->kind != id->kind)
            continue;
        if (oldest == NULL || w->version < oldest->version)
            oldest = w;
        if (w->version <= id->version && (best == NULL || w->version > best->version))
            best = w;
    }
    return best != NULL ? best : oldest != NULL ? oldest : &words[0];
}

const char *login_words_name(const struct login_words *w)
{
    return w->name;
}

static const struct login_words *words_of(const struct login_backend *lb)
{
    return lb != NULL && lb->words != NULL ? lb->words : &words[0];
}

int login_parses_ahead(const struct login_backend *lb)
{
    return words_of(lb)->parses_ahead;
}

const char *login_denied(const struct login_backend *lb, size_t *len)
{
    const char *d = words_of(lb)->denied;
    *len = strlen(d);
    return d;
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */

static void reply(struct login *out, const char *text)
{
    out->verdict = LV_REPLY;
    out->reply.len = 0;
    sbuf_add(&out->reply, text, strlen(text));
}

static void put(struct login *out, const char *text)
{
    sbuf_add(&out->reply, text, strlen(text));
}

/* An argument as the server's "%s" sees it: up to its first NUL. */
static struct slice cstr(struct slice a)
{
    const char *nul = memchr(a.p, '\0', a.len);
    if (nul != NULL)
        a.len = (size_t)(nul - a.p);
    return a;
}

/* strcmp(argument, word) == 0 */
static int cstr_is(struct slice arg, const char *word)
{
    struct slice a = cstr(arg);
    return a.len == strlen(word) && memcmp(a.p, word, a.len) == 0;
}

/* An argument in an error, as "%.*s" prints it (at most max bytes, up to
 * a NUL), CR and LF as spaces: the server maps them in every error it
 * formats (sdsmapchars). Returns the bytes added. */
static size_t put_arg(struct login *out, struct slice arg, size_t max)
{
    struct slice a = cstr(arg);
    size_t n = a.len < max ? a.len : max, at = out->reply.len;
    if (n == 0)
        return 0;
    sbuf_add(&out->reply, a.p, n);
    for (size_t i = at; i < at + n; i++)
        if (out->reply.p[i] == '\r' || out->reply.p[i] == '\n')
            out->reply.p[i] = ' ';
    return n;
}

/* "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' ": the
 * arguments quoted while the list is under 128 bytes, the last one cut to
 * what is left of them (server.c commandCheckExistence). */
static void unknown_command(const struct login_words *w, const struct request *req,
                            struct login *out)
{
    reply(out, "-ERR unknown command '");
    put_arg(out, req->argv[0], 128);
    put(out, "'");
    if (req->argc >= 2 || !w->bare_unknown) {
        put(out, ", with args beginning with: ");
        size_t alen = 0;
        for (int i = 1; i < req->argc && alen < 128; i++) {
            put(out, "'");
            alen += 3 + put_arg(out, req->argv[i], 128 - alen);
            put(out, "' ");
        }
    }
    put(out, "\r\n");
}

/* "-ERR unknown subcommand 'x'. Try CONFIG HELP." (the same function). */
static void unknown_subcommand(const struct request *req, struct login *out)
{
    reply(out, "-ERR unknown subcommand '");
    put_arg(out, req->argv[1], 128);
    put(out, "'. Try ");
    size_t at = out->reply.len;
    put_arg(out, req->argv[0], (size_t)-1);
    for (size_t i = at; i < out->reply.len; i++)
        if (out->reply.p[i] >= 'a' && out->reply.p[i] <= 'z')
            out->reply.p[i] = (char)(out->reply.p[i] - ('a' - 'A'));
    put(out, " HELP.\r\n");
}

/* ------------------------------------------------------------------------ */
/* Before the command runs (server.c processCommand)                         */

/* The commands every server in the table runs before a login (CMD_NO_AUTH),
 * with their arities: what is known while COMMAND has not been read. */
static struct cmd_arity no_auth_cmds[] = {
    { .name = (char *)"auth", .len = 4, .arity = -2 },
    { .name = (char *)"hello", .len = 5, .arity = -1 },
    { .name = (char *)"quit", .len = 4, .arity = -1 },
    { .name = (char *)"reset", .len = 5, .arity = 1 },
};
static const struct cmd_arities no_auth_table = { no_auth_cmds, 4 };

static int no_auth(enum cmd_id id)
{
    return id == CID_AUTH || id == CID_HELLO || id == CID_QUIT || id == CID_RESET;
}

/* "POST" and "Host:" as a command: the server takes the client for an HTTP
 * request and closes it unanswered (securityWarningCommand). */
static int http_request(const struct request *req)
{
    struct slice name = cstr(req->argv[0]);
    return slice_eq_nocase(name, "post") || slice_eq_nocase(name, "host:");
}

/* The unknown-command and arity checks (lookupCommand, commandCheckExistence,
 * commandCheckArity); 1 when req was refused by one. */
static int check_command(const struct login_ctx *cx, const struct request *req,
                         const struct cmd_info *ci, struct login *out)
{
    const struct cmd_arities *t = cx->backend != NULL && cx->backend->cmds.n > 0
                                  ? &cx->backend->cmds : NULL;
    const struct cmd_arity *c = arities_find(t != NULL ? t : &no_auth_table, req->argv[0].p,
                                             req->argv[0].len);
    if (t == NULL ? ci == NULL : c == NULL) {
        unknown_command(words_of(cx->backend), req, out);
        return 1;
    }
    if (t != NULL && c->container && req->argc > 1) {
        c = arities_find_sub(t, c, req->argv[1].p, req->argv[1].len);
        if (c == NULL) {
            unknown_subcommand(req, out);
            return 1;
        }
    }
    if (c != NULL && ((c->arity > 0 && c->arity != req->argc) || req->argc < -c->arity)) {
        reply(out, "-ERR wrong number of arguments for '");
        sbuf_add(&out->reply, c->name, c->len);
        put(out, "' command\r\n");
        return 1;
    }
    return 0;
}

/* What the server answers before it runs a command, in its order; 1 when
 * req was answered so. */
static int refused_before_running(const struct login_ctx *cx, const struct request *req,
                                  const struct cmd_info *ci, struct login *out)
{
    enum cmd_id id = ci != NULL ? ci->id : CID_OTHER;
    int needs_login = !cx->logged_in && !no_auth(id);
    if (!cx->logged_in && http_request(req)) {
        out->verdict = LV_CLOSE;
        return 1;
    }
    if (needs_login && words_of(cx->backend)->noauth_first) {
        reply(out, ERR_NOAUTH);
        return 1;
    }
    if (check_command(cx, req, ci, out))
        return 1;
    if (needs_login) {
        reply(out, ERR_NOAUTH);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* AUTH and HELLO                                                            */

/* Check a login; 1 when it was refused (out answered). A wrong password
 * goes unanswered where the server's addAuthErrReply() says nothing. */
static int login_refused(const struct login_ctx *cx, const struct slice *user,
                         struct slice pass, struct login *out)
{
    const struct auth_user *who = NULL;
    switch (auth_check(cx->users, user, pass, &who)) {
    case AUTH_OK:
        out->who = who;
        return 0;
    case AUTH_WRONGPASS:
        if (words_of(cx->backend)->auth_err_silent && cx->replies_pending)
            out->verdict = LV_SILENT;
        else
            reply(out, ERR_WRONGPASS);
        break;
    case AUTH_NOPASS:
        reply(out, ERR_NOPASS);
        break;
    }
    out->failed = 1;
    return 1;
}

/* AUTH [user] password (acl.c authCommand). */
static void judge_auth(const struct login_ctx *cx, const struct request *req,
                       struct login *out)
{
    if (req->argc > 3) {
        reply(out, ERR_SYNTAX);
        return;
    }
    if (req->argc == 3 && words_of(cx->backend)->internal_auth &&
        cstr_is(req->argv[1], "internal connection")) {
        /* ttlguard knows no cluster secret: nobody logs in so */
        reply(out, cx->cluster ? ERR_INTERNAL_WRONGPASS : ERR_INTERNAL_NOT_CLUSTER);
        out->failed = 1;
        return;
    }
    if (!login_refused(cx, req->argc == 3 ? &req->argv[1] : NULL, req->argv[req->argc - 1], out))
        reply(out, "+OK\r\n");
}

const char login_err_client_name[] =
    "-ERR Client names cannot contain spaces, newlines or special characters.\r\n";

int login_client_name_ok(struct slice name)
{
    for (size_t i = 0; i < name.len; i++)
        if (name.p[i] < '!' || name.p[i] > '~')
            return 0;
    return 1;
}

/* SETNAME name: kept for Redis (the last one given wins), or refused. */
static int hello_setname(struct slice opt, struct slice name, struct login *out)
{
    if (!login_client_name_ok(name)) {
        reply(out, login_err_client_name);
        return -1;
    }
    /* HELLO protover SETNAME name: a SETNAME kept already is replaced */
    int at = out->argc == LOGIN_ARGV_MAX ? out->argc - 2 : out->argc;
    out->argv[at] = opt;
    out->argv[at + 1] = name;
    out->argc = at + 2;
    return 0;
}

/* The options of HELLO, in order: a bad SETNAME or an unknown option ends
 * it with an error; AUTH logs in where it stands (Redis 7.0: a login stays
 * whatever follows) or once all are read, with the last AUTH given. Returns
 * 0 when HELLO goes on, with the arguments for Redis in out->argv. */
static int hello_options(const struct login_ctx *cx, const struct request *req,
                         struct login *out)
{
    int at_once = !words_of(cx->backend)->hello_auth_last;
    const struct slice *user = NULL;
    for (int j = 2; j < req->argc; j++) {
        int more = req->argc - 1 - j;
        struct slice opt = cstr(req->argv[j]);
        if (slice_eq_nocase(opt, "auth") && more >= 2) {
            user = &req->argv[j + 1];
            j += 2;
            if (at_once && login_refused(cx, user, req->argv[j], out))
                return -1;
        } else if (slice_eq_nocase(opt, "setname") && more >= 1) {
            if (hello_setname(req->argv[j], req->argv[j + 1], out) < 0)
                return -1;
            j++;
        } else {
            reply(out, "-ERR Syntax error in HELLO option '");
            put_arg(out, req->argv[j], (size_t)-1);
            put(out, "'\r\n");
            return -1;
        }
    }
    if (!at_once && user != NULL && login_refused(cx, user, user[1], out))
        return -1;
    return 0;
}

/* HELLO [protover [AUTH user pass] [SETNAME name]] (networking.c helloCommand). */
static void judge_hello(const struct login_ctx *cx, const struct request *req,
                        struct login *out)
{
    long long ver;
    out->argv[out->argc++] = req->argv[0];
    if (req->argc >= 2) {
        if (slice_to_ll(req->argv[1], &ver) < 0) {
            reply(out, ERR_PROTOVER);
            return;
        }
        if (ver < 2 || ver > 3) {
            reply(out, ERR_NOPROTO);
            return;
        }
        out->argv[out->argc++] = req->argv[1];
    }
    if (hello_options(cx, req, out) < 0)
        return;
    if (!cx->logged_in && out->who == NULL) {
        reply(out, words_of(cx->backend)->hello_noauth);
        return;
    }
    out->verdict = LV_HELLO;
}

int login_is_noauth(const char *reply, size_t n)
{
    return n >= 7 && memcmp(reply, "-NOAUTH", 7) == 0;
}

int login_carries_auth(enum cmd_id id, const struct cmd_words *w)
{
    return id == CID_AUTH || (id == CID_HELLO && (w->hello & HELLO_AUTH_ANY));
}

void login_judge(const struct login_ctx *cx, const struct request *req,
                 const struct cmd_info *ci, const struct cmd_words *w, struct login *out)
{
    enum cmd_id id = ci != NULL ? ci->id : CID_OTHER;
    out->verdict = LV_PASS;
    out->who = NULL;
    out->failed = 0;
    out->argc = 0;
    out->reply.len = 0;
    if (cx->logged_in && !login_carries_auth(id, w))
        return;
    if (refused_before_running(cx, req, ci, out))
        return;
    switch (id) {
    case CID_AUTH:
        judge_auth(cx, req, out);
        break;
    case CID_HELLO:
        judge_hello(cx, req, out);
        break;
    case CID_QUIT:
        reply(out, "+OK\r\n");
        out->verdict = LV_QUIT;
        break;
    case CID_RESET:
        reply(out, "+RESET\r\n");
        break;
    default:
        break;
    }
}
