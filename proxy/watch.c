/*
 * watch: keyspace notifications -> a TTL check of each key written (see watch.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "events.h"
#include "loop.h"
#include "rules.h"
#include "util.h"
#include "watch.h"

#define WATCH_OWED_MAX  100000          /* checks in flight, at most */
#define WATCH_PAUSE_AT  20000           /* stop reading notifications (Redis buffers */
#define WATCH_RESUME_AT 5000            /* them, up to its pubsub output limit) ... */
#define RETRY_MS        1000
#define FLAGS_MS        10000           /* notify-keyspace-events read again */
#define NEEDED_FLAGS    "g$lshztd"      /* besides K: every class of write */
#define SUB_KEEP        (64 * 1024)     /* a longer notification is skipped */
#define CHANNEL         "__keyspace@"
#define NAME_REQ        "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$14\r\nttlguard-watch\r\n"

enum owed_kind { OW_REPLY, OW_SELECT, OW_FLAGS_GET, OW_FLAGS_SET, OW_PTTL, OW_EXPIRE };

/* A reply the command connection owes, in order. */
struct owed {
    unsigned char kind;         /* enum owed_kind */
    int db;
    uint64_t t0;                /* loop_now_ns when the notification was read */
    char *key;                  /* OW_PTTL, OW_EXPIRE: owned */
    size_t klen;
    char ev[24];                /* the notification's event, upper case */
};

/* Events after which a key cannot lack a TTL it had: it is gone, got one, or
 * only lost elements. Everything else is checked. */
static const char *const harmless[] = {
    "del", "expired", "evicted", "expire", "rename_from", "move_from", "lpop", "rpop", "lrem",
    "ltrim", "srem", "spop", "hdel", "zrem", "zrembyscore", "zrembyrank", "zrembylex",
    "zpopmin", "zpopmax", "xdel", "xtrim", "hexpired", "hexpire", "hpersist", NULL,
};

static struct watch {
    struct loop_ctx *ctx;
    int on, stopping;
    int restart;                /* watch = on again while the connections still close */
    struct bconn sub, cmd;
    uint64_t sub_retry, cmd_retry, flags_at;   /* monotonic ms; 0: not waiting */

    char **pat;                 /* the patterns asked for on this connection */
    int npat, confirmed;        /* and the confirmations seen */
    uint64_t lost_at;           /* monotonic ms the subscription was lost; 0: it is not */
    uint64_t missed_mark;       /* st.missed when the last warning was given */
    char *buf;                  /* the notification being read */
    size_t len;

    struct ring q;              /* struct owed: the replies owed on cmd */
    int cur_db;                 /* SELECTed on cmd */
    struct sbuf out;            /* requests for cmd, written after each read of sub */

    char problem[320];
    struct watch_stats st;
} w;

/* ------------------------------------------------------------------------ */
/* Patterns                                                                  */

static void free_patterns(void)
{
    for (int i = 0; i < w.npat; i++)
        free(w.pat[i]);
    free(w.pat);
    w.pat = NULL;
    w.npat = 0;
}

/* __keyspace@*__:PREFIX* with PREFIX's glob characters escaped. */
static char *pattern_for(const struct rule *r, size_t *len)
{
    struct sbuf b = { 0 };
    sbuf_add(&b, CHANNEL "*__:", sizeof CHANNEL + 3);
    for (size_t i = 0; i < r->prefix_len; i++) {
        char c = r->prefix[i];
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
            sbuf_add(&b, "\\", 1);
        sbuf_add(&b, &c, 1);
    }
    sbuf_add(&b, "*", 1);
    *len = b.len;
    sbuf_add(&b, "", 1);
    return b.p;
}

static int watched(const struct rule *r)
{
    return r->kind != RULE_DURABLE && r->action != ACTION_ALLOW;
}

/* PSUBSCRIBE for the rules of the running config, into b; w.pat gets them. */
static void build_psubscribe(struct sbuf *b)
{
    const struct ruleset *rs = &w.ctx->cfg->rules;
    size_t lens[1024];
    free_patterns();
    w.pat = xcalloc(rs->n + 1, sizeof *w.pat);
    if (watched(&rs->dflt)) {
        w.pat[0] = xstrdup(CHANNEL "*__:*");
        lens[0] = strlen(w.pat[0]);
        w.npat = 1;
    } else {
        for (size_t i = 0; i < rs->n && w.npat < 1024; i++)
            if (watched(&rs->v[i])) {
                w.pat[w.npat] = pattern_for(&rs->v[i], &lens[w.npat]);
                w.npat++;
            }
    }
    if (w.npat == 0)
        return;
    char hdr[32];
    sbuf_add(b, hdr, (size_t)snprintf(hdr, sizeof hdr, "*%d\r\n$10\r\nPSUBSCRIBE\r\n",
                                      w.npat + 1));
    for (int i = 0; i < w.npat; i++) {
        sbuf_add(b, hdr, (size_t)snprintf(hdr, sizeof hdr, "$%zu\r\n", lens[i]));
        sbuf_add(b, w.pat[i], lens[i]);
        sbuf_add(b, "\r\n", 2);
    }
}

/* ------------------------------------------------------------------------ */
/* The command connection                                                    */

static struct owed *owed_head(void)
{
    return ring_at(&w.q, sizeof(struct owed), 0);
}

static struct owed *owe(enum owed_kind kind)
{
    struct owed *o = ring_push(&w.q, sizeof *o, 256);
    memset(o, 0, sizeof *o);
    o->kind = (unsigned char)kind;
    return o;
}

static void drop_owed(void)
{
    for (; w.q.len > 0; ring_pop(&w.q))
        free(owed_head()->key);
}

static void sb_cmd(struct sbuf *b, int argc, const char *const *argv, const size_t *lens)
{
    char num[32];
    sbuf_add(b, num, (size_t)snprintf(num, sizeof num, "*%d\r\n", argc));
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        sbuf_add(b, num, (size_t)snprintf(num, sizeof num, "$%zu\r\n", n));
        sbuf_add(b, argv[i], n);
        sbuf_add(b, "\r\n", 2);
    }
}

static void flush_out(void)
{
    if (w.out.len == 0)
        return;
    if (w.cmd.state == BC_READY)
        bconn_write_bytes(&w.cmd, w.out.p, w.out.len);
    w.out.len = 0;
}

static void ask_flags(void)
{
    static const char *const get[] = { "CONFIG", "GET", "notify-keyspace-events" };
    sb_cmd(&w.out, 3, get, NULL);
    owe(OW_FLAGS_GET);
    flush_out();
}

static void gap_maybe_ended(void);

/* The reply to CONFIG GET notify-keyspace-events: "*2 $22 name $N flags". */
static void flags_seen(const char *p, size_t n, char type)
{
    const struct config *cfg = w.ctx->cfg;
    char have[64] = "", missing[16] = "";
    const char *v = type == '*' ? memmem(p, n, "events\r\n$", 9) : NULL;
    if (v != NULL) {
        const char *nl = memchr(v + 9, '\n', n - (size_t)(v + 9 - p));
        const char *cr = nl ? memchr(nl + 1, '\r', n - (size_t)(nl + 1 - p)) : NULL;
        if (cr != NULL && (size_t)(cr - nl - 1) < sizeof have)
            memcpy(have, nl + 1, (size_t)(cr - nl - 1));
    } else {
        snprintf(w.problem, sizeof w.problem, "watch: CONFIG GET notify-keyspace-events "
                 "refused: cannot tell whether notifications are on");
        return;
    }
    int all = strchr(have, 'A') != NULL;        /* A is g$lshzxetd */
    int k = 0;
    if (strchr(have, 'K') == NULL)
        missing[k++] = 'K';
    for (const char *f = NEEDED_FLAGS; *f; f++)
        if (strchr(have, *f) == NULL && !(all && strchr("g$lshzxetd", *f) != NULL))
            missing[k++] = *f;
    missing[k] = '\0';
    int was_ok = w.st.flags_ok;
    w.st.flags_ok = k == 0;
    if (k == 0) {
        if (!was_ok && w.problem[0])
            log_info("watch: notify-keyspace-events is \"%s\": keyspace notifications on", have);
        w.problem[0] = '\0';
        gap_maybe_ended();
        return;
    }
    if (cfg->watch_configure) {
        char want[80];
        snprintf(want, sizeof want, "%s%s", have, missing);
        const char *const set[] = { "CONFIG", "SET", "notify-keyspace-events", want };
        sb_cmd(&w.out, 4, set, NULL);
        owe(OW_FLAGS_SET);
        flush_out();
        log_info("watch: notify-keyspace-events \"%s\" lacks %s: setting \"%s\" "
                 "(watch_configure = on)", have, missing, want);
        return;
    }
    char before[sizeof w.problem];
    snprintf(before, sizeof before, "%s", w.problem);
    snprintf(w.problem, sizeof w.problem, "watch: notify-keyspace-events \"%s\" lacks %s, so "
             "writes are not seen: CONFIG SET notify-keyspace-events K%s (or set "
             "watch_configure = on)", have, missing, NEEDED_FLAGS);
    if (strcmp(before, w.problem) != 0)
        log_warn("%s", w.problem);
}

static void found(const struct owed *o, int fixed)
{
    const struct rule *r = rules_match(&w.ctx->cfg->rules, o->key, o->klen);
    char detail[160];
    double ms = (double)(loop_now_ns - o->t0) / 1e6;
    w.st.found++;
    w.st.fixed += fixed;
    if (fixed)
        snprintf(detail, sizeof detail, "keyspace event %s; given the rule's TTL %.3f ms after "
                 "the notification", o->ev, ms);
    else
        snprintf(detail, sizeof detail, "keyspace event %s; found %.3f ms after the "
                 "notification, not fixed (rule action %s)", o->ev, ms,
                 r->action == ACTION_REJECT ? "reject" : "log");
    struct ev_client c = { .db = o->db };
    struct slice cmd = { o->ev, strlen(o->ev) }, key = { o->key, o->klen };
    events_violation_detail(r, cmd, key, EFF_FOUND_WITHOUT_TTL, EACT_OBSERVED, detail, &c);
}

static void cmd_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    static char head[512];
    static size_t hlen;
    if (start)
        hlen = 0;
    size_t k = n < sizeof head - hlen ? n : sizeof head - hlen;
    memcpy(head + hlen, p, k);
    hlen += k;
    if (!done || w.q.len == 0)
        return;
    struct owed *o = owed_head();
    if (type == '-' && o->kind != OW_FLAGS_GET)
        log_warn("watch: Redis refused %s: %.*s", o->kind == OW_SELECT ? "SELECT" :
                 o->kind == OW_FLAGS_SET ? "CONFIG SET notify-keyspace-events" : "a TTL check",
                 (int)strcspn(head + 1, "\r\n"), head + 1);
    switch (o->kind) {
    case OW_FLAGS_GET:
        flags_seen(head, hlen, type);
        break;
    case OW_FLAGS_SET:
        if (type == '+')
            ask_flags();
        else
            snprintf(w.problem, sizeof w.problem, "watch: CONFIG SET notify-keyspace-events "
                     "refused (%.*s): writes are not seen", (int)strcspn(head + 1, "\r\n"),
                     head + 1);
        break;
    case OW_EXPIRE:
        if (hlen >= 4 && memcmp(head, ":1\r\n", 4) == 0)
            found(o, 1);
        break;
    case OW_PTTL:
        if (hlen >= 5 && memcmp(head, ":-1\r\n", 5) == 0)
            found(o, 0);
        break;
    default:
        break;
    }
    free(o->key);
    ring_pop(&w.q);
    if (w.q.len < WATCH_RESUME_AT && !w.sub.reading && w.sub.state == BC_READY)
        bconn_read_start(&w.sub);
}

static void cmd_ready(struct bconn *b)
{
    w.cur_db = 0;
    bconn_write_bytes(&w.cmd, NAME_REQ, sizeof NAME_REQ - 1);
    owe(OW_REPLY);
    w.flags_at = now_ms_monotonic();
    ask_flags();
}

static void cmd_failed(struct bconn *b, const char *why, int was_ready)
{
    if (was_ready)
        log_warn("watch: command connection lost: %s", why);
    w.st.flags_ok = 0;              /* not known until it is read again */
    w.out.len = 0;                  /* what it owed answers went with it */
    drop_owed();
    if (!w.sub.reading && w.sub.state == BC_READY)
        bconn_read_start(&w.sub);   /* further checks are missed, and counted */
    w.cmd_retry = now_ms_monotonic() + RETRY_MS;
}

/* ------------------------------------------------------------------------ */
/* The subscription                                                          */

/* One bulk string at *p of a RESP array; advances *p. */
static int bulk(const char **p, const char *end, struct slice *out)
{
    const char *s = *p;
    if (s >= end || *s != '$')
        return -1;
    char *e;
    long n = strtol(s + 1, &e, 10);
    if (n < 0 || e + 2 > end || e[0] != '\r' || end - (e + 2) < n + 2)
        return -1;
    out->p = e + 2;
    out->len = (size_t)n;
    *p = e + 2 + n + 2;
    return 0;
}

static int is_harmless(struct slice ev)
{
    for (const char *const *h = harmless; *h; h++)
        if (strlen(*h) == ev.len && memcmp(*h, ev.p, ev.len) == 0)
            return 1;
    return 0;
}

/* __keyspace@DB__:KEY, event: check KEY in DB when a ttl rule governs it. */
static void notification(struct slice chan, struct slice ev)
{
    w.st.notifications++;
    const char *at = chan.p + sizeof CHANNEL - 1, *end = chan.p + chan.len;
    if (chan.len < sizeof CHANNEL + 3 || memcmp(chan.p, CHANNEL, sizeof CHANNEL - 1) != 0)
        return;
    char *e;
    long db = strtol(at, &e, 10);
    if (e + 3 > end || memcmp(e, "__:", 3) != 0 || is_harmless(ev))
        return;
    const char *key = e + 3;
    size_t klen = (size_t)(end - key);
    const struct rule *r = rules_match(&w.ctx->cfg->rules, key, klen);
    if (!watched(r))
        return;
    if (w.cmd.state != BC_READY || w.q.len >= WATCH_OWED_MAX) {
        w.st.missed++;
        return;
    }
    if (db != w.cur_db) {
        char num[24];
        const char *const sel[] = { "SELECT", num };
        snprintf(num, sizeof num, "%ld", db);
        sb_cmd(&w.out, 2, sel, NULL);
        owe(OW_SELECT);
        w.cur_db = (int)db;
    }
    int fix = r->action == ACTION_REWRITE && r->ttl > 0;
    struct owed *o = owe(fix ? OW_EXPIRE : OW_PTTL);
    o->db = (int)db;
    o->t0 = loop_now_ns;
    o->key = xmemdup(key, klen);
    o->klen = klen;
    size_t n = ev.len < sizeof o->ev - 1 ? ev.len : sizeof o->ev - 1;
    for (size_t i = 0; i < n; i++)
        o->ev[i] = (char)(ev.p[i] >= 'a' && ev.p[i] <= 'z' ? ev.p[i] - 32 : ev.p[i]);
    if (fix) {
        char ttl[24];
        snprintf(ttl, sizeof ttl, "%lld", r->ttl);
        const char *const ex[] = { "EXPIRE", key, ttl, "NX" };
        const size_t lens[] = { 6, klen, strlen(ttl), 2 };
        sb_cmd(&w.out, 4, ex, lens);
    } else {
        const char *const pt[] = { "PTTL", key };
        const size_t lens[] = { 4, klen };
        sb_cmd(&w.out, 2, pt, lens);
    }
    w.st.checks++;
}

/* The gap since the subscription was lost ends once it is back and the
 * server's notify-keyspace-events are known to have what the rules need (a
 * server that restarted forgot ttlguard's CONFIG SET: until it is set again,
 * writes make no notification). */
static void gap_maybe_ended(void)
{
    if (w.lost_at == 0 || !w.st.subscribed || !w.st.flags_ok)
        return;
    uint64_t gap = now_ms_monotonic() - w.lost_at;
    w.st.resubscribed++;
    w.st.gap_ms += gap;
    w.lost_at = 0;
    log_warn("watch: subscribed again after %llu ms without keyspace notifications: keys "
             "written meanwhile were not checked; run ttlguard audit for the rules' prefixes",
             (unsigned long long)gap);
    events_watch_gap(gap, w.st.missed);
}

static void subscribed(void)
{
    w.st.subscribed = 1;
    gap_maybe_ended();
}

/* One whole reply on the subscription: pmessage, a confirmation, or the
 * answer to CLIENT SETNAME. */
static void sub_message(const char *p, size_t n, char type)
{
    const char *end = p + n;
    struct slice kind, a, b, c;
    if (type == '-') {
        snprintf(w.problem, sizeof w.problem, "watch: Redis refused the subscription: %.*s",
                 (int)strcspn(p + 1, "\r\n"), p + 1);
        log_warn("%s", w.problem);
        return;
    }
    if (type != '*')
        return;
    const char *s = memchr(p, '\n', n);
    if (s == NULL || bulk(&(const char *){ s + 1 }, end, &kind) < 0)
        return;
    s = kind.p + kind.len + 2;
    if (kind.len == 8 && memcmp(kind.p, "pmessage", 8) == 0) {
        if (bulk(&s, end, &a) == 0 && bulk(&s, end, &b) == 0 && bulk(&s, end, &c) == 0)
            notification(b, c);
    } else if (kind.len == 10 && memcmp(kind.p, "psubscribe", 10) == 0) {
        if (++w.confirmed == w.npat)
            subscribed();
    }
}

static void sub_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    if (start)
        w.len = 0;
    if (w.len + n <= SUB_KEEP) {
        if (done && w.len == 0) {
            sub_message(p, n, type);        /* whole in one read: no copy */
            return;
        }
        w.buf = xrealloc(w.buf, w.len + n);
        memcpy(w.buf + w.len, p, n);
        w.len += n;
    } else {
        w.len = SUB_KEEP + 1;
    }
    if (done && w.len <= SUB_KEEP)
        sub_message(w.buf, w.len, type);
}

/* Backpressure: while too many checks are in flight, notifications wait in
 * Redis's output buffer for the subscriber; one that outgrows Redis's
 * client-output-buffer-limit pubsub is a lost subscription, said as a gap. */
static void sub_read_end(struct bconn *b)
{
    flush_out();
    if (w.q.len >= WATCH_PAUSE_AT && w.sub.reading)
        bconn_read_stop(&w.sub);
}

static void sub_ready(struct bconn *b)
{
    struct sbuf req = { 0 };
    sbuf_add(&req, NAME_REQ, sizeof NAME_REQ - 1);
    w.confirmed = 0;
    build_psubscribe(&req);
    bconn_write_bytes(&w.sub, req.p, req.len);
    free(req.p);
}

static void sub_failed(struct bconn *b, const char *why, int was_ready)
{
    if (w.st.subscribed) {
        w.lost_at = now_ms_monotonic();
        log_warn("watch: subscription lost: %s", why);
    }
    w.st.subscribed = 0;
    w.sub_retry = now_ms_monotonic() + RETRY_MS;
}

/* Closed on purpose (stop, a new backend, new rules): open again unless stopping. */
static void any_closed(struct bconn *b)
{
    if (!w.on || w.stopping)
        return;
    if (b == &w.sub && w.sub_retry == 0)
        bconn_connect(&w.sub, 1);
    if (b == &w.cmd && w.cmd_retry == 0)
        bconn_connect(&w.cmd, 1);
}

static void nothing_written(struct bconn *b, int status)
{
}

static void cmd_read_end(struct bconn *b)
{
}

static const struct bconn_ops sub_ops = {
    sub_ready, sub_reply, sub_read_end, sub_failed, any_closed, nothing_written,
};
static const struct bconn_ops cmd_ops = {
    cmd_ready, cmd_reply, cmd_read_end, cmd_failed, any_closed, nothing_written,
};

/* New rules: subscribe to their prefixes first, then leave the old ones, so
 * that no notification is missed in between. */
static void resubscribe(void)
{
    if (w.sub.state != BC_READY) {
        free_patterns();            /* sub_ready() subscribes to the new ones */
        return;
    }
    char **old = w.pat;
    int nold = w.npat;
    struct sbuf req = { 0 };
    w.pat = NULL;
    w.npat = 0;
    build_psubscribe(&req);
    w.confirmed = 0;
    if (w.npat == 0)
        w.st.subscribed = 0;
    for (int i = 0; i < nold; i++) {
        int kept = 0;
        for (int j = 0; j < w.npat && !kept; j++)
            kept = strcmp(old[i], w.pat[j]) == 0;
        if (!kept) {
            const char *const un[] = { "PUNSUBSCRIBE", old[i] };
            sb_cmd(&req, 2, un, NULL);
        }
        free(old[i]);
    }
    free(old);
    if (req.len > 0)
        bconn_write_bytes(&w.sub, req.p, req.len);
    free(req.p);
}

/* ------------------------------------------------------------------------ */

void watch_apply(struct loop_ctx *ctx)
{
    w.ctx = ctx;
    if (!ctx->cfg->watch) {
        watch_stop();
        return;
    }
    if (w.on) {
        resubscribe();
        return;
    }
    if (w.sub.state != BC_IDLE || w.cmd.state != BC_IDLE) {
        w.restart = 1;              /* watch_cron() starts it once they are closed */
        return;
    }
    w.restart = 0;
    w.on = 1;
    w.stopping = 0;
    bconn_init(&w.sub, ctx, &sub_ops, &w);
    bconn_init(&w.cmd, ctx, &cmd_ops, &w);
    w.sub.counts = w.cmd.counts = 0;
    bconn_connect(&w.cmd, 1);
    bconn_connect(&w.sub, 1);
    log_info("watch: keyspace notifications of the rules' prefixes are checked");
}

void watch_stop(void)
{
    w.restart = 0;
    if (!w.on)
        return;
    w.stopping = 1;
    w.on = 0;
    bconn_close(&w.sub);
    bconn_close(&w.cmd);
    drop_owed();
    free_patterns();
    ring_free(&w.q);
    free(w.buf);
    w.buf = NULL;
    free(w.out.p);
    w.out = (struct sbuf){ 0 };
    w.st.subscribed = 0;
    w.problem[0] = '\0';
}

void watch_cron(uint64_t now)
{
    if (w.restart)
        watch_apply(w.ctx);
    if (!w.on)
        return;
    bconn_cron(&w.sub, now);
    bconn_cron(&w.cmd, now);
    if (w.sub.state == BC_IDLE && w.sub_retry != 0 && now >= w.sub_retry) {
        w.sub_retry = 0;
        bconn_connect(&w.sub, 1);
    }
    if (w.cmd.state == BC_IDLE && w.cmd_retry != 0 && now >= w.cmd_retry) {
        w.cmd_retry = 0;
        bconn_connect(&w.cmd, 1);
    }
    if (w.cmd.state == BC_READY && now - w.flags_at >= FLAGS_MS) {
        w.flags_at = now;
        ask_flags();
    }
    if (w.st.missed != w.missed_mark && w.st.subscribed) {
        log_warn("watch: %llu TTL checks could not be sent (the command connection was down "
                 "or %d were in flight): run ttlguard audit for the rules' prefixes",
                 (unsigned long long)(w.st.missed - w.missed_mark), WATCH_OWED_MAX);
        w.missed_mark = w.st.missed;
    }
}

/* Connect again now: at once when idle, else once closed (any_closed()). */
static void reopen(struct bconn *b, uint64_t *retry)
{
    *retry = 0;
    if (b->state == BC_IDLE)
        bconn_connect(b, 1);
    else
        bconn_close(b);
}

void watch_backend_changed(void)
{
    if (!w.on)
        return;
    reopen(&w.sub, &w.sub_retry);
    reopen(&w.cmd, &w.cmd_retry);
}

const struct watch_stats *watch_stats(void)
{
    return &w.st;
}

const char *watch_problem(void)
{
    if (!w.on)
        return "";
    if (w.problem[0])
        return w.problem;
    if (!w.st.subscribed && w.npat > 0)
        return "watch: not subscribed to keyspace notifications (backend unreachable?)";
    return "";
}
