/*
 * audit: `ttlguard audit` walks the keyspace and reports the keys that
 * already leaked, per the rules of the proxy's own config file.
 *
 * One blocking connection (audit_conn), one pipeline. Every SCAN reply
 * starts a round: the next SCAN goes out together with PTTL and TYPE (and
 * MEMORY USAGE) for each key the reply returned, so Redis already works on
 * round i+1 while we read and classify the replies of round i:
 *
 *   send: SCAN 0
 *   read: SCAN reply 0 -> keys K0, cursor c1
 *   send:        SCAN c1, PTTL/TYPE K0
 *   read: SCAN reply 1 -> keys K1, cursor c2
 *   send:        SCAN c2, PTTL/TYPE K1       <- goes out before K0's replies are read
 *   read: PTTL/TYPE K0 -> classify K0        <- meanwhile Redis serves SCAN c2 and K1
 *   read: SCAN reply 2 -> ...
 *
 * What was sent and not yet answered is a queue of segments (SCAN, KEYS,
 * FIX); the reply callbacks below write each reply straight into the batch
 * of the segment at the head, so a round costs no allocation per reply. --fix sends EXPIRE key ttl NX for the leaked keys of a batch as
 * soon as the batch is classified.
 *
 * Writes happen only with --fix --yes, which is refused on a replica; every
 * other command is read-only, so the audit runs fine against one.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/read.h>

#include "audit.h"
#include "audit_conn.h"
#include "audit_report.h"
#include "config.h"
#include "events.h"
#include "rules.h"
#include "util.h"

/* SCAN COUNT. Smaller rounds measured faster than 1000: between SCAN
 * returning a key and PTTL/TYPE looking it up, Redis walks one more round,
 * and a smaller round keeps those keys in its CPU cache (about 10% less
 * redis-server CPU per key at 250 than at 1000). */
#define AUDIT_DEFAULT_COUNT 250
#define AUDIT_IO_TIMEOUT_MS 30000
#define AUDIT_QUEUE 8                   /* segments in flight: at most SCAN, 2 KEYS, 2 FIX */

struct audit_opts {
    const char *config;
    const char *backend;            /* NULL: the config's */
    int db;
    const char *match;
    int json;
    int memory;
    long long rate;                 /* keys per second; 0 = unbounded */
    long long count;                /* SCAN COUNT */
    int top;
    int fix;
    int yes;
    int cluster;                    /* walk every primary of the cluster the backend is in */
    int from_replicas;              /* ...reading from a replica of each shard instead */
    const char *html;               /* --html FILE: also write the report as one page */
};

/* Keys of one SCAN reply, and what the per-key commands answered. */
struct batch {
    size_t n, cap;
    size_t *off;                    /* key i is arena[off[i] .. off[i] + len[i]) */
    size_t *len;
    char *arena;
    size_t alen, acap;
    long long *pttl;
    long long *mem;
    unsigned char *type;            /* enum arep_ktype */
    uint64_t *hash;                 /* key_hash() of each key, for the seen set */
    const struct rule **rule;       /* FIX batches: the rule that gave the ttl */
    struct batch *next_free;
};

enum seg_kind { SEG_SCAN, SEG_KEYS, SEG_FIX };

struct seg {
    enum seg_kind kind;
    struct batch *b;
    size_t total;                   /* replies owed */
    size_t done;                    /* replies read */
};

/* Hashes of the keys seen so far: SCAN may return a key twice while the
 * table resizes, and the counts must be exact. 8-byte slots, at most half
 * full: 16 to 32 bytes a key. A lookup is a cache miss in a table of many
 * megabytes, so lookups are made a batch at a time, slots prefetched ahead. */
struct seen_set {
    uint64_t *v;                    /* 0 = empty slot */
    size_t cap;                     /* power of two */
    size_t n;
};

struct scan {
    const struct audit_opts *o;
    const struct config *cfg;
    struct aconn *c;
    const char *tls_name;           /* a cluster node's host name, its certificate's name
                                       (NULL: backend_tls_server_name, else the address) */
    struct arep *rep;
    FILE *events;                   /* fix events; NULL = none */
    int events_close;
    struct sbuf event_line;        /* scratch for one event */

    struct ring q;                  /* struct seg, at most AUDIT_QUEUE of them */
    struct batch *free_batches;
    struct abuf out;
    struct seen_set seen;
    int per_key;                    /* replies per key: PTTL, TYPE [, MEMORY USAGE] */

    char cursor[24];                /* cursor of the SCAN reply being read */
    int walked;                     /* the last SCAN round went out: nothing left to ask */
    double fraction;                /* of the keyspace walked, from the cursor */

    int reply_bad;                  /* the reply being read was an error or unexpected */
    char reply_err[256];

    uint64_t t0;                    /* monotonic ms at start */
    uint64_t paid;                  /* keys charged to --rate */
    int tty;
    uint64_t progress_at;
};

/* The i-th segment in flight from the oldest. */
static struct seg *seg_at(struct scan *s, uint32_t i)
{
    return ring_at(&s->q, sizeof(struct seg), i);
}

/* 1 after the first SIGINT/SIGTERM: send nothing new, read the replies
 * already owed (a few thousand at most) and report. 2 after the second:
 * stop at once. */
static volatile sig_atomic_t audit_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    audit_interrupted = audit_interrupted ? 2 : 1;
}

static const char usage_text[] =
    "usage: ttlguard audit --config FILE [--backend ADDR] [--db N] [--match PATTERN]\n"
    "                      [--json] [--memory] [--rate KEYS_PER_S] [--count N] [--top N]\n"
    "                      [--fix [--yes]] [--cluster [--from-replicas]] [--html OUT.html]\n"
    "\n"
    "Walks the keyspace with SCAN and classifies every key by the config's rules:\n"
    "leaked (a ttl rule, no TTL), registered (durable), unregistered persistent.\n"
    "\n"
    "  --config FILE     the proxy's config file (rules, backend, auth, events)\n"
    "  --backend ADDR    host:port or unix:/path; default: the config's backend\n"
    "  --db N            database to audit (SELECT); default 0\n"
    "  --match PATTERN   only keys matching this glob (SCAN MATCH)\n"
    "  --json            machine-readable report on stdout\n"
    "  --html FILE       also write the report as one self-contained HTML page with charts\n"
    "  --memory          also sum MEMORY USAGE per rule, group and pattern\n"
    "  --rate N          read at most N keys per second\n"
    "  --count N         SCAN COUNT hint; default 250 (with --rate: rate/10, 10..250)\n"
    "  --top N           patterns to list per table; default 20\n"
    "  --fix             give leaked keys their rule's ttl (EXPIRE key ttl NX); a dry run\n"
    "  --yes             ...that really writes (never on a replica)\n"
    "  --cluster         the backend is a node of a Redis Cluster: audit every primary\n"
    "                    (CLUSTER SHARDS), with totals and a breakdown per node\n"
    "  --from-replicas   with --cluster: read each shard from an online replica (keeps the\n"
    "                    load off the primaries; a shard without one is read from its primary)\n"
    "\n"
    "Exit status: 0 no leaked keys, 1 leaked keys found, 2 usage, config, connection\n"
    "or backend error, 3 interrupted (partial report printed).\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "ttlguard audit: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see ttlguard audit --help)\n");
    return AUDIT_EXIT_ERROR;
}

static int parse_count(const char *text, long long min, long long max, long long *out)
{
    struct slice s = { text, strlen(text) };
    return slice_to_ll(s, out) == 0 && *out >= min && *out <= max ? 0 : -1;
}

/* Fills *o from argv; returns -1 after printing what is wrong, 1 for --help. */
static int parse_args(int argc, char **argv, struct audit_opts *o)
{
    memset(o, 0, sizeof *o);
    o->top = 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        char name[32];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq != NULL && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            val = eq + 1;
            a = name;
        }
        int takes = !strcmp(a, "--config") || !strcmp(a, "--backend") || !strcmp(a, "--db")
                 || !strcmp(a, "--match") || !strcmp(a, "--rate") || !strcmp(a, "--count")
                 || !strcmp(a, "--top") || !strcmp(a, "--html");
        if (takes && val == NULL) {
            if (i + 1 >= argc) {
                usage_error("%s needs a value", a);
                return -1;
            }
            val = argv[++i];
        } else if (!takes && val != NULL) {
            usage_error("%s takes no value", a);
            return -1;
        }
        long long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            return 1;
        } else if (!strcmp(a, "--config")) {
            o->config = val;
        } else if (!strcmp(a, "--backend")) {
            o->backend = val;
        } else if (!strcmp(a, "--match")) {
            o->match = val;
        } else if (!strcmp(a, "--db")) {
            if (parse_count(val, 0, 1 << 30, &n) == -1) {
                usage_error("--db wants a database number, not '%s'", val);
                return -1;
            }
            o->db = (int)n;
        } else if (!strcmp(a, "--rate")) {
            if (parse_count(val, 1, 1LL << 40, &n) == -1) {
                usage_error("--rate wants a positive number of keys per second, not '%s'", val);
                return -1;
            }
            o->rate = n;
        } else if (!strcmp(a, "--count")) {
            if (parse_count(val, 1, 100000, &n) == -1) {
                usage_error("--count wants a number from 1 to 100000, not '%s'", val);
                return -1;
            }
            o->count = n;
        } else if (!strcmp(a, "--top")) {
            if (parse_count(val, 0, 100000, &n) == -1) {
                usage_error("--top wants a number from 0 to 100000, not '%s'", val);
                return -1;
            }
            o->top = (int)n;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--html")) {
            o->html = val;
        } else if (!strcmp(a, "--memory")) {
            o->memory = 1;
        } else if (!strcmp(a, "--fix")) {
            o->fix = 1;
        } else if (!strcmp(a, "--yes")) {
            o->yes = 1;
        } else if (!strcmp(a, "--cluster")) {
            o->cluster = 1;
        } else if (!strcmp(a, "--from-replicas")) {
            o->from_replicas = 1;
        } else {
            usage_error("unknown argument '%s'", argv[i]);
            return -1;
        }
    }
    if (o->config == NULL) {
        usage_error("%s", "--config FILE is required (the rules to audit against)");
        return -1;
    }
    if (o->yes && !o->fix) {
        usage_error("%s", "--yes only makes sense with --fix");
        return -1;
    }
    if (o->from_replicas && !o->cluster) {
        usage_error("%s", "--from-replicas goes with --cluster");
        return -1;
    }
    if (o->from_replicas && o->yes) {
        usage_error("%s", "--fix --yes writes: not with --from-replicas (replicas are read-only)");
        return -1;
    }
    if (o->cluster && o->db != 0) {
        usage_error("%s", "--cluster: a cluster has database 0 only");
        return -1;
    }
    if (o->count == 0) {
        o->count = AUDIT_DEFAULT_COUNT;
        /* Under a rate, smaller rounds keep the load smooth (about ten a second). */
        if (o->rate > 0)
            o->count = o->rate / 10 < 10 ? 10 : o->rate / 10 > AUDIT_DEFAULT_COUNT
                     ? AUDIT_DEFAULT_COUNT : o->rate / 10;
    }
    return 0;
}

/* ---- batches ------------------------------------------------------------ */

static struct batch *batch_get(struct scan *s)
{
    struct batch *b = s->free_batches;
    if (b != NULL) {
        s->free_batches = b->next_free;
        b->n = 0;
        b->alen = 0;
        return b;
    }
    return xcalloc(1, sizeof *b);
}

static void batch_put(struct scan *s, struct batch *b)
{
    b->next_free = s->free_batches;
    s->free_batches = b;
}

static void batch_free(struct batch *b)
{
    free(b->off);
    free(b->len);
    free(b->arena);
    free(b->pttl);
    free(b->mem);
    free(b->type);
    free(b->hash);
    free(b->rule);
    free(b);
}

static void batch_reserve(struct batch *b, size_t n)
{
    if (b->cap >= n)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n)
        cap *= 2;
    b->off = xrealloc(b->off, cap * sizeof *b->off);
    b->len = xrealloc(b->len, cap * sizeof *b->len);
    b->pttl = xrealloc(b->pttl, cap * sizeof *b->pttl);
    b->mem = xrealloc(b->mem, cap * sizeof *b->mem);
    b->type = xrealloc(b->type, cap * sizeof *b->type);
    b->hash = xrealloc(b->hash, cap * sizeof *b->hash);
    b->rule = xrealloc(b->rule, cap * sizeof *b->rule);
    b->cap = cap;
}

static void batch_push(struct batch *b, const char *key, size_t len)
{
    batch_reserve(b, b->n + 1);
    if (b->acap - b->alen < len) {
        size_t cap = b->acap ? b->acap : 64 * 1024;
        while (cap - b->alen < len)
            cap *= 2;
        b->arena = xrealloc(b->arena, cap);
        b->acap = cap;
    }
    memcpy(b->arena + b->alen, key, len);
    b->off[b->n] = b->alen;
    b->len[b->n] = len;
    b->pttl[b->n] = -2;
    b->mem[b->n] = -1;
    b->type[b->n] = KTYPE_NONE;
    b->alen += len;
    b->n++;
}

/* ---- keys already seen -------------------------------------------------- */

static uint64_t key_hash(const char *p, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    /* FNV leaves the high bits weak for short keys; the slot is taken from
     * the low bits, so finish with splitmix64's mixer. */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h ? h : 1;
}

/* Size the set for about n keys, so it does not grow (and copy) as it fills. */
static void seen_init(struct seen_set *ss, uint64_t n)
{
    size_t cap = 1 << 16;
    while (cap < n * 2 + 2)
        cap *= 2;
    ss->v = xcalloc(cap, sizeof *ss->v);
    ss->cap = cap;
    ss->n = 0;
}

/* Adds h; returns 1 if it was there already. */
static int seen_add(struct seen_set *ss, uint64_t h)
{
    if ((ss->n + 1) * 2 > ss->cap) {
        size_t ncap = ss->cap * 2;
        uint64_t *nv = xcalloc(ncap, sizeof *nv);
        for (size_t i = 0; i < ss->cap; i++) {
            if (ss->v[i] == 0)
                continue;
            size_t j = ss->v[i] & (ncap - 1);
            while (nv[j] != 0)
                j = (j + 1) & (ncap - 1);
            nv[j] = ss->v[i];
        }
        free(ss->v);
        ss->v = nv;
        ss->cap = ncap;
    }
    size_t i = h & (ss->cap - 1);
    while (ss->v[i] != 0) {
        if (ss->v[i] == h)
            return 1;
        i = (i + 1) & (ss->cap - 1);
    }
    ss->v[i] = h;
    ss->n++;
    return 0;
}

#define SEEN_PREFETCH 8     /* keys ahead: enough to cover a memory access */

/* ---- reply callbacks ------------------------------------------------------
 *
 * hiredis calls these while it parses; they write into the batch of the
 * segment at the head of the queue (replies come in the order commands went
 * out). Each returns a non-NULL token because NULL means "out of memory" to
 * the reader; nothing is allocated, so freeObject has nothing to do. */

static char reply_token;

static struct scan *task_scan(const redisReadTask *task)
{
    return task->privdata;
}

static void reply_unexpected(struct scan *s, const char *what)
{
    if (s->reply_bad)
        return;
    s->reply_bad = 1;
    static const char *names[] = { "SCAN", "PTTL/TYPE", "EXPIRE" };
    snprintf(s->reply_err, sizeof s->reply_err, "unexpected %s in a reply to %s",
             what, names[seg_at(s, 0)->kind]);
}

/* Which command of the head KEYS segment the reply being read answers. */
static int keys_cmd(const struct scan *s, const struct seg *sg, size_t *key)
{
    *key = sg->done / (size_t)s->per_key;
    return (int)(sg->done % (size_t)s->per_key);   /* 0 PTTL, 1 TYPE, 2 MEMORY USAGE */
}

static void *on_string(const redisReadTask *task, char *str, size_t len)
{
    struct scan *s = task_scan(task);
    struct seg *sg = seg_at(s, 0);

    if (task->type == REDIS_REPLY_ERROR) {
        if (!s->reply_bad) {
            s->reply_bad = 1;
            snprintf(s->reply_err, sizeof s->reply_err, "%.*s", (int)len, str);
        }
        return &reply_token;
    }
    if (sg->kind == SEG_SCAN && task->parent != NULL) {
        if (task->parent->parent == NULL && task->idx == 0) {
            if (len >= sizeof s->cursor) {
                reply_unexpected(s, "cursor");
                return &reply_token;
            }
            memcpy(s->cursor, str, len);
            s->cursor[len] = '\0';
        } else if (task->parent->parent != NULL) {
            batch_push(sg->b, str, len);
        }
        return &reply_token;
    }
    size_t k;
    if (sg->kind == SEG_KEYS && task->parent == NULL && keys_cmd(s, sg, &k) == 1) {
        sg->b->type[k] = (unsigned char)arep_ktype_parse(str, len);
        return &reply_token;
    }
    reply_unexpected(s, "string");
    return &reply_token;
}

static void *on_integer(const redisReadTask *task, long long v)
{
    struct scan *s = task_scan(task);
    struct seg *sg = seg_at(s, 0);
    size_t k;
    if (task->parent == NULL && sg->kind == SEG_KEYS) {
        int cmd = keys_cmd(s, sg, &k);
        if (cmd == 0) {
            sg->b->pttl[k] = v;
            return &reply_token;
        }
        if (cmd == 2) {
            sg->b->mem[k] = v;
            return &reply_token;
        }
    }
    if (task->parent == NULL && sg->kind == SEG_FIX) {
        sg->b->pttl[sg->done] = v;  /* EXPIRE answer: 1 set, 0 left alone */
        return &reply_token;
    }
    reply_unexpected(s, "integer");
    return &reply_token;
}

static void *on_nil(const redisReadTask *task)
{
    struct scan *s = task_scan(task);
    struct seg *sg = seg_at(s, 0);
    size_t k;
    /* MEMORY USAGE of a key that is gone. */
    if (task->parent == NULL && sg->kind == SEG_KEYS && keys_cmd(s, sg, &k) == 2) {
        sg->b->mem[k] = -1;
        return &reply_token;
    }
    reply_unexpected(s, "nil");
    return &reply_token;
}

static void *on_array(const redisReadTask *task, int elements)
{
    struct scan *s = task_scan(task);
    struct seg *sg = seg_at(s, 0);
    if (sg->kind == SEG_SCAN) {
        if (task->parent == NULL)
            s->cursor[0] = '\0';       /* a reply without one must not reuse the last */
        else if (elements > 0)
            batch_reserve(sg->b, sg->b->n + (size_t)elements);
        return &reply_token;
    }
    reply_unexpected(s, "array");
    return &reply_token;
}

static void on_free(void *obj)
{
    (void)obj;
}

static redisReplyObjectFunctions scan_functions = {
    on_string, on_array, on_integer, on_nil, on_free
};

/* ---- pipeline ----------------------------------------------------------- */

static void seg_push(struct scan *s, enum seg_kind kind, struct batch *b, size_t total)
{
    ASSERT(s->q.len < AUDIT_QUEUE);
    struct seg *sg = ring_push(&s->q, sizeof *sg, AUDIT_QUEUE);
    sg->kind = kind;
    sg->b = b;
    sg->total = total;
    sg->done = 0;
}

static void append_scan(struct scan *s, const char *cursor)
{
    char count[24];
    snprintf(count, sizeof count, "%lld", s->o->count);
    const char *argv[6] = { "SCAN", cursor, "COUNT", count, "MATCH", s->o->match };
    size_t lens[6];
    int argc = s->o->match ? 6 : 4;
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    abuf_command(&s->out, argc, argv, lens);
    seg_push(s, SEG_SCAN, batch_get(s), 1);
}

/* Sleep so that, counting `units` more keys, we stay under --rate. The
 * charge is paid before the keys are read, so no burst ever exceeds it. */
static void pace(struct scan *s, uint64_t units)
{
    /* After a signal nothing new goes out: no reason to wait. */
    if (s->o->rate <= 0 || audit_interrupted)
        return;
    s->paid += units;
    uint64_t due = s->t0 + s->paid * 1000 / (uint64_t)s->o->rate;
    uint64_t now = now_ms_monotonic();
    if (due <= now)
        return;
    uint64_t ms = due - now;
    struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };
    /* A signal ends the sleep early; the loop then sees audit_interrupted. */
    nanosleep(&ts, NULL);
}

/* SCAN reply read: send the next SCAN and the per-key commands for its keys. */
static int on_scan_done(struct scan *s, struct batch *b, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long cursor = strtoull(s->cursor, &end, 10);
    if (errno != 0 || *end != '\0' || s->cursor[0] == '\0') {
        snprintf(err, errlen, "SCAN returned a bad cursor '%s'", s->cursor);
        batch_put(s, b);
        return -1;
    }
    /* Redis walks the table in reverse-bit order: the reversed cursor grows
     * steadily from 0 to 2^64, which makes it a progress measure that works
     * with --match too. */
    unsigned long long rev = 0;
    for (int i = 0; i < 64; i++)
        rev |= ((cursor >> i) & 1ULL) << (63 - i);
    s->fraction = cursor == 0 ? 1.0 : (double)rev / 18446744073709551616.0;

    pace(s, s->o->match && (uint64_t)s->o->count > b->n ? (uint64_t)s->o->count : b->n);
    if (audit_interrupted) {
        batch_put(s, b);
        return 0;
    }

    s->out.len = 0;
    if (cursor != 0)
        append_scan(s, s->cursor);
    else
        s->walked = 1;
    if (b->n > 0) {
        for (size_t i = 0; i < b->n; i++) {
            const char *key = b->arena + b->off[i];
            abuf_command_key(&s->out, "$4\r\nPTTL\r\n", 10, key, b->len[i]);
            abuf_command_key(&s->out, "$4\r\nTYPE\r\n", 10, key, b->len[i]);
            if (s->o->memory) {
                const char *argv[3] = { "MEMORY", "USAGE", key };
                size_t lens[3] = { 6, 5, b->len[i] };
                abuf_command(&s->out, 3, argv, lens);
            }
        }
        seg_push(s, SEG_KEYS, b, b->n * (size_t)s->per_key);
    } else {
        batch_put(s, b);
    }
    if (s->out.len == 0)
        return 0;
    return aconn_send(s->c, s->out.p, s->out.len, err, errlen);
}

/* PTTL/TYPE replies of a batch read: classify, and queue fixes. */
static int on_keys_done(struct scan *s, struct batch *b, char *err, size_t errlen)
{
    struct arep *rep = s->rep;
    struct batch *fix = NULL;

    for (size_t i = 0; i < b->n; i++)
        b->hash[i] = key_hash(b->arena + b->off[i], b->len[i]);
    for (size_t i = 0; i < b->n; i++) {
        const char *key = b->arena + b->off[i];
        size_t len = b->len[i];
        if (i + SEEN_PREFETCH < b->n)
            __builtin_prefetch(&s->seen.v[b->hash[i + SEEN_PREFETCH] & (s->seen.cap - 1)]);
        /* Batches are classified in SCAN order, so the first sighting counts. */
        if (seen_add(&s->seen, b->hash[i])) {
            rep->duplicates++;
            continue;
        }
        const struct rule *r;
        int g = arep_classify(rep, &s->cfg->rules, key, len, b->pttl[i],
                              (enum arep_ktype)b->type[i], s->o->memory ? b->mem[i] : -1, &r);
        if (g != AREP_LEAKED || rep->fix == AREP_FIX_OFF)
            continue;
        if (r->ttl <= 0) {
            rep->fix_no_ttl++;
            continue;
        }
        rep->fix_candidates++;
        if (rep->fix != AREP_FIX_APPLY)
            continue;
        if (fix == NULL)
            fix = batch_get(s);
        batch_push(fix, key, len);
        fix->rule[fix->n - 1] = r;
    }
    batch_put(s, b);
    if (fix == NULL)
        return 0;

    pace(s, fix->n);
    if (audit_interrupted) {
        batch_put(s, fix);
        return 0;
    }
    s->out.len = 0;
    for (size_t i = 0; i < fix->n; i++) {
        char ttl[24];
        snprintf(ttl, sizeof ttl, "%lld", fix->rule[i]->ttl);
        const char *argv[4] = { "EXPIRE", fix->arena + fix->off[i], ttl, "NX" };
        size_t lens[4] = { 6, fix->len[i], strlen(ttl), 2 };
        abuf_command(&s->out, 4, argv, lens);
    }
    seg_push(s, SEG_FIX, fix, fix->n);
    return aconn_send(s->c, s->out.p, s->out.len, err, errlen);
}

/* One audit_fix event as a JSON line, in the event log's own encoding
 * (docs/events.md: strings, log_keys). Kept in one function so it can move
 * into the events module without touching the scan. b is scratch space. */
static void event_fix(FILE *f, struct sbuf *b, const struct config *cfg,
                      const char *key, size_t len, const struct rule *r)
{
    uint64_t ms = now_ms_wall();
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    char ts[40];
    gmtime_r(&secs, &tm);
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - n, ".%03uZ", (unsigned)(ms % 1000));

    b->len = 0;
    sbuf_printf(b, "{\"ts\":\"%s\",\"event\":\"%s\",\"rule\":", ts, event_name(EVN_AUDIT_FIX));
    evbuf_json_str(b, r->label, strlen(r->label));
    evbuf_adds(b, ",\"prefix\":");
    evbuf_json_str(b, r->prefix, r->prefix_len);
    if (cfg->log_keys == LOG_KEYS_FULL) {
        evbuf_adds(b, ",\"key\":");
        evbuf_json_str(b, key, len);
    } else if (cfg->log_keys == LOG_KEYS_HASH) {
        char hex[17];
        events_key_hash(key, len, hex);
        sbuf_printf(b, ",\"key_hash\":\"%s\"", hex);
    }
    sbuf_printf(b, ",\"ttl\":%lld}\n", r->ttl);
    fwrite(b->p, 1, b->len, f);
}

static void on_fix_done(struct scan *s, struct batch *b)
{
    struct arep *rep = s->rep;
    for (size_t i = 0; i < b->n; i++) {
        if (b->pttl[i] == 1) {
            rep->fixed++;
            if (s->events != NULL)
                event_fix(s->events, &s->event_line, s->cfg, b->arena + b->off[i], b->len[i],
                          b->rule[i]);
        } else if (b->pttl[i] == 0) {
            rep->fix_skipped++;
        }
        /* Anything else was an error reply, counted when it was read. */
    }
    if (s->events != NULL)
        fflush(s->events);
    batch_put(s, b);
}

/* ---- progress ------------------------------------------------------------ */

static void progress(struct scan *s, int final)
{
    uint64_t now = now_ms_monotonic();
    uint64_t every = s->tty ? 100 : 5000;
    if (!final && now - s->progress_at < every)
        return;
    s->progress_at = now;
    if (final) {
        if (s->tty)
            fputs("\r\033[K", stderr);
        return;
    }
    uint64_t keys = s->rep->seen + s->rep->expired_during + s->rep->duplicates;
    double secs = (double)(now - s->t0) / 1000.0;
    double rate = secs > 0 ? (double)keys / secs : 0;
    /* The cursor runs a round ahead of the keys classified; without --match
     * the share of INFO's key count is the closer of the two. */
    double f = s->fraction;
    if (s->o->match == NULL && s->rep->info_keys[0] > 0
        && (double)keys / (double)s->rep->info_keys[0] < f)
        f = (double)keys / (double)s->rep->info_keys[0];
    char eta[32] = "?";
    if (f > 0.001) {
        double left = secs * (1.0 - f) / f;
        snprintf(eta, sizeof eta, "%d:%02d", (int)(left / 60), (int)left % 60);
    }
    if (s->tty) {
        char bar[31];
        int filled = (int)(f * 30);
        for (int i = 0; i < 30; i++)
            bar[i] = i < filled ? '#' : '.';
        bar[30] = '\0';
        fprintf(stderr, "\r\033[K[%s] %3d%%  %llu keys  %.0f keys/s  ETA %s",
                bar, (int)(f * 100), (unsigned long long)keys, rate, eta);
    } else {
        fprintf(stderr, "ttlguard audit: %d%% %llu keys, %.0f keys/s, ETA %s\n",
                (int)(f * 100), (unsigned long long)keys, rate, eta);
    }
    fflush(stderr);
}

/* Walk the keyspace. Returns 0 (also when interrupted) or -1 with err. */
static int scan_run(struct scan *s, char *err, size_t errlen)
{
    aconn_use_functions(s->c, &scan_functions, s);
    s->out.len = 0;
    append_scan(s, "0");
    if (aconn_send(s->c, s->out.p, s->out.len, err, errlen) == -1)
        return -1;

    while (s->q.len > 0 && audit_interrupted < 2) {
        void *reply;
        s->reply_bad = 0;
        if (aconn_read(s->c, &reply, err, errlen) == -1) {
            if (aconn_interrupted(s->c) && audit_interrupted == 1)
                continue;       /* the first signal broke the wait: keep draining */
            return audit_interrupted ? 0 : -1;
        }
        struct seg *sg = seg_at(s, 0);
        if (s->reply_bad) {
            if (sg->kind != SEG_FIX) {
                snprintf(err, errlen, "%s", s->reply_err);
                return -1;
            }
            /* A failed EXPIRE (ACL, a read-only node...) is counted, not fatal. */
            sg->b->pttl[sg->done] = -1;
            if (s->rep->fix_errors++ == 0)
                snprintf(s->rep->fix_error, sizeof s->rep->fix_error, "%s", s->reply_err);
        }
        if (++sg->done < sg->total)
            continue;

        struct seg done = *sg;
        ring_pop(&s->q);
        int rc = 0;
        switch (done.kind) {
        case SEG_SCAN:
            rc = on_scan_done(s, done.b, err, errlen);
            break;
        case SEG_KEYS:
            rc = on_keys_done(s, done.b, err, errlen);
            break;
        case SEG_FIX:
            on_fix_done(s, done.b);
            break;
        }
        if (rc == -1)
            return -1;
        progress(s, 0);
    }
    return 0;
}

/* ---- setup --------------------------------------------------------------- */

/* Value of "name:" in an INFO text, copied into out. */
static void info_field(const char *info, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *p = info; p != NULL && *p; ) {
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            size_t len = strcspn(v, "\r\n");
            snprintf(out, outlen, "%.*s", (int)len, v);
            return;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
}

static int simple_call(struct aconn *c, char *err, size_t errlen, const char *what,
                       redisReply **out, int argc, const char **argv)
{
    redisReply *r;
    if (aconn_call(c, &r, err, errlen, argc, argv) == -1)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s: %s", what, r->str);
        freeReplyObject(r);
        return -1;
    }
    if (out != NULL)
        *out = r;
    else
        freeReplyObject(r);
    return 0;
}

/* INFO: role, version and the db's keys/expires into rep (slot 0 start, 1 end). */
static int read_info(struct aconn *c, struct arep *rep, int slot, char *err, size_t errlen)
{
    const char *argv[] = { "INFO" };
    redisReply *r;
    if (simple_call(c, err, errlen, "INFO", &r, 1, argv) == -1)
        return -1;
    if (r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        snprintf(err, errlen, "INFO: unexpected reply");
        return -1;
    }
    char field[256], db[16];
    info_field(r->str, "role", field, sizeof field);
    if (field[0])
        snprintf(rep->role, sizeof rep->role, "%.15s", strcmp(field, "slave") == 0 ? "replica" : field);
    info_field(r->str, "redis_version", rep->redis_version, sizeof rep->redis_version);
    snprintf(db, sizeof db, "db%d", rep->db);
    info_field(r->str, db, field, sizeof field);
    long long keys = 0, expires = 0;
    /* An empty db has no line at all: zero keys. */
    if (field[0])
        sscanf(field, "keys=%lld,expires=%lld", &keys, &expires);
    rep->info_keys[slot] = keys;
    rep->info_expires[slot] = expires;
    freeReplyObject(r);
    return 0;
}

static int connect_backend(const struct scan *s, const char *backend, struct arep *rep,
                           struct aconn **out, char *err, size_t errlen)
{
    const struct audit_opts *o = s->o;
    const struct config *cfg = s->cfg;
    struct addr a;
    char why[256];
    if (addr_parse(backend, &a, why, sizeof why) == -1) {
        snprintf(err, errlen, "backend %s", why);
        return -1;
    }
    addr_format(&a, rep->backend, sizeof rep->backend);
    if (cfg->backend_tls_ctx != NULL && a.is_unix) {
        snprintf(err, errlen, "backend_tls = on needs a host:port backend, not %s", backend);
        return -1;
    }
    struct aconn *c = aconn_open(&a, cfg->connect_timeout ? cfg->connect_timeout : 3000,
                                 AUDIT_IO_TIMEOUT_MS, cfg->backend_tls_ctx,
                                 s->tls_name != NULL ? s->tls_name : cfg->backend_tls_server_name,
                                 err, errlen);
    if (c == NULL)
        return -1;

    if (cfg->backend_password != NULL) {
        const char *argv[3] = { "AUTH", cfg->backend_username, cfg->backend_password };
        int argc = 3;
        if (cfg->backend_username == NULL) {
            argv[1] = cfg->backend_password;
            argc = 2;
        }
        if (simple_call(c, err, errlen, "AUTH", NULL, argc, argv) == -1)
            goto fail;
    }
    /* Name the connection so an operator who sees it in CLIENT LIST knows
     * what it is. Old servers or strict ACLs may refuse: not worth failing. */
    const char *setname[] = { "CLIENT", "SETNAME", "ttlguard-audit" };
    redisReply *r;
    if (aconn_call(c, &r, err, errlen, 3, setname) == -1)
        goto fail;
    freeReplyObject(r);
    if (o->from_replicas) {
        const char *argv[] = { "READONLY" };   /* a replica serves reads only after it */
        if (simple_call(c, err, errlen, "READONLY", NULL, 1, argv) == -1)
            goto fail;
    }
    if (o->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", o->db);
        const char *argv[] = { "SELECT", db };
        if (simple_call(c, err, errlen, "SELECT", NULL, 2, argv) == -1)
            goto fail;
    }
    if (read_info(c, rep, 0, err, errlen) == -1)
        goto fail;
    *out = c;
    return 0;
fail:
    aconn_close(c);
    return -1;
}

/* Refuse --fix --yes where it cannot work, before scanning for minutes. */
static int fix_preflight(const struct arep *rep, char *err, size_t errlen);
static const redisReply *reply_field(const redisReply *r, const char *key);

/* Audit one server (a node of a cluster, or the backend) into s->rep.
 * -1 with err on a connection or backend error; an interruption is not one
 * (rep->interrupted says it). */
static int audit_node(struct scan *s, const char *backend, char *err, size_t errlen)
{
    struct arep *rep = s->rep;
    if (connect_backend(s, backend, rep, &s->c, err, errlen) == -1)
        return -1;
    if (rep->fix == AREP_FIX_APPLY && fix_preflight(rep, err, errlen) == -1)
        return -1;
    /* With --match only some keys count; the set then grows as needed. */
    free(s->seen.v);
    memset(&s->seen, 0, sizeof s->seen);
    seen_init(&s->seen, s->o->match || rep->info_keys[0] < 0 ? 0 : (uint64_t)rep->info_keys[0]);
    s->walked = 0;
    s->fraction = 0;
    uint64_t t0 = now_ms_monotonic();
    s->t0 = t0;
    s->progress_at = t0;
    if (scan_run(s, err, errlen) == -1) {
        progress(s, 1);
        return -1;
    }
    progress(s, 1);
    rep->elapsed_ms += now_ms_monotonic() - t0;
    /* A signal after the last reply changes nothing: the report is whole. */
    rep->interrupted = !(s->walked && s->q.len == 0);
    if (!rep->interrupted) {
        aconn_use_functions(s->c, NULL, NULL);
        if (read_info(s->c, rep, 1, err, errlen) == -1) {
            /* The audit itself is complete; only the comparison is lost. */
            fprintf(stderr, "ttlguard audit: %s\n", err);
            rep->info_keys[1] = -1;
        }
    }
    return 0;
}

/* A CLUSTER SHARDS node as host:port (its TLS port with backend_tls) into
 * addr, and the host name it announces (its certificate's name) into name. */
static int shard_node_addr(const redisReply *node, int tls, char *addr, size_t addrlen,
                           char *name, size_t namelen)
{
    const redisReply *ip = reply_field(node, "ip"), *host = reply_field(node, "hostname");
    const redisReply *port = reply_field(node, tls ? "tls-port" : "port");
    if (port == NULL)
        port = reply_field(node, tls ? "port" : "tls-port");
    if (ip == NULL || ip->str == NULL || port == NULL || port->type != REDIS_REPLY_INTEGER)
        return -1;
    snprintf(addr, addrlen, strchr(ip->str, ':') ? "[%s]:%lld" : "%s:%lld", ip->str,
             port->integer);
    snprintf(name, namelen, "%s", host != NULL && host->str != NULL ? host->str : "");
    return 0;
}

/* The nodes to read, one per shard of the cluster seed is in: its primary,
 * or with --from-replicas an online replica when it has one. Returns how
 * many were put in nodes (host:port strings, malloc'ed) and names (their
 * host names, "" when they announce none), or -1 with err. */
static int cluster_nodes(struct scan *s, const char *seed, char **nodes, char **names, int max,
                         char *err, size_t errlen)
{
    const char *argv[] = { "CLUSTER", "SHARDS" };
    redisReply *r;
    int n = 0;
    if (connect_backend(s, seed, s->rep, &s->c, err, errlen) == -1)
        return -1;
    if (simple_call(s->c, err, errlen, "--cluster: CLUSTER SHARDS", &r, 2, argv) == -1) {
        aconn_close(s->c);
        s->c = NULL;
        return -1;
    }
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && n < max; i++) {
        const redisReply *list = reply_field(r->element[i], "nodes"), *pick = NULL;
        for (size_t j = 0; list != NULL && list->type == REDIS_REPLY_ARRAY && j < list->elements;
             j++) {
            const redisReply *node = list->element[j];
            const redisReply *role = reply_field(node, "role"), *health = reply_field(node, "health");
            int primary = role != NULL && role->str != NULL && strcmp(role->str, "master") == 0;
            int online = health == NULL || (health->str != NULL && strcmp(health->str, "online") == 0);
            if (primary && pick == NULL)
                pick = node;        /* the fallback when no replica will do */
            if (s->o->from_replicas && !primary && online) {
                pick = node;
                break;
            }
        }
        char addr[300], name[256];
        if (pick == NULL || shard_node_addr(pick, s->cfg->backend_tls, addr, sizeof addr, name,
                                            sizeof name) == -1)
            continue;
        names[n] = xstrdup(name);
        nodes[n++] = xstrdup(addr);
    }
    freeReplyObject(r);
    aconn_close(s->c);
    s->c = NULL;
    if (n == 0)
        snprintf(err, errlen, "--cluster: %s lists no shard with a reachable node", seed);
    return n > 0 ? n : -1;
}

/* --cluster: every node cluster_nodes() chose, into one report with a line
 * per node. */
static int audit_cluster(struct scan *s, const char *seed, char *err, size_t errlen)
{
    struct arep *rep = s->rep;
    char *nodes[AREP_MAX_NODES], *names[AREP_MAX_NODES];
    int n = cluster_nodes(s, seed, nodes, names, AREP_MAX_NODES, err, errlen), rc = 0;
    long long keys[2] = { 0, 0 }, expires[2] = { 0, 0 };
    if (n > 0)
        rep->nodes = xcalloc((size_t)n, sizeof *rep->nodes);
    for (int i = 0; i < n && rc == 0 && !rep->interrupted; i++) {
        uint64_t seen = rep->seen, leaked = arep_leaked(rep);
        s->tls_name = names[i][0] != '\0' ? names[i] : NULL;
        rc = audit_node(s, nodes[i], err, errlen);
        s->tls_name = NULL;
        aconn_close(s->c);
        s->c = NULL;
        if (rc == -1)
            break;
        struct arep_node *nd = &rep->nodes[rep->nnodes++];
        snprintf(nd->name, sizeof nd->name, "%s", rep->backend);
        snprintf(nd->role, sizeof nd->role, "%s", rep->role);
        nd->keys = rep->seen - seen;
        nd->leaked = arep_leaked(rep) - leaked;
        for (int k = 0; k < 2; k++) {
            keys[k] = keys[k] < 0 || rep->info_keys[k] < 0 ? -1 : keys[k] + rep->info_keys[k];
            expires[k] += rep->info_expires[k];
        }
    }
    for (int i = 0; i < (n > 0 ? n : 0); i++) {
        free(nodes[i]);
        free(names[i]);
    }
    if (rc == -1 || n < 0)
        return -1;
    memcpy(rep->info_keys, keys, sizeof keys);
    memcpy(rep->info_expires, expires, sizeof expires);
    snprintf(rep->backend, sizeof rep->backend, "cluster of %s (%zu %s)", seed, rep->nnodes,
             s->o->from_replicas ? "shards, read from replicas" : "primaries");
    return 0;
}

/* The value of key in a RESP2 flat key-value array (CLUSTER SHARDS). */
static const redisReply *reply_field(const redisReply *r, const char *key)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, key) == 0)
            return r->element[i + 1];
    return NULL;
}

/* Refuse --fix --yes where it cannot work, before scanning for minutes. */
static int fix_preflight(const struct arep *rep, char *err, size_t errlen)
{
    if (strcmp(rep->role, "replica") == 0) {
        snprintf(err, errlen, "--fix --yes writes, and %s is a replica: run it against the primary",
                 rep->backend);
        return -1;
    }
    if (rep->redis_version[0] && atoi(rep->redis_version) < 7) {
        snprintf(err, errlen, "--fix needs EXPIRE ... NX (Redis 7.0 or later); %s runs %s",
                 rep->backend, rep->redis_version);
        return -1;
    }
    return 0;
}

/* --fix --yes records each fix in the config's event log: *s->events
 * opened for appending (or stderr). 0, or -1 with err set. */
static int open_fix_events(struct scan *s, char *err, size_t errlen)
{
    const char *path = s->cfg->events;
    if (path == NULL)
        return 0;
    if (config_events_to_stderr(path)) {
        s->events = stderr;
        return 0;
    }
    s->events = fopen(path, "a");
    if (s->events == NULL) {
        snprintf(err, errlen, "cannot open the event log %s to record fixes: %s", path,
                 strerror(errno));
        return -1;
    }
    s->events_close = 1;
    return 0;
}

/* The report on stdout (text or --json) and in the --html page, which is
 * closed here. 0, or -1 with err set when the page could not be written. */
static int write_reports(const struct audit_opts *o, const struct arep *rep, int status,
                         FILE *html, char *err, size_t errlen)
{
    if (o->json)
        arep_print_json(stdout, rep, status);
    else
        arep_print_text(stdout, rep, status);
    fflush(stdout);
    err[0] = '\0';
    if (html == NULL)
        return 0;
    arep_print_html(html, rep, status);
    int bad = ferror(html);
    if (fclose(html) != 0 || bad) {
        snprintf(err, errlen, "--html %s: cannot write: %s", o->html,
                 strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

/* What a scan holds at its end: the event log, the connection, the
 * batches queued and free, the buffers. */
static void scan_free(struct scan *s)
{
    if (s->events_close)
        fclose(s->events);
    else if (s->events != NULL)
        fflush(s->events);
    aconn_close(s->c);
    for (uint32_t i = 0; i < s->q.len; i++)
        batch_put(s, seg_at(s, i)->b);
    ring_free(&s->q);
    while (s->free_batches != NULL) {
        struct batch *b = s->free_batches;
        s->free_batches = b->next_free;
        batch_free(b);
    }
    abuf_free(&s->out);
    free(s->event_line.p);
    free(s->seen.v);
}

int audit_main(int argc, char **argv)
{
    struct audit_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc == 1) {
        fputs(usage_text, stdout);
        return AUDIT_EXIT_CLEAN;
    }
    if (rc == -1)
        return AUDIT_EXIT_ERROR;

    char err[512] = "";
    struct config cfg;
    if (config_load(o.config, &cfg, err, sizeof err) == -1) {
        fprintf(stderr, "ttlguard audit: %s\n", err);
        return AUDIT_EXIT_ERROR;
    }

    /* --html: a file that cannot be made fails now, not after the scan. */
    FILE *html = o.html ? fopen(o.html, "w") : NULL;
    if (o.html && html == NULL) {
        fprintf(stderr, "ttlguard audit: --html %s: %s\n", o.html, strerror(errno));
        config_free(&cfg);
        return AUDIT_EXIT_ERROR;
    }

    struct arep rep;
    arep_init(&rep, &cfg.rules);
    rep.config_path = o.config;
    rep.db = o.db;
    rep.match = o.match;
    rep.with_memory = o.memory;
    rep.top = o.top;
    rep.fix = !o.fix ? AREP_FIX_OFF : o.yes ? AREP_FIX_APPLY : AREP_FIX_DRY_RUN;

    struct scan s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    s.cfg = &cfg;
    s.rep = &rep;
    s.per_key = o.memory ? 3 : 2;
    s.tty = isatty(STDERR_FILENO);

    int status = AUDIT_EXIT_ERROR;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a blocked read or sleep must return so we can report. */
    audit_interrupted = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    if (rep.fix == AREP_FIX_APPLY && open_fix_events(&s, err, sizeof err) == -1)
        goto done;

    const char *backend = o.backend ? o.backend : cfg.backend;
    if (o.cluster) {
        if (audit_cluster(&s, backend, err, sizeof err) == -1)
            goto done;
    } else if (audit_node(&s, backend, err, sizeof err) == -1) {
        goto done;
    }

    if (rep.interrupted)
        status = AUDIT_EXIT_INTERRUPTED;
    else if (rep.fix_errors > 0)
        status = AUDIT_EXIT_ERROR;
    else
        status = arep_leaked(&rep) > 0 ? AUDIT_EXIT_LEAKS : AUDIT_EXIT_CLEAN;
    if (write_reports(&o, &rep, status, html, err, sizeof err) == -1)
        status = AUDIT_EXIT_ERROR;
    html = NULL;

done:
    if (status == AUDIT_EXIT_ERROR && err[0])
        fprintf(stderr, "ttlguard audit: %s\n", err);
    if (html != NULL) {             /* no report to write: no page either */
        fclose(html);
        unlink(o.html);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    scan_free(&s);
    arep_free(&rep);
    config_free(&cfg);
    return status;
}
