/*
 * route_scan: one SCAN cursor over every primary (see route_scan.h).
 */
#include <stdio.h>
#include <string.h>

#include "route_merge.h"
#include "route_scan.h"

#define POS_MASK        ((1u << SCAN_POS_BITS) - 1)
#define CHECK_MASK      ((1u << SCAN_CHECK_BITS) - 1)

/* Decimal digits only, that fit in 64 bits, else -1. */
static int parse_u64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int scan_cursor_parse(struct slice s, struct scan_cursor *c)
{
    uint64_t v;
    if (parse_u64(s.p, s.len, &v) != 0)
        return -1;
    c->pos = (unsigned)(v & POS_MASK);
    c->check = (unsigned)((v >> SCAN_POS_BITS) & CHECK_MASK);
    c->node = v >> (SCAN_POS_BITS + SCAN_CHECK_BITS);
    return 0;
}

int scan_cursor_pack(const struct scan_cursor *c, uint64_t *out)
{
    if (c->node >> SCAN_NODE_BITS != 0)
        return -1;
    *out = c->node << (SCAN_POS_BITS + SCAN_CHECK_BITS) |
           (uint64_t)(c->check & CHECK_MASK) << SCAN_POS_BITS | (c->pos & POS_MASK);
    return 0;
}

/* FNV-1a of the address, folded to the check's bits. */
unsigned scan_check(const char *name)
{
    uint32_t h = 2166136261u;
    for (const char *p = name; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return (unsigned)(h ^ h >> 16) & CHECK_MASK;
}

int scan_pick(const unsigned *lowest, int n, unsigned pos)
{
    for (int i = 0; i < n; i++)
        if (lowest[i] >= pos)
            return i;
    return -1;
}

/* A node cursor is only worth anything to the node that gave it: the one
 * at its position then, with its check. */
uint64_t scan_resume(const struct scan_cursor *c, const struct scan_step *st)
{
    return c->pos == st->pos && c->check == st->check ? c->node : 0;
}

void scan_request(struct sbuf *b, int argc, const struct slice *argv, uint64_t node)
{
    char hdr[32], num[24];
    sbuf_add(b, hdr, (size_t)snprintf(hdr, sizeof hdr, "*%d\r\n", argc));
    merge_add_bulk(b, argv[0]);
    merge_add_bulk(b, (struct slice){ num, u64_to_dec(num, node) });
    for (int i = 2; i < argc; i++)
        merge_add_bulk(b, argv[i]);
}

/* The node's cursor in a SCAN reply ("*2\r\n$N\r\n<cursor>\r\n<page>"):
 * *rest is where the page starts. -1 when p is not such a reply. */
static int reply_cursor(const char *p, size_t n, uint64_t *node, size_t *rest)
{
    static const char head[] = "*2\r\n$";
    const char *nl;
    uint64_t len;
    if (n < sizeof head || memcmp(p, head, sizeof head - 1) != 0 ||
        (nl = memchr(p + sizeof head - 1, '\r', n - (sizeof head - 1))) == NULL ||
        parse_u64(p + sizeof head - 1, (size_t)(nl - p) - (sizeof head - 1), &len) != 0)
        return -1;
    size_t at = (size_t)(nl - p) + 2;
    if (len > n || at + len + 2 > n || parse_u64(p + at, len, node) != 0)
        return -1;
    *rest = at + len + 2;
    return 0;
}

char *scan_reply(const struct scan_step *st, const char *p, size_t n, size_t *len)
{
    static const char too_wide[] = "-ERR ttlguard cluster = route: a node's SCAN cursor is "
                                   "wider than the 44 bits a cursor carries\r\n";
    uint64_t node, client = st->next;
    size_t rest;
    if (reply_cursor(p, n, &node, &rest) != 0) {
        *len = n;                       /* an error: as it is */
        return xmemdup(p, n);
    }
    if (node != 0 &&
        scan_cursor_pack(&(struct scan_cursor){ st->pos, st->check, node }, &client) != 0) {
        *len = sizeof too_wide - 1;
        return xmemdup(too_wide, *len);
    }
    char num[24], hdr[32];
    size_t digits = u64_to_dec(num, client);
    struct sbuf out = { 0 };
    sbuf_add(&out, hdr, (size_t)snprintf(hdr, sizeof hdr, "*2\r\n$%zu\r\n", digits));
    sbuf_add(&out, num, digits);
    sbuf_add(&out, "\r\n", 2);
    sbuf_add(&out, p + rest, n - rest);
    *len = out.len;
    return out.p;
}
