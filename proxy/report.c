/*
 * report: read event logs, add the counts up, print a summary.
 *
 *   FILE... ──getline──▶ json_object() ──fields──▶ tally_*() ──sort──▶ stdout
 *
 * The logs are the proxy's own JSON lines (docs/events.md), so the parser
 * reads one flat object per line: strings (decoded back to the bytes the
 * proxy escaped, \udcXX included), numbers, true/false/null and arrays of
 * strings; an array's objects are kept as text, read one by one the same way
 * when asked for (obj_next(): audit_pass's "rules"); other nested values
 * are skipped. A line that is not such an object (a
 * stderr log line when events = stderr, a line cut by a full disk) is
 * counted and skipped, never fatal.
 *
 * Counting: an event line without "count" is one occurrence, a folded line
 * is "count" occurrences. Keys are tallied by the lines that name them (a
 * folded line names only its last key), so "top keys" ranks the keys seen
 * most, not exact per-key counts.
 *
 * --html FILE also writes the summary as one page with charts (html.h):
 * for the chart of violations over time every violation line is kept as a
 * point (time, (rule, action), count), a folded line counting at the time
 * it was written, the end of its window.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audit_report.h"
#include "events.h"
#include "html.h"
#include "report.h"

#define FIELDS_MAX  48
#define ITEMS_MAX   16

enum jtype { J_NONE, J_STR, J_NUM, J_BOOL, J_NULL, J_ARR, J_OTHER };

struct jfield {
    char name[32];
    enum jtype type;
    struct sbuf s;             /* J_STR: decoded bytes; J_ARR: the string items, length-prefixed */
    struct sbuf objs;          /* J_ARR: the object items, raw text, length-prefixed (obj_next()) */
    long long num;
    int nitems;
};

struct jobj {
    struct jfield f[FIELDS_MAX];
    int n;
};

/* ---- JSON --------------------------------------------------------------- */

struct jin {
    const char *p, *end;
};

static void skip_ws(struct jin *in)
{
    while (in->p < in->end && (*in->p == ' ' || *in->p == '\t' || *in->p == '\r' || *in->p == '\n'))
        in->p++;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static void put_utf8(struct sbuf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    sbuf_add(b, u, n);
}

/* A string at in->p (on its opening quote), decoded into out (appended). */
static int json_string(struct jin *in, struct sbuf *out)
{
    if (in->p >= in->end || *in->p != '"')
        return -1;
    in->p++;
    while (in->p < in->end) {
        char c = *in->p++;
        if (c == '"')
            return 0;
        if (c != '\\') {
            sbuf_add(out, &c, 1);
            continue;
        }
        if (in->p >= in->end)
            return -1;
        c = *in->p++;
        switch (c) {
        case '"': case '\\': case '/': sbuf_add(out, &c, 1); break;
        case 'b': sbuf_add(out, "\b", 1); break;
        case 'f': sbuf_add(out, "\f", 1); break;
        case 'n': sbuf_add(out, "\n", 1); break;
        case 'r': sbuf_add(out, "\r", 1); break;
        case 't': sbuf_add(out, "\t", 1); break;
        case 'u': {
            unsigned cp, lo;
            if (in->end - in->p < 4 || hex4(in->p, &cp) != 0)
                return -1;
            in->p += 4;
            if (cp >= 0xdc80 && cp <= 0xdcff) {
                char byte = (char)(cp & 0xff);      /* a raw byte (see events.h) */
                sbuf_add(out, &byte, 1);
                break;
            }
            if (cp >= 0xd800 && cp < 0xdc00 && in->end - in->p >= 6 && in->p[0] == '\\' &&
                in->p[1] == 'u' && hex4(in->p + 2, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                in->p += 6;
            }
            put_utf8(out, cp);
            break;
        }
        default:
            return -1;
        }
    }
    return -1;
}

/* Skip any value (nested ones included). */
static int json_skip(struct jin *in)
{
    int depth = 0;
    struct sbuf scratch = { 0 };
    do {
        skip_ws(in);
        if (in->p >= in->end)
            goto fail;
        char c = *in->p;
        if (c == '"') {
            scratch.len = 0;
            if (json_string(in, &scratch) != 0)
                goto fail;
        } else if (c == '{' || c == '[') {
            depth++;
            in->p++;
        } else if (c == '}' || c == ']') {
            depth--;
            in->p++;
        } else if (c == ',' || c == ':') {
            in->p++;
        } else {
            /* A scalar, up to a delimiter; a NUL byte is part of it (strchr
             * would find the terminator), and a value is never empty, so
             * every turn moves on. */
            const char *start = in->p;
            while (in->p < in->end && (*in->p == '\0' || !strchr(",:]} \t\r\n", *in->p)))
                in->p++;
            if (in->p == start)
                in->p++;
        }
    } while (depth > 0);
    free(scratch.p);
    return 0;
fail:
    free(scratch.p);
    return -1;
}

/* An array item that is not a string: skipped; an object's text is kept in
 * f->objs, length-prefixed, to be read by obj_next() when asked for. */
static int json_item_skip(struct jin *in, struct jfield *f)
{
    const char *start = in->p;
    if (json_skip(in) != 0)
        return -1;
    if (*start == '{') {
        uint32_t len = (uint32_t)(in->p - start);
        sbuf_add(&f->objs, &len, sizeof len);
        sbuf_add(&f->objs, start, len);
    }
    return 0;
}

static int json_value(struct jin *in, struct jfield *f)
{
    skip_ws(in);
    if (in->p >= in->end)
        return -1;
    char c = *in->p;
    if (c == '"') {
        f->type = J_STR;
        return json_string(in, &f->s);
    }
    if (c == '[') {
        f->type = J_ARR;
        in->p++;
        for (;;) {
            skip_ws(in);
            if (in->p < in->end && *in->p == ']') {
                in->p++;
                return 0;
            }
            if (in->p < in->end && *in->p == '"') {
                struct sbuf item = { 0 };
                if (json_string(in, &item) != 0) {
                    free(item.p);
                    return -1;
                }
                uint32_t len = (uint32_t)item.len;
                sbuf_add(&f->s, &len, sizeof len);
                sbuf_add(&f->s, item.p, item.len);
                f->nitems++;
                free(item.p);
            } else if (json_item_skip(in, f) != 0) {
                return -1;
            }
            skip_ws(in);
            if (in->p < in->end && *in->p == ',')
                in->p++;
        }
    }
    if (c == '{') {
        f->type = J_OTHER;
        return json_skip(in);
    }
    const char *start = in->p;
    while (in->p < in->end && !strchr(",}] \t\r\n", *in->p))
        in->p++;
    size_t n = (size_t)(in->p - start);
    if (n == 4 && memcmp(start, "null", 4) == 0) {
        f->type = J_NULL;
    } else if ((n == 4 && memcmp(start, "true", 4) == 0) || (n == 5 && memcmp(start, "false", 5) == 0)) {
        f->type = J_BOOL;
        f->num = n == 4;
    } else {
        char tmp[32], *end;
        if (n == 0 || n >= sizeof tmp)
            return -1;
        memcpy(tmp, start, n);
        tmp[n] = '\0';
        double d = strtod(tmp, &end);
        /* The event log writes integers that fit a long long; anything else
         * (1e300, NaN) is not one of its lines. */
        if (*end != '\0' || !(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
            return -1;
        f->type = J_NUM;
        f->num = (long long)d;
    }
    return 0;
}

static void jobj_reset(struct jobj *o)
{
    for (int i = 0; i < o->n; i++) {
        o->f[i].s.len = 0;
        o->f[i].objs.len = 0;
        o->f[i].nitems = 0;
        o->f[i].type = J_NONE;
    }
    o->n = 0;
}

static void jfield_free(struct jfield *f)
{
    free(f->s.p);
    free(f->objs.p);
}

static void jobj_free(struct jobj *o)
{
    for (int i = 0; i < FIELDS_MAX; i++)
        jfield_free(&o->f[i]);
}

/* One line into o. Fields beyond FIELDS_MAX, and names longer than 31
 * bytes (none of ours), are skipped. */
static int json_object(const char *line, size_t len, struct jobj *o)
{
    struct jin in = { line, line + len };
    struct sbuf name = { 0 };
    jobj_reset(o);
    skip_ws(&in);
    if (in.p >= in.end || *in.p != '{')
        return -1;
    in.p++;
    for (;;) {
        skip_ws(&in);
        if (in.p < in.end && *in.p == '}')
            break;
        name.len = 0;
        if (json_string(&in, &name) != 0)
            goto fail;
        skip_ws(&in);
        if (in.p >= in.end || *in.p != ':')
            goto fail;
        in.p++;
        struct jfield scratch = { .s = { 0 }, .objs = { 0 } };
        struct jfield *f = o->n < FIELDS_MAX && name.len < sizeof f->name ? &o->f[o->n] : &scratch;
        if (json_value(&in, f) != 0) {
            jfield_free(&scratch);
            goto fail;
        }
        if (f == &scratch) {
            jfield_free(&scratch);
        } else {
            if (name.len > 0)           /* "": name.p may still be NULL */
                memcpy(f->name, name.p, name.len);
            f->name[name.len] = '\0';
            o->n++;
        }
        skip_ws(&in);
        if (in.p < in.end && *in.p == ',') {
            in.p++;
            continue;
        }
        if (in.p < in.end && *in.p == '}')
            break;
        goto fail;
    }
    free(name.p);
    return 0;
fail:
    free(name.p);
    return -1;
}

static const struct jfield *get(const struct jobj *o, const char *name, enum jtype type)
{
    for (int i = 0; i < o->n; i++) {
        if (o->f[i].type == type && strcmp(o->f[i].name, name) == 0)
            return &o->f[i];
    }
    return NULL;
}

/* The next object item of the array f from *off (0 at first) into sub: 1,
 * or 0 when there is none left. Items that are not flat objects are passed. */
static int obj_next(const struct jfield *f, size_t *off, struct jobj *sub)
{
    while (*off + sizeof(uint32_t) <= f->objs.len) {
        uint32_t len;
        memcpy(&len, f->objs.p + *off, sizeof len);
        const char *p = f->objs.p + *off + sizeof len;
        *off += sizeof len + len;
        if (json_object(p, len, sub) == 0)
            return 1;
    }
    return 0;
}

/* A string field as a slice (empty when missing). */
static struct slice str(const struct jobj *o, const char *name)
{
    const struct jfield *f = get(o, name, J_STR);
    struct slice s = { "", 0 };
    if (f != NULL && f->s.len > 0) {
        s.p = f->s.p;
        s.len = f->s.len;
    }
    return s;
}

/* ---- tallies ----------------------------------------------------------------- */

/* Counts under a composite key of up to four byte strings. */
#define TALLY_FIELDS 4

struct tally_entry {
    struct slice part[TALLY_FIELDS];    /* point into mem */
    char *mem;
    uint64_t n;
    uint64_t hash;
    size_t tag;                         /* for the caller: a series number (--html) */
};

struct tally {
    struct tally_entry **slots;
    size_t cap, n;
};

static uint64_t fnv(const char *p, size_t len, uint64_t h)
{
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static int entry_is(const struct tally_entry *e, const struct slice *parts, uint64_t h)
{
    if (e->hash != h)
        return 0;
    for (int i = 0; i < TALLY_FIELDS; i++) {
        if (e->part[i].len != parts[i].len || memcmp(e->part[i].p, parts[i].p, parts[i].len) != 0)
            return 0;
    }
    return 1;
}

/* Count n under (a, b, c, d); returns the entry (it stays where it is). */
static struct tally_entry *tally_add(struct tally *t, struct slice a, struct slice b,
                                     struct slice c, struct slice d, uint64_t n)
{
    struct slice parts[TALLY_FIELDS] = { a, b, c, d };
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < TALLY_FIELDS; i++) {
        h = fnv(parts[i].p, parts[i].len, h);
        h = fnv("\0", 1, h ^ parts[i].len);
    }
    if (t->cap > 0) {
        for (size_t i = h & (t->cap - 1); t->slots[i] != NULL; i = (i + 1) & (t->cap - 1)) {
            if (entry_is(t->slots[i], parts, h)) {
                t->slots[i]->n += n;
                return t->slots[i];
            }
        }
    }
    if (t->n * 2 >= t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct tally_entry **slots = xcalloc(cap, sizeof *slots);
        for (size_t i = 0; i < t->cap; i++) {
            struct tally_entry *e = t->slots[i];
            if (e == NULL)
                continue;
            size_t j = e->hash & (cap - 1);
            while (slots[j] != NULL)
                j = (j + 1) & (cap - 1);
            slots[j] = e;
        }
        free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    struct tally_entry *e = xcalloc(1, sizeof *e);
    size_t total = 0;
    for (int i = 0; i < TALLY_FIELDS; i++)
        total += parts[i].len;
    e->mem = xmalloc(total + 1);
    char *m = e->mem;
    for (int i = 0; i < TALLY_FIELDS; i++) {
        memcpy(m, parts[i].p, parts[i].len);
        e->part[i].p = m;
        e->part[i].len = parts[i].len;
        m += parts[i].len;
    }
    e->n = n;
    e->hash = h;
    size_t i = h & (t->cap - 1);
    while (t->slots[i] != NULL)
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = e;
    t->n++;
    return e;
}

static int slice_cmp(struct slice a, struct slice b)
{
    int c = memcmp(a.p, b.p, a.len < b.len ? a.len : b.len);
    return c ? c : (a.len > b.len) - (a.len < b.len);
}

/* Biggest count first; ties in byte order of the parts. */
static int entry_cmp(const void *x, const void *y)
{
    const struct tally_entry *a = *(const struct tally_entry *const *)x;
    const struct tally_entry *b = *(const struct tally_entry *const *)y;
    if (a->n != b->n)
        return a->n > b->n ? -1 : 1;
    for (int i = 0; i < TALLY_FIELDS; i++) {
        int c = slice_cmp(a->part[i], b->part[i]);
        if (c)
            return c;
    }
    return 0;
}

/* The entries sorted; the array (not the entries) is the caller's to free. */
static struct tally_entry **tally_sorted(const struct tally *t)
{
    struct tally_entry **v = xmalloc((t->n ? t->n : 1) * sizeof *v);
    size_t k = 0;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i] != NULL)
            v[k++] = t->slots[i];
    }
    qsort(v, k, sizeof *v, entry_cmp);
    return v;
}

static void tally_free(struct tally *t)
{
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i] != NULL) {
            free(t->slots[i]->mem);
            free(t->slots[i]);
        }
    }
    free(t->slots);
    memset(t, 0, sizeof *t);
}

/* ---- the summary ---------------------------------------------------------------- */

/* A registered rule, as last registered. */
struct reg {
    struct sbuf prefix, label, kind, owner, reason, rebuild, action, refresh;
    long long ttl, max_ttl;
};

/* A violation line, for the chart over time (--html only). */
struct vpoint {
    int64_t ms;                 /* its ts, ms since the epoch */
    struct tally_entry *series; /* its (rule, action) in by_rule_action */
    uint64_t n;
};

/* An audit_pass line: the keyspace by state at the end of a background audit pass. */
struct apass {
    int64_t ms;                 /* its ts; -1 unreadable */
    uint64_t v[4];              /* leaked, expiring, registered, unregistered */
    uint64_t keys;
    long long leaked_change;
    int change_known;
    size_t rp0, nrp;            /* its rules: rpoints[rp0, rp0 + nrp) */
};

/* One item of an audit_pass's "rules": a rule's keys by state (apass_states:
 * expiring, and the one no-TTL state of its kind), and their change since
 * the pass before. */
struct rstates {
    uint64_t n[4];
    long long change[4];
    unsigned has, known;        /* bit s: the item has state s; ...and its change */
};

/* A rule of the last audit_pass, for the text report. */
struct rlast {
    struct sbuf rule;
    struct rstates st;
};

/* A ttl rule's leaked keys at an audit_pass (its "rules" item). */
struct rpoint {
    struct tally_entry *rule;   /* in audit_rules */
    uint64_t leaked;
    long long change;
    int change_known;
    long long bytes;            /* leaked_bytes (audit_memory = on); -1 not sampled */
};

static const char *const apass_states[4] = { "leaked", "expiring", "registered", "unregistered" };

struct report {
    uint64_t lines, events, skipped;
    struct apass *passes;       /* audit_pass lines in the order read */
    size_t npasses, cap_passes;
    struct rpoint *rpoints;     /* the passes' rules, pass after pass */
    size_t nrpoints, cap_rpoints;
    struct tally audit_rules;   /* rule: its leaked keys at the last pass naming it */
    struct rlast *last_rules;   /* the rules of the last audit_pass */
    size_t nlast, cap_last;
    struct jobj *item;          /* an item of an array of objects, read by obj_next() */
    char first_ts[32], last_ts[32];
    struct reg *regs;
    size_t nregs;
    struct tally violations;    /* rule, command, effect, action */
    struct tally by_rule;       /* rule */
    struct tally by_rule_action;    /* rule, action: the series over time */
    struct tally durable;       /* event, rule, command */
    struct tally keys;          /* key or "#hash_id:hash", rule */
    struct tally unverified;    /* command, detail */
    struct tally rejected;      /* config, reason */
    struct tally policy;        /* level, message */
    struct tally server;        /* "server version", level, message: not ok */
    uint64_t total_violations, reloads, starts;
    char hash_id[32];           /* of the log_opened seen last in the current file */
    int keep_points;            /* --html: keep every violation line's time */
    struct vpoint *points;
    size_t npoints, cap_points;
    uint64_t untimed;           /* violations on lines without a readable ts: not in the chart */
};

static void set_buf(struct sbuf *b, struct slice s)
{
    b->len = 0;
    sbuf_add(b, s.p, s.len);
}

static void registration(struct report *r, const struct jobj *o)
{
    struct slice prefix = str(o, "prefix"), kind = str(o, "kind");
    struct reg *g = NULL;
    for (size_t i = 0; i < r->nregs; i++) {
        struct reg *x = &r->regs[i];
        if (slice_cmp((struct slice){ x->prefix.p ? x->prefix.p : "", x->prefix.len }, prefix) == 0 &&
            slice_cmp((struct slice){ x->kind.p ? x->kind.p : "", x->kind.len }, kind) == 0) {
            g = x;
            break;
        }
    }
    if (g == NULL) {
        r->regs = xrealloc(r->regs, (r->nregs + 1) * sizeof *r->regs);
        g = &r->regs[r->nregs++];
        memset(g, 0, sizeof *g);
    }
    set_buf(&g->prefix, prefix);
    set_buf(&g->kind, kind);
    set_buf(&g->label, str(o, "rule"));
    set_buf(&g->owner, str(o, "owner"));
    set_buf(&g->reason, str(o, "reason"));
    set_buf(&g->rebuild, str(o, "rebuild"));
    set_buf(&g->action, str(o, "action"));
    set_buf(&g->refresh, str(o, "refresh"));
    const struct jfield *f = get(o, "ttl", J_NUM);
    g->ttl = f ? f->num : 0;
    f = get(o, "max_ttl", J_NUM);
    g->max_ttl = f ? f->num : 0;
}

static struct slice lit(const char *s)
{
    return (struct slice){ s, strlen(s) };
}

static const struct slice none = { "", 0 };

/* An event's ts, "2026-11-30T06:00:00.123Z", in ms since the epoch. */
static int parse_ts(struct slice ts, int64_t *ms)
{
    char buf[40];
    int y, mo, d, h, mi, sec, n = 0;
    if (ts.len == 0 || ts.len >= sizeof buf)
        return -1;
    memcpy(buf, ts.p, ts.len);
    buf[ts.len] = '\0';
    if (sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6)
        return -1;
    const char *p = buf + n;
    int64_t frac = 0;
    if (*p == '.') {
        int digits = 0;
        for (p++; isdigit((unsigned char)*p); p++, digits++)
            if (digits < 3)
                frac = frac * 10 + (*p - '0');
        for (; digits < 3; digits++)
            frac *= 10;
    }
    if (strcmp(p, "Z") != 0)
        return -1;
    struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
                     .tm_hour = h, .tm_min = mi, .tm_sec = sec };
    *ms = (int64_t)timegm(&tm) * 1000 + frac;
    return 0;
}

static void keep_point(struct report *r, struct slice ts, struct tally_entry *series, uint64_t n)
{
    int64_t ms;
    if (parse_ts(ts, &ms) != 0) {
        r->untimed += n;
        return;
    }
    if (r->npoints == r->cap_points) {
        r->cap_points = r->cap_points ? r->cap_points * 2 : 256;
        r->points = xrealloc(r->points, r->cap_points * sizeof *r->points);
    }
    r->points[r->npoints++] = (struct vpoint){ ms, series, n };
}

/* Count the keys an event names. */
static void count_keys(struct report *r, const struct jobj *o, struct slice rule)
{
    const struct jfield *f;
    char id[64];
    if ((f = get(o, "key", J_STR)) != NULL) {
        tally_add(&r->keys, (struct slice){ f->s.p ? f->s.p : "", f->s.len }, lit("key"), rule,
                  none, 1);
    } else if ((f = get(o, "key_hash", J_STR)) != NULL) {
        snprintf(id, sizeof id, "%.*s (hash_id %s)", (int)f->s.len, f->s.p, r->hash_id[0] ? r->hash_id : "?");
        tally_add(&r->keys, lit(id), lit("hash"), rule, none, 1);
    }
}

static void violation(struct report *r, const struct jobj *o, struct slice ts, uint64_t n)
{
    struct slice rule = str(o, "rule");
    tally_add(&r->violations, rule, str(o, "command"), str(o, "effect"), str(o, "action"), n);
    tally_add(&r->by_rule, rule, none, none, none, n);
    struct tally_entry *ra = tally_add(&r->by_rule_action, rule, str(o, "action"), none, none, n);
    if (r->keep_points)
        keep_point(r, ts, ra, n);
    r->total_violations += n;
    count_keys(r, o, rule);
}

static void rule_states(const struct jobj *item, struct rstates *st)
{
    char name[32];
    memset(st, 0, sizeof *st);
    for (int s = 0; s < 4; s++) {
        const struct jfield *n = get(item, apass_states[s], J_NUM);
        snprintf(name, sizeof name, "%s_change", apass_states[s]);
        const struct jfield *c = get(item, name, J_NUM);
        if (n == NULL)
            continue;
        st->has |= 1u << s;
        st->n[s] = n->num > 0 ? (uint64_t)n->num : 0;
        st->known |= c != NULL ? 1u << s : 0;
        st->change[s] = c != NULL ? c->num : 0;
    }
}

/* A rule of the pass being read, for the text report (r->last_rules). */
static void keep_last_rule(struct report *r, const struct rstates *st)
{
    if (r->nlast == r->cap_last) {
        r->cap_last = r->cap_last ? r->cap_last * 2 : 16;
        r->last_rules = xrealloc(r->last_rules, r->cap_last * sizeof *r->last_rules);
        memset(r->last_rules + r->nlast, 0, (r->cap_last - r->nlast) * sizeof *r->last_rules);
    }
    struct rlast *l = &r->last_rules[r->nlast++];
    set_buf(&l->rule, str(r->item, "rule"));
    l->st = *st;
}

/* The "rules" of an audit_pass: every rule for the text report; the leaked
 * keys of each ttl rule (durable rules and "default" have no "leaked") for
 * the page's series. */
static void audit_pass_rules(struct report *r, struct apass *a, const struct jfield *rules)
{
    size_t off = 0;
    struct rstates st;
    a->rp0 = r->nrpoints;
    r->nlast = 0;
    if (rules == NULL)
        return;
    if (r->item == NULL)
        r->item = xcalloc(1, sizeof *r->item);
    while (obj_next(rules, &off, r->item)) {
        const struct jfield *m = get(r->item, "leaked_bytes", J_NUM);
        rule_states(r->item, &st);
        keep_last_rule(r, &st);
        if (!(st.has & 1u))
            continue;
        if (r->nrpoints == r->cap_rpoints) {
            r->cap_rpoints = r->cap_rpoints ? r->cap_rpoints * 2 : 64;
            r->rpoints = xrealloc(r->rpoints, r->cap_rpoints * sizeof *r->rpoints);
        }
        struct tally_entry *e = tally_add(&r->audit_rules, str(r->item, "rule"), none, none, none, 0);
        e->n = st.n[0];
        r->rpoints[r->nrpoints++] = (struct rpoint){ e, e->n, st.change[0], (int)(st.known & 1u),
                                                     m && m->num >= 0 ? m->num : -1 };
        a->nrp++;
    }
}

static void audit_pass(struct report *r, const struct jobj *o, struct slice ts)
{
    if (r->npasses == r->cap_passes) {
        r->cap_passes = r->cap_passes ? r->cap_passes * 2 : 64;
        r->passes = xrealloc(r->passes, r->cap_passes * sizeof *r->passes);
    }
    struct apass *a = &r->passes[r->npasses++];
    memset(a, 0, sizeof *a);
    if (parse_ts(ts, &a->ms) != 0)
        a->ms = -1;
    for (int i = 0; i < 4; i++) {
        const struct jfield *f = get(o, apass_states[i], J_NUM);
        a->v[i] = f != NULL && f->num > 0 ? (uint64_t)f->num : 0;
    }
    const struct jfield *k = get(o, "keys", J_NUM), *c = get(o, "leaked_change", J_NUM);
    a->keys = k != NULL && k->num > 0 ? (uint64_t)k->num : 0;
    a->change_known = c != NULL;
    a->leaked_change = c != NULL ? c->num : 0;
    audit_pass_rules(r, a, get(o, "rules", J_ARR));
}

static void event(struct report *r, const struct jobj *o)
{
    struct slice ev = str(o, "event");
    const struct jfield *cf = get(o, "count", J_NUM);
    uint64_t n = cf && cf->num > 0 ? (uint64_t)cf->num : 1;
    struct slice ts = str(o, "ts");

    r->events++;
    if (ts.len > 0 && ts.len < sizeof r->first_ts) {
        if (r->first_ts[0] == '\0' || memcmp(ts.p, r->first_ts, ts.len) < 0) {
            memcpy(r->first_ts, ts.p, ts.len);
            r->first_ts[ts.len] = '\0';
        }
        if (memcmp(ts.p, r->last_ts, ts.len) > 0) {
            memcpy(r->last_ts, ts.p, ts.len);
            r->last_ts[ts.len] = '\0';
        }
    }

    struct slice level = str(o, "level");
    switch (event_name_lookup(ev)) {
    case EVN_REGISTRATION:
        registration(r, o);
        break;
    case EVN_VIOLATION:
        violation(r, o, ts, n);
        break;
    case EVN_DURABLE_WRITE:
    case EVN_TTL_ON_DURABLE:
        tally_add(&r->durable, ev, str(o, "rule"), str(o, "command"), none, n);
        break;
    case EVN_UNVERIFIED:
        tally_add(&r->unverified, str(o, "command"), str(o, "detail"), none, none, n);
        break;
    case EVN_CONFIG_RELOADED:
        r->reloads++;
        break;
    case EVN_CONFIG_REJECTED:
        tally_add(&r->rejected, str(o, "config"), str(o, "reason"), none, none, 1);
        break;
    case EVN_BACKEND_POLICY:
        if (!slice_eq_nocase(level, "ok"))
            tally_add(&r->policy, level, str(o, "message"), none, none, 1);
        break;
    case EVN_BACKEND_SERVER:
        if (!slice_eq_nocase(level, "ok"))
            tally_add(&r->server, str(o, "server"), str(o, "version"), level, str(o, "message"), 1);
        break;
    case EVN_LOG_OPENED: {
        struct slice h = str(o, "hash_id");
        snprintf(r->hash_id, sizeof r->hash_id, "%.*s", (int)(h.len < 31 ? h.len : 31), h.p);
        r->starts++;
        break;
    }
    case EVN_AUDIT_PASS:
        audit_pass(r, o, ts);
        break;
    default:                        /* watch_gap, audit_fix, names of a newer ttlguard */
        break;
    }
}

/* Bytes in printable form, appended to b: valid UTF-8 as is, \xHH for the
 * rest and for control bytes, \\ for a backslash. */
static void printable(struct sbuf *b, struct slice s)
{
    const unsigned char *p = (const unsigned char *)s.p;
    char hex[5];
    for (size_t i = 0; i < s.len; i++) {
        unsigned c = p[i];
        if (c == '\\') {
            sbuf_add(b, "\\\\", 2);
        } else if (c >= 0x20 && c < 0x7f) {
            sbuf_add(b, p + i, 1);
        } else if (c >= 0x80 && events_utf8_len(p + i, s.len - i) > 0) {
            size_t n = events_utf8_len(p + i, s.len - i);
            sbuf_add(b, p + i, n);
            i += n - 1;
        } else {
            snprintf(hex, sizeof hex, "\\x%02x", c);
            sbuf_add(b, hex, 4);
        }
    }
}

/* The same for a terminal. */
static void show(struct slice s)
{
    struct sbuf b = { 0 };
    printable(&b, s);
    if (b.len > 0)
        fwrite(b.p, 1, b.len, stdout);
    free(b.p);
}

static void show_str(const struct sbuf *b)
{
    show((struct slice){ b->p ? b->p : "", b->len });
}

static int is_durable(const struct reg *g)
{
    return g->kind.len == 7 && memcmp(g->kind.p, "durable", 7) == 0;
}

static void print_registrations(const struct report *r)
{
    size_t k = 0;
    printf("\nDurable prefixes (accepted data without a TTL)\n");
    for (size_t i = 0; i < r->nregs; i++) {
        const struct reg *g = &r->regs[i];
        if (!is_durable(g))
            continue;
        k++;
        printf("  \"");
        show_str(&g->prefix);
        printf("\"  owner: ");
        show_str(&g->owner);
        printf("\n      reason: ");
        show_str(&g->reason);
        printf("\n      rebuild: ");
        show_str(&g->rebuild);
        printf("\n");
    }
    if (k == 0)
        printf("  (none registered)\n");

    printf("\nTTL rules\n");
    k = 0;
    for (size_t i = 0; i < r->nregs; i++) {
        const struct reg *g = &r->regs[i];
        if (is_durable(g))
            continue;
        k++;
        printf("  ");
        show_str(&g->label);
        printf(": action ");
        show_str(&g->action);
        if (g->ttl)
            printf(", ttl %lld s", g->ttl);
        if (g->max_ttl)
            printf(", max_ttl %lld s", g->max_ttl);
        printf(", refresh ");
        show_str(&g->refresh);
        printf("\n");
    }
    if (k == 0)
        printf("  (none registered)\n");
}

static void print_violations(struct report *r)
{
    struct tally_entry **v;
    printf("\nViolations: %llu\n", (unsigned long long)r->total_violations);
    v = tally_sorted(&r->by_rule);
    for (size_t i = 0; i < r->by_rule.n; i++) {
        printf("  %10llu  ", (unsigned long long)v[i]->n);
        show(v[i]->part[0]);
        printf("\n");
    }
    free(v);
    if (r->violations.n == 0)
        return;
    printf("\n  %10s  %-28s %-16s %-20s %s\n", "count", "rule", "command", "effect", "action");
    v = tally_sorted(&r->violations);
    for (size_t i = 0; i < r->violations.n; i++) {
        printf("  %10llu  ", (unsigned long long)v[i]->n);
        show(v[i]->part[0]);
        printf("%*s", v[i]->part[0].len < 28 ? (int)(29 - v[i]->part[0].len) : 1, "");
        show(v[i]->part[1]);
        printf("%*s", v[i]->part[1].len < 16 ? (int)(17 - v[i]->part[1].len) : 1, "");
        printf("%-20.*s %.*s\n", (int)v[i]->part[2].len, v[i]->part[2].p,
               (int)v[i]->part[3].len, v[i]->part[3].p);
    }
    free(v);
}

static void print_top_keys(struct report *r, size_t top)
{
    printf("\nTop keys (by event lines naming them)\n");
    if (r->keys.n == 0)
        printf("  (none: no violations, or log_keys = prefix)\n");
    struct tally_entry **v = tally_sorted(&r->keys);
    for (size_t i = 0; i < r->keys.n && i < top; i++) {
        printf("  %10llu  ", (unsigned long long)v[i]->n);
        if (v[i]->part[1].len == 3) {      /* "key" */
            putchar('"');
            show(v[i]->part[0]);
            putchar('"');
        } else {
            printf("hash ");
            show(v[i]->part[0]);
        }
        printf("  (");
        show(v[i]->part[2]);
        printf(")\n");
    }
    free(v);
}

static void print_durable_and_unverified(struct report *r)
{
    struct tally_entry **v;
    printf("\nWrites to durable keys\n");
    if (r->durable.n == 0)
        printf("  (none)\n");
    v = tally_sorted(&r->durable);
    for (size_t i = 0; i < r->durable.n; i++) {
        printf("  %10llu  ", (unsigned long long)v[i]->n);
        show(v[i]->part[1]);
        printf("  ");
        show(v[i]->part[2]);
        if (v[i]->part[0].len == 14)       /* "ttl_on_durable" */
            printf("  put a TTL on a durable key: evictable under volatile-* policies");
        printf("\n");
    }
    free(v);

    printf("\nUnverified commands (passed, not judged)\n");
    if (r->unverified.n == 0)
        printf("  (none)\n");
    v = tally_sorted(&r->unverified);
    for (size_t i = 0; i < r->unverified.n; i++) {
        printf("  %10llu  ", (unsigned long long)v[i]->n);
        show(v[i]->part[0]);
        if (v[i]->part[1].len) {
            printf("  ");
            show(v[i]->part[1]);
        }
        printf("\n");
    }
    free(v);
}

static void print_config_and_backend(struct report *r)
{
    struct tally_entry **v;
    printf("\nConfig: %llu start%s or reopen%s, %llu reload%s, %zu distinct rejected\n",
           (unsigned long long)r->starts, r->starts == 1 ? "" : "s", r->starts == 1 ? "" : "s",
           (unsigned long long)r->reloads, r->reloads == 1 ? "" : "s", r->rejected.n);
    v = tally_sorted(&r->rejected);
    for (size_t i = 0; i < r->rejected.n; i++) {
        printf("  %10llu  rejected: ", (unsigned long long)v[i]->n);
        show(v[i]->part[1]);
        printf("\n");
    }
    free(v);

    if (r->policy.n > 0) {
        printf("\nBackend eviction policy\n");
        v = tally_sorted(&r->policy);
        for (size_t i = 0; i < r->policy.n; i++) {
            printf("  ");
            show(v[i]->part[0]);
            printf(": ");
            show(v[i]->part[1]);
            printf("\n");
        }
        free(v);
    }
    if (r->server.n > 0) {
        printf("\nBackend server\n");
        v = tally_sorted(&r->server);
        for (size_t i = 0; i < r->server.n; i++) {
            printf("  ");
            show(v[i]->part[0]);
            printf(" ");
            show(v[i]->part[1]);
            printf(" (");
            show(v[i]->part[2]);
            printf("): ");
            show(v[i]->part[3]);
            printf("\n");
        }
        free(v);
    }
}

/* One state of a rule of the last pass: "N (+C)" in a column, "-" when its
 * kind has no such state, no change on the first pass. */
static void print_state(const struct rstates *st, int s)
{
    char cell[64] = "-";
    if (st->has & (1u << s)) {
        int n = snprintf(cell, sizeof cell, "%llu", (unsigned long long)st->n[s]);
        if (st->known & (1u << s))
            snprintf(cell + n, sizeof cell - (size_t)n, " (%+lld)", st->change[s]);
    }
    printf(" %16s", cell);
}

/* The last audit_pass: its totals, and per rule its keys by state with the
 * change since the pass before (as the page's table of rules). */
static void print_audit(const struct report *r)
{
    const struct apass *a = &r->passes[r->npasses - 1];
    printf("\nBackground audit: %zu passes; the last: %llu keys, %llu leaked",
           r->npasses, (unsigned long long)a->keys, (unsigned long long)a->v[0]);
    if (a->change_known)
        printf(" (%+lld since the pass before)", a->leaked_change);
    printf(", %llu expiring, %llu registered, %llu unregistered\n",
           (unsigned long long)a->v[1], (unsigned long long)a->v[2],
           (unsigned long long)a->v[3]);
    if (r->nlast == 0)
        return;
    printf("\n  %-28s", "rule (last pass, change)");
    for (int s = 0; s < 4; s++)
        printf(" %16s", apass_states[s]);
    printf("\n");
    for (size_t i = 0; i < r->nlast; i++) {
        const struct rlast *l = &r->last_rules[i];
        printf("  ");
        show_str(&l->rule);
        printf("%*s", l->rule.len < 28 ? (int)(28 - l->rule.len) : 0, "");
        for (int s = 0; s < 4; s++)
            print_state(&l->st, s);
        printf("\n");
    }
}

static void print_report(struct report *r, int nfiles, size_t top)
{
    printf("ttlguard report: %d file%s, %llu events", nfiles, nfiles == 1 ? "" : "s",
           (unsigned long long)r->events);
    if (r->first_ts[0])
        printf(" from %s to %s", r->first_ts, r->last_ts);
    printf("\n");
    if (r->skipped)
        printf("(%llu lines skipped: not event log lines)\n", (unsigned long long)r->skipped);
    print_registrations(r);
    print_violations(r);
    print_top_keys(r, top);
    print_durable_and_unverified(r);
    print_config_and_backend(r);
    if (r->npasses > 0)
        print_audit(r);
}

/* ---- --html --------------------------------------------------------------- */

#define PAGE_SERIES 8           /* (rule, action) series over time; the rest is "other" */
#define PAGE_BUCKETS 48         /* time buckets at most */

static struct slice buf_slice(const struct sbuf *b)
{
    return (struct slice){ b->p ? b->p : "", b->len };
}

/* A fresh NUL-terminated copy of s in printable form (see printable()),
 * between pre and post. */
static char *printable_dup(const char *pre, struct slice s, const char *post)
{
    struct sbuf b = { 0 };
    evbuf_adds(&b, pre);
    printable(&b, s);
    evbuf_adds(&b, post);
    sbuf_add(&b, "", 1);
    return b.p;
}

/* A table cell with s in printable form, between pre and post. */
static void cell_bytes(struct html_table *t, const char *pre, struct slice s, const char *post)
{
    char *text = printable_dup(pre, s, post);
    html_cell(t, "%s", text);
    free(text);
}

/* Sum of the counts whose part `part` is `value` (NULL: all). */
static uint64_t tally_sum(const struct tally *t, int part, const char *value)
{
    uint64_t n = 0;
    for (size_t i = 0; i < t->cap; i++) {
        const struct tally_entry *e = t->slots[i];
        if (e != NULL && (value == NULL || (e->part[part].len == strlen(value) &&
                                            memcmp(e->part[part].p, value, e->part[part].len) == 0)))
            n += e->n;
    }
    return n;
}

static void page_totals(FILE *f, const struct report *r, int nfiles)
{
    static const char *const head[] = { "", "count" };
    struct html_table t;
    html_para(f, NULL, "%d file%s, %llu events%s%s%s%s", nfiles, nfiles == 1 ? "" : "s",
              (unsigned long long)r->events, r->first_ts[0] ? " from " : "", r->first_ts,
              r->first_ts[0] ? " to " : "", r->last_ts);
    html_table_begin(&t, f, "lr", head);
    html_cell(&t, "violations");
    html_cell(&t, "%llu", (unsigned long long)r->total_violations);
    html_cell(&t, "writes to durable keys");
    html_cell(&t, "%llu", (unsigned long long)tally_sum(&r->durable, 0, "durable_write"));
    html_cell(&t, "TTLs put on durable keys");
    html_cell(&t, "%llu", (unsigned long long)tally_sum(&r->durable, 0, "ttl_on_durable"));
    html_cell(&t, "unverified commands");
    html_cell(&t, "%llu", (unsigned long long)tally_sum(&r->unverified, 0, NULL));
    html_cell(&t, "starts or reopens");
    html_cell(&t, "%llu", (unsigned long long)r->starts);
    html_cell(&t, "reloads");
    html_cell(&t, "%llu", (unsigned long long)r->reloads);
    html_cell(&t, "configs rejected");
    html_cell(&t, "%llu", (unsigned long long)tally_sum(&r->rejected, 0, NULL));
    html_cell(&t, "events");
    html_cell(&t, "%llu", (unsigned long long)r->events);
    html_cell(&t, "lines skipped (not events)");
    html_cell(&t, "%llu", (unsigned long long)r->skipped);
    html_table_end(&t);
}

/* The durable registry with its owners, then the ttl rules. */
static void page_rules(FILE *f, const struct report *r)
{
    static const char *const dhead[] = { "prefix", "owner", "reason", "rebuild" };
    static const char *const thead[] = { "rule", "action", "ttl (s)", "max_ttl (s)", "refresh" };
    struct html_table t;
    size_t nd = 0;
    for (size_t i = 0; i < r->nregs; i++)
        nd += is_durable(&r->regs[i]);

    html_section(f, "Durable registry (accepted data without a TTL)");
    if (nd == 0)
        html_para(f, "empty", "(none registered)");
    else
        html_table_begin(&t, f, "llll", dhead);
    for (size_t i = 0; i < r->nregs && nd > 0; i++) {
        const struct reg *g = &r->regs[i];
        if (!is_durable(g))
            continue;
        cell_bytes(&t, "\"", buf_slice(&g->prefix), "\"");
        cell_bytes(&t, "", buf_slice(&g->owner), "");
        cell_bytes(&t, "", buf_slice(&g->reason), "");
        cell_bytes(&t, "", buf_slice(&g->rebuild), "");
    }
    if (nd > 0)
        html_table_end(&t);

    html_section(f, "TTL rules");
    if (nd == r->nregs) {
        html_para(f, "empty", "(none registered)");
        return;
    }
    html_table_begin(&t, f, "llrrl", thead);
    for (size_t i = 0; i < r->nregs; i++) {
        const struct reg *g = &r->regs[i];
        if (is_durable(g))
            continue;
        cell_bytes(&t, "", buf_slice(&g->label), "");
        cell_bytes(&t, "", buf_slice(&g->action), "");
        html_cell(&t, "%lld", g->ttl);
        html_cell(&t, "%lld", g->max_ttl);
        cell_bytes(&t, "", buf_slice(&g->refresh), "");
    }
    html_table_end(&t);
}

/* The series of a tally: its largest PAGE_SERIES entries, named by their
 * first nparts parts (" \xc2\xb7 " between), then "other". Tags each entry
 * with its series; returns how many. */
static size_t series_names(const struct tally *t, int nparts, char **names)
{
    struct tally_entry **v = tally_sorted(t);
    size_t n = t->n;
    for (size_t i = 0; i < n; i++) {
        v[i]->tag = i < PAGE_SERIES ? i : PAGE_SERIES;
        if (i < PAGE_SERIES) {
            struct sbuf b = { 0 };
            for (int p = 0; p < nparts; p++) {
                evbuf_adds(&b, p ? " \xc2\xb7 " : "");       /* U+00B7 */
                printable(&b, v[i]->part[p]);
            }
            sbuf_add(&b, "", 1);
            names[i] = b.p;
        }
    }
    free(v);
    if (n <= PAGE_SERIES)
        return n;
    names[PAGE_SERIES] = xstrdup("other");
    return PAGE_SERIES + 1;
}

static void page_over_time(FILE *f, struct report *r)
{
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < r->npoints; i++) {
        first = r->points[i].ms < first ? r->points[i].ms : first;
        last = r->points[i].ms > last ? r->points[i].ms : last;
    }
    struct html_timeline tl = { 0, 1000, 0 };
    if (r->npoints > 0)
        html_timeline_for(&tl, first, last, PAGE_BUCKETS);

    char *names[PAGE_SERIES + 1] = { 0 };
    struct html_series s[PAGE_SERIES + 1];
    size_t ns = series_names(&r->by_rule_action, 2, names);
    uint64_t *vals = xcalloc(ns * tl.nbuckets + 1, sizeof *vals);
    for (size_t i = 0; i < r->npoints; i++) {
        const struct vpoint *p = &r->points[i];
        vals[p->series->tag * tl.nbuckets + (size_t)((p->ms - tl.start_ms) / tl.step_ms)] += p->n;
    }
    for (size_t i = 0; i < ns; i++)
        s[i] = (struct html_series){ names[i], vals + i * tl.nbuckets };
    html_stacked_chart(f, "Violations over time, by rule and action", &tl, s, ns);
    if (r->untimed)
        html_para(f, "note", "%llu violations on lines without a readable ts are not in the chart",
                  (unsigned long long)r->untimed);
    free(vals);
    for (size_t i = 0; i < ns; i++)
        free(names[i]);
}

/* The background audit's passes over time, bucket by bucket: each bucket
 * shows its last pass (a gauge: the last pass counts, not a sum). Returns
 * last[b] = 1 + the index of bucket b's last pass (0: none) and sets *latest
 * to the bucket of the latest pass; NULL when no pass has a readable ts. */
static size_t *audit_buckets(const struct report *r, struct html_timeline *tl, size_t *latest)
{
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < r->npasses; i++) {
        if (r->passes[i].ms < 0)
            continue;
        first = r->passes[i].ms < first ? r->passes[i].ms : first;
        last = r->passes[i].ms > last ? r->passes[i].ms : last;
    }
    if (first > last)
        return NULL;
    html_timeline_for(tl, first, last, PAGE_BUCKETS);
    size_t *at = xcalloc(tl->nbuckets + 1, sizeof *at);
    for (size_t i = 0; i < r->npasses; i++) {
        const struct apass *a = &r->passes[i];
        size_t b = (size_t)((a->ms - tl->start_ms) / tl->step_ms);
        if (a->ms >= 0 && (at[b] == 0 || r->passes[at[b] - 1].ms <= a->ms))
            at[b] = i + 1;
    }
    *latest = (size_t)((last - tl->start_ms) / tl->step_ms);
    return at;
}

static void audit_states(FILE *f, const struct report *r, const struct html_timeline *tl,
                         const size_t *at, size_t latest)
{
    uint64_t *vals = xcalloc(4 * tl->nbuckets + 1, sizeof *vals);
    for (size_t b = 0; b < tl->nbuckets; b++)
        for (int s = 0; at[b] && s < 4; s++)
            vals[(size_t)s * tl->nbuckets + b] = r->passes[at[b] - 1].v[s];
    struct html_series s[4];
    for (int i = 0; i < 4; i++)
        s[i] = (struct html_series){ apass_states[i], vals + (size_t)i * tl->nbuckets };
    html_gauge_chart(f, "Keys by state at each background audit pass (audit_pass; the last "
                     "pass of each bucket)", tl, s, 4, latest);
    free(vals);
}

static void audit_leaks_by_rule(FILE *f, struct report *r, const struct html_timeline *tl,
                                const size_t *at, size_t latest)
{
    char *names[PAGE_SERIES + 1] = { 0 };
    struct html_series s[PAGE_SERIES + 1];
    size_t ns = series_names(&r->audit_rules, 1, names);
    uint64_t *vals = xcalloc(ns * tl->nbuckets + 1, sizeof *vals);
    for (size_t b = 0; b < tl->nbuckets; b++) {
        const struct apass *a = at[b] ? &r->passes[at[b] - 1] : NULL;
        for (size_t i = 0; a != NULL && i < a->nrp; i++) {
            const struct rpoint *p = &r->rpoints[a->rp0 + i];
            vals[p->rule->tag * tl->nbuckets + b] += p->leaked;
        }
    }
    for (size_t i = 0; i < ns; i++)
        s[i] = (struct html_series){ names[i], vals + i * tl->nbuckets };
    html_gauge_chart(f, "Leaked keys per rule at each background audit pass (the last pass "
                     "of each bucket)", tl, s, ns, latest);
    free(vals);
    for (size_t i = 0; i < ns; i++)
        free(names[i]);
}

/* Violations of a rule through the proxy, and the watcher's findings
 * (action "observed"): what it stopped or recorded, and what bypassed it. */
static void rule_violations(const struct report *r, struct slice rule, uint64_t *through,
                            uint64_t *observed)
{
    *through = *observed = 0;
    for (size_t i = 0; i < r->by_rule_action.cap; i++) {
        const struct tally_entry *e = r->by_rule_action.slots[i];
        if (e == NULL || slice_cmp(e->part[0], rule) != 0)
            continue;
        if (slice_cmp(e->part[1], lit("observed")) == 0)
            *observed += e->n;
        else
            *through += e->n;
    }
}

static void rule_row(struct html_table *t, const struct report *r, struct slice rule,
                     const struct rpoint *p, int bytes)
{
    uint64_t through, observed;
    rule_violations(r, rule, &through, &observed);
    cell_bytes(t, "", rule, "");
    if (p != NULL)
        html_cell(t, "%llu", (unsigned long long)p->leaked);
    else
        html_cell(t, "-");
    if (p != NULL && p->change_known)
        html_cell(t, "%+lld", p->change);
    else
        html_cell(t, "-");
    if (bytes && p != NULL && p->bytes >= 0)
        html_cell(t, "%lld", p->bytes);
    else if (bytes)
        html_cell(t, "-");
    html_cell(t, "%llu", (unsigned long long)through);
    html_cell(t, "%llu", (unsigned long long)observed);
}

/* Per rule: its leaked keys (and bytes, where sampled) at the latest pass
 * next to its violations and watcher findings; then the rules with
 * violations that pass did not name. */
static void audit_rules_table(FILE *f, const struct report *r)
{
    static const char *const head[] = { "rule", "leaked (last pass)", "change",
                                        "violations (through the proxy)", "watcher findings" };
    static const char *const bhead[] = { "rule", "leaked (last pass)", "change", "leaked bytes",
                                         "violations (through the proxy)", "watcher findings" };
    const struct apass *a = &r->passes[r->npasses - 1];
    const struct rpoint *rp = a->nrp > 0 ? &r->rpoints[a->rp0] : NULL;  /* none: no array */
    int bytes = 0;
    for (size_t i = 0; i < a->nrp; i++)
        bytes |= rp[i].bytes >= 0;
    struct html_table t;
    html_table_begin(&t, f, bytes ? "lrrrrr" : "lrrrr", bytes ? bhead : head);
    for (size_t i = 0; i < a->nrp; i++)
        rule_row(&t, r, rp[i].rule->part[0], &rp[i], bytes);
    struct tally_entry **v = tally_sorted(&r->by_rule);
    for (size_t k = 0; k < r->by_rule.n; k++) {
        size_t i = 0;
        while (i < a->nrp && slice_cmp(rp[i].rule->part[0], v[k]->part[0]) != 0)
            i++;
        if (i == a->nrp)
            rule_row(&t, r, v[k]->part[0], NULL, bytes);
    }
    free(v);
    html_table_end(&t);
}

static void page_audit(FILE *f, struct report *r)
{
    struct html_timeline tl = { 0, 1000, 0 };
    size_t latest;
    size_t *at = audit_buckets(r, &tl, &latest);
    html_section(f, "Background audit");
    if (at != NULL) {
        audit_states(f, r, &tl, at, latest);
        audit_leaks_by_rule(f, r, &tl, at, latest);
    }
    const struct apass *a = &r->passes[r->npasses - 1];
    char change[64] = "";
    if (a->change_known)
        snprintf(change, sizeof change, " (%+lld since the pass before)", a->leaked_change);
    html_para(f, "note", "%zu passes; the last: %llu keys, %llu leaked%s", r->npasses,
              (unsigned long long)a->keys, (unsigned long long)a->v[0], change);
    audit_rules_table(f, r);
    free(at);
}

/* Bars of the top entries of a tally, labelled by part[0] in printable form
 * (shown: part[0] is already, as a folded pattern is). */
static void page_bars(FILE *f, const char *title, const struct tally *t, size_t top, size_t color,
                      int shown)
{
    struct tally_entry **v = tally_sorted(t);
    size_t n = t->n < top ? t->n : top;
    struct html_bar *bars = xcalloc(n + 1, sizeof *bars);
    for (size_t i = 0; i < n; i++)
        bars[i] = (struct html_bar){ shown ? xmemdup(v[i]->part[0].p, v[i]->part[0].len)
                                           : printable_dup("", v[i]->part[0], ""), v[i]->n, NULL };
    html_bar_chart(f, title, bars, n, color);
    for (size_t i = 0; i < n; i++)
        free((char *)bars[i].label);
    free(bars);
    free(v);
}

static void page_violations(FILE *f, struct report *r)
{
    static const char *const head[] = { "count", "rule", "command", "effect", "action" };
    struct html_table t;
    html_section(f, "Violations");
    html_para(f, NULL, "%llu violations", (unsigned long long)r->total_violations);
    page_over_time(f, r);
    page_bars(f, "Violations by rule", &r->by_rule, r->by_rule.n, 2, 0);
    if (r->violations.n == 0)
        return;
    struct tally_entry **v = tally_sorted(&r->violations);
    html_table_begin(&t, f, "rllll", head);
    for (size_t i = 0; i < r->violations.n; i++) {
        html_cell(&t, "%llu", (unsigned long long)v[i]->n);
        for (int p = 0; p < 4; p++)
            cell_bytes(&t, "", v[i]->part[p], "");
    }
    html_table_end(&t);
    free(v);
}

/* Keys named by violation lines folded into patterns as the audit folds
 * them: part[0] the pattern, part[1] the rule. Hashed keys cannot fold. */
static void fold_keys(const struct report *r, struct tally *out)
{
    char text[256];
    for (size_t i = 0; i < r->keys.cap; i++) {
        const struct tally_entry *e = r->keys.slots[i];
        if (e == NULL || e->part[1].len != 3)      /* "hash" */
            continue;
        size_t len = arep_fold(e->part[0].p, e->part[0].len, text, sizeof text);
        tally_add(out, (struct slice){ text, len }, e->part[2], none, none, e->n);
    }
}

static void page_keys(FILE *f, const struct report *r, size_t top)
{
    static const char *const head[] = { "lines", "key", "rule" };
    struct html_table t;
    struct tally patterns = { 0 };
    html_section(f, "Keys (by the violation lines naming them)");
    if (r->keys.n == 0) {
        html_para(f, "empty", "(none: no violations, or log_keys = prefix)");
        return;
    }
    fold_keys(r, &patterns);
    page_bars(f, "Top key patterns (folded as the audit folds them)", &patterns, top, 0, 1);
    tally_free(&patterns);

    struct tally_entry **v = tally_sorted(&r->keys);
    size_t n = r->keys.n < top ? r->keys.n : top;
    struct html_bar *bars = xcalloc(n + 1, sizeof *bars);
    for (size_t i = 0; i < n; i++) {
        int hashed = v[i]->part[1].len != 3;
        bars[i] = (struct html_bar){ printable_dup(hashed ? "hash " : "\"", v[i]->part[0],
                                                   hashed ? "" : "\""), v[i]->n, NULL };
    }
    html_bar_chart(f, "Top keys", bars, n, 3);
    html_table_begin(&t, f, "rll", head);
    for (size_t i = 0; i < n; i++) {
        html_cell(&t, "%llu", (unsigned long long)v[i]->n);
        html_cell(&t, "%s", bars[i].label);
        cell_bytes(&t, "", v[i]->part[2], "");
    }
    html_table_end(&t);
    for (size_t i = 0; i < n; i++)
        free((char *)bars[i].label);
    free(bars);
    free(v);
}

/* A table of a tally: the count, then parts [0, nparts) in printable form. */
static void page_tally(FILE *f, const char *title, const struct tally *tl, const char *align,
                       const char *const *head)
{
    struct html_table t;
    html_section(f, title);
    if (tl->n == 0) {
        html_para(f, "empty", "(none)");
        return;
    }
    struct tally_entry **v = tally_sorted(tl);
    html_table_begin(&t, f, align, head);
    for (size_t i = 0; i < tl->n; i++) {
        html_cell(&t, "%llu", (unsigned long long)v[i]->n);
        for (size_t p = 0; p + 1 < t.ncol; p++)
            cell_bytes(&t, "", v[i]->part[p], "");
    }
    html_table_end(&t);
    free(v);
}

static void print_html(FILE *f, struct report *r, int nfiles, size_t top)
{
    static const char *const dhead[] = { "count", "event", "rule", "command" };
    static const char *const uhead[] = { "count", "command", "detail" };
    static const char *const chead[] = { "count", "config", "reason" };
    static const char *const phead[] = { "count", "level", "message" };
    static const char *const shead[] = { "count", "server", "version", "level", "message" };

    html_page_begin(f, "ttlguard report");
    page_totals(f, r, nfiles);
    page_rules(f, r);
    page_violations(f, r);
    if (r->npasses > 0)
        page_audit(f, r);
    page_keys(f, r, top);
    page_tally(f, "Writes to durable keys (ttl_on_durable: a TTL makes them evictable)",
               &r->durable, "rlll", dhead);
    page_tally(f, "Unverified commands (passed, not judged)", &r->unverified, "rll", uhead);
    page_tally(f, "Rejected configs", &r->rejected, "rll", chead);
    if (r->policy.n > 0)
        page_tally(f, "Backend eviction policy", &r->policy, "rll", phead);
    if (r->server.n > 0)
        page_tally(f, "Backend server", &r->server, "rllll", shead);
    html_page_end(f);
}

static void report_free(struct report *r)
{
    for (size_t i = 0; i < r->nregs; i++) {
        struct reg *g = &r->regs[i];
        free(g->prefix.p);
        free(g->label.p);
        free(g->kind.p);
        free(g->owner.p);
        free(g->reason.p);
        free(g->rebuild.p);
        free(g->action.p);
        free(g->refresh.p);
    }
    free(r->regs);
    tally_free(&r->violations);
    tally_free(&r->by_rule);
    tally_free(&r->by_rule_action);
    free(r->points);
    free(r->passes);
    free(r->rpoints);
    tally_free(&r->audit_rules);
    for (size_t i = 0; i < r->cap_last; i++)
        free(r->last_rules[i].rule.p);
    free(r->last_rules);
    if (r->item != NULL)
        jobj_free(r->item);
    free(r->item);
    tally_free(&r->durable);
    tally_free(&r->keys);
    tally_free(&r->unverified);
    tally_free(&r->rejected);
    tally_free(&r->policy);
    tally_free(&r->server);
}

static void usage(FILE *out)
{
    fprintf(out,
"Usage: ttlguard report [--top N] [--html OUT.html] FILE...\n"
"\n"
"Summarise ttlguard event logs (events = PATH): durable prefixes and their\n"
"owners, violations by rule, command, effect and action, the keys seen most,\n"
"writes to durable keys, unverified commands, reloads. '-' reads stdin.\n"
"\n"
"  -n, --top N        how many keys (and key patterns) to list (default 10)\n"
"      --html FILE    also write the summary as one self-contained HTML page with\n"
"                     charts (no script, no external reference); '-': the page on\n"
"                     stdout instead of the text\n"
"  -h, --help         show this help\n"
"\n"
"Exit status: 0, or 2 when a file cannot be read (nothing is printed then) or the\n"
"--html page cannot be written.\n");
}

/* Every event line of the files read into r. REPORT_EXIT_OK, or
 * REPORT_EXIT_ERROR with the reason said when a file could not be read. */
static int read_events(struct report *r, FILE **files, char **paths, int nfiles)
{
    struct jobj *o = xcalloc(1, sizeof *o);
    char *line = NULL;
    size_t cap = 0;
    int rc = REPORT_EXIT_OK;
    for (int i = 0; i < nfiles && rc == REPORT_EXIT_OK; i++) {
        ssize_t n;
        r->hash_id[0] = '\0';
        errno = 0;
        while ((n = getline(&line, &cap, files[i])) > 0) {
            r->lines++;
            if (json_object(line, (size_t)n, o) != 0 || get(o, "event", J_STR) == NULL) {
                r->skipped++;
                continue;
            }
            event(r, o);
        }
        if (ferror(files[i])) {
            fprintf(stderr, "ttlguard report: %s: %s\n", paths[i], strerror(errno ? errno : EIO));
            rc = REPORT_EXIT_ERROR;
        }
    }
    free(line);
    jobj_free(o);
    free(o);
    return rc;
}

int report_main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "top",  required_argument, NULL, 'n' },
        { "html", required_argument, NULL, 'H' },
        { "help", no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    size_t top = 10;
    const char *html_path = NULL;
    int c;
    char *end;

    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            top = (size_t)strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0') {
                fprintf(stderr, "ttlguard report: --top '%s': expected a number\n", optarg);
                return REPORT_EXIT_ERROR;
            }
            break;
        case 'H':
            html_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return REPORT_EXIT_OK;
        default:
            usage(stderr);
            return REPORT_EXIT_ERROR;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return REPORT_EXIT_ERROR;
    }

    /* Open everything first: a file that cannot be read fails the report
     * before anything is printed, rather than a summary that looks whole. */
    int nfiles = argc - optind;
    FILE **files = xcalloc((size_t)nfiles, sizeof *files);
    int rc = REPORT_EXIT_OK;
    for (int i = 0; i < nfiles; i++) {
        const char *path = argv[optind + i];
        files[i] = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
        if (files[i] == NULL) {
            fprintf(stderr, "ttlguard report: %s: %s\n", path, strerror(errno));
            rc = REPORT_EXIT_ERROR;
        }
    }

    /* The page's file too: nothing is written when it cannot be made. */
    FILE *html = NULL;
    if (rc == REPORT_EXIT_OK && html_path != NULL) {
        html = strcmp(html_path, "-") == 0 ? stdout : fopen(html_path, "w");
        if (html == NULL) {
            fprintf(stderr, "ttlguard report: --html %s: %s\n", html_path, strerror(errno));
            rc = REPORT_EXIT_ERROR;
        }
    }

    struct report r = { .keep_points = html != NULL };
    if (rc == REPORT_EXIT_OK)
        rc = read_events(&r, files, argv + optind, nfiles);
    if (rc == REPORT_EXIT_OK && html != stdout)
        print_report(&r, nfiles, top);
    if (rc == REPORT_EXIT_OK && html != NULL)
        print_html(html, &r, nfiles, top);
    if (html != NULL && html != stdout) {
        int bad = ferror(html);
        if ((fclose(html) != 0 || bad) && rc == REPORT_EXIT_OK) {
            fprintf(stderr, "ttlguard report: --html %s: cannot write: %s\n", html_path,
                    strerror(errno ? errno : EIO));
            rc = REPORT_EXIT_ERROR;
        }
    }

    for (int i = 0; i < nfiles; i++) {
        if (files[i] != NULL && files[i] != stdin)
            fclose(files[i]);
    }
    free(files);
    report_free(&r);
    return rc;
}
