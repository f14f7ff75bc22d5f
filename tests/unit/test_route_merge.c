/*
 * Unit tests for route_merge.c: requests split by slot (bytes and key
 * positions), and the merge of the parts' replies, RESP2 and RESP3.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route_merge.h"

#define S(lit) ((struct slice){ lit, sizeof lit - 1 })

/* The "slot" of a key: its first letter. */
static int first_letter(struct slice key)
{
    return key.p[0];
}

Test(route_merge, kinds)
{
    int width = 0;
    cr_assert_eq(merge_split_kind(&S("MGET"), &width), MERGE_ORDERED);
    cr_assert_eq(width, 1);
    cr_assert_eq(merge_split_kind(&S("mset"), &width), MERGE_SAME);
    cr_assert_eq(width, 2);
    cr_assert_eq(merge_split_kind(&S("Unlink"), &width), MERGE_SUM);
    cr_assert_eq(merge_split_kind(&S("msetnx"), &width), MERGE_NONE, "not splittable");
    struct slice dbsize[] = { S("dbsize") }, keys[] = { S("KEYS"), S("*") };
    struct slice load[] = { S("script"), S("load"), S("return 1") };
    struct slice exists[] = { S("script"), S("exists"), S("abc") };
    cr_assert_eq(merge_fanout_kind(1, dbsize), MERGE_SUM);
    cr_assert_eq(merge_fanout_kind(2, keys), MERGE_CONCAT);
    cr_assert_eq(merge_fanout_kind(3, load), MERGE_SAME);
    cr_assert_eq(merge_fanout_kind(3, exists), MERGE_ALL);
    struct slice fload[] = { S("FUNCTION"), S("LOAD"), S("REPLACE"), S("#!lua name=x") };
    struct slice flist[] = { S("function"), S("list") }, kill[] = { S("SCRIPT"), S("KILL") };
    cr_assert_eq(merge_fanout_kind(4, fload), MERGE_SAME);
    cr_assert_eq(merge_fanout_kind(2, flist), MERGE_NONE, "one node's list is every node's");
    cr_assert_eq(merge_fanout_kind(2, kill), MERGE_KILL);
    cr_assert_eq(merge_fanout_kind(2, load), MERGE_NONE, "SCRIPT LOAD without a script");
    cr_assert_eq(merge_fanout_kind(2, dbsize), MERGE_NONE, "DBSIZE takes no argument");
    struct slice rk[] = { S("RANDOMKEY") }, scan[] = { S("scan"), S("0"), S("COUNT"), S("5") };
    cr_assert_eq(merge_fanout_kind(1, rk), MERGE_FIRST);
    cr_assert_eq(merge_fanout_kind(4, scan), MERGE_SCAN);
    cr_assert_eq(merge_fanout_kind(1, scan), MERGE_NONE, "SCAN without a cursor: a node says");
    struct slice pause[] = { S("CLIENT"), S("pause"), S("100"), S("WRITE") };
    struct slice unpause[] = { S("client"), S("UNPAUSE") }, id[] = { S("client"), S("id") };
    cr_assert_eq(merge_fanout_kind(4, pause), MERGE_SAME);
    cr_assert_eq(merge_fanout_kind(2, unpause), MERGE_SAME);
    cr_assert_eq(merge_fanout_kind(2, id), MERGE_NONE, "the proxy answers CLIENT ID");
}

Test(route_merge, split_by_slot_keeps_pairs_and_positions)
{
    struct slice argv[] = { S("MSET"), S("a1"), S("x"), S("b1"), S("y"), S("a2"), S("z") };
    int n;
    struct merge_part *p = merge_split(7, argv, 2, first_letter, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(p[0].slot, 'a');
    cr_assert_eq(p[0].npos, 2);
    cr_assert_eq(p[0].pos[0], 0);
    cr_assert_eq(p[0].pos[1], 2);
    static const char want0[] = "*5\r\n$4\r\nMSET\r\n$2\r\na1\r\n$1\r\nx\r\n"
                                "$2\r\na2\r\n$1\r\nz\r\n";
    cr_assert_eq(p[0].req.len, sizeof want0 - 1);
    cr_assert_eq(memcmp(p[0].req.p, want0, sizeof want0 - 1), 0);
    static const char want1[] = "*3\r\n$4\r\nMSET\r\n$2\r\nb1\r\n$1\r\ny\r\n";
    cr_assert_eq(p[1].npos, 1);
    cr_assert_eq(p[1].pos[0], 1);
    cr_assert_eq(memcmp(p[1].req.p, want1, sizeof want1 - 1), 0);
    merge_parts_free(p, n);
}

static void merged(enum merge how, const struct merge_reply *r, int n, int nkeys,
                   const char *want)
{
    size_t len;
    char *out = merge_replies(how, r, n, nkeys, &len);
    cr_assert_eq(len, strlen(want), "%.*s", (int)len, out);
    cr_assert_eq(memcmp(out, want, len), 0, "%.*s", (int)len, out);
    free(out);
}

Test(route_merge, ordered_elements_go_back_to_their_keys)
{
    /* MGET a1 b1 a2 b2: part a has keys 0 and 2, part b keys 1 and 3. */
    static const int pa[] = { 0, 2 }, pb[] = { 1, 3 };
    struct merge_reply r[] = {
        { "*2\r\n$2\r\nA1\r\n$-1\r\n", 17, pa, 2 },
        { "*2\r\n$3\r\nB1x\r\n$2\r\nB2\r\n", 21, pb, 2 },
    };
    merged(MERGE_ORDERED, r, 2, 4, "*4\r\n$2\r\nA1\r\n$3\r\nB1x\r\n$-1\r\n$2\r\nB2\r\n");
    /* RESP3 nulls pass as they are. */
    struct merge_reply r3[] = { { "*2\r\n_\r\n$1\r\nq\r\n", 14, pa, 2 },
                                { "*2\r\n_\r\n_\r\n", 10, pb, 2 } };
    merged(MERGE_ORDERED, r3, 2, 4, "*4\r\n_\r\n_\r\n$1\r\nq\r\n_\r\n");
}

Test(route_merge, sums_concats_and_errors)
{
    struct merge_reply sum[] = { { ":3\r\n", 4, NULL, 0 }, { ":40\r\n", 5, NULL, 0 } };
    merged(MERGE_SUM, sum, 2, 0, ":43\r\n");
    struct merge_reply keys[] = { { "*1\r\n$1\r\na\r\n", 11, NULL, 0 }, { "*0\r\n", 4, NULL, 0 },
                                  { "*2\r\n$1\r\nb\r\n$1\r\nc\r\n", 18, NULL, 0 } };
    merged(MERGE_CONCAT, keys, 3, 0, "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n");
    struct merge_reply ok[] = { { "+OK\r\n", 5, NULL, 0 }, { "+OK\r\n", 5, NULL, 0 } };
    merged(MERGE_SAME, ok, 2, 0, "+OK\r\n");
    struct merge_reply err[] = { { ":1\r\n", 4, NULL, 0 },
                                 { "-CLUSTERDOWN Hash slot not served\r\n", 35, NULL, 0 } };
    merged(MERGE_SUM, err, 2, 0, "-CLUSTERDOWN Hash slot not served\r\n");
    merged(MERGE_SAME, (struct merge_reply[]){ { "+OK\r\n", 5, NULL, 0 },
                                               { "-OOM no\r\n", 9, NULL, 0 } },
           2, 0, "-OOM no\r\n");
    merged(MERGE_SAME, (struct merge_reply[]){ { "-ERR Library 'x' already exists\r\n", 33,
                                                 NULL, 0 },
                                               { "$1\r\nx\r\n", 7, NULL, 0 } },
           2, 0, "-ERR Library 'x' already exists\r\n");
}

Test(route_merge, all_parts_must_say_one)
{
    struct merge_reply ex[] = { { "*3\r\n:1\r\n:1\r\n:0\r\n", 16, NULL, 0 },
                                { "*3\r\n:1\r\n:0\r\n:0\r\n", 16, NULL, 0 },
                                { "*3\r\n:1\r\n:1\r\n:0\r\n", 16, NULL, 0 } };
    merged(MERGE_ALL, ex, 3, 0, "*3\r\n:1\r\n:0\r\n:0\r\n");
    merged(MERGE_ALL, ex, 1, 0, "*3\r\n:1\r\n:1\r\n:0\r\n");
}

Test(route_merge, first_reply_that_is_not_nil)
{
    struct merge_reply some[] = { { "$-1\r\n", 5, NULL, 0 }, { "_\r\n", 3, NULL, 0 },
                                  { "$1\r\nk\r\n", 7, NULL, 0 }, { "$1\r\nj\r\n", 7, NULL, 0 } };
    merged(MERGE_FIRST, some, 4, 0, "$1\r\nk\r\n");
    merged(MERGE_FIRST, some, 2, 0, "$-1\r\n");
    merged(MERGE_FIRST, some + 1, 1, 0, "_\r\n");
    struct merge_reply err[] = { { "$1\r\nk\r\n", 7, NULL, 0 }, { "-LOADING x\r\n", 12, NULL, 0 } };
    merged(MERGE_FIRST, err, 2, 0, "-LOADING x\r\n");
}

Test(route_merge, info_sums_counts_and_keyspace)
{
    static const char a[] = "# Server\r\nredis_version:7.0.15\r\n\r\n# Clients\r\n"
                            "connected_clients:3\r\nblocked_clients:1\r\n"
                            "maxclients:10000\r\n\r\n# Keyspace\r\n";
    static const char b[] = "# Server\r\nredis_version:7.0.15\r\n\r\n# Clients\r\n"
                            "connected_clients:4\r\nblocked_clients:0\r\n"
                            "maxclients:10000\r\n\r\n# Keyspace\r\n"
                            "db0:keys=10,expires=2,avg_ttl=1000\r\n";
    static const char c[] = "# Server\r\nredis_version:7.0.15\r\n\r\n# Clients\r\n"
                            "connected_clients:1\r\nblocked_clients:2\r\n"
                            "maxclients:10000\r\n\r\n# Keyspace\r\n"
                            "db0:keys=5,expires=2,avg_ttl=3000\r\n";
    char ra[256], rb[256], rc[256], r3[256];
    int na = snprintf(ra, sizeof ra, "$%zu\r\n%s\r\n", sizeof a - 1, a);
    int nb = snprintf(rb, sizeof rb, "$%zu\r\n%s\r\n", sizeof b - 1, b);
    int nc = snprintf(rc, sizeof rc, "$%zu\r\n%s\r\n", sizeof c - 1, c);
    int n3 = snprintf(r3, sizeof r3, "=%zu\r\ntxt:%s\r\n", sizeof c - 1 + 4, c);
    static const char want[] = "# Server\r\nredis_version:7.0.15\r\n\r\n# Clients\r\n"
                               "connected_clients:8\r\nblocked_clients:3\r\n"
                               "maxclients:10000\r\n\r\n# Keyspace\r\n"
                               "db0:keys=15,expires=4,avg_ttl=2000\r\n";
    char w[256];
    snprintf(w, sizeof w, "$%zu\r\n%s\r\n", sizeof want - 1, want);
    struct merge_reply r[] = { { ra, (size_t)na, NULL, 0 }, { rb, (size_t)nb, NULL, 0 },
                               { rc, (size_t)nc, NULL, 0 } };
    merged(MERGE_INFO, r, 3, 0, w);
    struct merge_reply resp3[] = { { r3, (size_t)n3, NULL, 0 }, { r3, (size_t)n3, NULL, 0 } };
    snprintf(w, sizeof w, "=%zu\r\ntxt:%s\r\n", sizeof c - 1 + 4, c);
    merged(MERGE_INFO, resp3, 1, 0, w);     /* one part: as it is */
    static const char twice[] = "# Server\r\nredis_version:7.0.15\r\n\r\n# Clients\r\n"
                                "connected_clients:2\r\nblocked_clients:4\r\n"
                                "maxclients:10000\r\n\r\n# Keyspace\r\n"
                                "db0:keys=10,expires=4,avg_ttl=3000\r\n";
    snprintf(w, sizeof w, "=%zu\r\ntxt:%s\r\n", sizeof twice - 1 + 4, twice);
    merged(MERGE_INFO, resp3, 2, 0, w);     /* RESP3's verbatim text */
    static const char p1[] = "$58\r\naof_rewrite_in_progress:0\r\nrdb_changes_since_last_save:3\r\n\r\n";
    static const char p2[] = "$58\r\naof_rewrite_in_progress:1\r\nrdb_changes_since_last_save:4\r\n\r\n";
    struct merge_reply flags[] = { { p1, sizeof p1 - 1, NULL, 0 }, { p2, sizeof p2 - 1, NULL, 0 },
                                   { p1, sizeof p1 - 1, NULL, 0 } };
    merged(MERGE_INFO, flags, 3, 0,
           "$59\r\naof_rewrite_in_progress:1\r\nrdb_changes_since_last_save:10\r\n\r\n");
    struct merge_reply err[] = { { ra, (size_t)na, NULL, 0 }, { "-LOADING x\r\n", 12, NULL, 0 } };
    merged(MERGE_INFO, err, 2, 0, "-LOADING x\r\n");
}

/* reply i of the proxy's MULTI form of one part, by its bytes. */
static void exec_reply(const struct slice *r, int n, const char *want)
{
    struct slice got = merge_exec_reply(r, n);
    cr_assert_eq(got.len, strlen(want), "%.*s", (int)got.len, got.p);
    cr_assert_eq(memcmp(got.p, want, got.len), 0, "%.*s", (int)got.len, got.p);
}

Test(route_merge, what_the_client_gets_of_the_multi_form)
{
    /* MULTI; SET a KEEPTTL; SET b; EXPIRE a NX; EXEC */
    struct slice ran[] = { S("+OK\r\n"), S("+QUEUED\r\n"), S("+QUEUED\r\n"), S("+QUEUED\r\n"),
                           S("*3\r\n+OK\r\n+OK\r\n:1\r\n") };
    exec_reply(ran, 5, "+OK\r\n");
    struct slice resp3[] = { S("+OK\r\n"), S("+QUEUED\r\n"), S("*2\r\n%1\r\n+a\r\n:1\r\n:0\r\n") };
    exec_reply(resp3, 3, "%1\r\n+a\r\n:1\r\n");
    struct slice refused[] = { S("+OK\r\n"), S("-OOM no\r\n"), S("+QUEUED\r\n"),
                               S("-EXECABORT Transaction discarded\r\n") };
    exec_reply(refused, 4, "-OOM no\r\n");
    struct slice moved[] = { S("+OK\r\n"), S("+QUEUED\r\n"), S("-MOVED 7 127.0.0.1:7001\r\n") };
    exec_reply(moved, 3, "-MOVED 7 127.0.0.1:7001\r\n");
}

Test(route_merge, a_kill_is_the_busy_primary_s_reply)
{
    struct merge_reply nb = { "-NOTBUSY No scripts in execution right now.\r\n", 45, NULL, 0 };
    struct merge_reply ok = { "+OK\r\n", 5, NULL, 0 };
    struct merge_reply uk = { "-UNKILLABLE Sorry the script already executed write commands "
                              "against the dataset.\r\n", 83, NULL, 0 };
    merged(MERGE_KILL, (struct merge_reply[]){ nb, ok, nb }, 3, 0, "+OK\r\n");
    merged(MERGE_KILL, (struct merge_reply[]){ nb, nb, uk }, 3, 0, uk.p);
    merged(MERGE_KILL, (struct merge_reply[]){ nb, nb }, 2, 0, nb.p);
}
