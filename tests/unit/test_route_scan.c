/*
 * Unit tests for route_scan.c: the client's SCAN cursor (parse, pack, the
 * primary it points at, when the node's own cursor is kept), the request a
 * node gets and the reply the client gets.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route_scan.h"

#define S(lit) ((struct slice){ lit, sizeof lit - 1 })

static uint64_t packed(unsigned pos, unsigned check, uint64_t node)
{
    uint64_t v = 0;
    cr_assert_eq(scan_cursor_pack(&(struct scan_cursor){ pos, check, node }, &v), 0);
    return v;
}

Test(route_scan, cursor_parse_is_redis_decimal)
{
    struct scan_cursor c;
    cr_assert_eq(scan_cursor_parse(S("0"), &c), 0);
    cr_assert(c.pos == 0 && c.check == 0 && c.node == 0);
    cr_assert_eq(scan_cursor_parse(S("007"), &c), 0, "leading zeros: every server reads them");
    cr_assert_eq(c.pos, 7);
    cr_assert_eq(scan_cursor_parse(S("18446744073709551615"), &c), 0);
    cr_assert(c.pos == 16383 && c.check == 63 && c.node == (UINT64_C(1) << 44) - 1);
    static const struct slice bad[] = { S(""), S("abc"), S("12a"), S("18446744073709551616"),
                                        S("99999999999999999999999"), S("-1"), S("+1"), S(" 1"),
                                        S("1 ") };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(scan_cursor_parse(bad[i], &c), -1, "'%.*s'", (int)bad[i].len, bad[i].p);
}

Test(route_scan, cursor_pack_round_trip_and_width)
{
    uint64_t v;
    struct scan_cursor c;
    cr_assert_eq(packed(0, 0, 0), 0, "the first primary from its start is cursor 0");
    cr_assert_eq(packed(5461, 0, 0), 5461, "a primary's start is its position");
    v = packed(10923, 37, (UINT64_C(1) << 44) - 1);
    char num[24];
    int n = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    cr_assert_eq(scan_cursor_parse((struct slice){ num, (size_t)n }, &c), 0);
    cr_assert(c.pos == 10923 && c.check == 37 && c.node == (UINT64_C(1) << 44) - 1);
    cr_assert_eq(scan_cursor_pack(&(struct scan_cursor){ 0, 0, UINT64_C(1) << 44 }, &v), -1,
                 "a node cursor wider than 44 bits is not carried");
}

Test(route_scan, pick_and_resume)
{
    static const unsigned lowest[] = { 0, 5461, 10923 };
    cr_assert_eq(scan_pick(lowest, 3, 0), 0);
    cr_assert_eq(scan_pick(lowest, 3, 1), 1, "after the first: the next primary's start");
    cr_assert_eq(scan_pick(lowest, 3, 5461), 1);
    cr_assert_eq(scan_pick(lowest, 3, 5462), 2);
    cr_assert_eq(scan_pick(lowest, 3, 10924), -1, "after the last: the scan is over");
    cr_assert_eq(scan_pick(lowest, 0, 0), -1);
    struct scan_step st = { 5461, scan_check("127.0.0.1:7001"), 5462 };
    struct scan_cursor same = { 5461, st.check, 99 }, other = { 5461, st.check ^ 1, 99 };
    struct scan_cursor moved = { 5460, st.check, 99 };
    cr_assert_eq(scan_resume(&same, &st), 99, "the node that gave the cursor: kept");
    cr_assert_eq(scan_resume(&other, &st), 0, "another node at the position: from its start");
    cr_assert_eq(scan_resume(&moved, &st), 0, "the node's lowest slot moved: from its start");
    cr_assert_lt(scan_check("127.0.0.1:7001"), 64u);
    cr_assert_neq(scan_check("127.0.0.1:7001"), scan_check("127.0.0.1:7004"));
}

Test(route_scan, request_gets_the_node_cursor)
{
    struct slice argv[] = { S("scan"), S("123456789"), S("MATCH"), S("k*"), S("COUNT"),
                            S("10"), S("TYPE"), S("hash") };
    struct sbuf b = { 0 };
    scan_request(&b, 8, argv, 1234);
    static const char want[] = "*8\r\n$4\r\nscan\r\n$4\r\n1234\r\n$5\r\nMATCH\r\n$2\r\nk*\r\n"
                               "$5\r\nCOUNT\r\n$2\r\n10\r\n$4\r\nTYPE\r\n$4\r\nhash\r\n";
    cr_assert_eq(b.len, sizeof want - 1, "%.*s", (int)b.len, b.p);
    cr_assert_eq(memcmp(b.p, want, b.len), 0, "%.*s", (int)b.len, b.p);
    free(b.p);
}

static void reply_is(const struct scan_step *st, const char *node, const char *want)
{
    size_t len;
    char *out = scan_reply(st, node, strlen(node), &len);
    cr_assert_eq(len, strlen(want), "%.*s", (int)len, out);
    cr_assert_eq(memcmp(out, want, len), 0, "%.*s", (int)len, out);
    free(out);
}

Test(route_scan, reply_carries_position_and_page)
{
    struct scan_step st = { 5461, 5, 5462 }, last = { 10923, 9, 0 };
    char want[128];
    uint64_t c = packed(5461, 5, 96);
    snprintf(want, sizeof want, "*2\r\n$%d\r\n%llu\r\n*1\r\n$1\r\na\r\n",
             snprintf(NULL, 0, "%llu", (unsigned long long)c), (unsigned long long)c);
    reply_is(&st, "*2\r\n$2\r\n96\r\n*1\r\n$1\r\na\r\n", want);
    reply_is(&st, "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nb\r\n$1\r\nc\r\n",
             "*2\r\n$4\r\n5462\r\n*2\r\n$1\r\nb\r\n$1\r\nc\r\n");
    reply_is(&last, "*2\r\n$1\r\n0\r\n*0\r\n", "*2\r\n$1\r\n0\r\n*0\r\n");
    reply_is(&st, "-ERR syntax error\r\n", "-ERR syntax error\r\n");
    reply_is(&st, "*2\r\n$14\r\n17592186044416\r\n*0\r\n",
             "-ERR ttlguard cluster = route: a node's SCAN cursor is wider than the 44 bits a "
             "cursor carries\r\n");
}
