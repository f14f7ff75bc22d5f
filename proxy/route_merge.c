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

enum merge merge_fanout_kind(int argc, const struct slice *argv)
{
    if (argc == 1 && slice_eq_nocase(argv[0], "dbsize"))
        return MERGE_SUM;
    if (argc == 2 && slice_eq_nocase(argv[0], "keys"))
        return MERGE_CONCAT;
    if ((slice_eq_nocase(argv[0], "flushall") || slice_eq_nocase(argv[0], "flushdb")) &&
        argc <= 2)
        return MERGE_SAME;
    if (argc == 1 && slice_eq_nocase(argv[0], "randomkey"))
        return MERGE_FIRST;
    if (argc >= 2 && slice_eq_nocase(argv[0], "scan"))
        return MERGE_SCAN;
    if (argc >= 2 && slice_eq_nocase(argv[0], "client") &&
        (slice_eq_nocase(argv[1], "pause") || slice_eq_nocase(argv[1], "unpause")))
        return MERGE_SAME;
    if (argc >= 2 && slice_eq_nocase(argv[0], "script") &&
        (slice_eq_nocase(argv[1], "load") || slice_eq_nocase(argv[1], "flush")))
        return MERGE_SAME;
    return MERGE_NONE;
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

char *merge_replies(enum merge how, const struct merge_reply *r, int n, int nkeys,
                    size_t *len)
{
    if (how == MERGE_FIRST)
        return merge_first(r, n, len);
    for (int i = 0; i < n; i++) {
        int expected = how == MERGE_SUM ? ':' : how == MERGE_SAME ? r[0].p[0] : '*';
        if (r[i].n == 0 || r[i].p[0] != expected ||
            (expected == '*' && array_count(r[i].p, r[i].n) < 0)) {
            *len = r[i].n;              /* an error (or what no merge can take): as it is */
            return xmemdup(r[i].p, r[i].n);
        }
    }
    if (how == MERGE_SUM)
        return merge_sum(r, n, len);
    if (how == MERGE_SAME) {
        *len = r[0].n;
        return xmemdup(r[0].p, r[0].n);
    }
    return merge_arrays(how, r, n, nkeys, len);
}
