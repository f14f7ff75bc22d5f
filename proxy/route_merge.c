/*
 * route_merge: split requests and merged replies (see route_merge.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp_reply.h"
#include "route_merge.h"

enum merge merge_split_kind(const struct slice *name, int *width)
{
    static const struct { const char *name; enum merge how; int width; } rows[] = {
        { "mget", MERGE_ORDERED, 1 }, { "mset", MERGE_SAME, 2 }, { "del", MERGE_SUM, 1 },
        { "unlink", MERGE_SUM, 1 }, { "exists", MERGE_SUM, 1 }, { "touch", MERGE_SUM, 1 },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (slice_eq_nocase(*name, rows[i].name)) {
            *width = rows[i].width;
            return rows[i].how;
        }
    }
    return MERGE_NONE;
}

/* Keyless commands that cover every primary: name, subcommand (NULL: none
 * looked at), the argument counts they take (max -1: any), their merge, and
 * whether inside MULTI they are the transaction's node's (SERVER: the
 * server's settings and upkeep, where the transaction runs) or refused
 * (data: one node's DBSIZE would not mean what it says). */
#define SERVER 1
static const struct fanout_row {
    const char *name, *sub;
    int min, max;
    enum merge how;
    int server;
} fanout_rows[] = {
    { "dbsize", NULL, 1, 1, MERGE_SUM, 0 },
    { "keys", NULL, 2, 2, MERGE_CONCAT, 0 },
    { "pubsub", "shardchannels", 2, 3, MERGE_CONCAT, 0 },
    { "client", "pause", 3, 4, MERGE_SAME, 0 },
    { "client", "unpause", 2, 2, MERGE_SAME, 0 },
    { "flushall", NULL, 1, 2, MERGE_SAME, 0 },
    { "flushdb", NULL, 1, 2, MERGE_SAME, 0 },
    { "randomkey", NULL, 1, 1, MERGE_FIRST, 0 },
    { "scan", NULL, 2, -1, MERGE_SCAN, 0 },
    { "info", NULL, 1, -1, MERGE_INFO, SERVER },
    { "script", "load", 3, 3, MERGE_SAME, 0 },
    { "script", "flush", 2, 3, MERGE_SAME, 0 },
    { "script", "exists", 3, -1, MERGE_ALL, 0 },
    { "function", "load", 3, 4, MERGE_SAME, 0 },
    { "function", "delete", 3, 3, MERGE_SAME, 0 },
    { "function", "flush", 2, 3, MERGE_SAME, 0 },
    { "function", "restore", 3, 4, MERGE_SAME, 0 },
    { "script", "kill", 2, 2, MERGE_KILL, 0 },
    { "function", "kill", 2, 2, MERGE_KILL, 0 },
    /* The server's settings, saves and test hooks: every primary's (replicas
     * keep theirs). Each node applies them on its own: one that refuses may
     * come after one that took them, and the client gets its error. */
    { "config", "set", 4, -1, MERGE_SAME, SERVER },
    { "config", "resetstat", 2, 2, MERGE_SAME, SERVER },
    { "config", "rewrite", 2, 2, MERGE_SAME, SERVER },
    { "debug", "set-active-expire", 3, 3, MERGE_SAME, SERVER },
    { "debug", "reload", 2, -1, MERGE_SAME, SERVER },
    { "debug", "loadaof", 2, 2, MERGE_SAME, SERVER },
    { "bgrewriteaof", NULL, 1, 1, MERGE_SAME, SERVER },
    { "bgsave", NULL, 1, 2, MERGE_SAME, SERVER },
    { "save", NULL, 1, 1, MERGE_SAME, SERVER },
};

static const struct fanout_row *fanout_row(int argc, const struct slice *argv)
{
    for (size_t i = 0; i < sizeof fanout_rows / sizeof fanout_rows[0]; i++) {
        const struct fanout_row *f = &fanout_rows[i];
        if (slice_eq_nocase(argv[0], f->name) && argc >= f->min &&
            (f->max < 0 || argc <= f->max) && (f->sub == NULL || slice_eq_nocase(argv[1], f->sub)))
            return f;
    }
    return NULL;
}

enum merge merge_fanout_kind(int argc, const struct slice *argv)
{
    const struct fanout_row *f = fanout_row(argc, argv);
    return f != NULL ? f->how : MERGE_NONE;
}

int merge_fanout_server(int argc, const struct slice *argv)
{
    const struct fanout_row *f = fanout_row(argc, argv);
    return f != NULL && f->server;
}

void merge_add_bulk(struct sbuf *b, struct slice s)
{
    char hdr[32];
    int n = snprintf(hdr, sizeof hdr, "$%zu\r\n", s.len);
    sbuf_add(b, hdr, (size_t)n);
    sbuf_add(b, s.p, s.len);
    sbuf_add(b, "\r\n", 2);
}

/* The part for slot, a new one at the end if there is none yet. */
static struct merge_part *part_for(struct merge_part *parts, int *n, int slot)
{
    for (int i = 0; i < *n; i++)
        if (parts[i].slot == slot)
            return &parts[i];
    parts[*n] = (struct merge_part){ .slot = slot };
    return &parts[(*n)++];
}

struct merge_part *merge_split(int argc, const struct slice *argv, int width,
                               int (*slot_of)(struct slice key), int *nparts)
{
    int nkeys = (argc - 1) / width, n = 0;
    struct merge_part *parts = xcalloc((size_t)(nkeys > 0 ? nkeys : 1), sizeof *parts);
    for (int k = 0; k < nkeys; k++) {
        struct merge_part *p = part_for(parts, &n, slot_of(argv[1 + k * width]));
        if (p->npos == 0)
            p->pos = xmalloc((size_t)nkeys * sizeof *p->pos);
        p->pos[p->npos++] = k;
    }
    for (int i = 0; i < n; i++) {
        char hdr[32];
        int len = snprintf(hdr, sizeof hdr, "*%d\r\n", 1 + parts[i].npos * width);
        sbuf_add(&parts[i].req, hdr, (size_t)len);
        merge_add_bulk(&parts[i].req, argv[0]);
        for (int j = 0; j < parts[i].npos; j++)
            for (int w = 0; w < width; w++)
                merge_add_bulk(&parts[i].req, argv[1 + parts[i].pos[j] * width + w]);
    }
    *nparts = n;
    return parts;
}

void merge_parts_free(struct merge_part *parts, int n)
{
    for (int i = 0; i < n; i++) {
        free(parts[i].req.p);
        free(parts[i].pos);
    }
    free(parts);
}

/* The element count in an array reply's header ("*N\r\n"), or -1. */
static int array_count(const char *p, size_t n)
{
    if (n < 4 || p[0] != '*' || memchr(p, '\n', n) == NULL)
        return -1;
    long count = strtol(p + 1, NULL, 10);
    return count >= 0 && count <= (long)n ? (int)count : -1;
}

/* The elements of an array reply: up to max spans into el. Returns how many. */
static int array_elements(const char *p, size_t n, struct slice *el, int max)
{
    const char *nl = memchr(p, '\n', n);
    size_t off = (size_t)(nl + 1 - p);
    int got = 0;
    struct reply_scanner sc;
    reply_scanner_init(&sc);
    while (got < max && off < n) {
        int done = 0;
        ssize_t used = reply_scan(&sc, p + off, n - off, &done);
        if (used <= 0 || !done)
            break;
        el[got++] = (struct slice){ p + off, (size_t)used };
        off += (size_t)used;
        reply_scanner_free(&sc);
    }
    reply_scanner_free(&sc);
    return got;
}

struct slice merge_exec_reply(const struct slice *r, int n)
{
    struct slice first;
    const struct slice *exec = &r[n - 1];
    if (exec->len > 0 && exec->p[0] == '*' && array_count(exec->p, exec->len) > 0 &&
        array_elements(exec->p, exec->len, &first, 1) == 1)
        return first;
    if (n > 2 && r[1].len > 0 && r[1].p[0] == '-')
        return r[1];
    return *exec;
}

static char *merge_sum(const struct merge_reply *r, int n, size_t *len)
{
    long long sum = 0;
    for (int i = 0; i < n; i++)
        sum += strtoll(r[i].p + 1, NULL, 10);
    char *out = xmalloc(32);
    *len = (size_t)snprintf(out, 32, ":%lld\r\n", sum);
    return out;
}

/* MERGE_ORDERED (elements to their key's place) and MERGE_CONCAT. */
static char *merge_arrays(enum merge how, const struct merge_reply *r, int n, int nkeys,
                          size_t *len)
{
    int total = 0, cap = 0;
    for (int i = 0; i < n; i++)
        cap += array_count(r[i].p, r[i].n);
    struct slice *got = xcalloc((size_t)cap + 1, sizeof *got);
    for (int i = 0; i < n; i++)
        total += array_elements(r[i].p, r[i].n, got + total, cap - total);
    struct slice *el = got;
    if (how == MERGE_ORDERED) {         /* part i's j-th element is key pos[j]'s */
        el = xcalloc((size_t)nkeys + 1, sizeof *el);
        for (int i = 0, k = 0; i < n; i++)
            for (int j = 0; j < r[i].npos && k < total; j++, k++)
                el[r[i].pos[j]] = got[k];
        total = nkeys;
    }
    struct sbuf out = { 0 };
    char hdr[32];
    sbuf_add(&out, hdr, (size_t)snprintf(hdr, sizeof hdr, "*%d\r\n", total));
    for (int i = 0; i < total; i++)
        sbuf_add(&out, el[i].p != NULL ? el[i].p : "$-1\r\n", el[i].p != NULL ? el[i].len : 5);
    if (el != got)
        free(el);
    free(got);
    *len = out.len;
    return out.p;
}

/* A nil reply: RESP2's null bulk, RESP3's null. */
static int is_nil(const struct merge_reply *r)
{
    return (r->n == 5 && memcmp(r->p, "$-1\r\n", 5) == 0) ||
           (r->n == 3 && memcmp(r->p, "_\r\n", 3) == 0);
}

/* MERGE_FIRST: the first error, as every merge; else the first reply that
 * is not nil; else nil. */
static char *merge_first(const struct merge_reply *r, int n, size_t *len)
{
    int pick = -1;
    for (int i = 0; i < n && pick < 0; i++)
        if (r[i].n > 0 && r[i].p[0] == '-')
            pick = i;
    for (int i = 0; i < n && pick < 0; i++)
        if (!is_nil(&r[i]))
            pick = i;
    pick = pick < 0 ? 0 : pick;
    *len = r[pick].n;
    return xmemdup(r[pick].p, r[pick].n);
}

/* MERGE_ALL: the first part's array, each element :0 where any part's is. */
static char *merge_all(const struct merge_reply *r, int n, size_t *len)
{
    int count = array_count(r[0].p, r[0].n);
    struct slice *el = xcalloc((size_t)count + 1, sizeof *el), *other = NULL;
    int got = array_elements(r[0].p, r[0].n, el, count);
    for (int i = 1; i < n; i++) {
        other = xrealloc(other, ((size_t)got + 1) * sizeof *other);
        int m = array_elements(r[i].p, r[i].n, other, got);
        for (int j = 0; j < m; j++)
            if (other[j].len == 4 && memcmp(other[j].p, ":0\r\n", 4) == 0)
                el[j] = other[j];
    }
    struct sbuf out = { 0 };
    char hdr[32];
    sbuf_add(&out, hdr, (size_t)snprintf(hdr, sizeof hdr, "*%d\r\n", got));
    for (int j = 0; j < got; j++)
        sbuf_add(&out, el[j].p, el[j].len);
    free(other);
    free(el);
    *len = out.len;
    return out.p;
}

/* ---- INFO ---------------------------------------------------------------------- */

/* INFO fields that count what the whole server holds or did: through one
 * address in front of a cluster, the sum over the primaries (a client that
 * waits for blocked_clients, reads the keyspace or counts commands sees the
 * cluster's). The rest (version, role, rates, ratios, human-readable sizes)
 * is the first primary's, but for the flags of info_any. */
static const char *const info_sums[] = {
    "connected_clients", "blocked_clients", "tracking_clients", "pubsub_clients",
    "watching_clients", "clients_in_timeout_table", "total_watched_keys",
    "total_blocking_keys", "total_blocking_keys_on_nokey", "rdb_changes_since_last_save",
    "total_connections_received", "total_commands_processed", "instantaneous_ops_per_sec",
    "total_net_input_bytes", "total_net_output_bytes", "rejected_connections",
    "expired_keys", "evicted_keys", "keyspace_hits", "keyspace_misses", "pubsub_channels",
    "pubsub_patterns", "pubsub_shardchannels", "total_error_replies", "total_reads_processed",
    "total_writes_processed",
};
#define INFO_SUMS (sizeof info_sums / sizeof info_sums[0])

/* ...and flags that say something runs: 1 while it runs on any primary (a
 * client that waits for a BGREWRITEAOF sent to every primary waits for all). */
static const char *const info_any[] = {
    "loading", "async_loading", "rdb_bgsave_in_progress", "aof_rewrite_in_progress",
    "aof_rewrite_scheduled",
};
#define INFO_ANY (sizeof info_any / sizeof info_any[0])
#define INFO_DBS 16             /* dbN lines summed; cluster nodes have db0 only */

/* The sums, and each database's keys, expires and avg_ttl weighted by expires. */
struct info_total {
    long long sum[INFO_SUMS];
    unsigned char any[INFO_ANY];
    long long keys[INFO_DBS], expires[INFO_DBS], ttl_weight[INFO_DBS];
    unsigned char has_db[INFO_DBS];
};

/* The text of an INFO reply (RESP2 bulk, RESP3 verbatim "txt:"), or -1. */
static int info_text(const struct merge_reply *r, struct slice *text)
{
    const char *nl = memchr(r->p, '\n', r->n);
    if ((r->p[0] != '$' && r->p[0] != '=') || nl == NULL)
        return -1;
    long len = strtol(r->p + 1, NULL, 10);
    size_t off = (size_t)(nl + 1 - r->p);
    if (len < 0 || off + (size_t)len + 2 > r->n)
        return -1;
    *text = (struct slice){ r->p + off, (size_t)len };
    if (r->p[0] == '=' && len >= 4) {
        text->p += 4;                   /* "txt:" */
        text->len -= 4;
    }
    return 0;
}

/* name's index in names (n of them), or -1. */
static int info_index(const char *const *names, size_t n, struct slice name)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(names[i]) == name.len && memcmp(names[i], name.p, name.len) == 0)
            return (int)i;
    return -1;
}

/* "dbN" with N < INFO_DBS: N, else -1. */
static int info_db(struct slice name)
{
    if (name.len < 3 || name.len > 4 || memcmp(name.p, "db", 2) != 0)
        return -1;
    int db = 0;
    for (size_t i = 2; i < name.len; i++) {
        if (name.p[i] < '0' || name.p[i] > '9')
            return -1;
        db = db * 10 + name.p[i] - '0';
    }
    return db < INFO_DBS ? db : -1;
}

/* "keys=1,expires=0,avg_ttl=0" into the total of db. */
static void info_add_db(struct info_total *t, int db, struct slice v)
{
    char buf[128];
    long long keys = 0, expires = 0, ttl = 0;
    snprintf(buf, sizeof buf, "%.*s", (int)v.len, v.p);
    if (sscanf(buf, "keys=%lld,expires=%lld,avg_ttl=%lld", &keys, &expires, &ttl) < 2)
        return;
    t->has_db[db] = 1;
    t->keys[db] += keys;
    t->expires[db] += expires;
    t->ttl_weight[db] += ttl * expires;
}

/* Each "name:value" line of text, with its name and value. */
static void info_lines(struct slice text, void (*fn)(void *ctx, struct slice line,
                                                     struct slice name, struct slice value),
                       void *ctx)
{
    const char *p = text.p, *end = text.p + text.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl != NULL ? nl + 1 : end;
        struct slice line = { p, (size_t)(eol - p) };
        size_t body = line.len - (nl != NULL) - (nl != NULL && nl > p && nl[-1] == '\r');
        const char *colon = memchr(p, ':', body);
        struct slice name = { p, colon != NULL ? (size_t)(colon - p) : body };
        struct slice value = { colon != NULL ? colon + 1 : p + body,
                               colon != NULL ? body - name.len - 1 : 0 };
        fn(ctx, line, name, value);
        p = eol;
    }
}

static void info_tally(void *ctx, struct slice line, struct slice name, struct slice value)
{
    struct info_total *t = ctx;
    int i = info_index(info_sums, INFO_SUMS, name), db = info_db(name);
    int f = info_index(info_any, INFO_ANY, name);
    long long v;
    if (i >= 0 && slice_to_ll(value, &v) == 0)
        t->sum[i] += v;
    else if (f >= 0 && slice_to_ll(value, &v) == 0)
        t->any[f] |= v != 0;
    else if (db >= 0)
        info_add_db(t, db, value);
}

struct info_out {
    struct info_total *t;
    struct sbuf b;
    int keyspace;               /* inside the first part's "# Keyspace" section */
};

static void info_db_lines(struct info_out *o)
{
    for (int db = 0; db < INFO_DBS; db++) {
        if (!o->t->has_db[db])
            continue;
        char line[160];
        long long e = o->t->expires[db];
        int n = snprintf(line, sizeof line, "db%d:keys=%lld,expires=%lld,avg_ttl=%lld\r\n", db,
                         o->t->keys[db], e, e > 0 ? o->t->ttl_weight[db] / e : 0);
        sbuf_add(&o->b, line, (size_t)n);
    }
}

static void info_emit(void *ctx, struct slice line, struct slice name, struct slice value)
{
    struct info_out *o = ctx;
    int i = info_index(info_sums, INFO_SUMS, name), f = info_index(info_any, INFO_ANY, name);
    long long v;
    if (o->keyspace && (info_db(name) >= 0 || (line.len <= 2 && line.p[0] == '\r'))) {
        if (line.len <= 2)              /* the section's end: its dbs were written */
            sbuf_add(&o->b, line.p, line.len);
        return;
    }
    if ((i >= 0 || f >= 0) && slice_to_ll(value, &v) == 0) {
        char num[32];
        sbuf_add(&o->b, name.p, name.len + 1);
        sbuf_add(&o->b, num, (size_t)snprintf(num, sizeof num, "%lld",
                                              i >= 0 ? o->t->sum[i] : (long long)o->t->any[f]));
        sbuf_add(&o->b, value.p + value.len, (size_t)(line.p + line.len - value.p - value.len));
        return;
    }
    sbuf_add(&o->b, line.p, line.len);
    o->keyspace = name.len == 10 && memcmp(name.p, "# Keyspace", 10) == 0;
    if (o->keyspace)
        info_db_lines(o);
}

static char *merge_info(const struct merge_reply *r, int n, size_t *len)
{
    struct info_total t = { 0 };
    struct slice text, first = { 0 };
    for (int i = 0; i < n; i++) {
        if (info_text(&r[i], &text) != 0) {
            *len = r[i].n;              /* not an INFO text: as it is */
            return xmemdup(r[i].p, r[i].n);
        }
        info_lines(text, info_tally, &t);
        first = i == 0 ? text : first;
    }
    struct info_out o = { .t = &t };
    info_lines(first, info_emit, &o);
    struct sbuf out = { 0 };
    char hdr[32];
    int verbatim = r[0].p[0] == '=';
    sbuf_add(&out, hdr, (size_t)snprintf(hdr, sizeof hdr, "%c%zu\r\n%s", r[0].p[0],
                                         o.b.len + (verbatim ? 4 : 0), verbatim ? "txt:" : ""));
    sbuf_add(&out, o.b.p, o.b.len);
    sbuf_add(&out, "\r\n", 2);
    free(o.b.p);
    *len = out.len;
    return out.p;
}

/* MERGE_KILL: the reply of the primary that ran the script. */
static char *merge_kill(const struct merge_reply *r, int n, size_t *len)
{
    static const char unkillable[] = "-UNKILLABLE ";
    int pick = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].n >= 3 && memcmp(r[i].p, "+OK", 3) == 0) {
            pick = i;
            break;
        }
        if (r[i].n > sizeof unkillable - 1 &&
            memcmp(r[i].p, unkillable, sizeof unkillable - 1) == 0)
            pick = i;
    }
    *len = r[pick].n;
    return xmemdup(r[pick].p, r[pick].n);
}

char *merge_replies(enum merge how, const struct merge_reply *r, int n, int nkeys,
                    size_t *len)
{
    if (how == MERGE_FIRST)
        return merge_first(r, n, len);
    if (how == MERGE_KILL)
        return merge_kill(r, n, len);
    int bad = -1;                       /* the first error, else what no merge can take */
    for (int i = 0; i < n && bad < 0; i++)
        if (r[i].n == 0 || r[i].p[0] == '-')
            bad = i;
    for (int i = 0; i < n && bad < 0; i++) {
        int expected = how == MERGE_SUM ? ':' : how == MERGE_SAME || how == MERGE_INFO ?
                       r[0].p[0] : '*';
        if (r[i].p[0] != expected || (expected == '*' && array_count(r[i].p, r[i].n) < 0))
            bad = i;
    }
    if (bad >= 0) {
        *len = r[bad].n;                /* as it is */
        return xmemdup(r[bad].p, r[bad].n);
    }
    if (how == MERGE_SUM)
        return merge_sum(r, n, len);
    if (how == MERGE_SAME) {
        *len = r[0].n;
        return xmemdup(r[0].p, r[0].n);
    }
    if (how == MERGE_ALL)
        return merge_all(r, n, len);
    if (how == MERGE_INFO)
        return merge_info(r, n, len);
    return merge_arrays(how, r, n, nkeys, len);
}
