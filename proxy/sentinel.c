/*
 * sentinel: following the primary Redis Sentinel names; see sentinel.h.
 *
 * Every connection here is a link: a bconn (backend.c) whose replies are
 * parsed by a hiredis reader and handed whole to the link's `got`. Each
 * Sentinel has two: `sub`, subscribed to its failover events, and `q`, opened
 * for one question a round. The probe asks the primary in use its ROLE.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hiredis/hiredis.h>

#include "audit_conn.h"
#include "backend.h"
#include "config.h"
#include "events.h"
#include "loop.h"
#include "resp_request.h"
#include "sentinel.h"

#define MAX_SENTINELS 16
#define TICK_MS 1000            /* reconnects */
#define ASK_MS 5000             /* a question to every Sentinel, as clients re-ask */
#define PROBE_RETRY_MS 100      /* a new primary that is not master yet, or unreachable */
#define READONLY_MS 100         /* -READONLY replies act at most this often */

struct link {
    struct bconn b;
    redisReader *rd;
    void (*ready)(struct link *l);
    void (*got)(struct link *l, const redisReply *r);
    struct sentinel_node *node;     /* NULL: the probe */
    int again;                      /* connect again once closed */
};

struct sentinel_node {
    struct target t;
    struct link sub, q;
    uint64_t retry_at;              /* monotonic ms: connect sub again */
    int answered;                   /* answered this round's question */
};

static struct {
    struct loop_ctx *ctx;
    const struct sentinel_hooks *hooks;
    struct sentinel_node node[MAX_SENTINELS];
    int n;
    char *user, *pass;              /* the Sentinels' login, copies */
    uv_timer_t tick, probe_timer;
    uint64_t next_ask;
    struct addr primary;            /* in use (ROLE master when primary_ok) */
    char primary_name[300];
    struct addr from;               /* the primary before the switch being confirmed */
    long long epoch;                /* the newest config-epoch a Sentinel named it under */
    int epoch_wait;                 /* an event was followed: the new primary's epoch is
                                       not known yet, so no answer may name another one */
    struct target pt;               /* the probe's target */
    struct link probe;              /* asks the primary in use its ROLE */
    int confirming;                 /* the probe confirms a switch (else: checks primary) */
    uint64_t switch_ns;             /* when the switch was learnt */
    uint64_t readonly_at;           /* monotonic ms of the last -READONLY acted on */
    char source[16];                /* how: "promoted-slave", "switch-master" or "ask" */
    int unreachable;                /* no Sentinel answered the last round */
    int primary_ok;                 /* the primary answered ROLE master last time */
    uint64_t switches, last_follow_us;
    int running;
} sn;

/* ---- start-up and reload: blocking --------------------------------------- */

/* 0 with *r; 1: no answer; -1: an error reply (err says which). */
static int call_ok(struct aconn *c, redisReply **r, char *err, size_t errlen, int argc,
                   const char **argv, const char *who)
{
    char why[400];
    if (aconn_call(c, r, why, sizeof why, argc, argv) != 0) {
        snprintf(err, errlen, "%.300s: %.250s", who, why);
        return 1;                   /* no answer: like a Sentinel that is down */
    }
    if ((*r)->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s answered %s: %.300s", who, argv[0], (*r)->str);
        freeReplyObject(*r);
        return -1;
    }
    return 0;
}

/* AUTH [user] pass on c when pass is set. */
static int login(struct aconn *c, const char *user, const char *pass, char *err, size_t errlen,
                 const char *who)
{
    if (pass == NULL)
        return 0;
    const char *argv[3] = { "AUTH", user ? user : pass, pass };
    redisReply *r;
    int rc = call_ok(c, &r, err, errlen, user ? 3 : 2, argv, who);
    if (rc == 0)
        freeReplyObject(r);
    return rc;
}

/* One command to a (who: "sentinel" or "primary"), logged in as user/pass
 * first, over TLS when sentinel_tls (a Sentinel) or backend_tls (the
 * primary) is on. 0 with *r (the caller frees it); 1: a did not answer;
 * -1: it refused (an error reply). err says why, naming a. */
static int ask(const struct config *cfg, const char *who, const struct addr *a,
               const char *user, const char *pass, int argc, const char **argv,
               redisReply **r, char *err, size_t errlen)
{
    char name[300], whom[320], why[400];
    addr_format(a, name, sizeof name);
    snprintf(whom, sizeof whom, "%s %s", who, name);
    struct tls_context *tls = strcmp(who, "sentinel") == 0 ? cfg->sentinel_tls_ctx
                                                           : cfg->backend_tls_ctx;
    struct aconn *c = aconn_open(a, cfg->connect_timeout, cfg->connect_timeout, tls,
                                 cfg->backend_tls_server_name, why, sizeof why);
    if (c == NULL) {
        snprintf(err, errlen, "%.300s: %.250s", whom, why);
        return 1;
    }
    int rc = login(c, user, pass, err, errlen, whom);
    if (rc == 0)
        rc = call_ok(c, r, err, errlen, argc, argv, whom);
    aconn_close(c);
    return rc;
}

/* The primary's ROLE is master. */
static int check_role(const struct config *cfg, const struct addr *a, char *err, size_t errlen)
{
    const char *argv[1] = { "ROLE" };
    redisReply *r = NULL;
    if (ask(cfg, "primary", a, cfg->backend_username, cfg->backend_password, 1, argv, &r, err,
            errlen) != 0)
        return -1;
    int master = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                 r->element[0]->type == REDIS_REPLY_STRING &&
                 strcmp(r->element[0]->str, "master") == 0;
    if (!master) {
        char name[300];
        addr_format(a, name, sizeof name);
        snprintf(err, errlen, "primary %s answers ROLE as %s, not master", name,
                 r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->str
                 ? r->element[0]->str : "something else");
    }
    freeReplyObject(r);
    return master ? 0 : -1;
}

/* Ask one Sentinel. 1: it did not answer (try the next); 0: *primary set;
 * -1: it refused (err says why). */
static int ask_one(const struct config *cfg, const struct addr *s, struct addr *primary,
                   char *err, size_t errlen)
{
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", cfg->sentinel_master };
    redisReply *r = NULL;
    int rc = ask(cfg, "sentinel", s, cfg->sentinel_username, cfg->sentinel_password, 3, argv,
                 &r, err, errlen);
    if (rc != 0)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        char name[300];
        addr_format(s, name, sizeof name);
        snprintf(err, errlen, "sentinel %s does not know a master named '%s'", name,
                 cfg->sentinel_master);
        rc = -1;
    } else {
        primary->is_unix = 0;
        snprintf(primary->host, sizeof primary->host, "%s", r->element[0]->str);
        primary->port = atoi(r->element[1]->str);
    }
    freeReplyObject(r);
    return rc;
}

/* The n-th address of the list (0 on success). */
static int nth_addr(const char *list, int n, struct addr *a)
{
    const char *p = list + strspn(list, " \t");
    for (; *p != '\0' && n > 0; n--) {
        p += strcspn(p, " \t");
        p += strspn(p, " \t");
    }
    if (*p == '\0')
        return -1;
    char one[512], why[320];
    size_t len = strcspn(p, " \t");
    snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), p);
    return addr_parse(one, a, why, sizeof why);
}

int sentinel_resolve(const struct config *cfg, struct addr *primary, char *err, size_t errlen)
{
    struct addr s;
    char last[600] = "";
    for (int i = 0; nth_addr(cfg->sentinel, i, &s) == 0; i++) {
        int rc = ask_one(cfg, &s, primary, last, sizeof last);
        if (rc < 0) {
            snprintf(err, errlen, "%s", last);
            return -1;
        }
        if (rc == 0)
            return check_role(cfg, primary, err, errlen);
    }
    snprintf(err, errlen, "no Sentinel answered (last: %s)%s", last,
             cfg->backend_tls && !cfg->sentinel_tls ? "; with sentinel_tls = off they are "
             "asked in plain TCP: Sentinels on TLS need sentinel_tls = on" : "");
    return -1;
}

int sentinel_config_changed(const struct config *a, const struct config *b)
{
    const char *x[2] = { a->sentinel, a->sentinel_master }, *y[2] = { b->sentinel,
                                                                      b->sentinel_master };
    for (int i = 0; i < 2; i++)
        if ((x[i] == NULL) != (y[i] == NULL) || (x[i] != NULL && strcmp(x[i], y[i]) != 0))
            return 1;
    return 0;
}

/* ---- links --------------------------------------------------------------- */

static void l_ready(struct bconn *b)
{
    struct link *l = b->owner;
    l->ready(l);
}

static void l_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    struct link *l = b->owner;
    redisReaderFeed(l->rd, p, n);
    if (!done)
        return;
    void *r = NULL;
    while (redisReaderGetReply(l->rd, &r) == REDIS_OK && r != NULL) {
        l->got(l, r);
        freeReplyObject(r);
        r = NULL;
        if (b->state != BC_READY)
            break;
    }
}

static void l_read_end(struct bconn *b)
{
}

static void probe_failed(void);

static void l_failed(struct bconn *b, const char *why, int was_ready)
{
    struct link *l = b->owner;
    log_debug("sentinel: %s: %s", b->t->name, why);
    if (l->node == NULL)
        probe_failed();
}

static void link_connect(struct link *l);

static void l_closed(struct bconn *b)
{
    struct link *l = b->owner;
    if (l->again && sn.running) {
        l->again = 0;
        link_connect(l);
    }
}

static void l_written(struct bconn *b, int status)
{
}

static const struct bconn_ops link_ops = {
    l_ready, l_reply, l_read_end, l_failed, l_closed, l_written,
};

static void link_init(struct link *l, struct target *t, struct sentinel_node *node,
                      void (*ready)(struct link *), void (*got)(struct link *, const redisReply *))
{
    bconn_init(&l->b, sn.ctx, &link_ops, l);
    l->b.t = t;
    l->b.counts = 0;
    l->node = node;
    l->ready = ready;
    l->got = got;
}

/* Connect (or, when busy, connect again once closed). Sentinel links log
 * in as sentinel_username/password, the probe as the backend's login. */
static void link_connect(struct link *l)
{
    if (l->b.state != BC_IDLE) {
        l->again = 1;
        bconn_close(&l->b);
        return;
    }
    if (l->rd != NULL)
        redisReaderFree(l->rd);
    l->rd = redisReaderCreate();
    if (l->node == NULL)
        target_set(&sn.pt, sn.ctx, &sn.primary, 1);
    if (l->node != NULL) {
        l->b.user = sn.user;
        l->b.pass = sn.pass;
    }
    bconn_connect(&l->b, l->node == NULL || sn.pass != NULL);
}

static void link_free(struct link *l)
{
    if (l->rd != NULL)
        redisReaderFree(l->rd);
    l->rd = NULL;
}

static void send_command(struct link *l, int argc, const char **argv)
{
    struct abuf a = { 0 };
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    abuf_command(&a, argc, argv, lens);
    bconn_write_bytes(&l->b, a.p, a.len);
    abuf_free(&a);
}

/* ---- following ----------------------------------------------------------- */

static int same_addr(const struct addr *a, const struct addr *b)
{
    return strcmp(a->host, b->host) == 0 && a->port == b->port;
}

static void set_primary(const struct addr *primary, int confirmed)
{
    sn.primary = *primary;
    sn.primary_ok = confirmed;
    addr_format(primary, sn.primary_name, sizeof sn.primary_name);
}

/* Ask the primary in use its ROLE. confirming: a switch waits for the
 * answer (new clients are held); else it is the check of a primary no
 * Sentinel vouches for, or one that answered -READONLY. */
static void probe_start(int confirming)
{
    if (!confirming && sn.confirming)
        return;                     /* the switch's own probe will tell */
    uv_timer_stop(&sn.probe_timer);
    sn.confirming = confirming;
    link_connect(&sn.probe);
}

static void on_probe_timer(uv_timer_t *t)
{
    probe_start(sn.confirming);
}

static void probe_failed(void)
{
    if (sn.confirming)
        uv_timer_start(&sn.probe_timer, on_probe_timer, PROBE_RETRY_MS, 0);
    else
        sn.primary_ok = 0;
}

static void probe_ready(struct link *l)
{
    const char *argv[1] = { "ROLE" };
    send_command(l, 1, argv);
}

static void followed(void)
{
    char a[300];
    addr_format(&sn.from, a, sizeof a);
    uint64_t us = (uv_hrtime() - sn.switch_ns) / 1000;
    sn.switches++;
    sn.last_follow_us = us;
    log_warn("sentinel: primary of %s moved from %s to %s (%s), followed in %.1f ms",
             sn.ctx->cfg->sentinel_master, a, sn.primary_name, sn.source, us / 1000.0);
    struct sbuf e = { 0 };
    evbuf_adds(&e, "\"master\":");
    evbuf_json_str(&e, sn.ctx->cfg->sentinel_master, strlen(sn.ctx->cfg->sentinel_master));
    sbuf_printf(&e, ",\"from\":\"%s\",\"to\":\"%s\",\"source\":\"%s\",\"follow_ms\":%.3f",
                 a, sn.primary_name, sn.source, us / 1000.0);
    events_members(EVN_SENTINEL_SWITCH, e.p, e.len);
    free(e.p);
}

static void probe_got(struct link *l, const redisReply *r)
{
    int master = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                 r->element[0]->type == REDIS_REPLY_STRING &&
                 strcmp(r->element[0]->str, "master") == 0;
    bconn_close(&l->b);
    if (!sn.confirming) {
        sn.primary_ok = master;
        return;
    }
    if (!master) {
        uv_timer_start(&sn.probe_timer, on_probe_timer, PROBE_RETRY_MS, 0);
        return;
    }
    sn.primary_ok = 1;
    sn.confirming = 0;
    sn.hooks->confirmed();
    followed();
}

/* A Sentinel named a new primary: from this moment nothing more goes to
 * the old one (hooks->moving), and new clients wait until the new one
 * answers ROLE as master (hooks->confirmed). */
static void named(const struct addr *a, const char *source)
{
    if (same_addr(a, &sn.primary))
        return;
    if (!sn.confirming) {
        sn.from = sn.primary;
        sn.switch_ns = uv_hrtime();
        snprintf(sn.source, sizeof sn.source, "%s", source);
    }
    set_primary(a, 0);
    sn.hooks->moving(&sn.primary);
    probe_start(1);
}

static void ask_now(void);

/* ---- the Sentinels --------------------------------------------------------- */

static void sub_ready(struct link *l)
{
    const char *argv[3] = { "SUBSCRIBE", "+switch-master", "+promoted-slave" };
    send_command(l, 3, argv);
}

static int parse_addr(const char *host, const char *port, struct addr *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->host, sizeof a->host, "%s", host);
    a->port = atoi(port);
    return a->port > 0 && a->port < 65536 ? 0 : -1;
}

/* The old and the new primary of sentinel_master in a Sentinel's event:
 *   +promoted-slave "slave IP:PORT IP PORT @ NAME OLDIP OLDPORT": the leader
 *       of a failover saw the replica it chose answer as master. What the
 *       old primary acknowledges from then on is lost, so it is left now,
 *       not a second or more later at +switch-master (once the other
 *       replicas follow the new one);
 *   +switch-master "NAME OLDIP OLDPORT NEWIP NEWPORT".
 * 0, or -1: another master, or not readable. */
static int event_addrs(const char *channel, const char *text, struct addr *from,
                       struct addr *to)
{
    char name[256], oh[256], op[16], nh[256], np[16], replica[300];
    int ok = strcmp(channel, "+switch-master") == 0
             ? sscanf(text, "%255s %255s %15s %255s %15s", name, oh, op, nh, np) == 5
             : sscanf(text, "slave %299s %255s %15s @ %255s %255s %15s", replica, nh, np, name,
                      oh, op) == 6;
    return ok && strcmp(name, sn.ctx->cfg->sentinel_master) == 0 &&
           parse_addr(oh, op, from) == 0 && parse_addr(nh, np, to) == 0 ? 0 : -1;
}

/* "message" CHANNEL TEXT. Followed when it moves the primary in use; any
 * other (a Sentinel late to tell an older switch, the +switch-master after
 * its +promoted-slave) is left to the epochs of the next questions. */
static void sub_got(struct link *l, const redisReply *r)
{
    struct addr from, to;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[2]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "message") != 0 ||
        event_addrs(r->element[1]->str, r->element[2]->str, &from, &to) != 0)
        return;
    log_info("sentinel %s: %s %s", l->b.t->name, r->element[1]->str, r->element[2]->str);
    if (!same_addr(&from, &sn.primary))
        return;
    sn.epoch_wait = 1;              /* until a Sentinel names it with its epoch */
    named(&to, r->element[1]->str + 1);     /* the channel without its '+' */
    ask_now();
}

static void q_ready(struct link *l)
{
    const char *argv[3] = { "SENTINEL", "MASTER", sn.ctx->cfg->sentinel_master };
    send_command(l, 3, argv);
}

/* The value of a field of SENTINEL MASTER's reply (RESP2: name, value, ...). */
static const char *field(const redisReply *r, const char *name)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING &&
            r->element[i + 1]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, name) == 0)
            return r->element[i + 1]->str;
    return NULL;
}

static void answers_again(struct link *l)
{
    l->node->answered = 1;
    if (!sn.unreachable)
        return;
    sn.unreachable = 0;
    log_info("sentinel %s answers again", l->b.t->name);
    struct sbuf e = { 0 };
    sbuf_printf(&e, "\"sentinel\":\"%s\",\"primary\":\"%s\"", l->b.t->name, sn.primary_name);
    events_members(EVN_SENTINEL_REACHABLE, e.p, e.len);
    free(e.p);
}

/* The Sentinel's view of the master. Its config-epoch tells a newer view
 * from an older one: a Sentinel that has not yet heard of a failover still
 * names the old primary, which may answer ROLE as master for seconds more
 * (Sentinel demotes it later), so only a primary named under an epoch newer
 * than the one in use is followed. */
static void q_got(struct link *l, const redisReply *r)
{
    bconn_close(&l->b);
    const char *ip = field(r, "ip"), *port = field(r, "port"), *epoch = field(r, "config-epoch");
    struct addr a;
    if (ip == NULL || port == NULL || epoch == NULL || parse_addr(ip, port, &a) != 0)
        return;
    answers_again(l);
    long long e = atoll(epoch);
    if (same_addr(&a, &sn.primary)) {
        if (e > sn.epoch)
            sn.epoch = e;
        sn.epoch_wait = 0;
    } else if (!sn.epoch_wait && e > sn.epoch) {
        sn.epoch = e;
        named(&a, "ask");
    } else {
        log_info("sentinel %s: names %s:%d (epoch %lld), no newer view than %s's: ignored",
                 l->b.t->name, a.host, a.port, e, sn.primary_name);
    }
}

/* The round that ended: when no Sentinel answered, the primary in use is
 * kept while it answers ROLE as master. */
static void round_end(void)
{
    int answered = 0;
    for (int i = 0; i < sn.n; i++)
        answered += sn.node[i].answered;
    if (answered > 0)
        return;
    if (!sn.unreachable) {
        sn.unreachable = 1;
        log_warn("sentinel: no Sentinel answered: keeping primary %s while it answers ROLE "
                 "as master", sn.primary_name);
        struct sbuf e = { 0 };
        sbuf_printf(&e, "\"primary\":\"%s\"", sn.primary_name);
        events_members(EVN_SENTINEL_UNREACHABLE, e.p, e.len);
        free(e.p);
    }
    probe_start(0);
}

/* Every Sentinel not being asked already is asked now. */
static void ask_now(void)
{
    for (int i = 0; i < sn.n; i++)
        if (sn.node[i].q.b.state == BC_IDLE)
            link_connect(&sn.node[i].q);
}

static void on_tick(uv_timer_t *t)
{
    uint64_t now = now_ms_monotonic();
    for (int i = 0; i < sn.n; i++) {
        struct sentinel_node *nd = &sn.node[i];
        if (nd->sub.b.state == BC_IDLE && now >= nd->retry_at) {
            nd->retry_at = now + TICK_MS;
            link_connect(&nd->sub);
        }
    }
    if (now < sn.next_ask)
        return;
    sn.next_ask = now + ASK_MS;
    round_end();
    for (int i = 0; i < sn.n; i++)
        sn.node[i].answered = 0;
    ask_now();
}

void sentinel_readonly(void)
{
    uint64_t now = now_ms_monotonic();
    if (!sn.running || now - sn.readonly_at < READONLY_MS)
        return;
    sn.readonly_at = now;
    log_warn("sentinel: primary %s answered -READONLY: asking the Sentinels now",
             sn.primary_name);
    ask_now();
    probe_start(0);
}

/* ---- the module ------------------------------------------------------------ */

static void set_login(const struct config *cfg)
{
    free(sn.user);
    free(sn.pass);
    sn.user = cfg->sentinel_username ? xstrdup(cfg->sentinel_username) : NULL;
    sn.pass = cfg->sentinel_password ? xstrdup(cfg->sentinel_password) : NULL;
}

void sentinel_start(struct loop_ctx *ctx, const struct addr *primary,
                    const struct sentinel_hooks *hooks)
{
    sn.ctx = ctx;
    sn.hooks = hooks;
    sn.running = 1;
    sn.epoch = -1;
    set_login(ctx->cfg);
    set_primary(primary, 1);
    struct addr a;
    for (sn.n = 0; sn.n < MAX_SENTINELS && nth_addr(ctx->cfg->sentinel, sn.n, &a) == 0; sn.n++) {
        struct sentinel_node *nd = &sn.node[sn.n];
        target_set(&nd->t, ctx, &a, 1);
        nd->t.sentinel = 1;
        link_init(&nd->sub, &nd->t, nd, sub_ready, sub_got);
        link_init(&nd->q, &nd->t, nd, q_ready, q_got);
        nd->answered = 1;           /* the start counts as an answer */
    }
    link_init(&sn.probe, &sn.pt, NULL, probe_ready, probe_got);
    sn.next_ask = now_ms_monotonic();     /* the first round learns the epoch */
    uv_timer_init(ctx->loop, &sn.tick);
    uv_timer_init(ctx->loop, &sn.probe_timer);
    uv_timer_start(&sn.tick, on_tick, 0, TICK_MS);
    log_info("sentinel: master %s is %s (%d Sentinels%s)", ctx->cfg->sentinel_master,
             sn.primary_name, sn.n, ctx->cfg->sentinel_tls ? ", over TLS" : "");
}

void sentinel_apply(const struct addr *primary)
{
    if (!sn.running)
        return;
    set_login(sn.ctx->cfg);
    if (!same_addr(primary, &sn.primary))
        set_primary(primary, 1);
    for (int i = 0; i < sn.n; i++)
        bconn_close(&sn.node[i].sub.b);     /* on_tick logs in again */
}

void sentinel_stop(void)
{
    if (!sn.running)
        return;
    sn.running = 0;
    for (int i = 0; i < sn.n; i++) {
        bconn_close(&sn.node[i].sub.b);
        bconn_close(&sn.node[i].q.b);
        target_cancel(&sn.node[i].t);
    }
    bconn_close(&sn.probe.b);
    target_cancel(&sn.pt);
    uv_close((uv_handle_t *)&sn.tick, NULL);
    uv_close((uv_handle_t *)&sn.probe_timer, NULL);
}

void sentinel_free(void)
{
    for (int i = 0; i < sn.n; i++) {
        link_free(&sn.node[i].sub);
        link_free(&sn.node[i].q);
    }
    link_free(&sn.probe);
    free(sn.user);
    free(sn.pass);
    sn.user = sn.pass = NULL;
}

void sentinel_metrics(struct sbuf *b)
{
    if (sn.ctx == NULL)
        return;
    evbuf_adds(b, "# HELP ttlguard_sentinel_primary_info The primary the Sentinels name, in "
               "use (confirmed: it answered ROLE as master when last asked).\n"
               "# TYPE ttlguard_sentinel_primary_info gauge\nttlguard_sentinel_primary_info{master=\"");
    evbuf_prom_label(b, sn.ctx->cfg->sentinel_master);
    sbuf_printf(b, "\",primary=\"%s\",confirmed=\"%s\"} 1\n", sn.primary_name,
                 sn.primary_ok ? "yes" : "no");
    sbuf_printf(b, "# HELP ttlguard_sentinel_reachable 1 while a Sentinel answered the last "
                 "round of questions (every 5 s), 0 when none did.\n"
                 "# TYPE ttlguard_sentinel_reachable gauge\nttlguard_sentinel_reachable %d\n",
                 !sn.unreachable);
    sbuf_printf(b, "# HELP ttlguard_sentinel_switches_total Primary changes followed.\n"
                 "# TYPE ttlguard_sentinel_switches_total counter\n"
                 "ttlguard_sentinel_switches_total %llu\n", (unsigned long long)sn.switches);
    sbuf_printf(b, "# HELP ttlguard_sentinel_follow_seconds From learning of a switch "
                 "(+promoted-slave, +switch-master, or a Sentinel's answer) to the new primary's "
                 "ROLE saying master: the last switch.\n# TYPE ttlguard_sentinel_follow_seconds gauge\n"
                 "ttlguard_sentinel_follow_seconds %.6f\n", sn.last_follow_us / 1e6);
}

const char *sentinel_problem(void)
{
    static char text[600];
    text[0] = '\0';
    if (sn.ctx == NULL)
        return text;
    if (sn.unreachable)
        snprintf(text, sizeof text, "sentinel: no Sentinel answers: keeping primary %s (%s)",
                 sn.primary_name, sn.primary_ok ? "ROLE master" : "ROLE not confirmed");
    else if (!sn.primary_ok)
        snprintf(text, sizeof text, "sentinel: primary %s does not answer ROLE as master",
                 sn.primary_name);
    else
        snprintf(text, sizeof text, "sentinel: master %.200s is %s (%llu switches followed, "
                 "the last in %.1f ms)", sn.ctx->cfg->sentinel_master, sn.primary_name,
                 (unsigned long long)sn.switches, sn.last_follow_us / 1000.0);
    return text;
}

/* ---- ttlguard as a Sentinel for clients ------------------------------------ */

static void bulk(struct sbuf *b, const char *s)
{
    sbuf_printf(b, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* SENTINEL MASTER(S): the one master, at ttlguard's own address. */
static void master_state(struct sbuf *b, const char *name, const char *host, const char *port)
{
    const char *kv[] = { "name", name, "ip", host, "port", port, "flags", "master",
                         "num-slaves", "0", "num-other-sentinels", "0", "quorum", "1" };
    size_t n = sizeof kv / sizeof kv[0];
    sbuf_printf(b, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        bulk(b, kv[i]);
}

/* argv[2] is the master name (when there is one). */
static int names_master(const struct request *req, const char *name)
{
    return req->argc >= 3 && slice_eq_nocase(req->argv[2], name) &&
           req->argv[2].len == strlen(name);
}

int sentinel_answer(const struct config *cfg, const struct request *req, const char *host,
                    int port, struct sbuf *out)
{
    if (cfg->sentinel == NULL || !slice_eq_nocase(req->argv[0], "SENTINEL"))
        return 0;
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    struct slice sub = req->argc >= 2 ? req->argv[1] : (struct slice){ "", 0 };
    const char *name = cfg->sentinel_master;
    if (port == 0) {
        evbuf_adds(out, "-ERR ttlguard answers SENTINEL on TCP listeners only\r\n");
    } else if (slice_eq_nocase(sub, "get-master-addr-by-name") && req->argc == 3) {
        if (!names_master(req, name)) {
            evbuf_adds(out, "*-1\r\n");
            return 1;
        }
        evbuf_adds(out, "*2\r\n");
        bulk(out, host);
        bulk(out, p);
    } else if (slice_eq_nocase(sub, "masters") && req->argc == 2) {
        evbuf_adds(out, "*1\r\n");
        master_state(out, name, host, p);
    } else if (slice_eq_nocase(sub, "master") && req->argc == 3 && names_master(req, name)) {
        master_state(out, name, host, p);
    } else if ((slice_eq_nocase(sub, "sentinels") || slice_eq_nocase(sub, "replicas") ||
                slice_eq_nocase(sub, "slaves")) && req->argc == 3 && names_master(req, name)) {
        evbuf_adds(out, "*0\r\n");
    } else if (req->argc == 3 && (slice_eq_nocase(sub, "sentinels") ||
               slice_eq_nocase(sub, "replicas") || slice_eq_nocase(sub, "slaves") ||
               slice_eq_nocase(sub, "master"))) {
        evbuf_adds(out, "-ERR No such master with that name\r\n");
    } else {
        evbuf_adds(out, "-ERR ttlguard answers SENTINEL get-master-addr-by-name, masters, "
                   "master, sentinels and replicas only\r\n");
    }
    return 1;
}
