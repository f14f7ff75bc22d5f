/*
 * audit_bg: the background audit on the proxy's loop (see audit_bg.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "admin.h"
#include "audit_bg.h"
#include "audit_report.h"
#include "backend.h"
#include "events.h"
#include "rules.h"
#include "server.h"
#include "util.h"

#define RETRY_MS        1000
#define CHECK_MS        1000            /* INFO again during a pass, and while paused */
#define MEMORY_NEAR     0.90            /* of maxmemory: pause above it */
#define COUNT_MIN       10              /* SCAN COUNT: audit_rate / 100 within these, so a */
#define COUNT_MAX       100             /* batch (2 commands a key) is a short burst for Redis
                                           (bench/audit_bg.sh: at 250 a key, p99 of other
                                           clients' GETs went from 0.17 to 0.27 ms) */
#define MAX_DBS         1024
#define TOP_PATTERNS    10              /* leaked patterns kept per pass (log_keys = full) */
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
enum phase { PH_NONE, PH_INFO, PH_SCAN, PH_KEYS };

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

static struct abg {
    struct server *srv;
    int on, stopping, restart;
    struct bconn c;
    uint64_t retry_at;                  /* monotonic ms; 0: not waiting */
    redisReader *rd;
    uv_timer_t *timer;                  /* pacing, the next pass, pauses; freed on close */

    enum phase phase;
    int skip;                           /* replies to read past before the phase's */
    size_t owed, done;                  /* PH_KEYS: replies expected and read */
    int cur_db;                         /* SELECTed on the connection; -1 unknown */

    /* The pass under way. */
    int in_pass;
    struct arep rep;
    int dbs[MAX_DBS], ndbs, dbi;
    long long info_keys;                /* INFO keyspace keys= summed at the start */
    char cursor[24];
    redisReply *batch;                  /* the SCAN reply whose keys are not classified yet */
    int batch_dbi;                      /* ...from dbs[batch_dbi] */
    long long *pttl, *mem;
    unsigned char *type;
    size_t cap;
    uint64_t leaked_db[MAX_DBS];        /* leaked keys per database (dbs[] order) */
    uint64_t fixable_db[MAX_DBS];       /* ...whose rule has a ttl to give */
    uint64_t pass_start;                /* monotonic ms */
    uint64_t next_pass;                 /* monotonic ms the next pass may start */
    uint64_t rate_t0, paid;             /* audit_rate: keys charged since rate_t0 */
    uint64_t checked_at;                /* monotonic ms of the last INFO */

    char paused[16];                    /* "" running, else loading|failover|sync|memory */
    uint64_t paused_at;                 /* monotonic ms */
    char problem[256];

    uint64_t passes, keys_read;
    struct pass_result last;
} a;

static void step(void);

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

/* The largest leaked patterns of rep, into p->top. */
static void top_patterns(const struct arep *rep, struct pass_result *p)
{
    const struct arep_patterns *ps = &rep->patterns[0];
    const struct arep_pattern *best[TOP_PATTERNS];
    int n = 0;
    for (size_t i = 0; i < ps->cap; i++) {
        const struct arep_pattern *x = &ps->v[i];
        if (x->text == NULL)
            continue;
        int j = n < TOP_PATTERNS ? n++ : TOP_PATTERNS - 1;
        if (j == TOP_PATTERNS - 1 && n == TOP_PATTERNS && best[j] != NULL && best[j]->keys >= x->keys)
            continue;
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

static void member_change(struct evbuf *b, const char *name, uint64_t now, int known,
                          uint64_t before)
{
    evbuf_printf(b, ",\"%s\":", name);
    if (known)
        evbuf_printf(b, "%lld", (long long)now - (long long)before);
    else
        evbuf_adds(b, "null");
}

/* `ttlguard audit --fix --yes` for each database with leaked keys a rule
 * can give a TTL to: the command the event names. */
static void fix_commands(struct evbuf *b, uint64_t no_ttl_to_give)
{
    const struct config *cfg = a.srv->cfg;
    int any = 0;
    evbuf_adds(b, ",\"fix\":[");
    for (int i = 0; i < a.ndbs; i++) {
        if (a.fixable_db[i] == 0)
            continue;
        struct evbuf cmd = { 0 };
        char *path = cfg->path ? realpath(cfg->path, NULL) : NULL;
        evbuf_printf(&cmd, "ttlguard audit --config %s", path ? path : cfg->path ? cfg->path
                     : "FILE");
        free(path);
        if (a.srv->backend_override)
            evbuf_printf(&cmd, " --backend %s", a.srv->backend.name);
        if (a.dbs[i] != 0)
            evbuf_printf(&cmd, " --db %d", a.dbs[i]);
        evbuf_adds(&cmd, " --fix --yes");
        if (any++)
            evbuf_add(b, ",", 1);
        evbuf_json_str(b, cmd.p, cmd.len);
        free(cmd.p);
    }
    evbuf_adds(b, "]");
    if (no_ttl_to_give > 0)
        evbuf_printf(b, ",\"leaked_without_rule_ttl\":%llu", (unsigned long long)no_ttl_to_give);
}

/* The audit_pass event of p, compared with prev. */
static void event_pass(const struct pass_result *p, const struct pass_result *prev)
{
    struct evbuf b = { 0 };
    uint64_t fixable = 0, leaked_db = 0;
    for (int i = 0; i < a.ndbs; i++) {
        fixable += a.fixable_db[i];
        leaked_db += a.leaked_db[i];
    }
    evbuf_printf(&b, "\"keys\":%llu,\"duration_ms\":%llu,\"rate\":%u,\"dbs\":[",
                 (unsigned long long)p->keys, (unsigned long long)p->duration_ms,
                 a.srv->cfg->audit_rate);
    for (int i = 0; i < a.ndbs; i++)
        evbuf_printf(&b, "%s{\"db\":%d,\"leaked\":%llu}", i ? "," : "", a.dbs[i],
                     (unsigned long long)a.leaked_db[i]);
    evbuf_adds(&b, "]");
    for (int s = 0; s < ST__COUNT; s++) {
        char name[32];
        evbuf_printf(&b, ",\"%s\":%llu", state_names[s], (unsigned long long)p->totals[s]);
        snprintf(name, sizeof name, "%s_change", state_names[s]);
        member_change(&b, name, p->totals[s], prev->valid, prev->totals[s]);
    }
    evbuf_printf(&b, ",\"expired_during\":%llu", (unsigned long long)p->expired_during);
    evbuf_adds(&b, ",\"rules\":[");
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule_result *r = &p->r[i], *was = previous(prev, r->label);
        evbuf_adds(&b, i ? ",{\"rule\":" : "{\"rule\":");
        evbuf_json_str(&b, r->label, strlen(r->label));
        evbuf_adds(&b, ",\"prefix\":");
        evbuf_json_str(&b, r->prefix, r->prefix_len);
        for (int s = 0; s < ST__COUNT; s++) {
            if (s != ST_EXPIRING && s != r->no_ttl_state)
                continue;
            char name[32];
            evbuf_printf(&b, ",\"%s\":%llu", state_names[s], (unsigned long long)r->keys[s]);
            snprintf(name, sizeof name, "%s_change", state_names[s]);
            member_change(&b, name, r->keys[s], was != NULL, was ? was->keys[s] : 0);
            if (p->with_memory)
                evbuf_printf(&b, ",\"%s_bytes\":%llu", state_names[s],
                             (unsigned long long)r->bytes[s]);
        }
        evbuf_adds(&b, "}");
    }
    evbuf_adds(&b, "]");
    /* Patterns are folded key names: only where the log may show keys. */
    if (a.srv->cfg->log_keys == LOG_KEYS_FULL && p->ntop > 0) {
        evbuf_adds(&b, ",\"leaked_patterns\":[");
        for (int i = 0; i < p->ntop && i < 5; i++) {
            evbuf_adds(&b, i ? ",{\"pattern\":" : "{\"pattern\":");
            evbuf_json_str(&b, p->top[i].text, strlen(p->top[i].text));
            evbuf_adds(&b, ",\"rule\":");
            evbuf_json_str(&b, p->top[i].rule, strlen(p->top[i].rule));
            evbuf_printf(&b, ",\"keys\":%llu}", (unsigned long long)p->top[i].keys);
        }
        evbuf_adds(&b, "]");
    }
    if (p->totals[ST_LEAKED] > 0) {
        fix_commands(&b, leaked_db - fixable);
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

static void pass_begin(uint64_t now)
{
    const struct config *cfg = a.srv->cfg;
    arep_init(&a.rep, &cfg->rules);
    a.rep.with_memory = cfg->audit_memory;
    a.in_pass = 1;
    a.dbi = 0;
    snprintf(a.cursor, sizeof a.cursor, "0");
    memset(a.leaked_db, 0, sizeof a.leaked_db);
    memset(a.fixable_db, 0, sizeof a.fixable_db);
    a.pass_start = now;
    a.next_pass = now + (uint64_t)cfg->audit_interval * 1000;
    rate_restart(now);
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

/* The keys of the batch, classified. */
static void classify(void)
{
    const struct config *cfg = a.srv->cfg;
    const redisReply *keys = a.batch->element[1];
    uint64_t before = a.rep.seen;
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        const struct rule *r;
        int g = arep_classify(&a.rep, &cfg->rules, k->str, k->len, a.pttl[i],
                              (enum arep_ktype)a.type[i], cfg->audit_memory ? a.mem[i] : -1, &r);
        if (g != AREP_LEAKED)
            continue;
        a.leaked_db[a.batch_dbi]++;
        if (r->ttl > 0)
            a.fixable_db[a.batch_dbi]++;
    }
    a.keys_read += a.rep.seen - before;
    batch_drop();
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */

static void send_cmd(int argc, const char *const *argv, const size_t *lens)
{
    struct sbuf b = { 0 };
    char num[32];
    sbuf_add(&b, num, (size_t)snprintf(num, sizeof num, "*%d\r\n", argc));
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
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
    send_cmd(2, argv, NULL);
    a.skip++;
    a.cur_db = db;
}

static void send_scan(void)
{
    unsigned rate = a.srv->cfg->audit_rate;
    unsigned count = rate / 100 < COUNT_MIN ? COUNT_MIN : rate / 100 > COUNT_MAX ? COUNT_MAX
                   : rate / 100;
    char num[24];
    snprintf(num, sizeof num, "%u", count);
    const char *const argv[] = { "SCAN", a.cursor, "COUNT", num };
    select_db(a.dbs[a.dbi]);
    send_cmd(4, argv, NULL);
    a.phase = PH_SCAN;
}

static void send_keys(void)
{
    const redisReply *keys = a.batch->element[1];
    int per = a.srv->cfg->audit_memory ? 2 : 1;
    struct sbuf b = { 0 };
    char num[32];
    select_db(a.dbs[a.batch_dbi]);
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        for (int c = 0; c < per; c++) {
            static const char *const cmd[] = { "*2\r\n$4\r\nPTTL\r\n",
                                               "*3\r\n$6\r\nMEMORY\r\n$5\r\nUSAGE\r\n" };
            sbuf_add(&b, cmd[c], strlen(cmd[c]));
            sbuf_add(&b, num, (size_t)snprintf(num, sizeof num, "$%zu\r\n", k->len));
            sbuf_add(&b, k->str, k->len);
            sbuf_add(&b, "\r\n", 2);
        }
        a.pttl[i] = -2;
        a.mem[i] = -1;
        a.type[i] = KTYPE_OTHER;    /* TYPE is not asked: the gauges do not need it */
    }
    bconn_write_bytes(&a.c, b.p, b.len);
    free(b.p);
    a.owed = keys->elements * (size_t)per;
    a.done = 0;
    a.phase = PH_KEYS;
}

static void send_info(void)
{
    const char *const argv[] = { "INFO" };
    send_cmd(1, argv, NULL);
    a.phase = PH_INFO;
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

/* What to do next, when nothing is in flight. */
static void step(void)
{
    if (!a.on || a.c.state != BC_READY || a.phase != PH_NONE)
        return;
    uint64_t now = now_ms_monotonic();
    if (!a.in_pass) {
        if (now < a.next_pass) {
            wait_ms(a.next_pass - now);
            return;
        }
        send_info();            /* the databases to walk; pass_begin() after it */
        return;
    }
    if (a.paused[0] || now - a.checked_at >= CHECK_MS) {
        send_info();
        return;
    }
    if (a.batch != NULL) {
        uint64_t due = a.rate_t0 + a.paid * 1000 / a.srv->cfg->audit_rate;
        if (due > now) {
            wait_ms(due - now);
            return;
        }
        send_keys();
        return;
    }
    if (a.dbi >= a.ndbs) {
        pass_end(now);
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

/* INFO keyspace: the databases that have keys, in order. */
static void keyspace(const char *info)
{
    a.ndbs = 0;
    a.info_keys = 0;
    for (const char *p = info; p != NULL && *p; ) {
        int db;
        long long keys;
        if (strncmp(p, "db", 2) == 0 && sscanf(p, "db%d:keys=%lld", &db, &keys) == 2 &&
            keys > 0 && a.ndbs < MAX_DBS) {
            a.dbs[a.ndbs++] = db;
            a.info_keys += keys;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
}

/* audit_paused (resumed 0) or audit_resumed, with where the pass is. */
static void event_pause(int resumed, const char *reason, const char *detail)
{
    struct evbuf b = { 0 };
    evbuf_adds(&b, "\"reason\":");
    evbuf_json_str(&b, reason, strlen(reason));
    if (resumed)
        evbuf_printf(&b, ",\"paused_ms\":%llu",
                     (unsigned long long)(now_ms_monotonic() - a.paused_at));
    evbuf_adds(&b, ",\"message\":");
    evbuf_json_str(&b, detail, strlen(detail));
    if (a.in_pass)
        evbuf_printf(&b, ",\"db\":%d,\"cursor\":\"%s\",\"keys_so_far\":%llu",
                     a.dbi < a.ndbs ? a.dbs[a.dbi] : -1, a.cursor,
                     (unsigned long long)a.rep.seen);
    events_members(resumed ? EVN_AUDIT_RESUMED : EVN_AUDIT_PAUSED, b.p, b.len);
    free(b.p);
}

static void on_info(const redisReply *r)
{
    uint64_t now = now_ms_monotonic();
    a.checked_at = now;
    if (r->type != REDIS_REPLY_STRING) {
        snprintf(a.problem, sizeof a.problem, "audit: INFO refused: %.200s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        log_warn("%s", a.problem);
        wait_ms(RETRY_MS * 10);
        return;
    }
    char detail[200];
    const char *why = pause_reason(r->str, detail, sizeof detail);
    if (why != NULL) {
        if (strcmp(a.paused, why) != 0) {
            if (!a.paused[0])
                a.paused_at = now;
            snprintf(a.paused, sizeof a.paused, "%s", why);
            log_warn("audit: paused: %s", detail);
            event_pause(0, why, detail);
        }
        wait_ms(CHECK_MS);
        return;
    }
    if (a.paused[0]) {
        log_info("audit: resumed after %llu ms (%s)", (unsigned long long)(now - a.paused_at),
                 a.paused);
        event_pause(1, a.paused, "the walk goes on where it paused");
        a.paused[0] = '\0';
        rate_restart(now);
    }
    a.problem[0] = '\0';
    if (!a.in_pass) {
        keyspace(r->str);
        pass_begin(now);
    }
    step();
}

/* A reply the walk cannot use: say so, and ask again from the same cursor
 * on a new connection a second later. Takes r. */
static void bad_reply(const char *what, redisReply *r)
{
    snprintf(a.problem, sizeof a.problem, "audit: %s: %.200s", what,
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    log_warn("%s", a.problem);
    freeReplyObject(r);
    a.retry_at = now_ms_monotonic() + RETRY_MS * 10;
    bconn_close(&a.c);
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

static void on_scan(redisReply *r)
{
    if (!scan_reply_ok(r)) {
        bad_reply("SCAN refused", r);
        return;
    }
    const redisReply *keys = r->element[1];
    memcpy(a.cursor, r->element[0]->str, r->element[0]->len + 1);
    if (keys->elements == 0) {
        freeReplyObject(r);
    } else {
        if (keys->elements > a.cap) {
            a.cap = keys->elements;
            a.pttl = xrealloc(a.pttl, a.cap * sizeof *a.pttl);
            a.mem = xrealloc(a.mem, a.cap * sizeof *a.mem);
            a.type = xrealloc(a.type, a.cap * sizeof *a.type);
        }
        a.batch = r;
        a.batch_dbi = a.dbi;
        a.paid += keys->elements;
    }
    if (strcmp(a.cursor, "0") == 0) {
        a.dbi++;                    /* this database is walked once its batch is read */
        snprintf(a.cursor, sizeof a.cursor, "0");
    }
}

static void on_key_reply(const redisReply *r)
{
    int per = a.srv->cfg->audit_memory ? 2 : 1;
    size_t k = a.done / (size_t)per;
    int cmd = (int)(a.done % (size_t)per);
    if (cmd == 0 && r->type == REDIS_REPLY_INTEGER)
        a.pttl[k] = r->integer;     /* -2: gone since SCAN, counted as expired_during */
    else if (cmd == 1 && r->type == REDIS_REPLY_INTEGER)
        a.mem[k] = r->integer;
    a.done++;
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
    enum phase ph = a.phase;
    switch (ph) {
    case PH_INFO:
        a.phase = PH_NONE;
        on_info(r);
        break;
    case PH_SCAN:
        a.phase = PH_NONE;
        if (a.in_pass) {            /* else the pass was dropped meanwhile (a reload) */
            on_scan(r);             /* keeps r as the batch */
            r = NULL;
        }
        step();
        break;
    case PH_KEYS:
        on_key_reply(r);
        if (a.done == a.owed) {
            a.phase = PH_NONE;
            if (a.in_pass && a.batch != NULL)
                classify();
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
    bconn_write_bytes(&a.c, NAME_REQ, sizeof NAME_REQ - 1);
    if (a.in_pass)
        log_info("audit: connected: the pass goes on at db %d, cursor %s",
                 a.dbi < a.ndbs ? a.dbs[a.dbi] : -1, a.cursor);
    rate_restart(now_ms_monotonic());
    step();
}

static void c_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    (void)b; (void)done; (void)type; (void)start;
    if (redisReaderFeed(a.rd, p, n) != REDIS_OK)
        return;
}

static void c_read_end(struct bconn *b)
{
    void *r;
    while (a.on && a.c.state == BC_READY) {
        if (redisReaderGetReply(a.rd, &r) != REDIS_OK) {
            log_warn("audit: unreadable reply: %s", a.rd->errstr);
            bconn_close(b);
            return;
        }
        if (r == NULL)
            return;
        on_reply(r);
    }
}

static void c_failed(struct bconn *b, const char *why, int was_ready)
{
    (void)b;
    if (was_ready)
        log_warn("audit: connection lost: %s", why);
    snprintf(a.problem, sizeof a.problem, "audit: no connection to the backend: %s", why);
    a.phase = PH_NONE;          /* a batch being read is asked again */
    a.skip = 0;
    a.retry_at = now_ms_monotonic() + RETRY_MS;
}

static void c_closed(struct bconn *b)
{
    if (!a.on || a.stopping)
        return;
    if (a.retry_at == 0)
        bconn_connect(b, 1);
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

void audit_bg_apply(struct server *srv)
{
    const struct config *cfg = srv->cfg;
    a.srv = srv;
    if (cfg->audit_interval == 0) {
        audit_bg_stop();
        return;
    }
    uint64_t now = now_ms_monotonic();
    if (a.on) {
        if (a.in_pass && arep_rebind(&a.rep, &cfg->rules) != 0) {
            log_info("audit: the rules changed: the pass starts over");
            pass_drop();
            a.next_pass = now;
        } else if (a.in_pass) {
            a.next_pass = a.pass_start + (uint64_t)cfg->audit_interval * 1000;
            log_info("audit: reloaded: the pass goes on at db %d, cursor %s",
                     a.dbi < a.ndbs ? a.dbs[a.dbi] : -1, a.cursor);
        } else if (a.passes > 0) {
            a.next_pass = a.pass_start + (uint64_t)cfg->audit_interval * 1000;
        }
        rate_restart(now);
        if (a.phase == PH_NONE)
            step();
        return;
    }
    if (a.c.state != BC_IDLE) {
        a.restart = 1;              /* audit_bg_cron() starts it once it is closed */
        return;
    }
    a.restart = 0;
    a.on = 1;
    a.stopping = 0;
    a.retry_at = 0;
    a.next_pass = now;
    a.timer = xcalloc(1, sizeof *a.timer);
    uv_timer_init(srv->loop, a.timer);
    bconn_init(&a.c, srv, &audit_ops, &a);
    a.c.counts = 0;
    bconn_connect(&a.c, 1);
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
    a.phase = PH_NONE;
    a.paused[0] = '\0';
    a.problem[0] = '\0';
}

void audit_bg_cron(uint64_t now)
{
    if (a.restart && a.c.state == BC_IDLE)
        audit_bg_apply(a.srv);
    if (!a.on)
        return;
    bconn_cron(&a.c, now);
    if (a.c.state == BC_IDLE && a.retry_at != 0 && now >= a.retry_at) {
        a.retry_at = 0;
        bconn_connect(&a.c, 1);
    }
}

void audit_bg_backend_changed(void)
{
    if (!a.on)
        return;
    log_info("audit: the backend changed: the pass starts over");
    pass_drop();
    a.next_pass = now_ms_monotonic();
    a.retry_at = 0;
    if (a.c.state == BC_IDLE)
        bconn_connect(&a.c, 1);
    else
        bconn_close(&a.c);
}

/* ------------------------------------------------------------------------ */
/* /metrics                                                                 */

static void family(struct evbuf *b, const char *name, const char *type, const char *help)
{
    evbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void rule_sample(struct evbuf *b, const char *name, const char *rule, const char *state,
                        uint64_t v)
{
    evbuf_printf(b, "%s{rule=\"", name);
    admin_label_value(b, rule);
    evbuf_printf(b, "\",state=\"%s\"} %llu\n", state, (unsigned long long)v);
}

void audit_bg_metrics(struct evbuf *b)
{
    if (!a.on)
        return;
    const struct pass_result *p = &a.last;
    static const char *const reasons[] = { "loading", "failover", "sync", "memory" };
    family(b, "ttlguard_audit_paused", "gauge", "1 while the background audit waits: Redis "
           "loading, a failover, a replica syncing, used_memory near maxmemory.");
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        evbuf_printf(b, "ttlguard_audit_paused{reason=\"%s\"} %d\n", reasons[i],
                     strcmp(a.paused, reasons[i]) == 0);
    family(b, "ttlguard_audit_connected", "gauge",
           "1 while the background audit has its backend connection.");
    evbuf_printf(b, "ttlguard_audit_connected %d\n", a.c.state == BC_READY);
    family(b, "ttlguard_audit_keys_read_total", "counter",
           "Keys the background audit classified, all passes.");
    evbuf_printf(b, "ttlguard_audit_keys_read_total %llu\n", (unsigned long long)a.keys_read);
    family(b, "ttlguard_audit_passes_total", "counter", "Background audit passes finished.");
    evbuf_printf(b, "ttlguard_audit_passes_total %llu\n", (unsigned long long)a.passes);
    family(b, "ttlguard_audit_pass_progress_ratio", "gauge", "Share of the keyspace (INFO "
           "keyspace at its start) the pass under way has classified; 0 between passes.");
    double f = a.in_pass && a.info_keys > 0 ? (double)a.rep.seen / (double)a.info_keys : 0;
    evbuf_printf(b, "ttlguard_audit_pass_progress_ratio %.4f\n", f > 1 ? 1.0 : f);
    if (!p->valid)
        return;
    family(b, "ttlguard_audit_keys", "gauge", "Keys under each rule by state (leaked: a rule "
           "wants a TTL, the key has none; expiring: has a TTL; registered: durable, no TTL; "
           "unregistered: default allow, no TTL), as the last full background audit pass "
           "counted them.");
    for (size_t i = 0; i < p->nrules; i++)
        for (int s = 0; s < ST__COUNT; s++)
            if (s == ST_EXPIRING || s == p->r[i].no_ttl_state)
                rule_sample(b, "ttlguard_audit_keys", p->r[i].label, state_names[s],
                            p->r[i].keys[s]);
    if (p->with_memory) {
        family(b, "ttlguard_audit_bytes", "gauge", "MEMORY USAGE of those keys summed "
               "(audit_memory = on), as the last full pass counted them.");
        for (size_t i = 0; i < p->nrules; i++)
            for (int s = 0; s < ST__COUNT; s++)
                if (s == ST_EXPIRING || s == p->r[i].no_ttl_state)
                    rule_sample(b, "ttlguard_audit_bytes", p->r[i].label, state_names[s],
                                p->r[i].bytes[s]);
    }
    if (a.srv->cfg->log_keys == LOG_KEYS_FULL && p->ntop > 0) {
        family(b, "ttlguard_audit_leaked_pattern_keys", "gauge", "Leaked keys of the largest "
               "key patterns (keys folded as ttlguard audit folds them) in the last full pass.");
        for (int i = 0; i < p->ntop; i++) {
            evbuf_adds(b, "ttlguard_audit_leaked_pattern_keys{rule=\"");
            admin_label_value(b, p->top[i].rule);
            evbuf_adds(b, "\",pattern=\"");
            admin_label_value(b, p->top[i].text);
            evbuf_printf(b, "\"} %llu\n", (unsigned long long)p->top[i].keys);
        }
    }
    family(b, "ttlguard_audit_last_pass_end_timestamp_seconds", "gauge",
           "When the last full background audit pass finished (Unix time).");
    evbuf_printf(b, "ttlguard_audit_last_pass_end_timestamp_seconds %.3f\n",
                 (double)p->end_wall_ms / 1000);
    family(b, "ttlguard_audit_last_pass_duration_seconds", "gauge",
           "How long the last full background audit pass took.");
    evbuf_printf(b, "ttlguard_audit_last_pass_duration_seconds %.3f\n",
                 (double)p->duration_ms / 1000);
    family(b, "ttlguard_audit_last_pass_keys", "gauge",
           "Keys the last full background audit pass classified.");
    evbuf_printf(b, "ttlguard_audit_last_pass_keys %llu\n", (unsigned long long)p->keys);
}
