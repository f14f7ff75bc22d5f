/*
 * Unit tests for the reply framer (proxy/resp_reply.c).
 *
 * Every well-formed case is a list of whole replies laid back to back in one
 * buffer. The buffer is scanned in one piece, split in two at every offset,
 * and fed one byte at a time; each way must find the same reply ends and the
 * same top-level types. The "captured" cases are bytes redis-server 7.0.15
 * sent (DEBUG PROTOCOL, HELLO 3, CLIENT TRACKING, pub/sub).
 *
 * Nesting has no limit: past RESP_INLINE_DEPTH levels the scanner moves its
 * level stack to the heap, and must give it back when the reply ends, on an
 * error, and in reply_scanner_free(). The tests check scanner.heap directly,
 * and in a sanitizer build also ask LeakSanitizer (a leak it reports at exit
 * would not fail a criterion test on its own).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp_reply.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_LSAN 1
#endif
#endif
#ifdef HAVE_LSAN
#include <sanitizer/lsan_interface.h>
/* Fails the test if any block allocated so far is no longer referenced. */
#define assert_no_leak() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "memory leaked")
#else
#define assert_no_leak() ((void)0)
#endif

#define MAX_REPLIES 64

struct part {
    const char *p;
    size_t n;
    char type;          /* expected reply_scanner_type() once it ended */
};

/* A string literal with its length, so payloads may hold NUL bytes. */
#define R(lit, t) { lit, sizeof(lit) - 1, t }
#define END { NULL, 0, 0 }

struct scan_result {
    int n;                      /* replies that ended, or -1 on error */
    size_t ends[MAX_REPLIES];   /* offset just past each one */
    char types[MAX_REPLIES];
    const char *err;
};

/* Feed buf[0..len) to a fresh scanner in pieces that end at cuts[] (sorted,
 * each < len) and at len. Checks the return-value contract at every call. */
static void feed(const char *buf, size_t len, const size_t *cuts, size_t ncuts,
                 struct scan_result *res)
{
    struct reply_scanner s;
    size_t start = 0;

    reply_scanner_init(&s);
    cr_assert(reply_scanner_idle(&s));
    cr_assert_eq(reply_scanner_type(&s), 0);
    res->n = 0;
    res->err = NULL;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t stop = i < ncuts ? cuts[i] : len;
        size_t off = start;

        while (off < stop) {
            int done = -7;
            ssize_t r = reply_scan(&s, buf + off, stop - off, &done);

            if (r < 0) {
                res->n = -1;
                res->err = reply_scanner_error(&s);
                cr_assert(res->err != NULL && res->err[0] != '\0');
                /* The error sticks, and the level stack is gone. */
                cr_assert_eq(reply_scan(&s, "+OK\r\n", 5, &done), -1);
                cr_assert(!reply_scanner_idle(&s));
                cr_assert_null(s.heap);
                reply_scanner_free(&s);
                return;
            }
            cr_assert(done == 0 || done == 1);
            if (done) {
                cr_assert(r > 0 && (size_t)r <= stop - off);
                cr_assert(res->n < MAX_REPLIES);
                res->ends[res->n] = off + (size_t)r;
                res->types[res->n] = reply_scanner_type(&s);
                res->n++;
                cr_assert(reply_scanner_idle(&s));
                /* An idle scanner holds no heap memory. */
                cr_assert_null(s.heap);
                cr_assert_eq(s.depth, 0);
            } else {
                cr_assert_eq((size_t)r, stop - off, "not done but consumed %zd of %zu",
                             r, stop - off);
                cr_assert(!reply_scanner_idle(&s));
                /* The heap stack exists only past the inline levels. */
                cr_assert(s.heap != NULL || s.depth <= RESP_INLINE_DEPTH);
            }
            off += (size_t)r;
        }
        start = stop;
    }
    /* The input may end inside a reply: the scanner's owner frees it. */
    reply_scanner_free(&s);
}

static char *join(const struct part *parts, size_t *len, size_t *ends, char *types, int *n)
{
    size_t total = 0;
    char *buf;

    for (*n = 0; parts[*n].p; (*n)++)
        total += parts[*n].n;
    buf = calloc(1, total + 1);
    total = 0;
    for (int i = 0; i < *n; i++) {
        memcpy(buf + total, parts[i].p, parts[i].n);
        total += parts[i].n;
        ends[i] = total;
        types[i] = parts[i].type;
    }
    *len = total;
    return buf;
}

static void expect_same(const struct scan_result *res, const size_t *ends, const char *types,
                        int n, const char *how)
{
    cr_assert_eq(res->n, n, "%s: %d replies found, %d expected (error: %s)", how, res->n, n,
                 res->err ? res->err : "none");
    for (int i = 0; i < n; i++) {
        cr_assert_eq(res->ends[i], ends[i], "%s: reply %d ends at %zu, expected %zu", how, i,
                     res->ends[i], ends[i]);
        cr_assert_eq(res->types[i], types[i], "%s: reply %d type '%c', expected '%c'", how, i,
                     res->types[i], types[i]);
    }
}

/* Whole, split in two at every offset, one byte at a time. */
static void check_parts(const struct part *parts)
{
    size_t len, ends[MAX_REPLIES] = { 0 }, *cuts;
    char types[MAX_REPLIES] = { 0 };
    struct scan_result res;
    int n;
    char *buf = join(parts, &len, ends, types, &n);

    feed(buf, len, NULL, 0, &res);
    expect_same(&res, ends, types, n, "whole");

    for (size_t k = 1; k < len; k++) {
        char how[32];

        feed(buf, len, &k, 1, &res);
        snprintf(how, sizeof(how), "split at %zu", k);
        expect_same(&res, ends, types, n, how);
    }

    cuts = malloc(len * sizeof(*cuts));
    for (size_t k = 1; k < len; k++)
        cuts[k - 1] = k;
    feed(buf, len, cuts, len ? len - 1 : 0, &res);
    expect_same(&res, ends, types, n, "byte by byte");
    free(cuts);
    free(buf);
}

/* Malformed input: an error however the bytes are cut, with a message
 * containing `msg`, and no reply found before the faulty one ends. */
static void check_bad(const char *buf, size_t len, int good_before, const char *msg)
{
    struct scan_result res;
    size_t *cuts = malloc(len * sizeof(*cuts));

    feed(buf, len, NULL, 0, &res);
    cr_assert_eq(res.n, -1, "accepted malformed input \"%.*s\"", (int)len, buf);
    cr_assert(strstr(res.err, msg), "error \"%s\" lacks \"%s\"", res.err, msg);
    /* Every split point of short inputs; a spread of them for long ones,
     * whose every split would take seconds. */
    for (size_t k = 1; k < len; k += len < 4096 ? 1 : 997) {
        feed(buf, len, &k, 1, &res);
        cr_assert_eq(res.n, -1, "accepted malformed input split at %zu", k);
        cr_assert(strstr(res.err, msg));
    }
    for (size_t k = 1; k < len; k++)
        cuts[k - 1] = k;
    feed(buf, len, cuts, len - 1, &res);
    cr_assert_eq(res.n, -1);
    cr_assert(strstr(res.err, msg));
    free(cuts);

    /* The replies before the faulty one still come out of a one-shot scan. */
    {
        struct reply_scanner s;
        size_t off = 0;
        int found = 0, done;
        ssize_t r;

        reply_scanner_init(&s);
        while ((r = reply_scan(&s, buf + off, len - off, &done)) >= 0 && done) {
            off += (size_t)r;
            found++;
        }
        cr_assert_eq(r, -1);
        cr_assert_eq(found, good_before);
        cr_assert_null(s.heap);
        reply_scanner_free(&s);
    }
}

#define BAD(lit, before, msg) check_bad(lit, sizeof(lit) - 1, before, msg)

/* Embedded in every session: 568 bytes when the depth was capped at 128. */
Test(reply, struct_is_small)
{
    cr_assert_leq(sizeof(struct reply_scanner), 112, "%zu bytes", sizeof(struct reply_scanner));
}

Test(reply, empty_input)
{
    struct reply_scanner s;
    int done = -1;

    reply_scanner_init(&s);
    cr_assert_eq(reply_scan(&s, "", 0, &done), 0);
    cr_assert_eq(done, 0);
    cr_assert(reply_scanner_idle(&s));
}

Test(reply, resp2_types)
{
    static const struct part p[] = {
        R("+OK\r\n", '+'),
        R("+\r\n", '+'),
        R("-ERR unknown command 'FOO'\r\n", '-'),
        R(":0\r\n", ':'),
        R(":-42\r\n", ':'),
        R(":9223372036854775807\r\n", ':'),
        R(":-9223372036854775807\r\n", ':'),
        R(":-9223372036854775808\r\n", ':'),  /* DECRBY to LLONG_MIN */
        R("$5\r\nhello\r\n", '$'),
        R("$0\r\n\r\n", '$'),
        R("$-1\r\n", '$'),
        R("$6\r\n\r\n\r\n\r\n\r\n", '$'),       /* CRLF inside the payload */
        R("$4\r\na\0\xff\n\r\n", '$'),          /* binary payload */
        R("*-1\r\n", '*'),
        R("*0\r\n", '*'),
        R("*2\r\n$3\r\nfoo\r\n:1\r\n", '*'),
        R("*3\r\n$-1\r\n*-1\r\n+x\r\n", '*'),
        END
    };
    check_parts(p);
}

Test(reply, resp3_types)
{
    static const struct part p[] = {
        R("_\r\n", '_'),
        R(",3.14\r\n", ','),
        R(",-inf\r\n", ','),
        R(",nan\r\n", ','),
        R(",1.5e+300\r\n", ','),
        R("#t\r\n", '#'),
        R("#f\r\n", '#'),
        R("(3492890328409238509324850943850943825024385\r\n", '('),
        R("(-3492890328409238509324850943850943825024385\r\n", '('),
        R("!21\r\nSYNTAX invalid syntax\r\n", '!'),
        R("!0\r\n\r\n", '!'),
        R("=15\r\ntxt:Some string\r\n", '='),
        R("%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", '%'),
        R("%0\r\n", '%'),
        R("~3\r\n+a\r\n+b\r\n+c\r\n", '~'),
        R("~0\r\n", '~'),
        R(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", '>'),
        END
    };
    check_parts(p);
}

Test(reply, streamed)
{
    static const struct part p[] = {
        R("$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n", '$'),
        R("$?\r\n;0\r\n", '$'),
        R("$?\r\n;2\r\n\r\n\r\n;0\r\n", '$'),
        R("*?\r\n:1\r\n:2\r\n:3\r\n.\r\n", '*'),
        R("*?\r\n.\r\n", '*'),
        R("%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n", '%'),
        R("~?\r\n+a\r\n$?\r\n;1\r\nb\r\n;0\r\n.\r\n", '~'),
        /* streamed inside counted inside streamed */
        R("*?\r\n*2\r\n*?\r\n.\r\n~?\r\n:1\r\n.\r\n%?\r\n.\r\n.\r\n", '*'),
        END
    };
    check_parts(p);
}

Test(reply, nested)
{
    static const struct part p[] = {
        /* map of arrays of sets */
        R("%2\r\n+k1\r\n*2\r\n~2\r\n:1\r\n:2\r\n~0\r\n"
          "+k2\r\n*1\r\n~1\r\n%1\r\n$1\r\na\r\n>1\r\n_\r\n", '%'),
        /* an array whose last element closes four levels at once */
        R("*2\r\n:1\r\n*1\r\n*1\r\n*1\r\n$3\r\nend\r\n", '*'),
        /* empty aggregates as elements */
        R("*3\r\n*0\r\n%0\r\n~0\r\n", '*'),
        /* nulls as map values */
        R("%2\r\n:1\r\n_\r\n:2\r\n*-1\r\n", '%'),
        END
    };
    check_parts(p);
}

/* Every kind of level a deep reply is made of: what opens it, what closes
 * it once the deeper part is over, and the type of a reply starting with it.
 * The deeper part is the one element still owed. */
static const struct {
    const char *open, *close;
    char type;
} kinds[] = {
    { "*1\r\n", "", '*' },
    { "*?\r\n", ":2\r\n.\r\n", '*' },                 /* streamed, more after */
    { "%1\r\n+k\r\n", "", '%' },                        /* deep map value */
    { "|1\r\n+a\r\n+b\r\n*2\r\n", "_\r\n", '*' },      /* attribute, then an array */
    { "~?\r\n", ".\r\n", '~' },
    { "%?\r\n+k\r\n", "+k2\r\n:3\r\n.\r\n", '%' },       /* streamed map */
    { ">2\r\n$1\r\nx\r\n", "", '>' },
    { "|1\r\n", "+v\r\n:7\r\n", ':' },                /* deep attribute key */
    { "*2\r\n$?\r\n;1\r\nx\r\n;0\r\n", "", '*' },     /* a streamed string first */
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* One reply nested `depth` levels deep around ":0", level i of kind
 * kind_of[i % nkind_of]. Returns a malloc'd buffer; *type is the reply's. */
static char *deep_reply(size_t depth, const unsigned char *kind_of, size_t nkind_of, size_t *len,
                        char *type)
{
    size_t n = 4, off = 0;
    char *buf;

    for (size_t i = 0; i < depth; i++) {
        unsigned k = kind_of[i % nkind_of];

        n += strlen(kinds[k].open) + strlen(kinds[k].close);
    }
    buf = malloc(n);
    cr_assert_not_null(buf);
    for (size_t i = 0; i < depth; i++) {
        const char *o = kinds[kind_of[i % nkind_of]].open;

        memcpy(buf + off, o, strlen(o));
        off += strlen(o);
    }
    memcpy(buf + off, ":0\r\n", 4);
    off += 4;
    for (size_t i = depth; i-- > 0;) {
        const char *c = kinds[kind_of[i % nkind_of]].close;

        memcpy(buf + off, c, strlen(c));
        off += strlen(c);
    }
    cr_assert_eq(off, n);
    *len = n;
    *type = depth ? kinds[kind_of[0]].type : ':';
    return buf;
}

static const unsigned char only_arrays[] = { 0 };
static const unsigned char all_kinds[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8 };
/* Attributes on the levels around the inline boundary, and on every level
 * of the heap stack: their bits must survive the moves. */
static const unsigned char attr_keys[] = { 7 };
static const unsigned char attr_prefixes[] = { 3, 7, 3, 3, 7, 7, 7, 1 };

/* Feed buf in pieces of pseudo-random sizes 1..max, from seed. */
static void feed_random(const char *buf, size_t len, uint32_t seed, size_t max,
                        struct scan_result *res)
{
    size_t ncuts = 0, *cuts = malloc((len + 1) * sizeof(*cuts));
    uint32_t x = seed | 1;

    for (size_t k = 0;;) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        k += 1 + x % max;
        if (k >= len)
            break;
        cuts[ncuts++] = k;
    }
    feed(buf, len, cuts, ncuts, res);
    free(cuts);
}

/* Depths on both sides of the inline size and of the heap stack's first
 * doublings, back to back in one scanner: each reply gives its heap stack
 * back and the next starts inline again. */
Test(reply, nesting_around_inline_depth)
{
    static const size_t depths[] = {
        RESP_INLINE_DEPTH - 1, RESP_INLINE_DEPTH, RESP_INLINE_DEPTH + 1, 0,
        2 * RESP_INLINE_DEPTH, 2 * RESP_INLINE_DEPTH + 1, RESP_INLINE_DEPTH,
        4 * RESP_INLINE_DEPTH + 1, 1,
    };
    struct part p[sizeof(depths) / sizeof(depths[0]) * 2 + 1];
    int n = 0;

    for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
        p[n].p = deep_reply(depths[i], i % 2 ? all_kinds : only_arrays,
                            i % 2 ? NKINDS : 1, &p[n].n, &p[n].type);
        n++;
        p[n++] = (struct part)R("+OK\r\n", '+');
    }
    p[n] = (struct part)END;
    check_parts(p);
    for (int i = 0; i < n; i += 2)
        free((char *)p[i].p);
    assert_no_leak();
}

/* 300 levels, past the inline size and two heap doublings, cut at every
 * byte boundary and fed one byte at a time. */
Test(reply, deep_300_every_split)
{
    struct part p[4];

    p[0].p = deep_reply(300, only_arrays, 1, &p[0].n, &p[0].type);
    p[1] = (struct part)R(":1\r\n", ':');
    p[2].p = deep_reply(300, all_kinds, NKINDS, &p[2].n, &p[2].type);
    p[3] = (struct part)END;
    check_parts(p);
    free((char *)p[0].p);
    free((char *)p[2].p);
    assert_no_leak();
}

/* RESP3 attributes at every depth beyond the inline size, attribute bits set
 * on inline levels while the stack moves to the heap, and attributes whose
 * key is itself deeply nested. */
Test(reply, deep_attributes)
{
    struct part p[5];

    p[0].p = deep_reply(150, attr_keys, 1, &p[0].n, &p[0].type);
    cr_assert_eq(p[0].type, ':');
    p[1].p = deep_reply(150, attr_prefixes, sizeof(attr_prefixes), &p[1].n, &p[1].type);
    cr_assert_eq(p[1].type, '*');
    /* the deep part inside an attribute's value, then the real reply */
    p[2] = (struct part)R("|1\r\n+a\r\n"
                          "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n"
                          "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n"
                          "|1\r\n+b\r\n+c\r\n*1\r\n|1\r\n+d\r\n+e\r\n:1\r\n"
                          "%1\r\n:1\r\n:2\r\n", '%');
    p[3] = (struct part)R("#t\r\n", '#');
    p[4] = (struct part)END;
    check_parts(p);
    free((char *)p[0].p);
    free((char *)p[1].p);
}

/* An attribute open on an inline level when the stack moves to the heap
 * closes there: back inline, that level is an ordinary one again. */
Test(reply, attr_bit_after_heap)
{
    static const struct part p[] = {
        R("|1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n"
          "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:0\r\n+v\r\n:1\r\n", ':'),
        R("*2\r\n:1\r\n:2\r\n", '*'),
        R("*1\r\n|1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n"
          "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:0\r\n+v\r\n:1\r\n", '*'),
        R("*1\r\n*2\r\n:1\r\n:2\r\n", '*'),
        END
    };
    check_parts(p);
}

/* Streamed aggregates beyond the inline size: each '.' closes its own level,
 * and a '.' where a counted level is on top is still refused. */
Test(reply, deep_streamed)
{
    static const unsigned char streamed[] = { 1, 4, 5 };
    static const unsigned char mixed[] = { 1, 0 };
    struct part p[3];
    size_t len;
    char type, *buf;

    p[0].p = deep_reply(200, streamed, sizeof(streamed), &p[0].n, &p[0].type);
    p[1].p = deep_reply(201, mixed, sizeof(mixed), &p[1].n, &p[1].type);
    p[2] = (struct part)END;
    check_parts(p);
    free((char *)p[0].p);
    free((char *)p[1].p);

    /* 100 levels, the innermost counted: "." there is an error */
    buf = deep_reply(100, mixed, sizeof(mixed), &len, &type);
    memcpy(buf + 2 * 4 * 50, ".\r\n", 3);
    check_bad(buf, 2 * 4 * 50 + 3, 0, "'.' outside");
    /* the streamed level above it takes one (then a stray LF is refused) */
    memcpy(buf + 2 * 4 * 50 - 4, ".\r\n\n", 4);
    check_bad(buf, 2 * 4 * 50, 0, "type");
    free(buf);
    assert_no_leak();
}

/* Redis's own "Script return recursive object" test: EVAL of
 * local a = {} local b = {a} a[1] = b return a
 * gets *1 nested until the Lua stack limit (LUAI_MAXCSTACK, 8000 slots, about
 * one a level), then the error, as one reply; the connection stays usable. */
Test(reply, lua_recursive_table)
{
    static const char tail[] = "-ERR reached lua stack limit\r\n";
    size_t depth = 8000, len = 4 * depth + sizeof(tail) - 1;
    char *buf = malloc(len);
    struct scan_result res;
    size_t ends[2] = { len, len + 7 };
    char types[2] = { '*', '+' };
    char *both = malloc(len + 7);

    for (size_t i = 0; i < depth; i++)
        memcpy(buf + 4 * i, "*1\r\n", 4);
    memcpy(buf + 4 * depth, tail, sizeof(tail) - 1);
    memcpy(both, buf, len);
    memcpy(both + len, "+PONG\r\n", 7);
    feed(both, len + 7, NULL, 0, &res);
    expect_same(&res, ends, types, 2, "whole");
    for (uint32_t seed = 1; seed < 20; seed++) {
        feed_random(both, len + 7, seed, seed % 2 ? 7 : 1500, &res);
        expect_same(&res, ends, types, 2, "random pieces");
    }
    free(both);
    free(buf);
    assert_no_leak();
}

/* 100,000 levels (400 kB to 1.2 MB of input), whole and in
 * pieces of random sizes; the scanner is idle with no heap memory after. */
Test(reply, deep_100000_random_chunks)
{
    const unsigned char *shapes[] = { only_arrays, all_kinds, attr_prefixes };
    size_t nshapes[] = { 1, NKINDS, sizeof(attr_prefixes) };

    for (int sh = 0; sh < 3; sh++) {
        size_t len, end;
        char type;
        char *buf = deep_reply(100000, shapes[sh], nshapes[sh], &len, &type);
        struct scan_result res;

        feed(buf, len, NULL, 0, &res);
        end = len;
        expect_same(&res, &end, &type, 1, "whole");
        for (uint32_t seed = 1; seed <= 4; seed++) {
            char how[32];

            feed_random(buf, len, seed * 2654435761u, seed % 2 ? 13 : 70000, &res);
            snprintf(how, sizeof(how), "shape %d, seed %u", sh, seed);
            expect_same(&res, &end, &type, 1, how);
        }
        free(buf);
    }
    assert_no_leak();
}

/* State through a deep reply: no heap memory up to the inline depth, heap
 * memory past it until the end, then idle, the type kept, nothing held, and
 * the next reply scanned as usual. */
Test(reply, deep_state_after_completion)
{
    size_t depth = 1000, len;
    char type;
    char *buf = deep_reply(depth, only_arrays, 1, &len, &type);
    static const char shallow[] = "*2\r\n:1\r\n%1\r\n+a\r\n+b\r\n";
    struct reply_scanner s;
    int done;

    reply_scanner_init(&s);
    cr_assert_eq(reply_scan(&s, buf, 4 * RESP_INLINE_DEPTH, &done), 4 * RESP_INLINE_DEPTH);
    cr_assert_eq(done, 0);
    cr_assert_eq(s.depth, RESP_INLINE_DEPTH);
    cr_assert_null(s.heap, "allocated at the inline depth");
    cr_assert_eq(reply_scan(&s, buf + 4 * RESP_INLINE_DEPTH, 4, &done), 4);
    cr_assert_eq(s.depth, RESP_INLINE_DEPTH + 1);
    cr_assert_not_null(s.heap);
    cr_assert_eq(reply_scanner_type(&s), '*');
    cr_assert(!reply_scanner_idle(&s));
    cr_assert_eq(reply_scan(&s, buf + 4 * RESP_INLINE_DEPTH + 4, len - 4 * RESP_INLINE_DEPTH - 4,
                            &done),
                 (ssize_t)(len - 4 * RESP_INLINE_DEPTH - 4));
    cr_assert_eq(done, 1);
    cr_assert(reply_scanner_idle(&s));
    cr_assert_eq(reply_scanner_type(&s), '*');
    cr_assert_str_eq(reply_scanner_error(&s), "no error");
    cr_assert_null(s.heap);
    cr_assert_eq(s.depth, 0);

    /* Shallow replies after it: no allocation. */
    cr_assert_eq(reply_scan(&s, shallow, sizeof(shallow) - 1, &done), (ssize_t)sizeof(shallow) - 1);
    cr_assert_eq(done, 1);
    cr_assert_eq(reply_scanner_type(&s), '*');
    cr_assert_null(s.heap);
    /* And a deep one again. */
    cr_assert_eq(reply_scan(&s, buf, len, &done), (ssize_t)len);
    cr_assert_eq(done, 1);
    cr_assert_null(s.heap);
    reply_scanner_free(&s);
    free(buf);
    assert_no_leak();
}

/* reply_scanner_free(): on a fresh, an idle, a failed and a mid-reply
 * scanner, twice in a row; the scanner is as after init and usable again. */
Test(reply, scanner_free)
{
    size_t len;
    char type;
    size_t alen;
    char atype;
    char *buf = deep_reply(5000, all_kinds, NKINDS, &len, &type);
    char *arrays = deep_reply(5000, only_arrays, 1, &alen, &atype);
    struct reply_scanner s;
    int done;

    reply_scanner_init(&s);
    reply_scanner_free(&s);         /* just initialized */
    reply_scanner_free(&s);         /* twice */
    cr_assert(reply_scanner_idle(&s));
    cr_assert_eq(reply_scan(&s, "+OK\r\n", 5, &done), 5);
    cr_assert_eq(done, 1);
    reply_scanner_free(&s);         /* idle after a reply */
    cr_assert_eq(reply_scanner_type(&s), 0);

    /* Dropped in the middle of a deep reply (the client went away). */
    cr_assert_eq(reply_scan(&s, buf, len / 2, &done), (ssize_t)(len / 2));
    cr_assert_eq(done, 0);
    cr_assert_not_null(s.heap);
    reply_scanner_free(&s);
    cr_assert_null(s.heap);
    cr_assert_eq(s.depth, 0);
    cr_assert(reply_scanner_idle(&s));
    cr_assert_eq(reply_scanner_type(&s), 0);
    assert_no_leak();
    /* usable at once, and after init again */
    cr_assert_eq(reply_scan(&s, buf, len, &done), (ssize_t)len);
    cr_assert_eq(done, 1);
    cr_assert_eq(reply_scanner_type(&s), type);
    cr_assert_eq(reply_scan(&s, buf, len - 1, &done), (ssize_t)(len - 1));
    reply_scanner_free(&s);
    reply_scanner_init(&s);
    cr_assert_eq(reply_scan(&s, ":5\r\n", 4, &done), 4);
    cr_assert_eq(done, 1);

    /* A protocol error deep down gives the heap stack back at once. */
    cr_assert_eq(reply_scan(&s, arrays, 4 * 3000, &done), 4 * 3000);
    cr_assert_not_null(s.heap);
    cr_assert_eq(reply_scan(&s, "?", 1, &done), -1);
    cr_assert_null(s.heap);
    cr_assert(!reply_scanner_idle(&s));
    cr_assert(strstr(reply_scanner_error(&s), "type"));
    reply_scanner_free(&s);         /* failed: reset, error gone */
    cr_assert(reply_scanner_idle(&s));
    cr_assert_str_eq(reply_scanner_error(&s), "no error");
    cr_assert_eq(reply_scan(&s, "_\r\n", 3, &done), 3);
    cr_assert_eq(done, 1);
    reply_scanner_free(&s);
    free(arrays);
    free(buf);
    assert_no_leak();
}

Test(reply, attributes)
{
    static const struct part p[] = {
        /* example of the RESP3 specification */
        R("|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n"
          "*2\r\n:2039123\r\n:9543892\r\n", '*'),
        /* attribute before an element, inside an array: not an element itself */
        R("*2\r\n|1\r\n+ttl\r\n:3600\r\n:1\r\n:2\r\n", '*'),
        /* attribute before a map value, and an attribute on the attribute */
        R("%1\r\n+k\r\n|1\r\n+a\r\n|1\r\n+b\r\n+c\r\n+d\r\n+v\r\n", '%'),
        /* two attributes, then a simple value */
        R("|1\r\n+a\r\n+b\r\n|1\r\n+c\r\n+d\r\n#t\r\n", '#'),
        /* an empty attribute */
        R("|0\r\n:7\r\n", ':'),
        /* attribute before a push */
        R("|1\r\n+a\r\n+b\r\n>1\r\n+x\r\n", '>'),
        END
    };
    check_parts(p);
}

/* The type is 0 while the attribute is read, then that of the value. */
Test(reply, type_during_attribute)
{
    static const char msg[] = "|1\r\n+a\r\n+b\r\n*1\r\n:1\r\n";
    struct reply_scanner s;
    int done;

    reply_scanner_init(&s);
    cr_assert_eq(reply_scan(&s, msg, 12, &done), 12);
    cr_assert_eq(done, 0);
    cr_assert_eq(reply_scanner_type(&s), 0);
    cr_assert(!reply_scanner_idle(&s));
    cr_assert_eq(reply_scan(&s, msg + 12, 1, &done), 1);
    cr_assert_eq(reply_scanner_type(&s), '*');
    cr_assert_eq(reply_scan(&s, msg + 13, sizeof(msg) - 14, &done), (ssize_t)sizeof(msg) - 14);
    cr_assert_eq(done, 1);
    cr_assert_eq(reply_scanner_type(&s), '*');
    cr_assert(reply_scanner_idle(&s));
    /* The completed reply's type stays until a byte of the next one. */
    cr_assert_eq(reply_scan(&s, ">", 1, &done), 1);
    cr_assert_eq(reply_scanner_type(&s), '>');
    cr_assert(!reply_scanner_idle(&s));
}

Test(reply, back_to_back_offsets)
{
    static const char buf[] = "+OK\r\n:1\r\n$3\r\nfoo\r\n*1\r\n_\r\n>1\r\n+p\r\n";
    static const ssize_t steps[] = { 5, 4, 9, 7, 8 };
    static const char types[] = { '+', ':', '$', '*', '>' };
    struct reply_scanner s;
    size_t off = 0;
    int done;

    reply_scanner_init(&s);
    for (int i = 0; i < 5; i++) {
        ssize_t r = reply_scan(&s, buf + off, sizeof(buf) - 1 - off, &done);

        cr_assert_eq(done, 1);
        cr_assert_eq(r, steps[i], "reply %d: %zd", i, r);
        cr_assert_eq(reply_scanner_type(&s), types[i]);
        off += (size_t)r;
    }
    cr_assert_eq(off, sizeof(buf) - 1);
    cr_assert_eq(reply_scan(&s, buf, 0, &done), 0);
    cr_assert_eq(done, 0);
}

Test(reply, pipelined_mix)
{
    static const struct part p[] = {
        R("+OK\r\n", '+'),
        R("$-1\r\n", '$'),
        R("%1\r\n$1\r\nk\r\n~1\r\n,1.5\r\n", '%'),
        R(">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nfoo\r\n", '>'),
        R(":3\r\n", ':'),
        R("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", '-'),
        R("*?\r\n$?\r\n;1\r\nx\r\n;0\r\n.\r\n", '*'),
        R("|1\r\n+a\r\n+b\r\n$0\r\n\r\n", '$'),
        R("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n", '*'),
        R("_\r\n", '_'),
        END
    };
    check_parts(p);
}

Test(reply, captured_redis_7_0)
{
    static const struct part p[] = {
        /* HELLO 3 */
        R("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n"
          "$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:8\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
          "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n", '%'),
        /* CLIENT TRACKING invalidation */
        R(">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nfoo\r\n", '>'),
        /* RESP3 pub/sub message */
        R(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", '>'),
        /* RESP2 pub/sub: SUBSCRIBE, PSUBSCRIBE confirmations, message, pmessage */
        R("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n", '*'),
        R("*3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n", '*'),
        R("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", '*'),
        R("*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nch\r\n$2\r\nhi\r\n", '*'),
        /* DEBUG PROTOCOL attrib / push / map / verbatim / bignum in RESP3 */
        R("|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n"
          "$39\r\nSome real reply following the attribute\r\n", '$'),
        R(">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n", '>'),
        R("$40\r\nSome real reply following the push reply\r\n", '$'),
        R("%3\r\n:0\r\n#f\r\n:1\r\n#t\r\n:2\r\n#f\r\n", '%'),
        R("=29\r\ntxt:This is a verbatim\nstring\r\n", '='),
        R("(1234567999999999999999999999999999999\r\n", '('),
        /* SMEMBERS, ZSCORE, CONFIG GET in RESP3 */
        R("~2\r\n$1\r\nb\r\n$1\r\na\r\n", '~'),
        R(",1.5\r\n", ','),
        R("%2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n",
          '%'),
        /* XINFO STREAM FULL: maps holding arrays of arrays */
        R("%9\r\n$6\r\nlength\r\n:1\r\n$15\r\nradix-tree-keys\r\n:1\r\n$16\r\nradix-tree-nodes\r\n"
          ":2\r\n$17\r\nlast-generated-id\r\n$15\r\n1796018498437-0\r\n$20\r\n"
          "max-deleted-entry-id\r\n$3\r\n0-0\r\n$13\r\nentries-added\r\n:1\r\n$23\r\n"
          "recorded-first-entry-id\r\n$15\r\n1796018498437-0\r\n$7\r\nentries\r\n*1\r\n*2\r\n"
          "$15\r\n1796018498437-0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n$6\r\ngroups\r\n*0\r\n", '%'),
        END
    };
    check_parts(p);
}

/* A CR or LF alone inside a simple string is content, as for hiredis. */
Test(reply, lone_cr_lf_in_text_line)
{
    static const struct part p[] = {
        R("+a\rb\r\n", '+'),
        R("-a\nb\r\n", '-'),
        R("+\r\r\r\n", '+'),
        R("+x\r\r\n", '+'),
        END
    };
    check_parts(p);
}

/* redis-server sends status and error lines of any length (a script's
 * redis.status_reply / redis.error_reply): they must pass. */
Test(reply, long_text_lines)
{
    size_t n = 3 * RESP_MAX_LINE;
    char *buf = malloc(2 * (n + 3));
    struct scan_result res;
    size_t cuts[] = { 1, 2, 4000, n, n + 1, n + 2, n + 3, n + 4, n + 70000, 2 * n + 5 };
    size_t ends[2] = { n + 3, 2 * n + 6 };
    char types[2] = { '+', '-' };

    buf[0] = '+';
    memset(buf + 1, 'a', n);
    memcpy(buf + n + 1, "\r\n-", 3);
    memset(buf + n + 4, 'b', n);
    memcpy(buf + 2 * n + 4, "\r\n", 2);
    feed(buf, 2 * n + 6, NULL, 0, &res);
    expect_same(&res, ends, types, 2, "whole");
    feed(buf, 2 * n + 6, cuts, sizeof(cuts) / sizeof(cuts[0]), &res);
    expect_same(&res, ends, types, 2, "cut");
    free(buf);
}

/* A large payload is skipped in whatever pieces it arrives. */
Test(reply, large_bulk_in_pieces)
{
    size_t payload = 5 * 1000 * 1000;
    char head[32];
    int hl = snprintf(head, sizeof(head), "*2\r\n$%zu\r\n", payload);
    size_t len = (size_t)hl + payload + 2 + 4;
    char *buf = malloc(len);
    size_t ncuts = 0, *cuts = malloc(len / 3 * sizeof(*cuts));
    struct scan_result res;
    size_t end = len;
    char type = '*';

    memcpy(buf, head, (size_t)hl);
    for (size_t i = 0; i < payload; i++)
        buf[hl + i] = (char)(i * 7);        /* includes CR, LF and '$' bytes */
    memcpy(buf + hl + payload, "\r\n:1\r\n", 6);
    for (size_t k = 1, step = 1; k < len; k += step, step = step % 7 + 1)
        cuts[ncuts++] = k;
    feed(buf, len, cuts, ncuts, &res);
    expect_same(&res, &end, &type, 1, "pieces of 1..7");
    feed(buf, len, NULL, 0, &res);
    expect_same(&res, &end, &type, 1, "whole");
    free(cuts);
    free(buf);
}

Test(reply, malformed_type_byte)
{
    BAD("?\r\n", 0, "type");
    BAD("+OK\r\nhello\r\n", 1, "type");
    BAD("*2\r\n:1\r\nx\r\n", 0, "type");
    BAD("\r\n", 0, "type");
    BAD("$3\r\nfoo\r\n\r\n", 1, "type");        /* stray CRLF between replies */
}

Test(reply, malformed_lengths)
{
    BAD("$abc\r\n", 0, "invalid length");
    BAD("$\r\n", 0, "invalid length");
    BAD("$-\r\n", 0, "invalid length");
    BAD("$1a\r\n", 0, "invalid length");
    BAD("$ 1\r\n", 0, "invalid length");
    BAD("*x\r\n", 0, "invalid length");
    BAD(":\r\n", 0, "invalid integer");
    BAD(":12a\r\n", 0, "invalid integer");
    BAD(":1.5\r\n", 0, "invalid integer");
    BAD("$99999999999999999999\r\n", 0, "out of range");
    BAD(":-99999999999999999999\r\n", 0, "out of range");
}

/* -1 is RESP2's null for $ and *; no other negative length exists. */
Test(reply, malformed_negative_lengths)
{
    BAD("*-5\r\n", 0, "invalid aggregate length");
    BAD("*-0\r\n", 0, "invalid aggregate length");
    BAD("$-2\r\n", 0, "invalid bulk length");
    BAD("$-0\r\n", 0, "invalid bulk length");
    BAD("%-1\r\n", 0, "invalid aggregate length");
    BAD("~-1\r\n", 0, "invalid aggregate length");
    BAD(">-1\r\n", 0, "invalid aggregate length");
    BAD("|-1\r\n", 0, "invalid aggregate length");
    BAD("!-1\r\n", 0, "invalid bulk length");
    BAD("=-1\r\n", 0, "invalid bulk length");
}

Test(reply, malformed_crlf)
{
    BAD("$3\r\nfooX\r\n", 0, "missing CRLF after bulk payload");
    BAD("$3\r\nfoo\rX", 0, "missing CRLF after bulk payload");
    BAD("$3\r\nfoo\n\r", 0, "missing CRLF after bulk payload");
    BAD("$?\r\n;1\r\nab\r\n", 0, "missing CRLF after bulk payload");
    BAD("$3\nfoo\r\n", 0, "invalid length");
    BAD("*1\r\r\n", 0, "expected CRLF");
    BAD("_x\r\n", 0, "expected CRLF");
    BAD("_\n", 0, "expected CRLF");
    BAD("#tt\r\n", 0, "expected CRLF");
    BAD("#x\r\n", 0, "invalid boolean");
    BAD("#\r\n", 0, "invalid boolean");
}

Test(reply, malformed_streams)
{
    BAD(".\r\n", 0, "'.' outside");
    BAD("*2\r\n:1\r\n.\r\n", 0, "'.' outside");
    BAD(";1\r\na\r\n", 0, "type");
    BAD("$?\r\n+OK\r\n", 0, "expected ';'");
    BAD("$?\r\n;-1\r\n", 0, "invalid bulk length");
    BAD("$?\r\n;?\r\n", 0, "invalid length");
    BAD(">?\r\n", 0, "invalid length");
    BAD("|?\r\n", 0, "invalid length");
    BAD("!?\r\n", 0, "invalid length");
    BAD(":?\r\n", 0, "invalid length");
    BAD("*?x\r\n", 0, "expected CRLF");
}

/* Errors past the inline depth, in each kind of level. */
Test(reply, malformed_deep)
{
    size_t len, opened = 0;
    char type, *buf = deep_reply(40, all_kinds, NKINDS, &len, &type);
    char *bad = malloc(len);

    for (size_t i = 0; i < 40; i++)
        opened += strlen(kinds[all_kinds[i % NKINDS]].open);
    cr_assert_eq(memcmp(buf + opened, ":0\r\n", 4), 0);
    /* a bad type byte instead of the innermost element */
    memcpy(bad, buf, len);
    bad[opened] = 'x';
    check_bad(bad, len, 0, "invalid reply type byte");
    /* a bad last byte, once most levels have closed */
    memcpy(bad, buf, len);
    bad[len - 1] = 'x';
    check_bad(bad, len, 0, "CRLF");
    /* a '.' where a counted level is on top */
    memcpy(bad, buf, len);
    memcpy(bad + opened, ".\r\n", 3);
    check_bad(bad, opened + 3, 0, "'.' outside");
    free(bad);
    free(buf);
    assert_no_leak();
}

Test(reply, aggregate_too_long)
{
    BAD("*4294967295\r\n", 0, "out of range");
    BAD("%2147483648\r\n", 0, "out of range");
    BAD("|2147483648\r\n", 0, "out of range");
}

Test(reply, aggregate_count_limit_accepted)
{
    /* The largest counts still accepted: their header alone is fine. */
    struct reply_scanner s;
    int done;

    reply_scanner_init(&s);
    cr_assert_eq(reply_scan(&s, "*4294967294\r\n:1\r\n", 17, &done), 17);
    cr_assert_eq(done, 0);
    reply_scanner_init(&s);
    cr_assert_eq(reply_scan(&s, "%2147483647\r\n", 13, &done), 13);
    cr_assert_eq(done, 0);
}

Test(reply, line_too_long)
{
    size_t n = RESP_MAX_LINE + 10;
    char *buf = malloc(n + 8);

    /* Leading zeros keep the number in range: only the length limit stops it. */
    buf[0] = '$';
    memset(buf + 1, '0', n);
    memcpy(buf + 1 + n, "1\r\nx\r\n", 6);
    check_bad(buf, n + 7, 0, "line too long");

    buf[0] = ',';
    memset(buf + 1, '1', n);
    check_bad(buf, n + 7, 0, "line too long");
    free(buf);
}
