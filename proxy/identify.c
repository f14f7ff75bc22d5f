/*
 * identify: the backend's identity and commands from its replies (see identify.h).
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "identify.h"
#include "util.h"

/* One whole reply parsed; NULL when it is not one. */
static redisReply *parse(const char *p, size_t len)
{
    redisReader *r = redisReaderCreate();
    void *reply = NULL;

    if (r == NULL)
        return NULL;
    if (redisReaderFeed(r, p, len) != REDIS_OK || redisReaderGetReply(r, &reply) != REDIS_OK)
        reply = NULL;
    redisReaderFree(r);
    return reply;
}

/* "1.2.3" at p (up to a CR/LF): the version code; -1 when it is not one. */
static long version_at(const char *p, const char *end)
{
    unsigned v[3] = { 0, 0, 0 };
    int n = 0;

    while (n < 3 && p < end && *p >= '0' && *p <= '9') {
        unsigned x = 0;
        while (p < end && *p >= '0' && *p <= '9' && x < 1000)
            x = x * 10 + (unsigned)(*p++ - '0');
        v[n++] = x > 99 ? 99 : x;
        if (p < end && *p == '.')
            p++;
        else
            break;
    }
    return n == 0 ? -1 : (long)SRV_VERSION(v[0], v[1], v[2]);
}

static const char *field(const char *text, size_t len, const char *name)
{
    size_t nl = strlen(name);
    const char *end = text + len;

    for (const char *p = text; p + nl < end; p++) {
        if ((p == text || p[-1] == '\n') && memcmp(p, name, nl) == 0)
            return p + nl;
    }
    return NULL;
}

int identify_info(const char *reply, size_t len, struct server_id *out)
{
    redisReply *r = parse(reply, len);
    int rc = -1;

    if (r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)) {
        const char *end = r->str + r->len;
        /* Valkey reports redis_version 7.2.4 for clients that check it. */
        const char *v = field(r->str, r->len, "valkey_version:");
        long code;

        out->kind = SRV_VALKEY;
        if (v == NULL) {
            v = field(r->str, r->len, "redis_version:");
            out->kind = SRV_REDIS;
        }
        if (v != NULL && (code = version_at(v, end)) >= 0) {
            out->version = (unsigned)code;
            rc = 0;
        }
    }
    freeReplyObject(r);
    return rc;
}

static void buf_bulk(struct sbuf *b, const char *p, size_t n)
{
    char hdr[32];
    int h = snprintf(hdr, sizeof hdr, "$%zu\r\n", n);

    sbuf_add(b, hdr, (size_t)h);
    sbuf_add(b, p, n);
    sbuf_add(b, "\r\n", 2);
}

/* COMMAND INFO name... for names[from..to). */
static void info_request(struct sbuf *b, redisReply **names, size_t from, size_t to)
{
    char hdr[32];
    int h = snprintf(hdr, sizeof hdr, "*%zu\r\n", to - from + 2);

    sbuf_add(b, hdr, (size_t)h);
    buf_bulk(b, "COMMAND", 7);
    buf_bulk(b, "INFO", 4);
    for (size_t i = from; i < to; i++)
        buf_bulk(b, names[i]->str, names[i]->len);
}

/* Whether the set needs the server's COMMAND INFO for name: a name it does
 * not know; and, on a server newer than the table, one it knows without a
 * row (a read of the table's), which may have gained a write subcommand
 * there, as CLUSTER FLUSHSLOT did in Valkey 9. */
static int wants_info(const struct command_set *set, const char *name, size_t len)
{
    const struct cmd_info *ci = command_resolve(set, name, len);
    return ci == NULL || (ci->row == NULL && (command_set_features(set) & FT_NEWER));
}

int identify_unknown(const char *reply, size_t len, const struct command_set *set,
                     int max_requests, char **reqs, size_t *reqs_len)
{
    redisReply *r = parse(reply, len);
    struct sbuf b = { *reqs, *reqs_len, *reqs_len };
    int nreq = 0;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return -1;
    }
    redisReply **unknown = xmalloc(sizeof *unknown * (r->elements + 1));
    size_t n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        /* Subcommands come with their container's COMMAND INFO. */
        if (e->type == REDIS_REPLY_STRING && memchr(e->str, '|', e->len) == NULL &&
            wants_info(set, e->str, e->len))
            unknown[n++] = e;
    }
    size_t batch = 16;
    if (max_requests < 1)
        max_requests = 1;
    if ((n + batch - 1) / batch > (size_t)max_requests)
        batch = (n + (size_t)max_requests - 1) / (size_t)max_requests;
    for (size_t i = 0; i < n; i += batch) {
        info_request(&b, unknown, i, i + batch < n ? i + batch : n);
        nreq++;
    }
    free(unknown);
    freeReplyObject(r);
    *reqs = b.p;
    *reqs_len = b.len;
    return nreq;
}

/* ------------------------------------------------------------------------ */
/* COMMAND INFO entries                                                      */

static int str_is(const redisReply *r, const char *s)
{
    return r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           r->len == strlen(s) && strncasecmp(r->str, s, r->len) == 0;
}

/* The value after key `name` in a flat key/value array; NULL when absent. */
static const redisReply *member(const redisReply *map, const char *name)
{
    if (map == NULL || map->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < map->elements; i += 2) {
        if (str_is(map->element[i], name))
            return map->element[i + 1];
    }
    return NULL;
}

static int int_member(const redisReply *map, const char *name, int dflt)
{
    const redisReply *v = member(map, name);

    return v != NULL && v->type == REDIS_REPLY_INTEGER ? (int)v->integer : dflt;
}

static unsigned spec_flags(const redisReply *flags)
{
    static const struct { const char *name; unsigned flag; } names[] = {
        { "RO", DK_RO }, { "RW", DK_RW }, { "OW", DK_OW }, { "RM", DK_RM },
        { "insert", DK_INSERT }, { "update", DK_UPDATE }, { "delete", DK_DELETE },
        { "incomplete", DK_INCOMPLETE }, { "not_key", DK_NOT_KEY },
        { "variable_flags", DK_VARIABLE },
    };
    unsigned f = 0;

    if (flags == NULL || flags->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < flags->elements; i++) {
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            if (str_is(flags->element[i], names[k].name))
                f |= names[k].flag;
        }
    }
    return f;
}

static void derive_spec(const redisReply *ks, struct derived_spec *d, char *keyword,
                        size_t kwlen)
{
    const redisReply *bs = member(ks, "begin_search"), *fk = member(ks, "find_keys");
    const redisReply *bspec = member(bs, "spec"), *fspec = member(fk, "spec");
    const redisReply *kw = member(bspec, "keyword");

    memset(d, 0, sizeof *d);
    d->flags = spec_flags(member(ks, "flags"));
    d->begin = 2;
    if (str_is(member(bs, "type"), "index")) {
        d->begin = 0;
        d->index = int_member(bspec, "index", 0);
    } else if (str_is(member(bs, "type"), "keyword") && kw != NULL &&
               kw->type == REDIS_REPLY_STRING && kw->len < kwlen) {
        d->begin = 1;
        memcpy(keyword, kw->str, kw->len);
        keyword[kw->len] = '\0';
        d->keyword = keyword;
        d->index = int_member(bspec, "startfrom", 0);
    }
    d->find = 2;
    if (str_is(member(fk, "type"), "range")) {
        d->find = 0;
        d->lastkey = int_member(fspec, "lastkey", 0);
        d->keystep = int_member(fspec, "keystep", 0);
        d->limit = int_member(fspec, "limit", 0);
    } else if (str_is(member(fk, "type"), "keynum")) {
        d->find = 1;
        d->keynumidx = int_member(fspec, "keynumidx", 0);
        d->firstkey = int_member(fspec, "firstkey", 0);
        d->keystep = int_member(fspec, "keystep", 0);
    }
}

static int has_flag(const redisReply *flags, const char *name)
{
    if (flags == NULL || flags->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < flags->elements; i++) {
        if (str_is(flags->element[i], name))
            return 1;
    }
    return 0;
}

/* The entry, or one of its subcommands, writes or blocks. */
static int writes_or_blocks(const redisReply *e)
{
    const redisReply *subs = e->elements >= 10 ? e->element[9] : NULL;
    if (has_flag(e->element[2], "write") || has_flag(e->element[2], "blocking"))
        return 1;
    for (size_t i = 0; subs != NULL && subs->type == REDIS_REPLY_ARRAY && i < subs->elements; i++)
        if (subs->element[i]->type == REDIS_REPLY_ARRAY && subs->element[i]->elements >= 3 &&
            writes_or_blocks(subs->element[i]))
            return 1;
    return 0;
}

/* One entry: name arity flags first last step acl tips key_specs subcommands. */
static int derive_entry(const redisReply *e, struct command_set *set)
{
    struct derived_spec specs[8];
    char keywords[8][64];
    char name[128];

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 10 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[0]->len >= sizeof name ||
        e->element[1]->type != REDIS_REPLY_INTEGER)
        return 0;
    const redisReply *flags = e->element[2], *ks = e->element[8], *subs = e->element[9];
    memcpy(name, e->element[0]->str, e->element[0]->len);
    name[e->element[0]->len] = '\0';
    /* A name the table knows as a read (asked for on a newer server only):
     * a row only when it writes or blocks there now. */
    if (strchr(name, '|') == NULL && command_resolve(set, name, strlen(name)) != NULL &&
        !writes_or_blocks(e))
        return 0;

    struct derived_cmd d = {
        .name = name,
        .arity = (int)e->element[1]->integer,
        .write = has_flag(flags, "write"),
        .blocking = has_flag(flags, "blocking"),
        .noscript = has_flag(flags, "noscript"),
        .movablekeys = has_flag(flags, "movablekeys"),
        .specs = specs,
    };
    if (ks->type == REDIS_REPLY_ARRAY) {
        d.nspecs = (int)ks->elements;
        for (size_t i = 0; i < ks->elements && i < 8; i++)
            derive_spec(ks->element[i], &specs[i], keywords[i], sizeof keywords[i]);
        if (d.nspecs > 8)
            d.nspecs = 9;           /* more than a row holds (MAX_SPECS): unjudged */
    }
    if (command_set_derive(set, &d) != 0)
        return 0;
    int n = 1;
    if (subs->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < subs->elements; i++)
            n += derive_entry(subs->element[i], set);
    }
    return n;
}

int identify_derive(const char *reply, size_t len, struct command_set *set)
{
    redisReply *r = parse(reply, len);
    int n = 0;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return -1;
    }
    for (size_t i = 0; i < r->elements; i++)
        n += derive_entry(r->element[i], set);
    freeReplyObject(r);
    return n;
}

/* ------------------------------------------------------------------------ */
/* COMMAND: names, containers and arities                                    */

static int fold(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* The order of the server's command names: case-insensitive, and every byte
 * counts (Redis hashes the whole name, so "get\0x" is not GET). */
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;

    for (size_t i = 0; i < n; i++) {
        int d = fold((unsigned char)a[i]) - fold((unsigned char)b[i]);
        if (d != 0)
            return d;
    }
    return alen < blen ? -1 : alen > blen;
}

static int arity_cmp(const void *a, const void *b)
{
    const struct cmd_arity *x = a, *y = b;

    return name_cmp(x->name, x->len, y->name, y->len);
}

/* An entry's first, last and step, and whether its flags say movablekeys. */
static void key_range(struct cmd_arity *a, const redisReply *e)
{
    if (e->elements < 6 || e->element[3]->type != REDIS_REPLY_INTEGER ||
        e->element[4]->type != REDIS_REPLY_INTEGER || e->element[5]->type != REDIS_REPLY_INTEGER)
        return;
    a->first = (int)e->element[3]->integer;
    a->last = (int)e->element[4]->integer;
    a->step = (int)e->element[5]->integer;
    a->movable = has_flag(e->element[2], "movablekeys");
}

/* One entry: name arity flags first last step acl tips key_specs subcommands
 * (the last three since Redis 7.0; subcommands are entries of their own). */
static void add_arity(struct cmd_arities *t, size_t *cap, const redisReply *e, int top)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_INTEGER)
        return;
    const redisReply *subs = e->elements >= 10 ? e->element[9] : NULL;
    int container = top && subs != NULL && subs->type == REDIS_REPLY_ARRAY && subs->elements > 0;

    if (t->n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        t->v = xrealloc(t->v, sizeof *t->v * *cap);
    }
    t->v[t->n++] = (struct cmd_arity){
        .name = xmemdup(e->element[0]->str, e->element[0]->len),
        .len = e->element[0]->len,
        .arity = (int)e->element[1]->integer,
        .container = container,
        .sub = !top,
    };
    key_range(&t->v[t->n - 1], e);
    for (size_t i = 0; container && i < subs->elements; i++)
        add_arity(t, cap, subs->element[i], 0);
}

int identify_arities(const char *reply, size_t len, struct cmd_arities *out)
{
    redisReply *r = parse(reply, len);
    size_t cap = 0;

    arities_free(out);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return -1;
    }
    for (size_t i = 0; i < r->elements; i++)
        add_arity(out, &cap, r->element[i], 1);
    freeReplyObject(r);
    if (out->n > 0)
        qsort(out->v, out->n, sizeof *out->v, arity_cmp);
    return 0;
}

static const struct cmd_arity *find(const struct cmd_arities *t, const char *name, size_t len)
{
    size_t lo = 0, hi = t->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = name_cmp(name, len, t->v[mid].name, t->v[mid].len);
        if (d == 0)
            return &t->v[mid];
        if (d < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const struct cmd_arity *arities_find_sub(const struct cmd_arities *t, const struct cmd_arity *c,
                                         const char *sub, size_t len)
{
    char key[256];

    if (c->len + 1 + len > sizeof key)
        return NULL;            /* no subcommand name is that long */
    memcpy(key, c->name, c->len);
    key[c->len] = '|';
    memcpy(key + c->len + 1, sub, len);
    return find(t, key, c->len + 1 + len);
}

const struct cmd_arity *arities_find(const struct cmd_arities *t, const char *name, size_t len)
{
    const struct cmd_arity *a = find(t, name, len);

    return a != NULL && !a->sub ? a : NULL;     /* "config|get" is no command of its own */
}

void arities_free(struct cmd_arities *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].name);
    free(t->v);
    t->v = NULL;
    t->n = 0;
}
