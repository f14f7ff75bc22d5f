/*
 * Unit tests for resp_value.c: whole replies parsed to a tree and encoded
 * back, byte for byte; edits; malformed input refused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "resp_value.h"

static void round_trip(const char *in)
{
    struct rv_tree t;
    char *out;
    size_t n;
    cr_assert_eq(rv_parse(&t, in, strlen(in)), 0, "refused: %s", in);
    rv_encode(&t, &out, &n);
    cr_assert_eq(n, strlen(in), "length of %s", in);
    cr_assert_eq(memcmp(out, in, n), 0, "bytes of %s", in);
    free(out);
    rv_free(&t);
}

Test(value, every_type_round_trips)
{
    round_trip("+OK\r\n");
    round_trip("-MOVED 3999 127.0.0.1:6381\r\n");
    round_trip(":-42\r\n");
    round_trip("$5\r\nhe\r\nx\r\n");
    round_trip("$0\r\n\r\n");
    round_trip("$-1\r\n");
    round_trip("*-1\r\n");
    round_trip("*0\r\n");
    round_trip("_\r\n");
    round_trip(",3.14\r\n");
    round_trip("#t\r\n");
    round_trip("(12345678901234567890\r\n");
    round_trip("=8\r\ntxt:abcd\r\n");
    round_trip("!3\r\nbad\r\n");
    round_trip("~2\r\n:1\r\n:2\r\n");
    round_trip(">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n");
    round_trip("|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n");
    /* CLUSTER SLOTS (RESP2) and one shard of CLUSTER SHARDS (RESP3) */
    round_trip("*1\r\n*4\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$3\r\nabc\r\n*0\r\n"
               "*4\r\n$9\r\n127.0.0.1\r\n:7003\r\n$3\r\ndef\r\n*0\r\n");
    round_trip("*1\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n%3\r\n"
               "$2\r\nid\r\n$3\r\nabc\r\n$4\r\nport\r\n:7000\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n");
}

Test(value, edits_are_encoded)
{
    const char *in = "*1\r\n%2\r\n$5\r\nslots\r\n*0\r\n$5\r\nnodes\r\n*1\r\n%2\r\n"
                     "$4\r\nport\r\n:7000\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n";
    struct rv_tree t;
    char *out;
    size_t n;
    cr_assert_eq(rv_parse(&t, in, strlen(in)), 0);
    struct rv *nodes = rv_get(&t.root->el[0], "nodes");
    cr_assert_not_null(nodes);
    struct rv *node = &nodes->el[0];
    rv_set_str(&t, rv_get(node, "port"), "7401", 4);
    rv_set_str(&t, rv_get(node, "ip"), "10.1.2.3", 8);
    cr_assert_null(rv_get(node, "hostname"));
    rv_encode(&t, &out, &n);
    const char *want = "*1\r\n%2\r\n$5\r\nslots\r\n*0\r\n$5\r\nnodes\r\n*1\r\n%2\r\n"
                       "$4\r\nport\r\n:7401\r\n$2\r\nip\r\n$8\r\n10.1.2.3\r\n";
    cr_assert_eq(n, strlen(want));
    cr_assert_eq(memcmp(out, want, n), 0, "got %.*s", (int)n, out);
    free(out);
    rv_free(&t);
}

Test(value, malformed_is_refused)
{
    static const char *bad[] = {
        "", "+OK", "+OK\r\n+OK\r\n", "$5\r\nabc\r\n", "$3\r\nabcde\r\n", "*2\r\n:1\r\n",
        "*3000000000\r\n", "%1\r\n:1\r\n", "?x\r\n", ":12\n", "$-2\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct rv_tree t;
        cr_assert_eq(rv_parse(&t, bad[i], strlen(bad[i])), -1, "accepted %zu: %s", i, bad[i]);
    }
    /* deeper than any topology reply */
    char deep[1024] = "";
    for (int i = 0; i < 100; i++)
        strcat(deep, "*1\r\n");
    strcat(deep, ":1\r\n");
    struct rv_tree t;
    cr_assert_eq(rv_parse(&t, deep, strlen(deep)), -1);
}
