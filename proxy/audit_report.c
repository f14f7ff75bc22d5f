/*
 * audit_report: tallies, pattern folding and output of `ttlguard audit`.
 * See audit_report.h for the groups and who owns what.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "audit_report.h"
#include "events.h"
#include "html.h"
#include "util.h"

static const char *ttl_bucket_names[AREP_TTL_BUCKETS] = {
    "<1m", "1m-1h", "1h-1d", "1d-7d", "7d-30d", ">30d"
};

/* Upper bounds (exclusive) of the buckets but the last, in ms. */
static const long long ttl_bucket_limits[AREP_TTL_BUCKETS - 1] = {
    60LL * 1000, 3600LL * 1000, 86400LL * 1000, 7 * 86400LL * 1000, 30 * 86400LL * 1000
};

static const char *ktype_names[KTYPE_COUNT] = {
    "string", "list", "set", "zset", "hash", "stream", "other", "none"
};

static const struct {
    const char *json;           /* name in --json */
    const char *text;           /* name in the table */
} group_names[AREP_GROUPS] = {
    [AREP_LEAKED]         = { "leaked", "leaked" },
    [AREP_EXPIRING]       = { "expiring", "expiring" },
    [AREP_REGISTERED]     = { "registered", "registered (durable)" },
    [AREP_REGISTERED_TTL] = { "registered_with_ttl", "durable with a TTL (!)" },
    [AREP_UNREGISTERED]   = { "unregistered", "unregistered persistent" },
};

void arep_init(struct arep *a, const struct ruleset *rs)
{
    memset(a, 0, sizeof *a);
    a->rs = rs;
    a->nrules = rs->n + 1;
    a->rules = xcalloc(a->nrules, sizeof *a->rules);
    a->rule_sig = xcalloc(a->nrules, sizeof *a->rule_sig);
    for (size_t i = 0; i < a->nrules; i++) {
        const struct rule *r = i < rs->n ? &rs->v[i] : &rs->dflt;
        a->rules[i].rule = r;
        a->rule_sig[i].kind = r->kind;
        a->rule_sig[i].action = r->action;
        a->rule_sig[i].ttl = r->ttl;
        a->rule_sig[i].prefix = xmemdup(r->prefix, r->prefix_len);
        a->rule_sig[i].prefix_len = r->prefix_len;
    }
    a->info_keys[0] = a->info_keys[1] = -1;
    a->info_expires[0] = a->info_expires[1] = -1;
    a->top = 20;
    a->max_patterns = AREP_MAX_PATTERNS;
}

static void tally_free(struct arep_tally *t)
{
    for (int i = 0; i < t->nex; i++)
        free(t->ex[i].key);
}

void arep_free(struct arep *a)
{
    free(a->nodes);
    for (size_t i = 0; i < a->nrules; i++) {
        tally_free(&a->rules[i].no_ttl);
        tally_free(&a->rules[i].with_ttl);
    }
    free(a->rules);
    for (size_t i = 0; a->rule_sig != NULL && i < a->nrules; i++)
        free(a->rule_sig[i].prefix);
    free(a->rule_sig);
    for (int t = 0; t < 2; t++) {
        struct arep_patterns *ps = &a->patterns[t];
        for (size_t i = 0; i < ps->cap; i++) {
            free(ps->v[i].text);
            free(ps->v[i].ex.key);
        }
        free(ps->v);
    }
    memset(a, 0, sizeof *a);
}

/* 1 when keys under r must carry a TTL (ttl rules; a strict default). */
static int rule_wants_ttl(const struct rule *r)
{
    return r->kind == RULE_TTL || (r->kind == RULE_DEFAULT && r->action != ACTION_ALLOW);
}

static size_t rule_index(const struct arep *a, const struct rule *r)
{
    if (r == &a->rs->dflt)
        return a->nrules - 1;
    return (size_t)(r - a->rs->v);
}

enum arep_group arep_group_of(const struct rule *r, int has_ttl)
{
    if (r->kind == RULE_DURABLE)
        return has_ttl ? AREP_REGISTERED_TTL : AREP_REGISTERED;
    if (has_ttl)
        return AREP_EXPIRING;
    return rule_wants_ttl(r) ? AREP_LEAKED : AREP_UNREGISTERED;
}

/* FNV-1a, 64 bit: patterns are short and few; nothing faster is needed. */
static uint64_t hash_bytes(const char *p, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static size_t fold(const char *key, size_t len, char *out, size_t cap);

/* The slot of text in the open-addressed table: its entry, or the empty
 * slot where it would go. */
static struct arep_pattern *pattern_slot(struct arep_patterns *ps, const char *text, size_t len,
                                         uint64_t h)
{
    for (size_t i = h & (ps->cap - 1);; i = (i + 1) & (ps->cap - 1)) {
        struct arep_pattern *p = &ps->v[i];
        if (p->text == NULL || (p->hash == h && p->len == len && memcmp(p->text, text, len) == 0))
            return p;
    }
}

/* Doubles the table of ps (64 slots at first). */
static void patterns_grow(struct arep_patterns *ps)
{
    size_t ncap = ps->cap ? ps->cap * 2 : 64;
    struct arep_pattern *nv = xcalloc(ncap, sizeof *nv);
    for (size_t i = 0; i < ps->cap; i++) {
        if (ps->v[i].text == NULL)
            continue;
        size_t j = ps->v[i].hash & (ncap - 1);
        while (nv[j].text != NULL)
            j = (j + 1) & (ncap - 1);
        nv[j] = ps->v[i];
    }
    free(ps->v);
    ps->v = nv;
    ps->cap = ncap;
}

/* Count key under its pattern; past max distinct patterns a new one is
 * counted as "other". */
static void pattern_add(struct arep_patterns *ps, size_t max, const struct rule *r,
                        const char *key, size_t keylen, long long mem)
{
    char text[256];
    size_t len = fold(key, keylen, text, sizeof text);
    uint64_t h = hash_bytes(text, len);
    uint64_t bytes = mem > 0 ? (uint64_t)mem : 0;

    struct arep_pattern *p = ps->cap > 0 ? pattern_slot(ps, text, len, h) : NULL;
    if (p != NULL && p->text != NULL) {
        p->keys++;
        p->memory += bytes;
        return;
    }
    if (ps->n >= max) {
        ps->other_keys++;
        ps->other_memory += bytes;
        return;
    }
    if (ps->cap == 0 || (ps->n + 1) * 2 > ps->cap) {
        patterns_grow(ps);
        p = pattern_slot(ps, text, len, h);
    }
    p->text = xmemdup(text, len);
    p->len = len;
    p->hash = h;
    p->keys = 1;
    p->memory = bytes;
    p->rule = r;
    p->ex.key = xmemdup(key, keylen);
    p->ex.len = keylen;
    ps->n++;
}

enum arep_group arep_add(struct arep *a, const struct rule *r, const char *key, size_t len,
                         long long pttl_ms, enum arep_ktype type, long long mem)
{
    int has_ttl = pttl_ms >= 0;
    struct arep_rule_stats *rs = &a->rules[rule_index(a, r)];
    struct arep_tally *t = has_ttl ? &rs->with_ttl : &rs->no_ttl;

    t->keys++;
    if (mem > 0)
        t->memory += (uint64_t)mem;
    t->types[type]++;
    if (has_ttl) {
        int b = 0;
        while (b < AREP_TTL_BUCKETS - 1 && pttl_ms >= ttl_bucket_limits[b])
            b++;
        t->ttl[b]++;
    }
    if (t->nex < AREP_EXAMPLES) {
        t->ex[t->nex].key = xmemdup(key, len);
        t->ex[t->nex].len = len;
        t->nex++;
    }
    a->seen++;

    enum arep_group g = arep_group_of(r, has_ttl);
    if (g == AREP_LEAKED)
        pattern_add(&a->patterns[0], a->max_patterns, r, key, len, mem);
    else if (g == AREP_UNREGISTERED)
        pattern_add(&a->patterns[1], a->max_patterns, r, key, len, mem);
    return g;
}

enum arep_ktype arep_ktype_parse(const char *s, size_t len)
{
    for (int t = 0; t < KTYPE_COUNT; t++) {
        if (t == KTYPE_OTHER)
            continue;
        if (strlen(ktype_names[t]) == len && memcmp(ktype_names[t], s, len) == 0)
            return (enum arep_ktype)t;
    }
    return KTYPE_OTHER;
}

int arep_classify(struct arep *a, const struct ruleset *rs, const char *key, size_t len,
                  long long pttl_ms, enum arep_ktype type, long long mem, const struct rule **rule)
{
    /* PTTL -2 or TYPE none: SCAN returned it, then it expired (or was
     * deleted) before we asked. Not an error; counted on its own. */
    if (pttl_ms < -1 || type == KTYPE_NONE) {
        a->expired_during++;
        return AREP_GONE;
    }
    const struct rule *r = rules_match(rs, key, len);
    if (rule != NULL)
        *rule = r;
    return (int)arep_add(a, r, key, len, pttl_ms, type, mem);
}

uint64_t arep_leaked(const struct arep *a)
{
    uint64_t n = 0;
    for (size_t i = 0; i < a->nrules; i++)
        if (rule_wants_ttl(a->rules[i].rule))
            n += a->rules[i].no_ttl.keys;
    return n;
}

int arep_rebind(struct arep *a, const struct ruleset *rs)
{
    if (rs->n + 1 != a->nrules)
        return -1;
    const struct rule *to[a->nrules];
    for (size_t i = 0; i < a->nrules; i++) {
        const struct rule *r = i < rs->n ? &rs->v[i] : &rs->dflt;
        if (r->kind != a->rule_sig[i].kind || r->action != a->rule_sig[i].action
            || r->ttl != a->rule_sig[i].ttl || r->prefix_len != a->rule_sig[i].prefix_len
            || memcmp(r->prefix, a->rule_sig[i].prefix, r->prefix_len) != 0)
            return -1;
        to[i] = r;
    }
    /* The old rules are gone: their addresses are compared, never read. */
    for (int t = 0; t < 2; t++) {
        struct arep_patterns *ps = &a->patterns[t];
        for (size_t j = 0; j < ps->cap; j++)
            for (size_t i = 0; ps->v[j].text != NULL && i < a->nrules; i++)
                if (ps->v[j].rule == a->rules[i].rule) {
                    ps->v[j].rule = to[i];
                    break;
                }
    }
    for (size_t i = 0; i < a->nrules; i++)
        a->rules[i].rule = to[i];
    a->rs = rs;
    return 0;
}

/* ---- escaping and folding --------------------------------------------- */

static const char hexdigits[] = "0123456789abcdef";

/* Printable form of one byte at out (room for 4); returns bytes written. */
static size_t escape_byte(unsigned char c, char *out)
{
    switch (c) {
    case '\\': out[0] = '\\'; out[1] = '\\'; return 2;
    case '"':  out[0] = '\\'; out[1] = '"';  return 2;
    case '\n': out[0] = '\\'; out[1] = 'n';  return 2;
    case '\r': out[0] = '\\'; out[1] = 'r';  return 2;
    case '\t': out[0] = '\\'; out[1] = 't';  return 2;
    }
    if (c >= 0x20 && c < 0x7f) {
        out[0] = (char)c;
        return 1;
    }
    out[0] = '\\';
    out[1] = 'x';
    out[2] = hexdigits[c >> 4];
    out[3] = hexdigits[c & 15];
    return 4;
}

/* Printable form of key bytes: printable ASCII as is, `\\` `\"` `\n` `\r`
 * `\t`, other bytes `\xHH`. Writes at most cap - 1 bytes plus a NUL; a cut
 * ends in "...". Returns the length written. cap must be at least 8. */
static size_t escape_key(const char *key, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char tmp[4];
        size_t n = escape_byte((unsigned char)key[i], tmp);
        if (o + n > cap - 4) {      /* keep room for "..." and the NUL */
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, tmp, n);
        o += n;
    }
    out[o] = '\0';
    return o;
}

static int is_hex(unsigned char c)
{
    return isxdigit(c) != 0;
}

static int is_word(unsigned char c)
{
    return c < 0x80 && isalnum(c);
}

/* A canonical UUID (8-4-4-4-12 hex digits) starting at p. */
static int is_uuid(const char *p, size_t avail)
{
    static const int dash[] = { 8, 13, 18, 23 };
    if (avail < 36)
        return 0;
    for (int i = 0, d = 0; i < 36; i++) {
        if (d < 4 && i == dash[d]) {
            if (p[i] != '-')
                return 0;
            d++;
        } else if (!is_hex((unsigned char)p[i])) {
            return 0;
        }
    }
    return 1;
}

/* An id-like word: all digits, or 8+ hex digits with at least one digit
 * (object ids, hashes; "deadbeef" and "v2" stay). */
static int is_id_word(const char *p, size_t len)
{
    int digits = 0, hex = 1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (isdigit(c))
            digits++;
        else if (!is_hex(c))
            hex = 0;
    }
    if ((size_t)digits == len)
        return 1;
    return hex && digits > 0 && len >= 8;
}

/* Fold a key into a pattern in display form: numbers, UUIDs and hex ids
 * (8+ hex digits with at least one digit) become `*`, glob specials are
 * escaped with `\`, other bytes are escaped as in escape_key(). Writes at
 * most cap - 1 bytes plus a NUL (a pattern cut short ends in `*`); returns
 * its length. cap must be at least 8. */
static size_t fold(const char *key, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    size_t i = 0;
    while (i < len) {
        char tmp[4];
        const char *piece = tmp;
        size_t n;
        size_t next;
        int word_start = i == 0 || !is_word((unsigned char)key[i - 1]);

        if (word_start && is_uuid(key + i, len - i)
            && (i + 36 == len || !is_word((unsigned char)key[i + 36]))) {
            piece = "*";
            n = 1;
            next = i + 36;
        } else if (is_word((unsigned char)key[i])) {
            size_t j = i;
            while (j < len && is_word((unsigned char)key[j]))
                j++;
            if (is_id_word(key + i, j - i)) {
                piece = "*";
                n = 1;
            } else {
                piece = key + i;
                n = j - i;
            }
            next = j;
        } else {
            unsigned char c = (unsigned char)key[i];
            if (c == '*' || c == '?' || c == '[' || c == ']') {
                tmp[0] = '\\';
                tmp[1] = (char)c;
                n = 2;
            } else {
                n = escape_byte(c, tmp);
            }
            next = i + 1;
        }
        if (o + n > cap - 2) {
            /* Out of room: a trailing `*` keeps the pattern a match for the key. */
            if (o == 0 || out[o - 1] != '*' || (o >= 2 && out[o - 2] == '\\'))
                out[o++] = '*';
            break;
        }
        memcpy(out + o, piece, n);
        o += n;
        i = next;
    }
    out[o] = '\0';
    return o;
}

size_t arep_fold(const char *key, size_t len, char *out, size_t cap)
{
    return fold(key, len, out, cap);
}

/* ---- text output ------------------------------------------------------ */

/* An aligned table: cells are added row by row, then printed with each
 * column as wide as its widest cell. */
struct table {
    size_t ncol;
    const char *align;          /* one 'l' or 'r' per column */
    char **cells;
    size_t n;
    size_t cap;
};

static void table_init(struct table *t, size_t ncol, const char *align)
{
    memset(t, 0, sizeof *t);
    t->ncol = ncol;
    t->align = align;
}

static void table_cell(struct table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void table_cell(struct table *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->cells = xrealloc(t->cells, t->cap * sizeof *t->cells);
    }
    t->cells[t->n++] = xstrdup(buf);
}

/* Prints and frees the table. */
static void table_print(FILE *f, struct table *t)
{
    size_t width[32] = { 0 };
    ASSERT(t->ncol <= 32 && t->n % t->ncol == 0);
    for (size_t i = 0; i < t->n; i++) {
        size_t w = strlen(t->cells[i]);
        if (w > width[i % t->ncol])
            width[i % t->ncol] = w;
    }
    for (size_t i = 0; i < t->n; i++) {
        size_t c = i % t->ncol;
        int last = c == t->ncol - 1;
        if (t->align[c] == 'r')
            fprintf(f, "%*s", (int)width[c], t->cells[i]);
        else if (last)
            fputs(t->cells[i], f);
        else
            fprintf(f, "%-*s", (int)width[c], t->cells[i]);
        fputs(last ? "\n" : "  ", f);
        free(t->cells[i]);
    }
    free(t->cells);
    t->cells = NULL;
    t->n = t->cap = 0;
}

static const char *fmt_bytes(char *buf, size_t len, uint64_t n)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

/* Sum of the rule tallies that make up group g. Example keys are borrowed. */
static void group_tally(const struct arep *a, enum arep_group g, struct arep_tally *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < a->nrules; i++) {
        const struct rule *r = a->rules[i].rule;
        for (int has_ttl = 0; has_ttl < 2; has_ttl++) {
            if (arep_group_of(r, has_ttl) != g)
                continue;
            const struct arep_tally *t = has_ttl ? &a->rules[i].with_ttl : &a->rules[i].no_ttl;
            out->keys += t->keys;
            out->memory += t->memory;
            for (int b = 0; b < AREP_TTL_BUCKETS; b++)
                out->ttl[b] += t->ttl[b];
            for (int k = 0; k < KTYPE_COUNT; k++)
                out->types[k] += t->types[k];
            for (int e = 0; e < t->nex && out->nex < AREP_EXAMPLES; e++)
                out->ex[out->nex++] = t->ex[e];
        }
    }
}

static void types_text(const struct arep_tally *t, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < KTYPE_COUNT && o < len; k++)
        if (t->types[k] > 0)
            o += (size_t)snprintf(buf + o, len - o, "%s%s %llu", o ? ", " : "",
                                  ktype_names[k], (unsigned long long)t->types[k]);
}

/* The examples of a rule worth showing: the keys in its problem state. */
static const struct arep_tally *rule_problem(const struct arep_rule_stats *rs)
{
    return rs->rule->kind == RULE_DURABLE ? &rs->with_ttl : &rs->no_ttl;
}

static int pattern_cmp_keys(const void *x, const void *y)
{
    const struct arep_pattern *a = *(const struct arep_pattern *const *)x;
    const struct arep_pattern *b = *(const struct arep_pattern *const *)y;
    if (a->keys != b->keys)
        return a->keys > b->keys ? -1 : 1;
    if (a->memory != b->memory)
        return a->memory > b->memory ? -1 : 1;
    return strcmp(a->text, b->text);
}

static int pattern_cmp_memory(const void *x, const void *y)
{
    const struct arep_pattern *a = *(const struct arep_pattern *const *)x;
    const struct arep_pattern *b = *(const struct arep_pattern *const *)y;
    if (a->memory != b->memory)
        return a->memory > b->memory ? -1 : 1;
    return pattern_cmp_keys(x, y);
}

/* The patterns of a table, largest first (by memory with --memory, else by
 * key count). The caller frees the array, not its elements. */
static struct arep_pattern **patterns_sorted(const struct arep *a, const struct arep_patterns *ps)
{
    struct arep_pattern **v = xmalloc((ps->n ? ps->n : 1) * sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < ps->cap; i++)
        if (ps->v[i].text != NULL)
            v[n++] = &ps->v[i];
    qsort(v, n, sizeof *v, a->with_memory ? pattern_cmp_memory : pattern_cmp_keys);
    return v;
}

static void print_patterns(FILE *f, const struct arep *a, int which, const char *title)
{
    const struct arep_patterns *ps = &a->patterns[which];
    if (ps->n == 0)
        return;
    char mem[32], ex[160];
    struct arep_pattern **v = patterns_sorted(a, ps);
    size_t shown = ps->n < (size_t)a->top ? ps->n : (size_t)a->top;

    fprintf(f, "\n%s\n", title);
    struct table t;
    table_init(&t, 5, "rrlll");
    table_cell(&t, "KEYS");
    table_cell(&t, "MEMORY");
    table_cell(&t, "RULE");
    table_cell(&t, "PATTERN");
    table_cell(&t, "EXAMPLE");
    for (size_t i = 0; i < shown; i++) {
        table_cell(&t, "%llu", (unsigned long long)v[i]->keys);
        table_cell(&t, "%s", a->with_memory ? fmt_bytes(mem, sizeof mem, v[i]->memory) : "-");
        table_cell(&t, "%s", v[i]->rule->label);
        table_cell(&t, "%s", v[i]->text);
        escape_key(v[i]->ex.key, v[i]->ex.len, ex, sizeof ex);
        table_cell(&t, "%s", ex);
    }
    table_print(f, &t);
    uint64_t rest_keys = ps->other_keys, rest_patterns = 0;
    for (size_t i = shown; i < ps->n; i++) {
        rest_keys += v[i]->keys;
        rest_patterns++;
    }
    if (rest_keys > 0)
        fprintf(f, "... and %llu more keys in %llu more patterns%s\n",
                (unsigned long long)rest_keys, (unsigned long long)rest_patterns,
                ps->other_keys ? " (and some not folded: too many distinct patterns)" : "");
    free(v);
}

static void print_keyspace(FILE *f, const struct arep *a)
{
    uint64_t with_ttl = 0;
    for (size_t i = 0; i < a->nrules; i++)
        with_ttl += a->rules[i].with_ttl.keys;

    fprintf(f, "\nKEYSPACE: INFO keyspace db%d next to what the scan saw\n", a->db);
    struct table t;
    table_init(&t, 3, "lrr");
    table_cell(&t, " ");
    table_cell(&t, "KEYS");
    table_cell(&t, "WITH TTL");
    for (int i = 0; i < 2; i++) {
        if (a->info_keys[i] < 0)
            continue;
        table_cell(&t, "INFO at %s", i == 0 ? "start" : "end");
        table_cell(&t, "%lld", a->info_keys[i]);
        table_cell(&t, "%lld", a->info_expires[i]);
    }
    table_cell(&t, "seen alive by the scan");
    table_cell(&t, "%llu", (unsigned long long)a->seen);
    table_cell(&t, "%llu", (unsigned long long)with_ttl);
    table_cell(&t, "expired during the scan");
    table_cell(&t, "%llu", (unsigned long long)a->expired_during);
    table_cell(&t, "-");
    table_print(f, &t);
    if (a->duplicates)
        fprintf(f, "SCAN returned %llu keys twice (the table was resizing); each is counted once.\n",
                (unsigned long long)a->duplicates);

    if (a->match != NULL) {
        fprintf(f, "With --match the scan only counts matching keys; INFO counts all of them.\n");
        return;
    }
    long long diff = a->info_keys[0] < 0 ? 0
                   : a->info_keys[0] - (long long)(a->seen + a->expired_during);
    if (a->info_keys[0] >= 0 && diff == 0 && !a->interrupted) {
        fprintf(f, "INFO and the scan agree.\n");
        return;
    }
    if (a->interrupted)
        fprintf(f, "The scan was interrupted: it saw only part of the keyspace.\n");
    else if (diff > 0)
        fprintf(f, "INFO counts %lld keys the scan did not see alive.\n", diff);
    else if (diff < 0)
        fprintf(f, "The scan saw %lld keys more than INFO counted at the start.\n", -diff);
    fprintf(f,
        "Why counts differ: INFO keyspace still counts keys that have expired but that Redis\n"
        "has not removed yet. It removes them lazily, when a client touches one, and by a\n"
        "background cycle that samples volatile keys; SCAN and PTTL never show them. A replica\n"
        "does not expire keys itself (it waits for its primary's DEL), so its INFO can count\n"
        "even more of them, while a freshly attached replica counts fewer keys than its primary:\n"
        "the snapshot it loaded left already-expired keys out. Keys written or deleted while\n"
        "the scan runs move both numbers.\n");
}

/* --cluster: the share of each node. */
static void print_nodes(FILE *f, const struct arep *a)
{
    if (a->nnodes == 0)
        return;
    struct table t;
    fprintf(f, "\n");
    table_init(&t, 4, "llrr");
    table_cell(&t, "NODE");
    table_cell(&t, "ROLE");
    table_cell(&t, "KEYS");
    table_cell(&t, "LEAKED");
    for (size_t i = 0; i < a->nnodes; i++) {
        table_cell(&t, "%s", a->nodes[i].name);
        table_cell(&t, "%s", a->nodes[i].role);
        table_cell(&t, "%llu", (unsigned long long)a->nodes[i].keys);
        table_cell(&t, "%llu", (unsigned long long)a->nodes[i].leaked);
    }
    table_print(f, &t);
}

/* "RESULT: ... (exit N)", the last line of the text report. */
static void result_line(char *buf, size_t len, const struct arep *a, uint64_t durable_with_ttl,
                        int exit_status)
{
    uint64_t leaked = arep_leaked(a);
    size_t o = (size_t)snprintf(buf, len, "RESULT: ");
    if (a->interrupted)
        o += (size_t)snprintf(buf + o, len - o, "interrupted; %llu leaked keys so far",
                              (unsigned long long)leaked);
    else if (leaked)
        o += (size_t)snprintf(buf + o, len - o, "%llu leaked keys under rules that require a TTL",
                              (unsigned long long)leaked);
    else
        o += (size_t)snprintf(buf + o, len - o, "no leaked keys");
    if (durable_with_ttl && o < len)
        o += (size_t)snprintf(buf + o, len - o, "; %llu durable keys carry a TTL and can be evicted",
                              (unsigned long long)durable_with_ttl);
    if (o < len)
        snprintf(buf + o, len - o, " (exit %d)", exit_status);
}

/* The table of groups (registered, leaked, ...), filling groups[]. */
static void print_groups(FILE *f, const struct arep *a, struct arep_tally *groups)
{
    char mem[32], buf[512];
    struct table t;
    fprintf(f, "\n");
    table_init(&t, 4 + AREP_TTL_BUCKETS, "lrrrrrrrrl");
    table_cell(&t, "GROUP");
    table_cell(&t, "KEYS");
    table_cell(&t, "MEMORY");
    for (int b = 0; b < AREP_TTL_BUCKETS; b++)
        table_cell(&t, "%s", ttl_bucket_names[b]);
    table_cell(&t, "TYPES");
    for (int g = 0; g < AREP_GROUPS; g++) {
        group_tally(a, (enum arep_group)g, &groups[g]);
        table_cell(&t, "%s", group_names[g].text);
        table_cell(&t, "%llu", (unsigned long long)groups[g].keys);
        table_cell(&t, "%s", a->with_memory ? fmt_bytes(mem, sizeof mem, groups[g].memory) : "-");
        for (int b = 0; b < AREP_TTL_BUCKETS; b++)
            table_cell(&t, "%llu", (unsigned long long)groups[g].ttl[b]);
        types_text(&groups[g], buf, sizeof buf);
        table_cell(&t, "%s", buf);
    }
    table_print(f, &t);
}

/* The table of rules: keys under each, with and without a TTL, a problem
 * key for an example. */
static void print_rules(FILE *f, const struct arep *a)
{
    char mem[32], buf[128];
    struct table t;
    fprintf(f, "\n");
    table_init(&t, 9, "lllrrrrrl");
    table_cell(&t, "RULE");
    table_cell(&t, "ACTION");
    table_cell(&t, "RULE TTL");
    table_cell(&t, "KEYS");
    table_cell(&t, "NO TTL");
    table_cell(&t, "WITH TTL");
    table_cell(&t, "MEMORY");
    table_cell(&t, "PROBLEM KEYS");
    table_cell(&t, "EXAMPLE");
    for (size_t i = 0; i < a->nrules; i++) {
        const struct arep_rule_stats *rs = &a->rules[i];
        const struct rule *r = rs->rule;
        const struct arep_tally *p = rule_problem(rs);
        table_cell(&t, "%s", r->label);
        table_cell(&t, "%s", r->kind == RULE_DURABLE ? "durable" : rule_action_name(r->action));
        if (r->ttl > 0)
            table_cell(&t, "%llds", r->ttl);
        else
            table_cell(&t, "-");
        table_cell(&t, "%llu", (unsigned long long)(rs->no_ttl.keys + rs->with_ttl.keys));
        table_cell(&t, "%llu", (unsigned long long)rs->no_ttl.keys);
        table_cell(&t, "%llu", (unsigned long long)rs->with_ttl.keys);
        table_cell(&t, "%s", a->with_memory
                   ? fmt_bytes(mem, sizeof mem, rs->no_ttl.memory + rs->with_ttl.memory) : "-");
        if (r->kind == RULE_DURABLE)
            table_cell(&t, "%llu with a TTL", (unsigned long long)p->keys);
        else if (rule_wants_ttl(r))
            table_cell(&t, "%llu leaked", (unsigned long long)p->keys);
        else
            table_cell(&t, "%llu unregistered", (unsigned long long)p->keys);
        if (p->nex > 0)
            escape_key(p->ex[0].key, p->ex[0].len, buf, 100);
        else
            buf[0] = '\0';
        table_cell(&t, "%s", buf);
    }
    table_print(f, &t);
}

/* Example keys of the groups that need attention. */
static void print_examples(FILE *f, const struct arep_tally *groups)
{
    char buf[512];
    int any = 0;
    for (int g = 0; g < AREP_GROUPS; g++) {
        if (groups[g].nex == 0 || g == AREP_EXPIRING || g == AREP_REGISTERED)
            continue;
        if (!any)
            fprintf(f, "\nEXAMPLES\n");
        any = 1;
        fprintf(f, "%s:", group_names[g].text);
        for (int e = 0; e < groups[g].nex; e++) {
            escape_key(groups[g].ex[e].key, groups[g].ex[e].len, buf, 160);
            fprintf(f, "%s %s", e ? "," : "", buf);
        }
        fprintf(f, "\n");
    }
}

static void print_fix(FILE *f, const struct arep *a)
{
    if (a->fix == AREP_FIX_OFF)
        return;
    fprintf(f, "\nFIX (EXPIRE key <rule ttl> NX: a key that got a TTL meanwhile is left alone)\n");
    if (a->fix == AREP_FIX_DRY_RUN)
        fprintf(f, "dry run: would give %llu leaked keys their rule's TTL; run again with --fix --yes\n",
                (unsigned long long)a->fix_candidates);
    else
        fprintf(f, "gave %llu keys their rule's TTL; %llu left alone (got a TTL or vanished meanwhile); "
                "%llu errors%s%s\n",
                (unsigned long long)a->fixed, (unsigned long long)a->fix_skipped,
                (unsigned long long)a->fix_errors, a->fix_errors ? ", first: " : "", a->fix_error);
    if (a->fix_no_ttl)
        fprintf(f, "%llu leaked keys are under rules without a ttl: nothing to give them\n",
                (unsigned long long)a->fix_no_ttl);
}

void arep_print_text(FILE *f, const struct arep *a, int exit_status)
{
    char buf[512];

    fprintf(f, "ttlguard audit of %s db %d (%s%s%s)", a->backend, a->db,
            a->role[0] ? a->role : "unknown role",
            a->redis_version[0] ? ", redis " : "", a->redis_version);
    if (a->match)
        fprintf(f, ", match '%s'", a->match);
    fprintf(f, ", config %s\n", a->config_path ? a->config_path : "(built-in)");
    double secs = (double)a->elapsed_ms / 1000.0;
    uint64_t total = a->seen + a->expired_during;
    fprintf(f, "%s %llu keys in %.2f s (%.0f keys/s)\n",
            a->interrupted ? "INTERRUPTED: partial report after" : "audited",
            (unsigned long long)total, secs, secs > 0 ? (double)total / secs : 0.0);

    struct arep_tally groups[AREP_GROUPS];
    print_groups(f, a, groups);
    print_nodes(f, a);
    print_rules(f, a);
    print_patterns(f, a, 0, "LEAKED KEYS BY PATTERN: their rule wants a TTL; fix the writer (seed 000), then --fix");
    print_patterns(f, a, 1, "UNREGISTERED PERSISTENT KEYS BY PATTERN: give them a TTL, or register them as durable");
    print_examples(f, groups);
    print_keyspace(f, a);
    print_fix(f, a);
    result_line(buf, sizeof buf, a, groups[AREP_REGISTERED_TTL].keys, exit_status);
    fprintf(f, "\n%s\n", buf);
}

/* ---- JSON output ------------------------------------------------------ */

/* Bytes as a JSON string in the event log's byte-exact encoding
 * (docs/events.md, Strings): the one escaper of the tree, so that invalid
 * UTF-8 in a key, a pattern or a name is escaped here too, and Python gets
 * the bytes back with surrogateescape. */
static void json_str(FILE *f, const char *s, size_t len)
{
    struct sbuf b = { 0 };
    evbuf_json_str(&b, s, len);
    fwrite(b.p, 1, b.len, f);
    free(b.p);
}

static void json_cstr(FILE *f, const char *s)
{
    if (s == NULL)
        fputs("null", f);
    else
        json_str(f, s, strlen(s));
}

static void json_tally(FILE *f, const struct arep *a, const struct arep_tally *t)
{
    fprintf(f, "{\"keys\":%llu,\"memory\":", (unsigned long long)t->keys);
    if (a->with_memory)
        fprintf(f, "%llu", (unsigned long long)t->memory);
    else
        fputs("null", f);
    fputs(",\"ttl\":{", f);
    for (int b = 0; b < AREP_TTL_BUCKETS; b++)
        fprintf(f, "%s\"%s\":%llu", b ? "," : "", ttl_bucket_names[b], (unsigned long long)t->ttl[b]);
    fputs("},\"types\":{", f);
    int first = 1;
    for (int k = 0; k < KTYPE_COUNT; k++) {
        if (t->types[k] == 0)
            continue;
        fprintf(f, "%s\"%s\":%llu", first ? "" : ",", ktype_names[k], (unsigned long long)t->types[k]);
        first = 0;
    }
    fputs("},\"examples\":[", f);
    for (int e = 0; e < t->nex; e++) {
        if (e)
            fputc(',', f);
        json_str(f, t->ex[e].key, t->ex[e].len);
    }
    fputs("]}", f);
}

static void json_patterns(FILE *f, const struct arep *a, int which)
{
    const struct arep_patterns *ps = &a->patterns[which];
    struct arep_pattern **v = patterns_sorted(a, ps);
    size_t shown = ps->n < (size_t)a->top ? ps->n : (size_t)a->top;
    uint64_t rest = ps->other_keys;
    for (size_t i = shown; i < ps->n; i++)
        rest += v[i]->keys;
    fprintf(f, "{\"distinct\":%zu,\"not_shown_keys\":%llu,\"top\":[", ps->n, (unsigned long long)rest);
    for (size_t i = 0; i < shown; i++) {
        fputs(i ? ",{\"pattern\":" : "{\"pattern\":", f);
        json_str(f, v[i]->text, v[i]->len);
        fprintf(f, ",\"keys\":%llu,\"memory\":", (unsigned long long)v[i]->keys);
        if (a->with_memory)
            fprintf(f, "%llu", (unsigned long long)v[i]->memory);
        else
            fputs("null", f);
        fputs(",\"rule\":", f);
        json_cstr(f, v[i]->rule->label);
        fputs(",\"example\":", f);
        json_str(f, v[i]->ex.key, v[i]->ex.len);
        fputc('}', f);
    }
    fputs("]}", f);
    free(v);
}

/* ,"nodes":[...]: each cluster node's keys and leaks. */
static void json_nodes(FILE *f, const struct arep *a)
{
    fputs(",\"nodes\":[", f);
    for (size_t i = 0; i < a->nnodes; i++) {
        fputs(i ? ",{\"node\":" : "{\"node\":", f);
        json_cstr(f, a->nodes[i].name);
        fputs(",\"role\":", f);
        json_cstr(f, a->nodes[i].role);
        fprintf(f, ",\"keys\":%llu,\"leaked\":%llu}", (unsigned long long)a->nodes[i].keys,
                (unsigned long long)a->nodes[i].leaked);
    }
    fputc(']', f);
}

/* ,"rules":[...]: each rule with its keys with and without a TTL. */
static void json_rules(FILE *f, const struct arep *a)
{
    fputs(",\"rules\":[", f);
    for (size_t i = 0; i < a->nrules; i++) {
        const struct rule *r = a->rules[i].rule;
        fputs(i ? ",{\"rule\":" : "{\"rule\":", f);
        json_cstr(f, r->label);
        fprintf(f, ",\"kind\":\"%s\",\"prefix\":", rule_kind_name(r->kind));
        if (r->kind == RULE_DEFAULT)
            fputs("null", f);
        else
            json_str(f, r->prefix, r->prefix_len);
        fprintf(f, ",\"action\":\"%s\",\"ttl\":%lld,\"wants_ttl\":%s,\"no_ttl\":",
                rule_action_name(r->action), r->ttl, rule_wants_ttl(r) ? "true" : "false");
        json_tally(f, a, &a->rules[i].no_ttl);
        fputs(",\"with_ttl\":", f);
        json_tally(f, a, &a->rules[i].with_ttl);
        fputc('}', f);
    }
    fputc(']', f);
}

void arep_print_json(FILE *f, const struct arep *a, int exit_status)
{
    uint64_t with_ttl = 0;
    for (size_t i = 0; i < a->nrules; i++)
        with_ttl += a->rules[i].with_ttl.keys;
    uint64_t total = a->seen + a->expired_during;

    fputs("{\"version\":1,\"backend\":", f);
    json_cstr(f, a->backend);
    fprintf(f, ",\"db\":%d,\"match\":", a->db);
    json_cstr(f, a->match);
    fputs(",\"config\":", f);
    json_cstr(f, a->config_path);
    fputs(",\"role\":", f);
    json_cstr(f, a->role[0] ? a->role : NULL);
    fputs(",\"redis_version\":", f);
    json_cstr(f, a->redis_version[0] ? a->redis_version : NULL);
    fprintf(f, ",\"complete\":%s,\"elapsed_ms\":%llu,\"keys_per_sec\":%.0f,\"exit_status\":%d",
            a->interrupted ? "false" : "true", (unsigned long long)a->elapsed_ms,
            a->elapsed_ms ? (double)total * 1000.0 / (double)a->elapsed_ms : 0.0, exit_status);

    fprintf(f, ",\"scan\":{\"keys\":%llu,\"with_ttl\":%llu,\"without_ttl\":%llu,"
            "\"expired_during_scan\":%llu,\"duplicates\":%llu,\"leaked\":%llu}",
            (unsigned long long)a->seen, (unsigned long long)with_ttl,
            (unsigned long long)(a->seen - with_ttl), (unsigned long long)a->expired_during,
            (unsigned long long)a->duplicates, (unsigned long long)arep_leaked(a));

    if (a->nnodes > 0)
        json_nodes(f, a);

    fputs(",\"info\":{", f);
    for (int i = 0; i < 2; i++) {
        fprintf(f, "%s\"%s\":", i ? "," : "", i ? "end" : "start");
        if (a->info_keys[i] < 0)
            fputs("null", f);
        else
            fprintf(f, "{\"keys\":%lld,\"expires\":%lld}", a->info_keys[i], a->info_expires[i]);
    }
    fputc('}', f);

    fputs(",\"groups\":{", f);
    for (int g = 0; g < AREP_GROUPS; g++) {
        struct arep_tally t;
        group_tally(a, (enum arep_group)g, &t);
        fprintf(f, "%s\"%s\":", g ? "," : "", group_names[g].json);
        json_tally(f, a, &t);
    }
    fputc('}', f);

    json_rules(f, a);

    fputs(",\"patterns\":{\"leaked\":", f);
    json_patterns(f, a, 0);
    fputs(",\"unregistered\":", f);
    json_patterns(f, a, 1);
    fputc('}', f);

    static const char *fix_modes[] = { "off", "dry_run", "applied" };
    fprintf(f, ",\"fix\":{\"mode\":\"%s\",\"candidates\":%llu,\"no_rule_ttl\":%llu,"
            "\"fixed\":%llu,\"skipped\":%llu,\"errors\":%llu,\"first_error\":",
            fix_modes[a->fix], (unsigned long long)a->fix_candidates,
            (unsigned long long)a->fix_no_ttl, (unsigned long long)a->fixed,
            (unsigned long long)a->fix_skipped, (unsigned long long)a->fix_errors);
    json_cstr(f, a->fix_errors ? a->fix_error : NULL);
    fputs("}}\n", f);
}

/* ---- HTML output ------------------------------------------------------ */

#define HTML_KEY_CUT 200        /* example keys are cut short, as in the text report */

/* Memory for a table cell: exact bytes, or "-" without --memory. */
static const char *page_mem(const struct arep *a, char *buf, size_t len, uint64_t n)
{
    if (!a->with_memory)
        return "-";
    snprintf(buf, len, "%llu", (unsigned long long)n);
    return buf;
}

static void page_head(FILE *f, const struct arep *a, int exit_status, uint64_t durable_with_ttl)
{
    char buf[512];
    snprintf(buf, sizeof buf, "ttlguard audit of %s db %d", a->backend, a->db);
    html_page_begin(f, buf);
    html_para(f, NULL, "%s%s%s%s%s%s, config %s", a->role[0] ? a->role : "unknown role",
              a->redis_version[0] ? ", redis " : "", a->redis_version,
              a->match ? ", match '" : "", a->match ? a->match : "", a->match ? "'" : "",
              a->config_path ? a->config_path : "(built-in)");
    double secs = (double)a->elapsed_ms / 1000.0;
    uint64_t total = a->seen + a->expired_during;
    html_para(f, a->interrupted ? "warn" : NULL, "%s %llu keys in %.2f s (%.0f keys/s)",
              a->interrupted ? "INTERRUPTED: partial report after" : "audited",
              (unsigned long long)total, secs, secs > 0 ? (double)total / secs : 0.0);
    result_line(buf, sizeof buf, a, durable_with_ttl, exit_status);
    html_para(f, arep_leaked(a) || durable_with_ttl ? "warn" : NULL, "%s", buf);
}

static void page_groups(FILE *f, const struct arep *a, const struct arep_tally *groups)
{
    static const char *const head[4 + AREP_TTL_BUCKETS] = {
        "group", "keys", "memory (bytes)", "<1m", "1m-1h", "1h-1d", "1d-7d", "7d-30d", ">30d", "types"
    };
    struct html_bar bars[AREP_GROUPS];
    struct html_table t;
    char mem[32], types[512];

    html_section(f, "Groups");
    html_table_begin(&t, f, "lrrrrrrrrl", head);
    for (int g = 0; g < AREP_GROUPS; g++) {
        html_cell(&t, "%s", group_names[g].text);
        html_cell(&t, "%llu", (unsigned long long)groups[g].keys);
        html_cell(&t, "%s", page_mem(a, mem, sizeof mem, groups[g].memory));
        for (int b = 0; b < AREP_TTL_BUCKETS; b++)
            html_cell(&t, "%llu", (unsigned long long)groups[g].ttl[b]);
        types_text(&groups[g], types, sizeof types);
        html_cell(&t, "%s", types);
        bars[g] = (struct html_bar){ group_names[g].text, groups[g].keys, NULL };
    }
    html_table_end(&t);
    html_bar_chart(f, "Keys by group", bars, AREP_GROUPS, 0);
}

/* Leaked keys (and their memory) per rule that wants a TTL. */
static void page_leaked_by_rule(FILE *f, const struct arep *a)
{
    struct html_bar *keys = xcalloc(a->nrules, sizeof *keys);
    struct html_bar *mem = xcalloc(a->nrules, sizeof *mem);
    char (*memtext)[32] = xcalloc(a->nrules, sizeof *memtext);
    size_t n = 0;
    for (size_t i = 0; i < a->nrules; i++) {
        const struct arep_rule_stats *rs = &a->rules[i];
        if (!rule_wants_ttl(rs->rule) || rs->no_ttl.keys == 0)
            continue;
        keys[n] = (struct html_bar){ rs->rule->label, rs->no_ttl.keys, NULL };
        mem[n] = (struct html_bar){ rs->rule->label, rs->no_ttl.memory,
                                    fmt_bytes(memtext[n], sizeof memtext[n], rs->no_ttl.memory) };
        n++;
    }
    html_bar_chart(f, "Leaked keys by rule", keys, n, 2);
    if (a->with_memory)
        html_bar_chart(f, "Leaked memory by rule", mem, n, 1);
    free(keys);
    free(mem);
    free(memtext);
}

static void page_pattern_table(FILE *f, const struct arep *a, struct arep_pattern **v, size_t n)
{
    static const char *const head[] = { "keys", "memory (bytes)", "rule", "pattern", "example" };
    struct html_table t;
    char mem[32], ex[HTML_KEY_CUT];
    html_table_begin(&t, f, "rrlll", head);
    for (size_t i = 0; i < n; i++) {
        html_cell(&t, "%llu", (unsigned long long)v[i]->keys);
        html_cell(&t, "%s", page_mem(a, mem, sizeof mem, v[i]->memory));
        html_cell(&t, "%s", v[i]->rule->label);
        html_cell(&t, "%s", v[i]->text);
        escape_key(v[i]->ex.key, v[i]->ex.len, ex, sizeof ex);
        html_cell(&t, "%s", ex);
    }
    html_table_end(&t);
}

/* One pattern table (0 leaked, 1 unregistered): bars of keys and of memory, the table. */
static void page_patterns(FILE *f, const struct arep *a, int which, const char *what, size_t color)
{
    const struct arep_patterns *ps = &a->patterns[which];
    struct arep_pattern **v = patterns_sorted(a, ps);
    size_t shown = ps->n < (size_t)a->top ? ps->n : (size_t)a->top;
    struct html_bar *keys = xcalloc(shown + 1, sizeof *keys);
    struct html_bar *mem = xcalloc(shown + 1, sizeof *mem);
    char (*memtext)[32] = xcalloc(shown + 1, sizeof *memtext);
    char title[128];
    uint64_t rest_keys = ps->other_keys;

    for (size_t i = 0; i < shown; i++) {
        keys[i] = (struct html_bar){ v[i]->text, v[i]->keys, NULL };
        mem[i] = (struct html_bar){ v[i]->text, v[i]->memory,
                                    fmt_bytes(memtext[i], sizeof memtext[i], v[i]->memory) };
    }
    snprintf(title, sizeof title, "%s keys by pattern", what);
    html_bar_chart(f, title, keys, shown, color);
    if (a->with_memory && shown > 0) {
        snprintf(title, sizeof title, "%s memory by pattern", what);
        html_bar_chart(f, title, mem, shown, 1);
    }
    if (shown > 0)
        page_pattern_table(f, a, v, shown);
    for (size_t i = shown; i < ps->n; i++)
        rest_keys += v[i]->keys;
    if (rest_keys > 0)
        html_para(f, "note", "... and %llu more keys in %llu more patterns%s",
                  (unsigned long long)rest_keys, (unsigned long long)(ps->n - shown),
                  ps->other_keys ? " (and some not folded: too many distinct patterns)" : "");
    free(keys);
    free(mem);
    free(memtext);
    free(v);
}

static void page_ttls(FILE *f, const struct arep_tally *groups)
{
    struct html_bar bars[AREP_TTL_BUCKETS];
    html_section(f, "TTL distribution (remaining TTL of the keys that have one)");
    for (int b = 0; b < AREP_TTL_BUCKETS; b++) {
        uint64_t n = 0;
        for (int g = 0; g < AREP_GROUPS; g++)
            n += groups[g].ttl[b];
        bars[b] = (struct html_bar){ ttl_bucket_names[b], n, NULL };
    }
    html_bar_chart(f, "Keys by remaining TTL", bars, AREP_TTL_BUCKETS, 4);
}

static void page_rules(FILE *f, const struct arep *a)
{
    static const char *const head[] = { "rule", "action", "rule ttl", "keys", "no ttl", "with ttl",
                                        "memory (bytes)", "problem keys", "example" };
    struct html_table t;
    char mem[32], ex[HTML_KEY_CUT];
    html_section(f, "Rules");
    html_table_begin(&t, f, "lllrrrrll", head);
    for (size_t i = 0; i < a->nrules; i++) {
        const struct arep_rule_stats *rs = &a->rules[i];
        const struct rule *r = rs->rule;
        const struct arep_tally *p = rule_problem(rs);
        html_cell(&t, "%s", r->label);
        html_cell(&t, "%s", r->kind == RULE_DURABLE ? "durable" : rule_action_name(r->action));
        if (r->ttl > 0)
            html_cell(&t, "%llds", r->ttl);
        else
            html_cell(&t, "-");
        html_cell(&t, "%llu", (unsigned long long)(rs->no_ttl.keys + rs->with_ttl.keys));
        html_cell(&t, "%llu", (unsigned long long)rs->no_ttl.keys);
        html_cell(&t, "%llu", (unsigned long long)rs->with_ttl.keys);
        html_cell(&t, "%s", page_mem(a, mem, sizeof mem, rs->no_ttl.memory + rs->with_ttl.memory));
        html_cell(&t, "%llu %s", (unsigned long long)p->keys, r->kind == RULE_DURABLE
                  ? "with a TTL" : rule_wants_ttl(r) ? "leaked" : "unregistered");
        if (p->nex > 0)
            escape_key(p->ex[0].key, p->ex[0].len, ex, sizeof ex);
        else
            ex[0] = '\0';
        html_cell(&t, "%s", ex);
    }
    html_table_end(&t);
}

/* The durable rules of the config: who owns the data, why it lives without
 * a TTL, how to rebuild it, and what the audit found under it. */
static void page_registry(FILE *f, const struct arep *a)
{
    static const char *const head[] = { "prefix", "owner", "reason", "rebuild",
                                        "registered keys", "with a TTL (!)" };
    struct html_table t;
    char prefix[HTML_KEY_CUT];
    int any = 0;
    html_section(f, "Durable registry");
    for (size_t i = 0; i < a->nrules; i++) {
        const struct arep_rule_stats *rs = &a->rules[i];
        const struct rule *r = rs->rule;
        if (r->kind != RULE_DURABLE)
            continue;
        if (!any++)
            html_table_begin(&t, f, "llllrr", head);
        escape_key(r->prefix, r->prefix_len, prefix, sizeof prefix);
        html_cell(&t, "\"%s\"", prefix);
        html_cell(&t, "%s", r->owner ? r->owner : "");
        html_cell(&t, "%s", r->reason ? r->reason : "");
        html_cell(&t, "%s", r->rebuild ? r->rebuild : "");
        html_cell(&t, "%llu", (unsigned long long)rs->no_ttl.keys);
        html_cell(&t, "%llu", (unsigned long long)rs->with_ttl.keys);
    }
    if (any)
        html_table_end(&t);
    else
        html_para(f, "empty", "(no durable rules in the config)");
}

/* --cluster: a table and bars of each node's share. */
static void page_nodes(FILE *f, const struct arep *a)
{
    static const char *const head[] = { "node", "role", "keys", "leaked" };
    struct html_table t;
    if (a->nnodes == 0)
        return;
    struct html_bar *bars = xcalloc(a->nnodes, sizeof *bars);
    html_section(f, "Nodes");
    html_table_begin(&t, f, "llrr", head);
    for (size_t i = 0; i < a->nnodes; i++) {
        const struct arep_node *n = &a->nodes[i];
        html_cell(&t, "%s", n->name);
        html_cell(&t, "%s", n->role);
        html_cell(&t, "%llu", (unsigned long long)n->keys);
        html_cell(&t, "%llu", (unsigned long long)n->leaked);
        bars[i] = (struct html_bar){ n->name, n->leaked, NULL };
    }
    html_table_end(&t);
    html_bar_chart(f, "Leaked keys by node", bars, a->nnodes, 2);
    free(bars);
}

static void page_keyspace(FILE *f, const struct arep *a)
{
    static const char *const head[] = { "", "keys", "with ttl" };
    struct html_table t;
    uint64_t with_ttl = 0;
    for (size_t i = 0; i < a->nrules; i++)
        with_ttl += a->rules[i].with_ttl.keys;
    html_section(f, "Keyspace: INFO next to what the scan saw");
    html_table_begin(&t, f, "lrr", head);
    for (int i = 0; i < 2; i++) {
        if (a->info_keys[i] < 0)
            continue;
        html_cell(&t, "INFO at %s", i == 0 ? "start" : "end");
        html_cell(&t, "%lld", a->info_keys[i]);
        html_cell(&t, "%lld", a->info_expires[i]);
    }
    html_cell(&t, "seen alive by the scan");
    html_cell(&t, "%llu", (unsigned long long)a->seen);
    html_cell(&t, "%llu", (unsigned long long)with_ttl);
    html_cell(&t, "expired during the scan");
    html_cell(&t, "%llu", (unsigned long long)a->expired_during);
    html_cell(&t, "-");
    html_cell(&t, "returned twice by SCAN (counted once)");
    html_cell(&t, "%llu", (unsigned long long)a->duplicates);
    html_cell(&t, "-");
    html_table_end(&t);
}

static void page_fix(FILE *f, const struct arep *a)
{
    if (a->fix == AREP_FIX_OFF)
        return;
    html_section(f, "Fix (EXPIRE key <rule ttl> NX)");
    if (a->fix == AREP_FIX_DRY_RUN)
        html_para(f, NULL, "dry run: would give %llu leaked keys their rule's TTL",
                  (unsigned long long)a->fix_candidates);
    else
        html_para(f, NULL, "gave %llu keys their rule's TTL; %llu left alone; %llu errors%s%s",
                  (unsigned long long)a->fixed, (unsigned long long)a->fix_skipped,
                  (unsigned long long)a->fix_errors, a->fix_errors ? ", first: " : "", a->fix_error);
    if (a->fix_no_ttl)
        html_para(f, NULL, "%llu leaked keys are under rules without a ttl: nothing to give them",
                  (unsigned long long)a->fix_no_ttl);
}

void arep_print_html(FILE *f, const struct arep *a, int exit_status)
{
    struct arep_tally groups[AREP_GROUPS];
    for (int g = 0; g < AREP_GROUPS; g++)
        group_tally(a, (enum arep_group)g, &groups[g]);

    page_head(f, a, exit_status, groups[AREP_REGISTERED_TTL].keys);
    page_groups(f, a, groups);
    page_nodes(f, a);
    html_section(f, "Leaked keys: their rule wants a TTL (fix the writer, then --fix)");
    page_leaked_by_rule(f, a);
    page_patterns(f, a, 0, "Leaked", 2);
    if (!a->with_memory)
        html_para(f, "note", "Memory: run with --memory to chart it.");
    html_section(f, "Unregistered persistent keys: give them a TTL, or register them as durable");
    page_patterns(f, a, 1, "Unregistered", 6);
    page_ttls(f, groups);
    page_registry(f, a);
    page_rules(f, a);
    page_keyspace(f, a);
    page_fix(f, a);
    html_page_end(f);
}
