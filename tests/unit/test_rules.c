/*
 * Unit tests for rules.c: longest-prefix matching, building, quoting.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "util.h"

/* Adds a rule whose prefix is len bytes of p. */
static void add(struct ruleset *rs, enum rule_kind kind, const char *p, size_t len, int line)
{
    struct rule r = {
        .kind = kind,
        .prefix = xmemdup(p, len),
        .prefix_len = len,
        .action = kind == RULE_TTL ? ACTION_REWRITE : ACTION_ALLOW,
        .ttl = kind == RULE_TTL ? 60 : 0,
        .line = line,
    };
    if (kind == RULE_DURABLE) {
        r.owner = xstrdup("o");
        r.reason = xstrdup("r");
        r.rebuild = xstrdup("b");
    }
    rules_add(rs, &r);
}

#define ADD(rs, kind, lit) add(rs, kind, lit, sizeof(lit) - 1, __LINE__)

static void finish(struct ruleset *rs)
{
    char err[256] = "";
    cr_assert_eq(rules_finish(rs, err, sizeof err), 0, "rules_finish: %s", err);
}

/* The prefix of the rule that governs key ("" for the default rule). */
static const char *match(const struct ruleset *rs, const char *key, size_t len)
{
    const struct rule *r = rules_match(rs, key, len);
    cr_assert_not_null(r);
    return r->prefix;
}

#define MATCH(rs, lit) match(rs, lit, sizeof(lit) - 1)

Test(rules, empty_set_gives_default)
{
    struct ruleset rs;
    rules_init(&rs);
    finish(&rs);
    const struct rule *r = rules_match(&rs, "anything", 8);
    cr_assert_eq(r, &rs.dflt);
    cr_assert_eq(rules_match(&rs, "", 0), &rs.dflt);
    cr_assert_eq(r->kind, RULE_DEFAULT);
    cr_assert_eq(r->action, ACTION_ALLOW);
    cr_assert_str_eq(r->label, "default");
    cr_assert_eq(r->prefix_len, 0);
    rules_free(&rs);
}

Test(rules, longest_prefix_with_nested_carve_outs)
{
    struct ruleset rs;
    rules_init(&rs);
    ADD(&rs, RULE_TTL, "a:");
    ADD(&rs, RULE_DURABLE, "a:b:");         /* durable inside ttl */
    ADD(&rs, RULE_TTL, "a:b:c:");           /* ttl inside that durable */
    ADD(&rs, RULE_TTL, "session:");
    finish(&rs);

    cr_assert_str_eq(MATCH(&rs, "a:x"), "a:");
    cr_assert_str_eq(MATCH(&rs, "a:"), "a:");
    cr_assert_str_eq(MATCH(&rs, "a:b"), "a:");              /* shorter than a:b: */
    cr_assert_str_eq(MATCH(&rs, "a:b:"), "a:b:");
    cr_assert_str_eq(MATCH(&rs, "a:b:zz"), "a:b:");
    cr_assert_str_eq(MATCH(&rs, "a:b:c"), "a:b:");
    cr_assert_str_eq(MATCH(&rs, "a:b:c:1"), "a:b:c:");
    cr_assert_str_eq(MATCH(&rs, "a:b:d:1"), "a:b:");        /* sorts after a:b:c: */
    cr_assert_str_eq(MATCH(&rs, "a:c"), "a:");
    cr_assert_str_eq(MATCH(&rs, "a"), "");
    cr_assert_str_eq(MATCH(&rs, ""), "");
    cr_assert_str_eq(MATCH(&rs, "b:1"), "");
    cr_assert_str_eq(MATCH(&rs, "session"), "");
    cr_assert_str_eq(MATCH(&rs, "session:42"), "session:");
    cr_assert_eq(rules_match(&rs, "a:b:1", 5)->kind, RULE_DURABLE);
    cr_assert_eq(rules_match(&rs, "a:b:c:1", 7)->kind, RULE_TTL);
    cr_assert_eq(rules_match(&rs, "zzz", 3), &rs.dflt);
    rules_free(&rs);
}

/* The last rule sorting <= key is a sibling, not an ancestor: the match
 * must back off along the parent chain, past many siblings. */
Test(rules, backs_off_from_near_misses)
{
    struct ruleset rs;
    rules_init(&rs);
    ADD(&rs, RULE_TTL, "ab");
    ADD(&rs, RULE_TTL, "abc");
    ADD(&rs, RULE_TTL, "abd");
    ADD(&rs, RULE_TTL, "u:");
    char name[16];
    for (int i = 0; i < 200; i++) {
        int n = snprintf(name, sizeof name, "u:%03d:", i);
        add(&rs, RULE_TTL, name, (size_t)n, i + 1000);
    }
    finish(&rs);

    cr_assert_str_eq(MATCH(&rs, "abe"), "ab");
    cr_assert_str_eq(MATCH(&rs, "abcd"), "abc");
    cr_assert_str_eq(MATCH(&rs, "abd"), "abd");
    cr_assert_str_eq(MATCH(&rs, "abda"), "abd");
    cr_assert_str_eq(MATCH(&rs, "ab"), "ab");
    cr_assert_str_eq(MATCH(&rs, "aa"), "");        /* first byte known, sorts before all */
    cr_assert_str_eq(MATCH(&rs, "a"), "");
    cr_assert_str_eq(MATCH(&rs, "u:zzz"), "u:");   /* after all 200 siblings */
    cr_assert_str_eq(MATCH(&rs, "u:150"), "u:");   /* between u:149: and u:150: */
    cr_assert_str_eq(MATCH(&rs, "u:150:x"), "u:150:");
    cr_assert_str_eq(MATCH(&rs, "u:000:"), "u:000:");
    rules_free(&rs);
}

Test(rules, binary_prefixes_and_keys)
{
    struct ruleset rs;
    rules_init(&rs);
    ADD(&rs, RULE_TTL, "a\0b");
    ADD(&rs, RULE_DURABLE, "a\0b\0");
    ADD(&rs, RULE_TTL, "\xff\xfe");
    finish(&rs);

    cr_assert_eq(rules_match(&rs, "a\0bc", 4)->prefix_len, 3);
    cr_assert_eq(rules_match(&rs, "a\0b\0\0", 5)->prefix_len, 4);
    cr_assert_eq(rules_match(&rs, "a\0b\0\0", 5)->kind, RULE_DURABLE);
    cr_assert_eq(rules_match(&rs, "a\0", 2), &rs.dflt);     /* shorter than the prefix */
    cr_assert_eq(rules_match(&rs, "a", 1), &rs.dflt);
    cr_assert_eq(rules_match(&rs, "a\0c", 3), &rs.dflt);
    cr_assert_eq(rules_match(&rs, "\xff\xfe\x01", 3)->prefix_len, 2);
    cr_assert_eq(rules_match(&rs, "\xff\xff", 2), &rs.dflt);
    cr_assert_eq(rules_match(&rs, "\xfe", 1), &rs.dflt);
    cr_assert_str_eq(rs.v[0].label, "ttl \"a\\x00b\"");
    rules_free(&rs);
}

Test(rules, first_byte_bitmap)
{
    struct ruleset rs;
    rules_init(&rs);
    ADD(&rs, RULE_TTL, "session:");
    ADD(&rs, RULE_TTL, "\x80x");
    finish(&rs);
    for (int b = 0; b < 256; b++) {
        int set = (rs.first_byte[b >> 3] >> (b & 7)) & 1;
        cr_assert_eq(set, b == 's' || b == 0x80, "bitmap bit %d", b);
    }
    cr_assert_eq(rs.has_empty_prefix, 0);
    rules_free(&rs);
}

/* The config refuses "", but the API supports it: it matches every key that
 * no longer prefix matches, the empty key included. */
Test(rules, empty_prefix_rule)
{
    struct ruleset rs;
    rules_init(&rs);
    add(&rs, RULE_TTL, "", 0, 1);
    ADD(&rs, RULE_DURABLE, "keep:");
    finish(&rs);
    cr_assert_eq(rs.has_empty_prefix, 1);
    cr_assert_eq(rules_match(&rs, "", 0)->kind, RULE_TTL);
    cr_assert_eq(rules_match(&rs, "zzz", 3)->kind, RULE_TTL);
    cr_assert_eq(rules_match(&rs, "keep", 4)->kind, RULE_TTL);
    cr_assert_eq(rules_match(&rs, "keep:1", 6)->kind, RULE_DURABLE);
    cr_assert_eq(rules_match(&rs, "k", 1)->kind, RULE_TTL);
    rules_free(&rs);
}

Test(rules, duplicate_prefix_fails_naming_both)
{
    struct ruleset rs;
    char err[256] = "";
    rules_init(&rs);
    add(&rs, RULE_DURABLE, "a:", 2, 12);
    add(&rs, RULE_TTL, "b:", 2, 3);
    add(&rs, RULE_TTL, "a:", 2, 4);
    cr_assert_eq(rules_finish(&rs, err, sizeof err), -1);
    cr_assert_str_eq(err, "duplicate prefix: [ttl \"a:\"] (line 4) and [durable \"a:\"] (line 12)");
    rules_free(&rs);
}

Test(rules, labels)
{
    struct ruleset rs;
    rules_init(&rs);
    ADD(&rs, RULE_TTL, "session:");
    ADD(&rs, RULE_DURABLE, "billing:ledger:");
    struct rule r = { .kind = RULE_TTL, .prefix = xstrdup("x"), .prefix_len = 1,
                      .label = xstrdup("mine") };
    rules_add(&rs, &r);
    finish(&rs);
    cr_assert_str_eq(rules_match(&rs, "session:1", 9)->label, "ttl \"session:\"");
    cr_assert_str_eq(rules_match(&rs, "billing:ledger:9", 16)->label, "durable \"billing:ledger:\"");
    cr_assert_str_eq(rules_match(&rs, "x", 1)->label, "mine");
    rules_free(&rs);
}

Test(rules, names)
{
    cr_assert_str_eq(rule_action_name(ACTION_ALLOW), "allow");
    cr_assert_str_eq(rule_action_name(ACTION_LOG), "log");
    cr_assert_str_eq(rule_action_name(ACTION_REWRITE), "rewrite");
    cr_assert_str_eq(rule_action_name(ACTION_REJECT), "reject");
    cr_assert_str_eq(rule_refresh_name(REFRESH_ALLOW), "allow");
    cr_assert_str_eq(rule_refresh_name(REFRESH_BOUND), "bound");
    cr_assert_str_eq(rule_kind_name(RULE_DEFAULT), "default");
    cr_assert_str_eq(rule_kind_name(RULE_TTL), "ttl");
    cr_assert_str_eq(rule_kind_name(RULE_DURABLE), "durable");
}

/* Brute force over random nested prefixes from a tiny alphabet, where
 * near misses and nesting are the common case. */
Test(rules, matches_brute_force)
{
    static const char alphabet[] = "ab:\0";
    srand(12345);
    for (int round = 0; round < 200; round++) {
        struct ruleset rs;
        rules_init(&rs);
        char pre[64][6];
        size_t plen[64];
        size_t n = 0;
        for (int i = 0; i < 40; i++) {
            size_t len = 1 + (size_t)rand() % 5;
            char p[6];
            for (size_t j = 0; j < len; j++)
                p[j] = alphabet[rand() % 4];
            int dup = 0;
            for (size_t k = 0; k < n; k++)
                dup |= plen[k] == len && memcmp(pre[k], p, len) == 0;
            if (dup)
                continue;
            memcpy(pre[n], p, len);
            plen[n++] = len;
            add(&rs, rand() % 2 ? RULE_TTL : RULE_DURABLE, p, len, (int)n);
        }
        finish(&rs);

        for (int t = 0; t < 300; t++) {
            char key[8];
            size_t klen = (size_t)rand() % 8;
            for (size_t j = 0; j < klen; j++)
                key[j] = alphabet[rand() % 4];
            size_t best = SIZE_MAX;
            for (size_t k = 0; k < n; k++) {
                if (plen[k] <= klen && memcmp(pre[k], key, plen[k]) == 0 &&
                    (best == SIZE_MAX || plen[k] > plen[best]))
                    best = k;
            }
            const struct rule *r = rules_match(&rs, key, klen);
            if (best == SIZE_MAX) {
                cr_assert_eq(r, &rs.dflt, "round %d key %d: expected default", round, t);
            } else {
                cr_assert_eq(r->prefix_len, plen[best], "round %d key %d", round, t);
                cr_assert_eq(memcmp(r->prefix, pre[best], plen[best]), 0, "round %d key %d", round, t);
            }
        }
        rules_free(&rs);
    }
}

static void unquote_ok(const char *text, const char *want, size_t wantlen)
{
    char *out = NULL, err[256] = "";
    size_t len = 0;
    cr_assert_eq(rules_unquote(text, &out, &len, err, sizeof err), 0, "%s: %s", text, err);
    cr_assert_eq(len, wantlen, "%s", text);
    cr_assert_eq(memcmp(out, want, len), 0, "%s", text);
    cr_assert_eq(out[len], '\0');
    free(out);
}

static void unquote_bad(const char *text, const char *want_in_err)
{
    char *out = NULL, err[256] = "";
    size_t len = 0;
    cr_assert_eq(rules_unquote(text, &out, &len, err, sizeof err), -1, "%s accepted", text);
    cr_assert_null(out);
    cr_assert_not_null(strstr(err, want_in_err), "%s: got '%s'", text, err);
}

Test(rules, unquote)
{
    unquote_ok("\"session:\"", "session:", 8);
    unquote_ok("\"\"", "", 0);
    unquote_ok("\"bin\\x00ary:\"", "bin\0ary:", 8);
    unquote_ok("\"\\xFF\\xfe\"", "\xff\xfe", 2);
    unquote_ok("\"q\\\"b\\\\s\"", "q\"b\\s", 5);
    unquote_ok("\"\\n\\r\\t\"", "\n\r\t", 3);
    unquote_ok("\"a]b; c\"", "a]b; c", 6);

    unquote_bad("session:", "expected a quoted prefix");
    unquote_bad("", "expected a quoted prefix");
    unquote_bad("\"open", "missing closing");
    unquote_bad("\"open\\\"", "missing closing");
    unquote_bad("\"trail\\", "missing closing");
    unquote_bad("\"a\\q\"", "unknown escape '\\q'");
    unquote_bad("\"\\x4\"", "two hex digits");
    unquote_bad("\"\\xg0\"", "two hex digits");
    unquote_bad("\"\\x", "two hex digits");
    unquote_bad("\"a\"b", "unexpected text after");
}

Test(rules, quote)
{
    char *q = rules_quote("session:", 8);
    cr_assert_str_eq(q, "\"session:\"");
    free(q);
    q = rules_quote("a\0\"\\\n\r\t\x7f\xc3\xa9 ", 11);
    cr_assert_str_eq(q, "\"a\\x00\\\"\\\\\\n\\r\\t\\x7f\\xc3\\xa9 \"");
    free(q);
    q = rules_quote("", 0);
    cr_assert_str_eq(q, "\"\"");
    free(q);
}

Test(rules, quote_round_trip)
{
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    srand(7);
    for (int round = 0; round < 500; round++) {
        char buf[64];
        const char *p = all;
        size_t len = sizeof all;
        if (round > 0) {
            len = (size_t)rand() % sizeof buf;
            for (size_t i = 0; i < len; i++)
                buf[i] = (char)(rand() % 256);
            p = buf;
        }
        char *q = rules_quote(p, len);
        for (const char *c = q; *c; c++)
            cr_assert(*c >= 0x20 && *c < 0x7f, "unprintable byte in %s", q);
        char *out = NULL, err[256] = "";
        size_t olen = 0;
        cr_assert_eq(rules_unquote(q, &out, &olen, err, sizeof err), 0, "%s: %s", q, err);
        cr_assert_eq(olen, len);
        cr_assert_eq(memcmp(out, p, len), 0);
        free(out);
        free(q);
    }
}
