/*
 * Unit tests for html.c, the page helpers of `report --html` and
 * `audit --html`: escaping, tables, bar charts, time buckets and the
 * stacked chart.
 *
 * And the audit's page (arep_print_html) from a report made by hand: a
 * cluster audit's node table, a binary key, markup in a durable owner.
 *
 * html.c and audit_report.c live in ttlguard_offline, and the unit tests
 * link ttlguard_core only, so both are compiled into this test directly
 * (they need nothing else of the offline library).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "html.c"
#include "audit_report.c"

/* What fn wrote to a memory stream, NUL-terminated; the caller frees it. */
#define CAPTURE(out, ...)                                                       \
    do {                                                                        \
        size_t len_;                                                            \
        FILE *f = open_memstream(&(out), &len_);                                \
        cr_assert_not_null(f);                                                  \
        __VA_ARGS__;                                                            \
        fclose(f);                                                              \
    } while (0)

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(html, text_escapes_markup)
{
    char *out;
    CAPTURE(out, html_text(f, "<b a=\"x\">&'\\x00</b>"));
    cr_assert_str_eq(out, "&lt;b a=&quot;x&quot;&gt;&amp;&#39;\\x00&lt;/b&gt;");
    free(out);
    CAPTURE(out, html_textn(f, "a<\0b", 4));
    cr_assert_eq(memcmp(out, "a&lt;\0b", 7), 0);
    free(out);
    CAPTURE(out, html_printf(f, "%d <%s>", 7, "k"));
    cr_assert_str_eq(out, "7 &lt;k&gt;");
    free(out);
}

Test(html, page_is_self_contained)
{
    char *out;
    CAPTURE(out, html_page_begin(f, "a <title>"); html_section(f, "S&P");
            html_para(f, "warn", "%d leaked", 3); html_page_end(f));
    cr_assert(strncmp(out, "<!DOCTYPE html>", 15) == 0);
    cr_assert_eq(count(out, "<title>a &lt;title&gt;</title>"), 1);
    cr_assert_eq(count(out, "<h1>a &lt;title&gt;</h1>"), 1);
    cr_assert_eq(count(out, "<h2>S&amp;P</h2>"), 1);
    cr_assert_eq(count(out, "<p class=\"warn\">3 leaked</p>"), 1);
    cr_assert_eq(count(out, "<script"), 0);
    cr_assert_eq(count(out, "http"), 0);
    cr_assert(strstr(out, "</html>\n") != NULL);
    free(out);
}

Test(html, table_rows_close_by_themselves)
{
    static const char *const head[] = { "key", "count" };
    struct html_table t;
    char *out;
    CAPTURE(out, html_table_begin(&t, f, "lr", head); html_cell(&t, "%s", "a<b");
            html_cell(&t, "%d", 12); html_cell(&t, "%s", "c"); html_table_end(&t));
    cr_assert_eq(count(out, "<th>key</th><th class=\"n\">count</th>"), 1);
    cr_assert_eq(count(out, "<tr><td>a&lt;b</td><td class=\"n\">12</td></tr>"), 1);
    /* The short last row is padded and closed. */
    cr_assert_eq(count(out, "<tr><td>c</td><td class=\"n\"></td></tr>"), 1);
    cr_assert_eq(count(out, "<tr>"), 3);
    cr_assert_eq(count(out, "</tr>"), 3);
    free(out);
}

Test(html, bar_chart)
{
    struct html_bar bars[] = {
        { "session:*:billableSecondsPending", 10, NULL },
        { "bin\\x00ary:*", 2, "144 B" },
        { "zero", 0, NULL },
    };
    char *out;
    CAPTURE(out, html_bar_chart(f, "Leaked <keys>", bars, 3, 2));
    cr_assert_eq(count(out, "<figcaption>Leaked &lt;keys&gt;</figcaption>"), 1);
    cr_assert_eq(count(out, "<svg "), 1);
    cr_assert_eq(count(out, "<rect "), 3);
    cr_assert_eq(count(out, ">10</text>"), 1);
    cr_assert_eq(count(out, ">144 B</text>"), 1);
    cr_assert_eq(count(out, ">bin\\x00ary:*</text>"), 1);
    cr_assert_eq(count(out, "<title>bin\\x00ary:*: 144 B</title>"), 1);
    /* The largest bar fills the bar area, a zero gets no width. */
    cr_assert_eq(count(out, "width=\"350.0\""), 1);
    cr_assert_eq(count(out, "width=\"70.0\""), 1);
    cr_assert_eq(count(out, "width=\"0.0\""), 1);
    cr_assert_eq(count(out, html_color(2)), 3);
    free(out);

    CAPTURE(out, html_bar_chart(f, "Nothing", bars, 0, 0));
    cr_assert_eq(count(out, "<svg"), 0);
    cr_assert_eq(count(out, "(none)"), 1);
    free(out);
}

Test(html, long_labels_are_cut_on_a_character)
{
    char label[128];
    /* 39 ASCII bytes then "é" twice: the cut falls after 39 characters. */
    snprintf(label, sizeof label, "%s\xc3\xa9\xc3\xa9", "abcdefghijklmnopqrstuvwxyz0123456789abc");
    struct html_bar bar = { label, 1, NULL };
    char *out;
    CAPTURE(out, html_bar_chart(f, "t", &bar, 1, 0));
    cr_assert_eq(count(out, ">abcdefghijklmnopqrstuvwxyz0123456789abc\xe2\x80\xa6</text>"), 1);
    cr_assert_eq(count(out, label), 1);     /* whole in the tooltip */
    free(out);
}

Test(html, pick_step)
{
    cr_assert_eq(html_pick_step(0, 48), 1000);
    cr_assert_eq(html_pick_step(40 * 1000, 48), 1000);
    cr_assert_eq(html_pick_step(60 * 1000, 48), 2000);
    cr_assert_eq(html_pick_step(3600 * 1000LL, 48), 2 * 60 * 1000);
    cr_assert_eq(html_pick_step(86400 * 1000LL, 48), 3600 * 1000);
    cr_assert_eq(html_pick_step(30 * 86400 * 1000LL, 48), 86400 * 1000LL);
    /* Years: multiples of 30 days, still at most 48 buckets. */
    int64_t span = 3650 * 86400 * 1000LL;
    int64_t step = html_pick_step(span, 48);
    cr_assert_eq(step % (30 * 86400 * 1000LL), 0);
    cr_assert_leq(span / step + 2, 48);
}

Test(html, timeline_covers_the_data)
{
    struct html_timeline tl;
    int64_t first = 1764662400123LL, last = first + 90 * 1000;  /* 2025-12-02T08:00:00.123Z */
    html_timeline_for(&tl, first, last, 48);
    cr_assert_eq(tl.step_ms, 2000);
    cr_assert_eq(tl.start_ms, 1764662400000LL);
    cr_assert_leq(tl.start_ms, first);
    cr_assert_gt(tl.start_ms + (int64_t)tl.nbuckets * tl.step_ms, last);
    cr_assert_leq(tl.nbuckets, 48);
    cr_assert_eq(tl.nbuckets, 46);
    html_timeline_for(&tl, first, first, 48);
    cr_assert_eq(tl.nbuckets, 1);
}

Test(html, nice_steps)
{
    cr_assert_eq(nice_step(0, 4), 1);
    cr_assert_eq(nice_step(3, 4), 1);
    cr_assert_eq(nice_step(7, 4), 2);
    cr_assert_eq(nice_step(17, 4), 5);
    cr_assert_eq(nice_step(35, 4), 10);
    cr_assert_eq(nice_step(1000, 4), 500);
}

Test(html, stacked_chart)
{
    uint64_t a[3] = { 3, 0, 1 }, b[3] = { 2, 5, 0 };
    struct html_series s[] = { { "ttl \"rw:\" \xc2\xb7 rewritten", a }, { "other <x>", b } };
    struct html_timeline tl = { 1764662400000LL, 10000, 3 };
    char *out;
    CAPTURE(out, html_stacked_chart(f, "Violations over time", &tl, s, 2));
    cr_assert_eq(count(out, "<svg "), 1);
    cr_assert_eq(count(out, "<rect "), 4);                 /* zeros draw nothing */
    cr_assert_eq(count(out, "<title>ttl &quot;rw:&quot; \xc2\xb7 rewritten, 2025-12-02 08:00:00 UTC: 3</title>"), 1);
    cr_assert_eq(count(out, "<title>other &lt;x&gt;, 2025-12-02 08:00:10 UTC: 5</title>"), 1);
    /* The legend has the totals, the axis its counts up to the top (5 -> 6). */
    cr_assert_eq(count(out, "rewritten <b>4</b>"), 1);
    cr_assert_eq(count(out, "other &lt;x&gt; <b>7</b>"), 1);
    cr_assert_eq(count(out, "text-anchor=\"end\">6</text>"), 1);
    cr_assert_eq(count(out, ">08:00:00</text>"), 1);
    cr_assert_eq(count(out, "one bar per 10 s"), 1);
    free(out);

    uint64_t z[3] = { 0 };
    struct html_series zs[] = { { "none", z } };
    CAPTURE(out, html_stacked_chart(f, "Empty", &tl, zs, 1));
    cr_assert_eq(count(out, "<svg"), 0);
    cr_assert_eq(count(out, "(none)"), 1);
    free(out);
}

/* ---- the audit's page --------------------------------------------------- */

static void add_rule(struct ruleset *rs, enum rule_kind kind, const char *prefix, size_t len,
                     enum rule_action action, long long ttl)
{
    struct rule r = { .kind = kind, .prefix = xmemdup(prefix, len), .prefix_len = len,
                      .action = action, .ttl = ttl };
    if (kind == RULE_DURABLE) {
        r.owner = xstrdup("payments <ledger@team>");
        r.reason = xstrdup("ledger of record");
        r.rebuild = xstrdup("replay & rebuild");
    }
    rules_add(rs, &r);
}

Test(html, audit_page)
{
    struct ruleset rs;
    char err[256];
    rules_init(&rs);
    add_rule(&rs, RULE_TTL, "session:", 8, ACTION_REWRITE, 900);
    add_rule(&rs, RULE_TTL, "bin\0ary:", 8, ACTION_REJECT, 60);
    add_rule(&rs, RULE_DURABLE, "billing:", 8, ACTION_ALLOW, 0);
    cr_assert_eq(rules_finish(&rs, err, sizeof err), 0, "%s", err);

    struct arep a;
    arep_init(&a, &rs);
    snprintf(a.backend, sizeof a.backend, "cluster of 127.0.0.1:7000 (2 primaries)");
    const char *keys[] = { "session:1:x", "session:2:x", "session:3:x", "billing:1" };
    for (int i = 0; i < 4; i++)
        arep_add(&a, rules_match(&rs, keys[i], strlen(keys[i])), keys[i], strlen(keys[i]),
                 -1, KTYPE_STRING, -1);
    arep_add(&a, rules_match(&rs, "bin\0ary:<1>", 11), "bin\0ary:<1>", 11, -1, KTYPE_STRING, -1);
    arep_add(&a, rules_match(&rs, "billing:2", 9), "billing:2", 9, 5000, KTYPE_ZSET, -1);
    a.nodes = xcalloc(2, sizeof *a.nodes);
    a.nnodes = 2;
    a.nodes[0] = (struct arep_node){ "127.0.0.1:7000", "master", 4, 3 };
    a.nodes[1] = (struct arep_node){ "127.0.0.1:7001", "master", 2, 1 };

    char *out;
    CAPTURE(out, arep_print_html(f, &a, 1));
    cr_assert_eq(count(out, "<script"), 0);
    cr_assert_eq(count(out, "http"), 0);
    cr_assert(strstr(out, "RESULT: 4 leaked keys under rules that require a TTL; 1 durable keys "
                          "carry a TTL and can be evicted (exit 1)") != NULL);
    /* The nodes: a table and a chart of leaked keys per node. */
    cr_assert(strstr(out, "<tr><td>127.0.0.1:7000</td><td>master</td><td class=\"n\">4</td>"
                          "<td class=\"n\">3</td></tr>") != NULL);
    cr_assert(strstr(out, "<figcaption>Leaked keys by node</figcaption>") != NULL);
    /* Binary bytes as the text report shows them, then HTML-escaped. */
    cr_assert(strstr(out, "<td>bin\\x00ary:&lt;*&gt;</td><td>bin\\x00ary:&lt;1&gt;</td>") != NULL);
    cr_assert(strstr(out, ">ttl &quot;bin\\x00ary:&quot;</text>") != NULL);
    /* The registry, with owners. */
    cr_assert(strstr(out, "<tr><td>&quot;billing:&quot;</td><td>payments &lt;ledger@team&gt;</td>"
                          "<td>ledger of record</td><td>replay &amp; rebuild</td>"
                          "<td class=\"n\">1</td><td class=\"n\">1</td></tr>") != NULL);
    /* Without --memory: no memory charts, "-" in the tables. */
    cr_assert_eq(count(out, "memory by"), 0);
    cr_assert(strstr(out, "Memory: run with --memory") != NULL);
    /* One svg per figure, but for the empty ones (no unregistered keys here). */
    cr_assert_eq(count(out, "<figure>"),
                 count(out, "<svg ") + count(out, "<p class=\"empty\">(none)</p>\n</figure>"));
    cr_assert(strstr(out, "<figcaption>Unregistered keys by pattern</figcaption>\n"
                          "<p class=\"empty\">(none)</p>") != NULL);
    free(out);
    arep_free(&a);
    rules_free(&rs);
}
