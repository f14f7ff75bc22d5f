/*
 * route_client: CLIENT through cluster = route.
 *
 * Through one address in front of a cluster, ttlguard is the server its
 * clients talk to, and CLIENT asks about that server's clients: the
 * proxy's own. The connections the proxy holds to the nodes are shared by
 * many clients and name none of them (a node's CLIENT LIST would list the
 * proxy, its CLIENT KILL would end every client's requests), so the proxy
 * answers CLIENT itself, as redis-cluster-proxy and camellia do:
 *
 *   SETNAME, GETNAME  the session's name (s->client_name, Redis's checks); a pin the
 *                     session opens is named so too (session_state_requests()); so
 *                     is HELLO protover SETNAME's, the HELLO going on without it
 *   ID                the session's id (s->id: unique among the proxy's clients)
 *   INFO, LIST        Redis 7.2's line per client; what the proxy does not keep per
 *                     client (its last command, its output buffers) reads as a
 *                     client that has none (cmd=NULL, obl=0...)
 *   KILL              over the proxy's clients: the old addr form (+OK, or -ERR No
 *                     such client) and the filters (how many)
 *   REPLY             kept by the proxy: the node always answers (a connection others
 *                     share cannot stop), and session.c pairs each reply the client
 *                     does not get and drops it (PK_INTERNAL)
 *
 * Others go to the nodes as any request: SETINFO and NO-EVICT carried on the
 * shared connection (mux.c), PAUSE and UNPAUSE to every primary (route_merge.h:
 * the pause of a server is the pause of the whole cluster here; a write held
 * holds up the shared connection it came on, as the node holds it), HELP and
 * a form the node refuses itself (its arity, an unknown subcommand), for
 * the node's own words.
 *
 * UNBLOCK of a client blocked on its pin goes to the pin's node, with the
 * node's id for that connection (route_pin.h).
 *
 * Refused, saying so: TRACKING and the rest of client-side caching (a node
 * sends invalidations on the connection that read the key: a shared one,
 * whose reads are every client's), NO-TOUCH (the flag would be every
 * client's on that connection). Inside MULTI CLIENT is refused (route.c): the
 * node would run it at EXEC, about the pin's connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "control.h"
#include "identify.h"
#include "login.h"
#include "route.h"
#include "route_client.h"
#include "route_pin.h"
#include "util.h"

#define ERR_SYNTAX  "-ERR syntax error\r\n"

/* A reply of the proxy's, in the request's place. */
static void say(struct session *s, const struct request *req, const struct req_plan *pl,
                const char *text)
{
    route_answer(s, req, pl, text, strlen(text));
}


/* An error that quotes the client's words: "-ERR <before>'<arg>'", with
 * newlines made spaces as Redis does (addReplyErrorFormat). */
static void say_quoting(struct session *s, const struct request *req, const struct req_plan *pl,
                        const char *before, struct slice arg)
{
    struct sbuf b = { 0 };
    sbuf_printf(&b, "-ERR %s'%.*s'\r\n", before, (int)arg.len, arg.p);
    for (size_t i = 1; i + 2 < b.len; i++)
        if (b.p[i] == '\r' || b.p[i] == '\n')
            b.p[i] = ' ';
    route_answer(s, req, pl, b.p, b.len);
    free(b.p);
}

/* Does the node refuse this form itself (its arity, an unknown subcommand)? */
static int node_refuses(const struct request *req)
{
    const struct cmd_arities *t = &control_login()->cmds;
    const struct cmd_arity *a = arities_find(t, "client", 6);
    if (a == NULL || req->argc < 2)
        return 1;
    const struct cmd_arity *sub = arities_find_sub(t, a, req->argv[1].p, req->argv[1].len);
    if (sub == NULL)
        return 1;
    return sub->arity >= 0 ? req->argc != sub->arity : req->argc < -sub->arity;
}

/* ---- the proxy's clients, as CLIENT LIST shows them ------------------------------- */

enum client_type { CT_NORMAL, CT_PUBSUB, CT_OTHER, CT_UNKNOWN };

static enum client_type type_named(struct slice name)
{
    if (slice_eq_nocase(name, "normal"))
        return CT_NORMAL;
    if (slice_eq_nocase(name, "pubsub"))
        return CT_PUBSUB;
    if (slice_eq_nocase(name, "slave") || slice_eq_nocase(name, "replica") ||
        slice_eq_nocase(name, "master"))
        return CT_OTHER;                /* a kind the proxy has none of */
    return CT_UNKNOWN;
}

static enum client_type type_of(const struct session *c)
{
    return c->nchan + c->npat + c->nshard > 0 ? CT_PUBSUB : CT_NORMAL;
}

/* Redis's flags letters for c (networking.c catClientInfoString). */
static const char *flags_of(const struct session *c, char *f)
{
    char *p = f;
    if (type_of(c) == CT_PUBSUB)
        *p++ = 'P';
    if (c->in_multi)
        *p++ = 'x';
    if (route_pin_blocked(c))
        *p++ = 'b';
    if (c->client.h.handle.type != UV_TCP)
        *p++ = 'U';
    if (c->no_evict)
        *p++ = 'e';
    if (p == f)
        *p++ = 'N';
    *p = '\0';
    return f;
}

/* c's line, in Redis 7.2's fields and order, with its newline. multi= is
 * how many commands its MULTI queued (multi_topo: one byte for each). */
static void client_line(struct sbuf *b, struct session *c, uint64_t now)
{
    char laddr[96], flags[8];
    struct ev_client ec;
    uv_os_fd_t fd = -1;
    uv_fileno(&c->client.h.handle, &fd);
    size_t omem = xport_backlog(&c->client);
    sbuf_printf(b, "id=%llu addr=%s laddr=%s fd=%d name=%s age=%llu idle=%llu flags=%s db=%d "
         "sub=%d psub=%d ssub=%d multi=%d qbuf=%zu qbuf-free=%zu argv-mem=0 multi-mem=0 "
         "rbs=0 rbp=0 obl=0 oll=0 omem=%zu tot-mem=%zu events=r%s cmd=NULL user=default "
         "redir=-1 resp=%d lib-name=%s lib-ver=%s\n",
         (unsigned long long)c->id, session_client(c, &ec)->addr,
         session_local_addr(c, laddr, sizeof laddr), (int)fd,
         c->client_name != NULL ? c->client_name : "",
         (unsigned long long)(now - c->accepted) / 1000,
         (unsigned long long)(now - c->last_active) / 1000, flags_of(c, flags), c->db,
         c->nchan, c->npat, c->nshard, c->in_multi ? (int)c->multi_topo.len : -1, c->ilen,
         c->icap - c->ilen, omem, c->icap + omem, omem > 0 ? "w" : "", c->resp3 ? 3 : 2,
         c->lib_name != NULL ? c->lib_name : "", c->lib_ver != NULL ? c->lib_ver : "");
}

/* Text as CLIENT INFO and LIST give it: a bulk string, RESP3's verbatim one. */
static void say_text(struct session *s, const struct request *req, const struct req_plan *pl,
                     const struct sbuf *text)
{
    struct sbuf b = { 0 };
    if (s->resp3)
        sbuf_printf(&b, "=%zu\r\ntxt:", text->len + 4);
    else
        sbuf_printf(&b, "$%zu\r\n", text->len);
    sbuf_add(&b, text->p, text->len);
    sbuf_add(&b, "\r\n", 2);
    route_answer(s, req, pl, b.p, b.len);
    free(b.p);
}

/* The proxy's clients, oldest first (as Redis lists them), but those that
 * are closing: n of them in v (malloc'ed). */
static struct session **clients_of(struct session *s, int *n)
{
    struct session **v = xmalloc(sizeof *v * (size_t)(s->cl->nsessions + 1));
    *n = 0;
    for (struct session *c = s->cl->all; c != NULL; c = c->next)
        if (!c->closing)
            v[(*n)++] = c;
    for (int i = 0; i < *n / 2; i++) {
        struct session *t = v[i];
        v[i] = v[*n - 1 - i];
        v[*n - 1 - i] = t;
    }
    return v;
}

#define ERR_ID_RANGE "-ERR client-id should be greater than 0\r\n"

/* Valkey (8.1 on) reads the ids of CLIENT LIST and KILL as a list of
 * numbers, as far as they go: what follows that is no filter is its syntax
 * error, and an id below 1 its range error. */
static int valkey(void)
{
    return command_set_server(control_facts()->commands)->kind == SRV_VALKEY;
}

/* The error for an id argument that is not a client id: Redis's (redis),
 * or Valkey's. */
static const char *id_error(struct slice arg, const char *redis)
{
    long long id;
    if (!valkey())
        return redis;
    return slice_to_ll(arg, &id) == 0 ? ERR_ID_RANGE : ERR_SYNTAX;
}

static struct session *client_by_id(struct session *s, long long id)
{
    for (struct session *c = s->cl->all; c != NULL; c = c->next)
        if (!c->closing && (long long)c->id == id)
            return c;
    return NULL;
}

/* CLIENT LIST [TYPE type | ID id...] (networking.c clientCommand). */
static void client_list(struct session *s, const struct request *req, const struct req_plan *pl)
{
    enum client_type type = CT_UNKNOWN;         /* every type */
    struct sbuf out = { 0 };
    uint64_t now = now_ms_monotonic();
    long long id;
    if (req->argc == 4 && slice_eq_nocase(req->argv[2], "type")) {
        if ((type = type_named(req->argv[3])) == CT_UNKNOWN) {
            say_quoting(s, req, pl, "Unknown client type ", req->argv[3]);
            return;
        }
    } else if (req->argc > 3 && slice_eq_nocase(req->argv[2], "id")) {
        for (int i = 3; i < req->argc; i++)
            if (slice_to_ll(req->argv[i], &id) != 0 || (valkey() && id < 1)) {
                say(s, req, pl, id_error(req->argv[i], "-ERR Invalid client ID\r\n"));
                return;
            }
        for (int i = 3; i < req->argc; i++) {
            slice_to_ll(req->argv[i], &id);
            struct session *c = client_by_id(s, id);
            if (c != NULL)
                client_line(&out, c, now);
        }
        say_text(s, req, pl, &out);
        free(out.p);
        return;
    } else if (req->argc != 2) {
        say(s, req, pl, ERR_SYNTAX);
        return;
    }
    int n;
    struct session **v = clients_of(s, &n);
    for (int i = 0; i < n; i++)
        if (type == CT_UNKNOWN || type_of(v[i]) == type)
            client_line(&out, v[i], now);
    free(v);
    say_text(s, req, pl, &out);
    free(out.p);
}

static void client_info(struct session *s, const struct request *req, const struct req_plan *pl)
{
    struct sbuf out = { 0 };
    client_line(&out, s, now_ms_monotonic());
    say_text(s, req, pl, &out);
    free(out.p);
}

/* ---- CLIENT KILL ------------------------------------------------------------------ */

/* Is have what want says (want.p NULL: anything)? */
static int slice_is(struct slice want, const char *have)
{
    return want.p == NULL || (strlen(have) == want.len && memcmp(have, want.p, want.len) == 0);
}

/* Which clients a CLIENT KILL ends. */
struct kill_filter {
    struct slice addr, laddr;   /* .p NULL: any */
    enum client_type type;      /* CT_UNKNOWN: any */
    long long id;               /* 0: any */
    int skipme;                 /* not the client that asks */
};

/* The filter form's options, or the error Redis gives (NULL: parsed). */
static const char *kill_options(const struct request *req, struct kill_filter *f,
                                struct slice *quote)
{
    for (int i = 2; i < req->argc; i += 2) {
        if (i + 1 >= req->argc)
            return ERR_SYNTAX;
        struct slice opt = req->argv[i], v = req->argv[i + 1];
        *quote = v;
        if (slice_eq_nocase(opt, "id")) {
            if (slice_to_ll(v, &f->id) != 0 || f->id < 1)
                return id_error(v, ERR_ID_RANGE);
        } else if (slice_eq_nocase(opt, "type")) {
            if ((f->type = type_named(v)) == CT_UNKNOWN)
                return "Unknown client type ";
        } else if (slice_eq_nocase(opt, "addr")) {
            f->addr = v;
        } else if (slice_eq_nocase(opt, "laddr")) {
            f->laddr = v;
        } else if (slice_eq_nocase(opt, "user")) {
            if (!slice_is(v, "default"))
                return "No such user ";     /* the proxy's clients are all `default` */
        } else if (slice_eq_nocase(opt, "skipme") &&
                   (slice_eq_nocase(v, "yes") || slice_eq_nocase(v, "no"))) {
            f->skipme = slice_eq_nocase(v, "yes");
        } else {
            return ERR_SYNTAX;
        }
    }
    return NULL;
}

static int kill_matches(struct session *s, struct session *c, const struct kill_filter *f)
{
    char laddr[96];
    struct ev_client ec;
    return slice_is(f->addr, session_client(c, &ec)->addr) &&
           (f->laddr.p == NULL || slice_is(f->laddr, session_local_addr(c, laddr, sizeof laddr))) &&
           (f->type == CT_UNKNOWN || type_of(c) == f->type) &&
           (f->id == 0 || (long long)c->id == f->id) && !(c == s && f->skipme);
}

/* CLIENT KILL addr | CLIENT KILL [ID id] [TYPE t] [ADDR a] [LADDR a] [USER u]
 * [SKIPME yes|no]: the clients go at once, the one that asks after its
 * reply (networking.c clientCommand). */
static void client_kill(struct session *s, const struct request *req, const struct req_plan *pl)
{
    struct kill_filter f = { .type = CT_UNKNOWN, .skipme = req->argc > 3 };
    struct slice quote;
    const char *no = NULL;
    if (req->argc == 3)
        f.addr = req->argv[2];
    else
        no = kill_options(req, &f, &quote);
    if (no != NULL) {
        if (no[0] == '-')
            say(s, req, pl, no);
        else
            say_quoting(s, req, pl, no, quote);
        return;
    }
    int n, killed = 0, self = 0;
    struct session **v = clients_of(s, &n);
    for (int i = 0; i < n; i++) {
        if (!kill_matches(s, v[i], &f))
            continue;
        killed++;
        if (v[i] == s)
            self = 1;
        else
            session_close(v[i]);
    }
    free(v);
    char line[32];
    snprintf(line, sizeof line, ":%d\r\n", killed);
    if (req->argc == 3)
        say(s, req, pl, killed ? "+OK\r\n" : "-ERR No such client\r\n");
    else
        say(s, req, pl, line);
    s->close_after_flush |= self;
}

/* ---- the rest --------------------------------------------------------------------- */

/* CLIENT UNBLOCK id [TIMEOUT|ERROR]: a session blocked on its pin is the
 * node's client there, under the node's id for the pin's connection: the
 * node unblocks it (CLIENT UNBLOCK with that id, sent to it) and its reply
 * is the asker's; any other client is not blocked (:0). More arguments:
 * the node's own error. */
static int client_unblock(struct session *s, const struct request *req,
                          const struct req_plan *pl)
{
    long long id, node_id;
    char line[96];
    if (req->argc > 4)
        return 0;
    if (req->argc == 4 && !slice_eq_nocase(req->argv[3], "timeout") &&
        !slice_eq_nocase(req->argv[3], "error")) {
        say(s, req, pl, "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n");
        return 1;
    }
    if (slice_to_ll(req->argv[2], &id) != 0) {
        say(s, req, pl, "-ERR value is not an integer or out of range\r\n");
        return 1;
    }
    struct session *c = client_by_id(s, id);
    struct target *t = c != NULL ? route_pin_blocked_at(c, &node_id) : NULL;
    if (t == NULL) {
        say(s, req, pl, ":0\r\n");
        return 1;
    }
    int n = snprintf(line, sizeof line, "%lld", node_id);
    struct sbuf b = { 0 };
    sbuf_printf(&b, "*%d\r\n$6\r\nCLIENT\r\n$7\r\nUNBLOCK\r\n$%d\r\n%s\r\n", req->argc, n, line);
    if (req->argc == 4)
        sbuf_printf(&b, "$%zu\r\n%.*s\r\n", req->argv[3].len, (int)req->argv[3].len, req->argv[3].p);
    route_send_instead(s, req, pl, t, b.p, b.len);
    free(b.p);
    return 1;
}

static void client_setname(struct session *s, const struct request *req,
                           const struct req_plan *pl)
{
    struct slice name = req->argv[2];
    if (!login_client_name_ok(name)) {
        say(s, req, pl, login_err_client_name);
        return;
    }
    free(s->client_name);
    s->client_name = name.len > 0 ? xmemdup(name.p, name.len) : NULL;
    say(s, req, pl, "+OK\r\n");
}

int route_hello_setname(struct session *s, const struct request *req, struct req_plan *pl,
                        struct request *fwd)
{
    static struct sbuf bytes;
    long long proto;
    if (req->argc != 4 || !slice_eq_nocase(req->argv[2], "setname"))
        return 0;
    int valid = slice_to_ll(req->argv[1], &proto) == 0 && (proto == 2 || proto == 3);
    if (valid && !login_client_name_ok(req->argv[3])) {
        say(s, req, pl, login_err_client_name);
        return 1;
    }
    if (valid) {                        /* else the node says what is wrong with protover */
        free(s->client_name);
        s->client_name = req->argv[3].len > 0 ? xmemdup(req->argv[3].p, req->argv[3].len)
                                              : NULL;
    }
    bytes.len = 0;
    sbuf_printf(&bytes, "*2\r\n$5\r\nHELLO\r\n$%zu\r\n", req->argv[1].len);
    sbuf_add(&bytes, req->argv[1].p, req->argv[1].len);
    sbuf_add(&bytes, "\r\n", 2);
    *fwd = (struct request){ .argc = 2, .argv = req->argv,
                             .raw = { bytes.p, bytes.len } };
    pl->words = command_words(pl->id, fwd->argc, fwd->argv);
    pl->raw_copy = 1;
    return 0;
}

static void client_getname(struct session *s, const struct request *req,
                           const struct req_plan *pl)
{
    struct sbuf b = { 0 };
    if (s->client_name == NULL)
        sbuf_add(&b, s->resp3 ? "_\r\n" : "$-1\r\n", s->resp3 ? 3 : 5);
    else
        sbuf_printf(&b, "$%zu\r\n%s\r\n", strlen(s->client_name), s->client_name);
    route_answer(s, req, pl, b.p, b.len);
    free(b.p);
}

static void client_id(struct session *s, const struct request *req, const struct req_plan *pl)
{
    char line[32];
    snprintf(line, sizeof line, ":%llu\r\n", (unsigned long long)s->id);
    say(s, req, pl, line);
}

/* CLIENT REPLY ON|OFF|SKIP: plan_replies() keeps it (track_client_reply()),
 * route_answer() gives +OK only where it says. */
static void client_reply(struct session *s, const struct request *req, const struct req_plan *pl)
{
    int known = pl->words.arg == CARG_ON || pl->words.arg == CARG_OFF ||
                pl->words.arg == CARG_SKIP;
    say(s, req, pl, known ? "+OK\r\n" : ERR_SYNTAX);
}

static const struct {
    const char *name;
    void (*answer)(struct session *s, const struct request *req, const struct req_plan *pl);
} answered[] = {
    { "setname", client_setname }, { "getname", client_getname }, { "id", client_id },
    { "info", client_info },       { "list", client_list },       { "kill", client_kill },
    { "reply", client_reply },
};

/* What goes to the nodes. */
static const char *const carried[] = { "setinfo", "no-evict", "pause", "unpause", "help" };

static const char *refusal(struct slice sub)
{
    static const char *const caching[] = { "tracking", "caching", "getredir", "trackinginfo" };
    for (size_t i = 0; i < sizeof caching / sizeof *caching; i++)
        if (slice_eq_nocase(sub, caching[i]))
            return "-ERR ttlguard cluster = route does not support client-side caching "
                   "(CLIENT TRACKING): a node sends invalidations on the connection that "
                   "read the key, which clients share\r\n";
    if (slice_eq_nocase(sub, "no-touch"))
        return "-ERR ttlguard cluster = route does not support CLIENT NO-TOUCH: the "
               "connections to the nodes are shared, the flag would be every client's\r\n";
    return "-ERR ttlguard cluster = route does not support this CLIENT subcommand yet\r\n";
}

int route_client(struct session *s, const struct request *req, const struct req_plan *pl)
{
    if (node_refuses(req))
        return 0;
    struct slice sub = req->argv[1];
    for (size_t i = 0; i < sizeof answered / sizeof *answered; i++)
        if (slice_eq_nocase(sub, answered[i].name)) {
            answered[i].answer(s, req, pl);
            return 1;
        }
    for (size_t i = 0; i < sizeof carried / sizeof *carried; i++)
        if (slice_eq_nocase(sub, carried[i]))
            return 0;
    if (slice_eq_nocase(sub, "unblock"))
        return client_unblock(s, req, pl);
    say(s, req, pl, refusal(sub));
    return 1;
}
