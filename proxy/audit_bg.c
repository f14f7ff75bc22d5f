/*
 * audit_bg: the background audit on the proxy's loop (see audit_bg.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "audit_bg.h"
#include "audit_report.h"
#include "backend.h"
#include "cluster.h"
#include "config.h"
#include "events.h"
#include "rules.h"
#include "loop.h"
#include "util.h"

#define RETRY_MS        1000            /* reconnect after a lost connection; a busy server */
#define REFUSED_MS      10000           /* ...after a refused command (ACL, renamed command) */
#define CHECK_MS        1000            /* INFO again during a pass, and while paused */
#define REPLY_MAX_MS    60000           /* a command unanswered this long: drop the connection
                                           (TTLG_AUDIT_REPLY_MAX_MS: shorter, for tests) */
#define MEMORY_NEAR     0.90            /* of maxmemory: pause above it */
#define COUNT_MIN       10              /* SCAN COUNT: audit_rate / 100 within these, so a */
#define COUNT_MAX       100             /* batch (2 commands a key) is a short burst for Redis
                                           (bench/audit_bg.sh: at 250 a key, p99 of other
                                           clients' GETs went from 0.17 to 0.27 ms) */
#define MAX_DBS         1024            /* databases walked per server */
#define MAX_NODES       AREP_MAX_NODES  /* servers walked per pass (a cluster's primaries) */
#define TOP_PATTERNS    10              /* leaked patterns kept per pass (log_keys = full) */
#define PATTERNS_KEPT   1024            /* distinct folded patterns per table during a pass:
                                           the pass's memory does not grow with the keyspace */
#define NAME_REQ        "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$14\r\nttlguard-audit\r\n"

/* The four states of the gauges. The no-TTL group of a rule decides the
 * first three; every key with a TTL is expiring, durable ones included (the
 * report's "durable with a TTL" warning). */
enum state { ST_LEAKED, ST_EXPIRING, ST_REGISTERED, ST_UNREGISTERED, ST__COUNT };
static const char *const state_names[ST__COUNT] = {
    "leaked", "expiring", "registered", "unregistered",
};

/* What is in flight on the connection (one command at a time, after any
 * replies to skip). */
enum phase { PH_NONE, PH_INFO, PH_READONLY, PH_SCAN, PH_KEYS };

/* One rule in a finished pass: copies, so a reload cannot pull them away. */
struct rule_result {
    char *label;
    char *prefix;
    size_t prefix_len;
    int no_ttl_state;                   /* enum state of its keys without a TTL */
    uint64_t keys[ST__COUNT];
    uint64_t bytes[ST__COUNT];
};

struct pattern_result {
    char *text;
    char *rule;
    uint64_t keys;
    uint64_t bytes;
};

/* A finished pass, as the gauges show it. */
struct pass_result {
    int valid;
    struct rule_result *r;
    size_t nrules;
    struct pattern_result top[TOP_PATTERNS];
    int ntop;
    int with_memory;
    uint64_t keys, expired_during;
    uint64_t totals[ST__COUNT];
    uint64_t end_wall_ms;
    uint64_t duration_ms;
};

/* Leaked keys of one database, all servers of the pass together. */
struct db_tally {
    int db;
    uint64_t leaked;
    uint64_t fixable;                   /* ...whose rule has a ttl to give */
};

/* One server of the pass: the backend (or audit_from's server), or a node
 * of the cluster for each shard. */
struct node_tally {
    struct target *t;                   /* the backend, a.from, or cluster.c's node (lives
                                           until cluster_free, after the loop) */
    struct target *primary;             /* t is a replica (audit_from = replica): the primary
                                           of its shard; else NULL */
    uint64_t keys, leaked;
};

static struct abg {
    struct loop_ctx *ctx;
    int on, stopping, restart;
    struct bconn c;
    uint64_t retry_at;                  /* monotonic ms to reconnect; 0: not waiting */
    redisReader *rd;
    uv_timer_t *timer;                  /* pacing, the next pass, pauses; freed on close */

    enum phase phase;
    uint64_t sent_at;                   /* monotonic ms the command in flight was sent */
    int skip;                           /* replies to read past before the phase's */
    size_t owed, done;                  /* PH_KEYS: replies expected and read */
    char key_error[128];                /* PH_KEYS: the first error reply; "" none */
    int cur_db;                         /* SELECTed on the connection */
    int readonly;                       /* READONLY answered on the connection */
    uint64_t hold_until;                /* monotonic ms: nothing is sent before (busy, refused) */

    /* The pass under way: servers, then databases, then the SCAN cursor. */
    int in_pass;
    struct arep rep;
    struct node_tally nodes[MAX_NODES];
    int nnodes, nodei;
    int dbs[MAX_DBS], ndbs, dbi;        /* databases of nodes[nodei] with keys; ndbs -1:
                                           its INFO keyspace is not read yet */
    long long node_keys;                /* INFO keyspace keys= of nodes[nodei] */
    uint64_t node_seen0;                /* rep.seen when nodes[nodei] began */
    char cursor[24];
    redisReply *batch;                  /* the SCAN reply whose keys are not classified yet */
    int batch_db;                       /* ...from this database */
    long long *pttl, *mem;              /* [cap]: the batch's replies */
    size_t cap;
    struct db_tally dbt[MAX_DBS];
    int ndbt;
    uint64_t pass_start;                /* monotonic ms */
    uint64_t next_pass;                 /* monotonic ms the next pass may start */
    uint64_t rate_t0, paid;             /* audit_rate: keys charged since rate_t0 */
    uint64_t checked_at;                /* monotonic ms of the last INFO */

    char paused[16];                    /* "" running, else loading|failover|sync|memory */
    uint64_t paused_at;                 /* monotonic ms */
    char problem[640];
    int refusal;                        /* problem: SCAN or PTTL refused for good (an ACL) */

    uint64_t passes, keys_read;
    struct pass_result last;

    int from;                           /* enum audit_from of the pass (or the next one) */
    struct target from_t;               /* audit_from = HOST:PORT: that server */
} a;

static void step(void);
static void pause_enter(const char *why, const char *detail, uint64_t now);

/* ------------------------------------------------------------------------ */
/* Results                                                                  */

static void result_free(struct pass_result *p)
{
    for (size_t i = 0; i < p->nrules; i++) {
        free(p->r[i].label);
        free(p->r[i].prefix);
    }
    free(p->r);
    for (int i = 0; i < p->ntop; i++) {
        free(p->top[i].text);
        free(p->top[i].rule);
    }
    memset(p, 0, sizeof *p);
}

static int state_of(enum arep_group g)
{
    switch (g) {
    case AREP_LEAKED:       return ST_LEAKED;
    case AREP_REGISTERED:   return ST_REGISTERED;
    case AREP_UNREGISTERED: return ST_UNREGISTERED;
    default:                return ST_EXPIRING;
    }
}

/* The largest leaked patterns of rep, into p->top (largest first). */
static void top_patterns(const struct arep *rep, struct pass_result *p)
{
    const struct arep_patterns *ps = &rep->patterns[0];
    const struct arep_pattern *best[TOP_PATTERNS];
    int n = 0;
    for (size_t i = 0; i < ps->cap; i++) {
        const struct arep_pattern *x = &ps->v[i];
        if (x->text == NULL || (n == TOP_PATTERNS && best[n - 1]->keys >= x->keys))
            continue;
        int j = n < TOP_PATTERNS ? n++ : TOP_PATTERNS - 1;  /* a new place, or the last's */
        for (; j > 0 && best[j - 1]->keys < x->keys; j--)
            best[j] = best[j - 1];
        best[j] = x;
    }
    for (int i = 0; i < n; i++) {
        p->top[i].text = xstrdup(best[i]->text);
        p->top[i].rule = xstrdup(best[i]->rule != NULL ? best[i]->rule->label : "?");
        p->top[i].keys = best[i]->keys;
        p->top[i].bytes = best[i]->memory;
    }
    p->ntop = n;
}

static void result_from(const struct arep *rep, struct pass_result *p, uint64_t duration_ms)
{
    memset(p, 0, sizeof *p);
    p->valid = 1;
    p->nrules = rep->nrules;
    p->r = xcalloc(rep->nrules, sizeof *p->r);
    for (size_t i = 0; i < rep->nrules; i++) {
        const struct arep_rule_stats *rs = &rep->rules[i];
        struct rule_result *r = &p->r[i];
        r->label = xstrdup(rs->rule->label);
        r->prefix = xmemdup(rs->rule->prefix, rs->rule->prefix_len);
        r->prefix_len = rs->rule->prefix_len;
        r->no_ttl_state = state_of(arep_group_of(rs->rule, 0));
        r->keys[r->no_ttl_state] += rs->no_ttl.keys;
        r->bytes[r->no_ttl_state] += rs->no_ttl.memory;
        r->keys[ST_EXPIRING] += rs->with_ttl.keys;
        r->bytes[ST_EXPIRING] += rs->with_ttl.memory;
        for (int s = 0; s < ST__COUNT; s++)
            p->totals[s] += r->keys[s];
    }
    top_patterns(rep, p);
    p->with_memory = rep->with_memory;
    p->keys = rep->seen;
    p->expired_during = rep->expired_during;
    p->end_wall_ms = now_ms_wall();
    p->duration_ms = duration_ms;
}

/* The same rule in the previous pass (by label), or NULL. */
static const struct rule_result *previous(const struct pass_result *prev, const char *label)
{
    for (size_t i = 0; prev->valid && i < prev->nrules; i++)
        if (strcmp(prev->r[i].label, label) == 0)
            return &prev->r[i];
    return NULL;
}

/* ,"<state>":N,"<state>_change":N|null */
static void member_count(struct sbuf *b, int state, uint64_t now, int known, uint64_t before)
{
    sbuf_printf(b, ",\"%s\":%llu,\"%s_change\":", state_names[state], (unsigned long long)now,
                 state_names[state]);
    if (known)
        sbuf_printf(b, "%lld", (long long)now - (long long)before);
    else
        evbuf_adds(b, "null");
}

/* `ttlguard audit --fix --yes` for each database with leaked keys a rule
 * can give a TTL to: the commands the event names. */
static void member_fix(struct sbuf *b)
{
    const struct config *cfg = a.ctx->cfg;
    char *path = cfg->path ? realpath(cfg->path, NULL) : NULL;
    uint64_t no_ttl_to_give = 0;
    int any = 0;
    evbuf_adds(b, ",\"fix\":[");
    for (int i = 0; i < a.ndbt; i++) {
        no_ttl_to_give += a.dbt[i].leaked - a.dbt[i].fixable;
        if (a.dbt[i].fixable == 0)
            continue;
        struct sbuf cmd = { 0 };
        sbuf_printf(&cmd, "ttlguard audit --config %s", path ? path : cfg->path ? cfg->path
                     : "FILE");
        if (strcmp(a.ctx->backend->name, cfg->backend) != 0)     /* ttlguard --backend */
            sbuf_printf(&cmd, " --backend %s", a.ctx->backend->name);
        if (cfg->cluster)
            evbuf_adds(&cmd, " --cluster");
        else if (a.dbt[i].db != 0)
            sbuf_printf(&cmd, " --db %d", a.dbt[i].db);
        evbuf_adds(&cmd, " --fix --yes");
        if (any++)
            sbuf_add(b, ",", 1);
        evbuf_json_str(b, cmd.p, cmd.len);
        free(cmd.p);
    }
    free(path);
    evbuf_adds(b, "]");
    if (no_ttl_to_give > 0)
        sbuf_printf(b, ",\"leaked_without_rule_ttl\":%llu", (unsigned long long)no_ttl_to_give);
}

/* "dbs":[{db, leaked}]; with audit_from = HOST:PORT "from"; with cluster =
 * on "nodes":[{node, [replica_of,] keys, leaked}]. */
static void member_where(struct sbuf *b)
{
    evbuf_adds(b, ",\"dbs\":[");
    for (int i = 0; i < a.ndbt; i++)
        sbuf_printf(b, "%s{\"db\":%d,\"leaked\":%llu}", i ? "," : "", a.dbt[i].db,
                     (unsigned long long)a.dbt[i].leaked);
    evbuf_adds(b, "]");
    if (a.from == AUDIT_FROM_ADDR) {
        evbuf_adds(b, ",\"from\":");
        evbuf_json_str(b, a.from_t.name, strlen(a.from_t.name));
    }
    if (!a.ctx->cfg->cluster)
        return;
    evbuf_adds(b, ",\"nodes\":[");
    for (int i = 0; i < a.nnodes; i++) {
        const struct node_tally *n = &a.nodes[i];
        evbuf_adds(b, i ? ",{\"node\":" : "{\"node\":");
        evbuf_json_str(b, n->t->name, strlen(n->t->name));
        if (n->primary != NULL) {
            evbuf_adds(b, ",\"replica_of\":");
            evbuf_json_str(b, n->primary->name, strlen(n->primary->name));
        }
        sbuf_printf(b, ",\"keys\":%llu,\"leaked\":%llu}", (unsigned long long)n->keys,
                     (unsigned long long)n->leaked);
    }
    evbuf_adds(b, "]");
}

/* "rules":[...]: each rule's states, their change since prev, bytes. */
static void member_rules(struct sbuf *b, const struct pass_result *p,
                         const struct pass_result *prev)
{
    evbuf_adds(b, ",\"rules\":[");
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule_result *r = &p->r[i], *was = previous(prev, r->label);
        evbuf_adds(b, i ? ",{\"rule\":" : "{\"rule\":");
        evbuf_json_str(b, r->label, strlen(r->label));
        evbuf_adds(b, ",\"prefix\":");
        evbuf_json_str(b, r->prefix, r->prefix_len);
        for (int s = 0; s < ST__COUNT; s++) {
            if (s != ST_EXPIRING && s != r->no_ttl_state)
                continue;
            member_count(b, s, r->keys[s], was != NULL, was ? was->keys[s] : 0);
            if (p->with_memory)
                sbuf_printf(b, ",\"%s_bytes\":%llu", state_names[s],
                             (unsigned long long)r->bytes[s]);
        }
        evbuf_adds(b, "}");
    }
    evbuf_adds(b, "]");
}

/* "leaked_patterns": folded key names, so only where the log may show keys. */
static void member_patterns(struct sbuf *b, const struct pass_result *p)
{
    if (a.ctx->cfg->log_keys != LOG_KEYS_FULL || p->ntop == 0)
        return;
    evbuf_adds(b, ",\"leaked_patterns\":[");
    for (int i = 0; i < p->ntop && i < 5; i++) {
        evbuf_adds(b, i ? ",{\"pattern\":" : "{\"pattern\":");
        evbuf_json_str(b, p->top[i].text, strlen(p->top[i].text));
        evbuf_adds(b, ",\"rule\":");
        evbuf_json_str(b, p->top[i].rule, strlen(p->top[i].rule));
        sbuf_printf(b, ",\"keys\":%llu}", (unsigned long long)p->top[i].keys);
    }
    evbuf_adds(b, "]");
}

/* The audit_pass event of p, compared with prev. */
static void event_pass(const struct pass_result *p, const struct pass_result *prev)
{
    struct sbuf b = { 0 };
    sbuf_printf(&b, "\"keys\":%llu,\"duration_ms\":%llu,\"rate\":%u",
                 (unsigned long long)p->keys, (unsigned long long)p->duration_ms,
                 a.ctx->cfg->audit_rate);
    member_where(&b);
    for (int s = 0; s < ST__COUNT; s++)
        member_count(&b, s, p->totals[s], prev->valid, prev->totals[s]);
    sbuf_printf(&b, ",\"expired_during\":%llu", (unsigned long long)p->expired_during);
    member_rules(&b, p, prev);
    member_patterns(&b, p);
    if (p->totals[ST_LEAKED] > 0) {
        member_fix(&b);
        evbuf_adds(&b, ",\"message\":\"the pass wrote nothing: run the fix command to give "
                   "leaked keys their rule's TTL (EXPIRE ... NX; a dry run without --yes)\"");
    }
    events_members(EVN_AUDIT_PASS, b.p, b.len);
    free(b.p);
}

/* ------------------------------------------------------------------------ */
/* The pass                                                                 */

static void batch_drop(void)
{
    if (a.batch != NULL)
        freeReplyObject(a.batch);
    a.batch = NULL;
}

static void pass_drop(void)
{
    batch_drop();
    if (a.in_pass)
        arep_free(&a.rep);
    a.in_pass = 0;
}

static void rate_restart(uint64_t now)
{
    a.rate_t0 = now;
    a.paid = a.batch != NULL ? a.batch->element[1]->elements : 0;
}

/* audit_fallback: the shard of primary p has no online replica, so the
 * pass reads p. */
static void event_fallback(const struct target *p)
{
    struct sbuf b = { 0 };
    char msg[400];
    snprintf(msg, sizeof msg, "audit_from = replica, and the shard of %s has no online replica: "
             "this pass reads its primary", p->name);
    log_warn("audit: %s", msg);
    evbuf_adds(&b, "\"node\":");
    evbuf_json_str(&b, p->name, strlen(p->name));
    evbuf_adds(&b, ",\"message\":");
    evbuf_json_str(&b, msg, strlen(msg));
    events_members(EVN_AUDIT_FALLBACK, b.p, b.len);
    free(b.p);
}

/* audit_from = replica: each primary of a.nodes swapped for an online
 * replica of its shard, or kept (audit_fallback) when it has none. */
static void pick_replicas(void)
{
    for (int i = 0; i < a.nnodes; i++) {
        struct node_tally *n = &a.nodes[i];
        struct target *r = cluster_replica_of(n->t);
        if (r == NULL) {
            event_fallback(n->t);
            continue;
        }
        n->primary = n->t;
        n->t = r;
    }
}

/* The server read outside a pass (and by a pass without cluster = on). */
static struct target *home_target(void)
{
    return a.from == AUDIT_FROM_ADDR ? &a.from_t : a.ctx->backend;
}

/* The servers a pass walks, into a.nodes: the backend (or audit_from's
 * server), or every primary of the cluster that serves slots (or a
 * replica of each), one after the other. Returns 0, or -1 when they are
 * not known yet: no topology read has ended, or a primary is down and no
 * failover has replaced it yet (a pause, "failover"). */
static int pass_nodes(uint64_t now)
{
    struct target *t[MAX_NODES];
    const char *down = NULL;
    int n = 1;
    if (a.ctx->cfg->cluster)
        n = cluster_primaries(t, MAX_NODES, &down);
    else
        t[0] = home_target();
    if (down != NULL) {
        char detail[400];
        snprintf(detail, sizeof detail, "the cluster's primary %s is not online: the pass "
                 "waits for a failover (or its return)", down);
        pause_enter("failover", detail, now);
    }
    if (n <= 0)
        return -1;
    memset(a.nodes, 0, sizeof a.nodes);
    for (int i = 0; i < n; i++)
        a.nodes[i].t = t[i];
    a.nnodes = n;
    if (a.ctx->cfg->cluster && a.from == AUDIT_FROM_REPLICA)
        pick_replicas();
    return 0;
}

static void node_begin(int i)
{
    a.nodei = i;
    a.ndbs = -1;                /* the next INFO says which databases have keys */
    a.dbi = 0;
    a.node_keys = 0;
    a.node_seen0 = a.rep.seen;
    snprintf(a.cursor, sizeof a.cursor, "0");
}

static int pass_begin(uint64_t now)
{
    const struct config *cfg = a.ctx->cfg;
    if (pass_nodes(now) != 0)
        return -1;
    arep_init(&a.rep, &cfg->rules);
    a.rep.with_memory = cfg->audit_memory;
    a.rep.max_patterns = PATTERNS_KEPT;
    a.in_pass = 1;
    a.ndbt = 0;
    node_begin(0);
    a.pass_start = now;
    a.next_pass = now + (uint64_t)cfg->audit_interval * 1000;
    rate_restart(now);
    return 0;
}

static void pass_end(uint64_t now)
{
    struct pass_result p;
    result_from(&a.rep, &p, now - a.pass_start);
    event_pass(&p, &a.last);
    log_info("audit: pass done in %.1f s: %llu keys, %llu leaked, %llu expiring, %llu "
             "registered, %llu unregistered", (double)p.duration_ms / 1000,
             (unsigned long long)p.keys, (unsigned long long)p.totals[ST_LEAKED],
             (unsigned long long)p.totals[ST_EXPIRING],
             (unsigned long long)p.totals[ST_REGISTERED],
             (unsigned long long)p.totals[ST_UNREGISTERED]);
    result_free(&a.last);
    a.last = p;
    a.passes++;
    pass_drop();
    if (a.next_pass < now)
        a.next_pass = now;      /* the pass took longer than audit_interval */
}

/* Every database of nodes[nodei] is walked: the next server, or the end. */
static void node_end(uint64_t now)
{
    if (a.nodei + 1 < a.nnodes)
        node_begin(a.nodei + 1);
    else
        pass_end(now);
}

/* The tally of database db (MAX_DBS at most: a server has fewer). */
static struct db_tally *db_tally(int db)
{
    for (int i = 0; i < a.ndbt; i++)
        if (a.dbt[i].db == db)
            return &a.dbt[i];
    struct db_tally *t = &a.dbt[a.ndbt < MAX_DBS ? a.ndbt++ : MAX_DBS - 1];
    *t = (struct db_tally){ .db = db };
    return t;
}

/* The keys of the batch, classified. */
static void classify(void)
{
    const struct config *cfg = a.ctx->cfg;
    const redisReply *keys = a.batch->element[1];
    struct db_tally *dt = db_tally(a.batch_db);
    struct node_tally *nt = &a.nodes[a.nodei];
    uint64_t before = a.rep.seen;
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        const struct rule *r;
        /* TYPE is not asked: the gauges do not need it. */
        int g = arep_classify(&a.rep, &cfg->rules, k->str, k->len, a.pttl[i], KTYPE_OTHER,
                              cfg->audit_memory ? a.mem[i] : -1, &r);
        if (g != AREP_LEAKED)
            continue;
        dt->leaked++;
        nt->leaked++;
        if (r->ttl > 0)
            dt->fixable++;
    }
    nt->keys += a.rep.seen - before;
    a.keys_read += a.rep.seen - before;
    batch_drop();
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */

static void send_cmd(int argc, const char *const *argv)
{
    struct sbuf b = { 0 };
    char num[32];
    sbuf_add(&b, num, (size_t)snprintf(num, sizeof num, "*%d\r\n", argc));
    for (int i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]);
        sbuf_add(&b, num, (size_t)snprintf(num, sizeof num, "$%zu\r\n", n));
        sbuf_add(&b, argv[i], n);
        sbuf_add(&b, "\r\n", 2);
    }
    bconn_write_bytes(&a.c, b.p, b.len);
    free(b.p);
}

static void select_db(int db)
{
    if (db == a.cur_db)
        return;
    char num[24];
    snprintf(num, sizeof num, "%d", db);
    const char *const argv[] = { "SELECT", num };
    send_cmd(2, argv);
    a.skip++;
    a.cur_db = db;
}

static void sent(enum phase ph)
{
    a.phase = ph;
    a.sent_at = now_ms_monotonic();
}

static void send_scan(void)
{
    unsigned rate = a.ctx->cfg->audit_rate;
    unsigned count = rate / 100 < COUNT_MIN ? COUNT_MIN : rate / 100 > COUNT_MAX ? COUNT_MAX
                   : rate / 100;
    char num[24];
    snprintf(num, sizeof num, "%u", count);
    const char *const argv[] = { "SCAN", a.cursor, "COUNT", num };
    select_db(a.dbs[a.dbi]);
    send_cmd(4, argv);
    sent(PH_SCAN);
}

/* PTTL [and MEMORY USAGE] of every key of the batch, in one write. */
static void send_keys(void)
{
    static const char *const cmd[] = { "*2\r\n$4\r\nPTTL\r\n",
                                       "*3\r\n$6\r\nMEMORY\r\n$5\r\nUSAGE\r\n" };
    const redisReply *keys = a.batch->element[1];
    int per = a.ctx->cfg->audit_memory ? 2 : 1;
    struct sbuf b = { 0 };
    char num[32];
    select_db(a.batch_db);
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        for (int c = 0; c < per; c++) {
            sbuf_add(&b, cmd[c], strlen(cmd[c]));
            sbuf_add(&b, num, (size_t)snprintf(num, sizeof num, "$%zu\r\n", k->len));
            sbuf_add(&b, k->str, k->len);
            sbuf_add(&b, "\r\n", 2);
        }
        a.pttl[i] = -2;
        a.mem[i] = -1;
    }
    bconn_write_bytes(&a.c, b.p, b.len);
    free(b.p);
    a.owed = keys->elements * (size_t)per;
    a.done = 0;
    a.key_error[0] = '\0';
    sent(PH_KEYS);
}

static void send_readonly(void)
{
    const char *const argv[] = { "READONLY" };
    send_cmd(1, argv);
    sent(PH_READONLY);
}

static void send_info(void)
{
    const char *const argv[] = { "INFO" };
    send_cmd(1, argv);
    sent(PH_INFO);
}

static void on_timer(uv_timer_t *t)
{
    (void)t;
    step();
}

static void wait_ms(uint64_t ms)
{
    uv_timer_start(a.timer, on_timer, ms, 0);
}

/* Drop the connection: the command in flight is asked again (from the same
 * position) on a new one, retry_ms later (0: as soon as it is closed). */
static void conn_drop(uint64_t retry_ms)
{
    a.phase = PH_NONE;
    a.skip = 0;
    a.retry_at = retry_ms > 0 ? now_ms_monotonic() + retry_ms : 0;
    bconn_close(&a.c);
}

/* The server the connection should talk to: the pass's, else home_target(). */
static struct target *node_target(void)
{
    return a.in_pass ? a.nodes[a.nodei].t : home_target();
}

/* Is the cluster node n what the pass chose for its shard still: an online
 * primary, or an online replica of that primary? */
static int node_current(const struct node_tally *n)
{
    return n->primary != NULL ? cluster_is_replica_of(n->t, n->primary)
                              : cluster_is_primary(n->t);
}

/* Connect (the connection is closed), to the pass's server. A cluster node
 * that is no longer what the pass chose (failed, failed over, gone, a
 * replica of another primary) starts the pass over with the nodes the
 * topology shows now: its shard may be served elsewhere, and a pass counts
 * every shard once. */
static void conn_open(void)
{
    a.retry_at = 0;
    const struct node_tally *n = &a.nodes[a.nodei];
    if (a.in_pass && a.ctx->cfg->cluster && !node_current(n)) {
        log_warn("audit: %s is no longer an online %s%s: the pass starts over", n->t->name,
                 n->primary != NULL ? "replica of " : "primary of the cluster",
                 n->primary != NULL ? n->primary->name : "");
        pass_drop();
        a.next_pass = now_ms_monotonic() + RETRY_MS;
    }
    a.c.t = node_target();
    bconn_connect(&a.c, 1);
}

/* How the next batch may go out under audit_rate: 0 now, else ms to wait. */
static uint64_t rate_wait(uint64_t now)
{
    uint64_t due = a.rate_t0 + a.paid * 1000 / a.ctx->cfg->audit_rate;
    return due > now ? due - now : 0;
}

/* What to do next, when nothing is in flight. */
static void step(void)
{
    if (!a.on || a.c.state != BC_READY || a.phase != PH_NONE)
        return;
    uint64_t now = now_ms_monotonic();
    if (!a.in_pass && now < a.next_pass) {
        wait_ms(a.next_pass - now);
        return;
    }
    if (!a.in_pass && pass_begin(now) != 0) {
        wait_ms(RETRY_MS);          /* the servers to walk are not known yet */
        return;
    }
    if (a.c.t != node_target()) {
        conn_drop(0);               /* the next server: c_closed() connects there */
        return;
    }
    if (now < a.hold_until) {
        wait_ms(a.hold_until - now);
        return;
    }
    if (a.nodes[a.nodei].primary != NULL && !a.readonly) {
        send_readonly();            /* a cluster replica serves reads of its keys after it */
        return;
    }
    if (a.ndbs < 0 || a.paused[0] || now - a.checked_at >= CHECK_MS) {
        send_info();                /* pauses, and the databases to walk */
        return;
    }
    if (a.batch != NULL) {
        uint64_t ms = rate_wait(now);
        if (ms > 0)
            wait_ms(ms);
        else
            send_keys();
        return;
    }
    if (a.dbi >= a.ndbs) {
        node_end(now);
        step();
        return;
    }
    send_scan();
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                  */

/* Value of "name:" in an INFO text, or "" (out has outlen bytes). */
static void info_field(const char *info, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *p = info; p != NULL && *p; ) {
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            size_t len = strcspn(p + n + 1, "\r\n");
            snprintf(out, outlen, "%.*s", (int)len, p + n + 1);
            return;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
}

/* Why the walk must wait, from INFO, or NULL; detail gets the numbers. */
static const char *pause_reason(const char *info, char *detail, size_t len)
{
    char v[64], used[32], max[32];
    detail[0] = '\0';
    info_field(info, "loading", v, sizeof v);
    if (strcmp(v, "1") == 0) {
        snprintf(detail, len, "Redis is loading its dataset (INFO persistence loading:1)");
        return "loading";
    }
    info_field(info, "master_failover_state", v, sizeof v);
    if (v[0] && strcmp(v, "no-failover") != 0) {
        snprintf(detail, len, "a failover is under way (master_failover_state:%s)", v);
        return "failover";
    }
    info_field(info, "master_sync_in_progress", v, sizeof v);
    if (strcmp(v, "1") == 0) {
        snprintf(detail, len, "the replica is syncing with its primary "
                 "(master_sync_in_progress:1)");
        return "sync";
    }
    info_field(info, "used_memory", used, sizeof used);
    info_field(info, "maxmemory", max, sizeof max);
    double u = atof(used), m = atof(max);
    if (m > 0 && u >= m * MEMORY_NEAR) {
        snprintf(detail, len, "used_memory %s is within %d%% of maxmemory %s", used,
                 (int)((1 - MEMORY_NEAR) * 100 + 0.5), max);
        return "memory";
    }
    return NULL;
}

/* INFO keyspace of nodes[nodei]: its databases that have keys, in order. */
static void keyspace(const char *info)
{
    a.ndbs = 0;
    a.node_keys = 0;
    for (const char *p = info; p != NULL && *p; ) {
        int db;
        long long keys;
        if (strncmp(p, "db", 2) == 0 && sscanf(p, "db%d:keys=%lld", &db, &keys) == 2 &&
            keys > 0 && a.ndbs < MAX_DBS) {
            a.dbs[a.ndbs++] = db;
            a.node_keys += keys;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
}

/* audit_paused (resumed 0) or audit_resumed, with where the pass is. */
static void event_pause(int resumed, const char *reason, const char *detail)
{
    struct sbuf b = { 0 };
    evbuf_adds(&b, "\"reason\":");
    evbuf_json_str(&b, reason, strlen(reason));
    if (resumed)
        sbuf_printf(&b, ",\"paused_ms\":%llu",
                     (unsigned long long)(now_ms_monotonic() - a.paused_at));
    evbuf_adds(&b, ",\"message\":");
    evbuf_json_str(&b, detail, strlen(detail));
    if (a.ctx->cfg->cluster) {
        evbuf_adds(&b, ",\"node\":");
        evbuf_json_str(&b, a.c.t->name, strlen(a.c.t->name));
    }
    if (a.in_pass)
        sbuf_printf(&b, ",\"db\":%d,\"cursor\":\"%s\",\"keys_so_far\":%llu",
                     a.ndbs > 0 && a.dbi < a.ndbs ? a.dbs[a.dbi] : -1, a.cursor,
                     (unsigned long long)a.rep.seen);
    events_members(resumed ? EVN_AUDIT_RESUMED : EVN_AUDIT_PAUSED, b.p, b.len);
    free(b.p);
}

/* The walk waits (for why: loading|failover|sync|memory); said once. */
static void pause_enter(const char *why, const char *detail, uint64_t now)
{
    if (strcmp(a.paused, why) == 0)
        return;
    if (!a.paused[0])
        a.paused_at = now;
    snprintf(a.paused, sizeof a.paused, "%s", why);
    log_warn("audit: paused: %s", detail);
    event_pause(0, why, detail);
}

/* Pause, or resume, by what INFO says. Returns 1 while paused. */
static int pause_check(const char *info, uint64_t now)
{
    char detail[200];
    const char *why = pause_reason(info, detail, sizeof detail);
    if (why != NULL) {
        pause_enter(why, detail, now);
        return 1;
    }
    if (a.paused[0]) {
        log_info("audit: resumed after %llu ms (%s)", (unsigned long long)(now - a.paused_at),
                 a.paused);
        event_pause(1, a.paused, "the walk goes on where it paused");
        a.paused[0] = '\0';
        rate_restart(now);
    }
    return 0;
}

/* An error a server gives for a while only: loading, a script running, a
 * replica without its primary, a cluster changing. */
static int error_passes(const char *err)
{
    static const char *const busy[] = { "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN",
                                        "CLUSTERDOWN" };
    for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++)
        if (strncmp(err, busy[i], strlen(busy[i])) == 0)
            return 1;
    return 0;
}

/* Redis refused what the walk asked: INFO again (it may say why: loading),
 * then the same command once more, a second later when the refusal passes,
 * else REFUSED_MS later (an ACL, a renamed command: the problem is shown on
 * /healthz until it is fixed). */
static void refused(const char *what, const char *err)
{
    int passes = error_passes(err);
    char before[sizeof a.problem];
    snprintf(before, sizeof before, "%s", a.problem);
    snprintf(a.problem, sizeof a.problem, "audit: %s refused by %s: %.200s", what, a.c.t->name,
             err);
    a.refusal = !passes && strcmp(what, "INFO") != 0;
    if (!passes && strcmp(before, a.problem) != 0)
        log_warn("%s", a.problem);
    a.hold_until = now_ms_monotonic() + (passes ? CHECK_MS : REFUSED_MS);
    a.checked_at = 0;
}

/* The problem is over: the server answered (INFO: not a refusal of SCAN or
 * PTTL, which holds until they are answered, logged once). */
static void problem_clear(int by_info)
{
    if (by_info && a.refusal)
        return;
    a.problem[0] = '\0';
    a.refusal = 0;
}

static void on_info(const redisReply *r)
{
    uint64_t now = now_ms_monotonic();
    a.checked_at = now;
    if (r->type != REDIS_REPLY_STRING) {
        refused("INFO", r->type == REDIS_REPLY_ERROR ? r->str : "(not a string)");
        step();
        return;
    }
    if (pause_check(r->str, now)) {
        wait_ms(CHECK_MS);
        return;
    }
    problem_clear(1);
    if (a.in_pass && a.ndbs < 0)
        keyspace(r->str);
    step();
}

/* READONLY's reply: refused (an ACL), the replica's keys cannot be read:
 * held like a refused SCAN, on /healthz, and asked again. */
static void on_readonly(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        refused("READONLY", r->str);
    else
        a.readonly = 1;
}

static int scan_reply_ok(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY ||
        r->element[0]->len >= sizeof a.cursor)
        return 0;
    for (size_t i = 0; i < r->element[1]->elements; i++)
        if (r->element[1]->element[i]->type != REDIS_REPLY_STRING)
            return 0;
    return 1;
}

/* SCAN's reply: the next cursor, and the keys as the batch. Takes r. */
static void on_scan(redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        refused("SCAN", r->str);
        freeReplyObject(r);
        return;
    }
    if (!scan_reply_ok(r)) {
        log_warn("audit: SCAN: a reply that is not a cursor and keys: the connection is "
                 "dropped");
        freeReplyObject(r);
        conn_drop(REFUSED_MS);
        return;
    }
    problem_clear(0);
    const redisReply *keys = r->element[1];
    memcpy(a.cursor, r->element[0]->str, r->element[0]->len + 1);
    if (keys->elements == 0) {
        freeReplyObject(r);
    } else {
        if (keys->elements > a.cap) {
            a.cap = keys->elements;
            a.pttl = xrealloc(a.pttl, a.cap * sizeof *a.pttl);
            a.mem = xrealloc(a.mem, a.cap * sizeof *a.mem);
        }
        a.batch = r;
        a.batch_db = a.dbs[a.dbi];
        a.paid += keys->elements;
    }
    if (strcmp(a.cursor, "0") == 0)
        a.dbi++;                    /* this database is walked once its batch is read */
}

/* One reply of PTTL [, MEMORY USAGE] per key. A redirect (the slot moved
 * since SCAN) counts the key as gone from this server; another error keeps
 * the batch to ask again. */
static void on_key_reply(const redisReply *r)
{
    int per = a.ctx->cfg->audit_memory ? 2 : 1;
    size_t k = a.done / (size_t)per;
    int cmd = (int)(a.done % (size_t)per);
    if (r->type == REDIS_REPLY_INTEGER && cmd == 0)
        a.pttl[k] = r->integer;     /* -2: gone since SCAN, counted as expired_during */
    else if (r->type == REDIS_REPLY_INTEGER)
        a.mem[k] = r->integer;
    else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) != 0 &&
             strncmp(r->str, "ASK ", 4) != 0 && a.key_error[0] == '\0')
        snprintf(a.key_error, sizeof a.key_error, "%s", r->str);
    a.done++;
}

/* Every reply of the batch is in. */
static void on_keys_done(void)
{
    if (!a.in_pass || a.batch == NULL)
        return;                     /* the pass was dropped meanwhile (a reload) */
    if (a.key_error[0] != '\0') {
        refused(a.ctx->cfg->audit_memory ? "PTTL or MEMORY USAGE" : "PTTL", a.key_error);
    } else {
        problem_clear(0);
        classify();
    }
}

/* One whole reply; takes r. */
static void on_reply(redisReply *r)
{
    if (a.skip > 0) {
        if (r->type == REDIS_REPLY_ERROR && a.skip == 1 && a.cur_db != 0)
            log_warn("audit: Redis refused SELECT %d: %s", a.cur_db, r->str);
        a.skip--;
        freeReplyObject(r);
        return;
    }
    switch (a.phase) {
    case PH_INFO:
        a.phase = PH_NONE;
        on_info(r);
        break;
    case PH_READONLY:
        a.phase = PH_NONE;
        on_readonly(r);
        step();
        break;
    case PH_SCAN:
        a.phase = PH_NONE;
        if (a.in_pass)              /* else the pass was dropped meanwhile (a reload) */
            on_scan(r);             /* takes r */
        else
            freeReplyObject(r);
        r = NULL;
        step();
        break;
    case PH_KEYS:
        on_key_reply(r);
        if (a.done == a.owed) {
            a.phase = PH_NONE;
            on_keys_done();
            step();
        }
        break;
    case PH_NONE:
        break;
    }
    if (r != NULL)
        freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* The connection                                                           */

static void reader_reset(void)
{
    if (a.rd != NULL)
        redisReaderFree(a.rd);
    a.rd = redisReaderCreate();
}

static void c_ready(struct bconn *b)
{
    (void)b;
    reader_reset();
    a.phase = PH_NONE;
    a.skip = 1;
    a.cur_db = 0;
    a.readonly = 0;
    bconn_write_bytes(&a.c, NAME_REQ, sizeof NAME_REQ - 1);
    if (a.in_pass)
        log_info("audit: connected to %s: the pass goes on at db %d, cursor %s", a.c.t->name,
                 a.ndbs > 0 && a.dbi < a.ndbs ? a.dbs[a.dbi] : -1, a.cursor);
    rate_restart(now_ms_monotonic());
    step();
}

static void c_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    (void)b; (void)done; (void)type; (void)start;
    redisReaderFeed(a.rd, p, n);    /* an error shows in c_read_end */
}

static void c_read_end(struct bconn *b)
{
    void *r;
    while (a.on && a.c.state == BC_READY) {
        if (redisReaderGetReply(a.rd, &r) != REDIS_OK) {
            log_warn("audit: unreadable reply from %s: %s", b->t->name, a.rd->errstr);
            conn_drop(RETRY_MS);
            return;
        }
        if (r == NULL)
            return;
        on_reply(r);
    }
}

static void c_failed(struct bconn *b, const char *why, int was_ready)
{
    if (was_ready)
        log_warn("audit: connection to %s lost: %s", b->t->name, why);
    snprintf(a.problem, sizeof a.problem, "audit: no connection to %s: %s", b->t->name, why);
    a.refusal = 0;
    a.phase = PH_NONE;          /* a batch being read is asked again */
    a.skip = 0;
    a.retry_at = now_ms_monotonic() + RETRY_MS;
}

static void c_closed(struct bconn *b)
{
    (void)b;
    if (a.on && !a.stopping && a.retry_at == 0)
        conn_open();
}

static void c_written(struct bconn *b, int status)
{
    (void)b; (void)status;
}

static const struct bconn_ops audit_ops = {
    c_ready, c_reply, c_read_end, c_failed, c_closed, c_written,
};

/* ------------------------------------------------------------------------ */

static void on_timer_closed(uv_handle_t *h)
{
    free(h);
}

/* audit_from of cfg taken (a.from, a.from_t). Returns 1 when the servers
 * to read changed. */
static int from_apply(const struct config *cfg)
{
    int changed = cfg->audit_from != a.from;
    struct addr ad;
    char name[sizeof a.from_t.name], err[320];
    a.from = cfg->audit_from;
    if (a.from != AUDIT_FROM_ADDR || addr_parse(cfg->audit_from_addr, &ad, err, sizeof err) != 0)
        return changed;             /* (config_load() checked the address) */
    addr_format(&ad, name, sizeof name);
    if (!changed && strcmp(name, a.from_t.name) == 0)
        return 0;
    target_set(&a.from_t, a.ctx, &ad, 1);     /* at start and reload, as the backend */
    return 1;
}

/* The servers to read changed (the backend, audit_from): the pass starts
 * over, on a new connection. */
static void pass_restart(const char *why)
{
    log_info("audit: %s: the pass starts over", why);
    pass_drop();
    a.next_pass = now_ms_monotonic();
    if (a.c.state == BC_IDLE)
        conn_open();
    else
        conn_drop(0);
}

/* A reload while running: the new rules, rate, interval and audit_from. */
static void reapply(uint64_t now)
{
    const struct config *cfg = a.ctx->cfg;
    if (from_apply(cfg)) {
        pass_restart("audit_from changed");
        return;
    }
    if (a.in_pass && arep_rebind(&a.rep, &cfg->rules) != 0) {
        log_info("audit: the rules changed: the pass starts over");
        pass_drop();
        a.next_pass = now;
    } else if (a.in_pass) {
        a.next_pass = a.pass_start + (uint64_t)cfg->audit_interval * 1000;
        log_info("audit: reloaded: the pass goes on at db %d, cursor %s",
                 a.ndbs > 0 && a.dbi < a.ndbs ? a.dbs[a.dbi] : -1, a.cursor);
    } else if (a.passes > 0) {
        a.next_pass = a.pass_start + (uint64_t)cfg->audit_interval * 1000;
    }
    rate_restart(now);
    if (a.phase == PH_NONE)
        step();
}

void audit_bg_apply(struct loop_ctx *ctx)
{
    const struct config *cfg = ctx->cfg;
    a.ctx = ctx;
    if (cfg->audit_interval == 0) {
        audit_bg_stop();
        return;
    }
    if (a.on) {
        reapply(now_ms_monotonic());
        return;
    }
    if (a.c.state != BC_IDLE) {
        a.restart = 1;              /* audit_bg_cron() starts it once it is closed */
        return;
    }
    a.restart = 0;
    a.on = 1;
    a.stopping = 0;
    a.next_pass = now_ms_monotonic();
    from_apply(cfg);
    a.timer = xcalloc(1, sizeof *a.timer);
    uv_timer_init(ctx->loop, a.timer);
    bconn_init(&a.c, ctx, &audit_ops, &a);
    a.c.counts = 0;
    conn_open();
    log_info("audit: background audit every %u s at %u keys/s%s", cfg->audit_interval,
             cfg->audit_rate, cfg->audit_memory ? ", with MEMORY USAGE" : "");
}

void audit_bg_stop(void)
{
    a.restart = 0;
    if (!a.on)
        return;
    a.on = 0;
    a.stopping = 1;
    bconn_close(&a.c);
    uv_close((uv_handle_t *)a.timer, on_timer_closed);
    a.timer = NULL;
    pass_drop();
    if (a.rd != NULL)
        redisReaderFree(a.rd);
    a.rd = NULL;
    free(a.pttl);
    free(a.mem);
    a.pttl = a.mem = NULL;
    a.cap = 0;
    result_free(&a.last);
    a.phase = PH_NONE;
    a.hold_until = 0;
    a.paused[0] = '\0';
    problem_clear(0);
    target_cancel(&a.from_t);
    a.from = AUDIT_FROM_PRIMARY;
    a.from_t.name[0] = '\0';
}

/* REPLY_MAX_MS, or TTLG_AUDIT_REPLY_MAX_MS (100 ms or more): the tests' way
 * to see a server that does not answer without waiting a minute. */
static uint64_t reply_max_ms(void)
{
    const char *v = getenv("TTLG_AUDIT_REPLY_MAX_MS");
    char *end;
    unsigned long long ms = v != NULL ? strtoull(v, &end, 10) : 0;
    return v != NULL && *v && *end == '\0' && ms >= 100 ? ms : REPLY_MAX_MS;
}

void audit_bg_cron(uint64_t now)
{
    if (a.restart && a.c.state == BC_IDLE)
        audit_bg_apply(a.ctx);
    if (!a.on)
        return;
    bconn_cron(&a.c, now);
    if (a.c.state == BC_READY && a.phase != PH_NONE && now - a.sent_at >= reply_max_ms()) {
        snprintf(a.problem, sizeof a.problem, "audit: %s did not answer in %g s: reconnecting",
                 a.c.t->name, (double)reply_max_ms() / 1000);
        a.refusal = 0;
        log_warn("%s", a.problem);
        conn_drop(RETRY_MS);
    }
    if (a.c.state == BC_IDLE && a.retry_at != 0 && now >= a.retry_at)
        conn_open();
}

void audit_bg_backend_changed(void)
{
    if (a.on)
        pass_restart("the backend changed");
}

const char *audit_bg_problem(void)
{
    return a.on ? a.problem : "";
}

/* ------------------------------------------------------------------------ */
/* /metrics                                                                 */

static void family(struct sbuf *b, const char *name, const char *type, const char *help)
{
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{rule,state} of every rule of p: keys, or bytes. */
static void rule_samples(struct sbuf *b, const char *name, const struct pass_result *p,
                         int bytes)
{
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule_result *r = &p->r[i];
        for (int s = 0; s < ST__COUNT; s++) {
            if (s != ST_EXPIRING && s != r->no_ttl_state)
                continue;
            sbuf_printf(b, "%s{rule=\"", name);
            evbuf_prom_label(b, r->label);
            sbuf_printf(b, "\",state=\"%s\"} %llu\n", state_names[s],
                         (unsigned long long)(bytes ? r->bytes[s] : r->keys[s]));
        }
    }
}

/* Share of the pass under way done: servers done, and of the current one
 * the keys classified against INFO keyspace at its start. */
static double progress(void)
{
    if (!a.in_pass || a.nnodes == 0)
        return 0;
    double node = a.node_keys > 0 ? (double)(a.rep.seen - a.node_seen0) / (double)a.node_keys
                : 0;
    return ((double)a.nodei + (node > 1 ? 1 : node)) / a.nnodes;
}

/* What the audit is doing now: paused, connected, counters, progress. */
static void metrics_state(struct sbuf *b)
{
    static const char *const reasons[] = { "loading", "failover", "sync", "memory" };
    family(b, "ttlguard_audit_paused", "gauge", "1 while the background audit waits: Redis "
           "loading, a failover, a replica syncing, used_memory near maxmemory.");
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        sbuf_printf(b, "ttlguard_audit_paused{reason=\"%s\"} %d\n", reasons[i],
                     strcmp(a.paused, reasons[i]) == 0);
    family(b, "ttlguard_audit_connected", "gauge",
           "1 while the background audit has its backend connection.");
    sbuf_printf(b, "ttlguard_audit_connected %d\n", a.c.state == BC_READY);
    family(b, "ttlguard_audit_keys_read_total", "counter",
           "Keys the background audit classified, all passes.");
    sbuf_printf(b, "ttlguard_audit_keys_read_total %llu\n", (unsigned long long)a.keys_read);
    family(b, "ttlguard_audit_passes_total", "counter", "Background audit passes finished.");
    sbuf_printf(b, "ttlguard_audit_passes_total %llu\n", (unsigned long long)a.passes);
    family(b, "ttlguard_audit_interval_seconds", "gauge", "audit_interval: seconds between "
           "the starts of two passes (the alert on a stale last pass compares with it).");
    sbuf_printf(b, "ttlguard_audit_interval_seconds %u\n", a.ctx->cfg->audit_interval);
    family(b, "ttlguard_audit_pass_progress_ratio", "gauge", "Share of the keyspace (INFO "
           "keyspace at its start) the pass under way has classified; 0 between passes.");
    sbuf_printf(b, "ttlguard_audit_pass_progress_ratio %.4f\n", progress());
}

/* The leaked patterns of the last pass: folded key names, so only where
 * the log may show keys. */
static void metrics_patterns(struct sbuf *b, const struct pass_result *p)
{
    if (a.ctx->cfg->log_keys != LOG_KEYS_FULL || p->ntop == 0)
        return;
    family(b, "ttlguard_audit_leaked_pattern_keys", "gauge", "Leaked keys of the largest "
           "key patterns (keys folded as ttlguard audit folds them) in the last full pass.");
    for (int i = 0; i < p->ntop; i++) {
        evbuf_adds(b, "ttlguard_audit_leaked_pattern_keys{rule=\"");
        evbuf_prom_label(b, p->top[i].rule);
        evbuf_adds(b, "\",pattern=\"");
        evbuf_prom_label(b, p->top[i].text);
        sbuf_printf(b, "\"} %llu\n", (unsigned long long)p->top[i].keys);
    }
}

/* When the last pass ended, how long it took, how many keys it read. */
static void metrics_when(struct sbuf *b, const struct pass_result *p)
{
    family(b, "ttlguard_audit_last_pass_end_timestamp_seconds", "gauge",
           "When the last full background audit pass finished (Unix time).");
    sbuf_printf(b, "ttlguard_audit_last_pass_end_timestamp_seconds %.3f\n",
                 (double)p->end_wall_ms / 1000);
    family(b, "ttlguard_audit_last_pass_duration_seconds", "gauge",
           "How long the last full background audit pass took.");
    sbuf_printf(b, "ttlguard_audit_last_pass_duration_seconds %.3f\n",
                 (double)p->duration_ms / 1000);
    family(b, "ttlguard_audit_last_pass_keys", "gauge",
           "Keys the last full background audit pass classified.");
    sbuf_printf(b, "ttlguard_audit_last_pass_keys %llu\n", (unsigned long long)p->keys);
}

void audit_bg_metrics(struct sbuf *b)
{
    if (!a.on)
        return;
    const struct pass_result *p = &a.last;
    metrics_state(b);
    if (!p->valid)
        return;
    family(b, "ttlguard_audit_keys", "gauge", "Keys under each rule by state (leaked: a rule "
           "wants a TTL, the key has none; expiring: has a TTL; registered: durable, no TTL; "
           "unregistered: default allow, no TTL), as the last full background audit pass "
           "counted them.");
    rule_samples(b, "ttlguard_audit_keys", p, 0);
    if (p->with_memory) {
        family(b, "ttlguard_audit_bytes", "gauge", "MEMORY USAGE of those keys summed "
               "(audit_memory = on), as the last full pass counted them.");
        rule_samples(b, "ttlguard_audit_bytes", p, 1);
    }
    metrics_patterns(b, p);
    metrics_when(b, p);
}
