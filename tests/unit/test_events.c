/*
 * Unit tests for the event log: JSON escaping of binary keys, SipHash and
 * key hashing, folding of repeats (with a real loop and a 1 s window), lost
 * events on a full disk, reopen, reload; and the latency histogram buckets.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "events.h"
#include "stats.h"

/* ---- helpers ------------------------------------------------------------ */

static char *json(const char *p, size_t len)
{
    struct sbuf b = { 0 };
    evbuf_json_str(&b, p, len);
    sbuf_add(&b, "", 1);
    return b.p;
}

#define ASSERT_JSON(bytes, expect)                                              \
    do {                                                                        \
        char *got_ = json(bytes, sizeof(bytes) - 1);                            \
        cr_assert_str_eq(got_, expect);                                         \
        free(got_);                                                             \
    } while (0)

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/ttlg-test-events-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* A config with one ttl rule (rewrite), one durable rule and a log default,
 * events written to `events` (a path under dir unless absolute). */
static struct config *load(const char *events, const char *extra)
{
    char path[128], log[128];
    snprintf(path, sizeof path, "%s/ttlguard.ini", dir);
    if (events[0] == '/')
        snprintf(log, sizeof log, "%s", events);
    else
        snprintf(log, sizeof log, "%s/%s", dir, events);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "[proxy]\nevents = %s\nevent_window = 1\n%s\n"
               "[default]\naction = log\n"
               "[ttl \"session:\"]\nttl = 900\naction = rewrite\n"
               "[durable \"billing:\"]\nowner = payments\nreason = ledger\nrebuild = replay\n",
            log, extra);
    fclose(f);
    struct config *cfg = calloc(1, sizeof *cfg);
    char err[512];
    cr_assert_eq(config_load(path, cfg, err, sizeof err), 0, "%s", err);
    return cfg;
}

static const struct rule *rule_for(const struct config *cfg, const char *key)
{
    return rules_match(&cfg->rules, key, strlen(key));
}

static struct slice S(const char *s)
{
    return (struct slice){ s, strlen(s) };
}

static void on_stop(uv_timer_t *t)
{
}

/* Run the loop for ms milliseconds (windows close, writes complete). */
static void run_for(uv_loop_t *loop, uint64_t ms)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, on_stop, ms, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
}

static void finish(uv_loop_t *loop)
{
    events_shutdown();
    uv_run(loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(loop), 0, "events left a handle open");
}

/* The lines of a file, NULL-terminated; free with free_lines(). */
static char **read_lines(const char *name, int *n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char **v = NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    *n = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        cr_assert_eq(line[len - 1], '\n', "line not terminated: %s", line);
        line[len - 1] = '\0';
        v = realloc(v, (size_t)(*n + 2) * sizeof *v);
        v[(*n)++] = strdup(line);
        v[*n] = NULL;
    }
    free(line);
    fclose(f);
    return v;
}

static void free_lines(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Lines containing all of the given fragments. */
static int count_matching(char **v, int n, const char *a, const char *b)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (strstr(v[i], a) && (b == NULL || strstr(v[i], b)))
            k++;
    }
    return k;
}

static const char *find_line(char **v, int n, const char *a, const char *b)
{
    for (int i = 0; i < n; i++) {
        if (strstr(v[i], a) && (b == NULL || strstr(v[i], b)))
            return v[i];
    }
    return NULL;
}

static const struct ev_client client = { .addr = "127.0.0.1:5000", .name = "worker", .db = 3 };

/* ---- JSON ------------------------------------------------------------------- */

Test(json, ascii_and_short_escapes)
{
    ASSERT_JSON("session:1", "\"session:1\"");
    ASSERT_JSON("a\"b\\c", "\"a\\\"b\\\\c\"");
    ASSERT_JSON("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
    ASSERT_JSON("", "\"\"");
}

Test(json, control_bytes_and_nul)
{
    ASSERT_JSON("a\x00z", "\"a\\u0000z\"");
    ASSERT_JSON("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
}

Test(json, valid_utf8_is_copied)
{
    ASSERT_JSON("caf\xc3\xa9", "\"caf\xc3\xa9\"");                    /* é */
    ASSERT_JSON("\xe2\x82\xac", "\"\xe2\x82\xac\"");                    /* € */
    ASSERT_JSON("\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\"");            /* U+1F600 */
    ASSERT_JSON("\xef\xbf\xbf", "\"\xef\xbf\xbf\"");                    /* U+FFFF */
    ASSERT_JSON("\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\"");            /* U+10FFFF */
}

Test(json, invalid_bytes_become_low_surrogates)
{
    ASSERT_JSON("\xff", "\"\\udcff\"");
    ASSERT_JSON("\x80", "\"\\udc80\"");                                 /* lone continuation */
    ASSERT_JSON("\xc0\xaf", "\"\\udcc0\\udcaf\"");                      /* overlong '/' */
    ASSERT_JSON("\xe0\x80\xaf", "\"\\udce0\\udc80\\udcaf\"");           /* overlong 3-byte */
    ASSERT_JSON("\xed\xa0\x80", "\"\\udced\\udca0\\udc80\"");           /* U+D800 */
    ASSERT_JSON("\xf4\x90\x80\x80", "\"\\udcf4\\udc90\\udc80\\udc80\""); /* above U+10FFFF */
    ASSERT_JSON("\xe2\x82", "\"\\udce2\\udc82\"");                      /* truncated € */
    ASSERT_JSON("a\xe2\x82z", "\"a\\udce2\\udc82z\"");
    ASSERT_JSON("\xc3\xa9\xff\xc3\xa9", "\"\xc3\xa9\\udcff\xc3\xa9\"");
}

Test(json, utf8_len)
{
    cr_assert_eq(events_utf8_len((const unsigned char *)"a", 1), 1);
    cr_assert_eq(events_utf8_len((const unsigned char *)"\xc3\xa9", 2), 2);
    cr_assert_eq(events_utf8_len((const unsigned char *)"\xc3\xa9", 1), 0);
    cr_assert_eq(events_utf8_len((const unsigned char *)"\xc3\x28", 2), 0);
    cr_assert_eq(events_utf8_len((const unsigned char *)"\xf5\x80\x80\x80", 4), 0);
}

Test(json, rule_members)
{
    struct ruleset rs;
    char err[128];
    rules_init(&rs);
    struct rule r = { .kind = RULE_TTL, .prefix = strdup("s\x01:"), .prefix_len = 3,
                      .action = ACTION_REJECT, .ttl = 60, .max_ttl = 600, .line = 7 };
    rules_add(&rs, &r);
    cr_assert_eq(rules_finish(&rs, err, sizeof err), 0);
    struct sbuf b = { 0 };
    events_rule_json(&b, &rs.v[0]);
    sbuf_add(&b, "", 1);
    cr_assert_str_eq(b.p, "\"kind\":\"ttl\",\"rule\":\"ttl \\\"s\\\\x01:\\\"\",\"prefix\":\"s\\u0001:\","
                          "\"action\":\"reject\",\"ttl\":60,\"refresh\":\"allow\",\"max_ttl\":600,"
                          "\"line\":7");
    free(b.p);
    rules_free(&rs);
}

/* ---- hashing -------------------------------------------------------------------- */

Test(siphash, reference_vectors)
{
    /* From the SipHash paper and reference implementation: key 00..0f,
     * message 00..len-1. */
    uint8_t key[16], msg[16];
    for (int i = 0; i < 16; i++)
        key[i] = msg[i] = (uint8_t)i;
    cr_assert_eq(events_siphash(key, msg, 0), 0x726fdb47dd0e0e31ULL);
    cr_assert_eq(events_siphash(key, msg, 1), 0x74f839c593dc67fdULL);
    cr_assert_eq(events_siphash(key, msg, 2), 0x0d6c8009d9a94f5aULL);
    cr_assert_eq(events_siphash(key, msg, 3), 0x85676696d7fb7e2dULL);
    cr_assert_eq(events_siphash(key, msg, 15), 0xa129ca6149be45e5ULL);
}

Test(siphash, key_hash_is_stable_and_keyed)
{
    char a[17], b[17], c[17];
    events_key_hash("session:42", 10, a);
    events_key_hash("session:42", 10, b);
    events_key_hash("session:43", 10, c);
    cr_assert_str_eq(a, b);
    cr_assert_str_neq(a, c);
    cr_assert_eq(strlen(a), 16);
    cr_assert_eq(strspn(a, "0123456789abcdef"), 16);

    /* Not the unkeyed hash: the key is random per process. */
    uint8_t zero[16] = { 0 };
    char z[17];
    uint64_t h = events_siphash(zero, "session:42", 10);
    snprintf(z, sizeof z, "%016llx", (unsigned long long)h);
    cr_assert_str_neq(a, z);
}

/* ---- histogram -------------------------------------------------------------------- */

Test(stats, bucket_bounds_are_inclusive)
{
    cr_assert_eq(stats_bucket(0), 0);
    cr_assert_eq(stats_bucket(50000), 0);            /* le="0.00005" includes 50 µs */
    cr_assert_eq(stats_bucket(50001), 1);
    cr_assert_eq(stats_bucket(100000), 1);
    cr_assert_eq(stats_bucket(999999), 4);           /* <= 1 ms */
    cr_assert_eq(stats_bucket(1000000), 4);
    cr_assert_eq(stats_bucket(1000000000ULL), STATS_NBOUNDS - 1);
    cr_assert_eq(stats_bucket(1000000001ULL), STATS_NBOUNDS);     /* +Inf */
    for (unsigned i = 1; i < STATS_NBOUNDS; i++)
        cr_assert_gt(stats_bounds_ns[i], stats_bounds_ns[i - 1]);
    /* The text Prometheus prints is the same number. */
    for (unsigned i = 0; i < STATS_NBOUNDS; i++)
        cr_assert_eq((uint64_t)(strtod(stats_bounds_text[i], NULL) * 1e9 + 0.5), stats_bounds_ns[i]);
}

Test(stats, observe_counts_per_path)
{
    stats_latency_observe(0, 70000);
    stats_latency_observe(0, 70000);
    stats_latency_observe(1, 3000000000ULL);
    const struct stats_hist *p = &stats_proxy.latency[STATS_PASS];
    const struct stats_hist *r = &stats_proxy.latency[STATS_REWRITTEN];
    cr_assert_eq(p->count, 2);
    cr_assert_eq(p->bucket[1], 2);
    cr_assert_eq(p->sum_ns, 140000);
    cr_assert_eq(r->count, 1);
    cr_assert_eq(r->bucket[STATS_NBOUNDS], 1);
}

/* ---- the log ------------------------------------------------------------------------ */

Test(events, registrations_at_start, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    cr_assert_eq(n, 4, "log_opened + 3 registrations, got %d", n);
    cr_assert(strstr(v[0], "\"event\":\"log_opened\""));
    cr_assert(strstr(v[0], "\"log_keys\":\"full\""));
    cr_assert_eq(count_matching(v, n, "\"event\":\"registration\"", NULL), 3);
    const char *d = find_line(v, n, "\"kind\":\"durable\"", NULL);
    cr_assert_not_null(d);
    cr_assert(strstr(d, "\"prefix\":\"billing:\",\"owner\":\"payments\",\"reason\":\"ledger\","
                        "\"rebuild\":\"replay\""), "%s", d);
    cr_assert_not_null(find_line(v, n, "\"kind\":\"ttl\",\"rule\":\"ttl \\\"session:\\\"\","
                                       "\"prefix\":\"session:\",\"action\":\"rewrite\",\"ttl\":900", NULL));
    cr_assert_not_null(find_line(v, n, "\"kind\":\"default\"", "\"action\":\"log\""));
    /* "ts" is RFC 3339 UTC with milliseconds. */
    cr_assert_eq(strncmp(v[1], "{\"ts\":\"", 7), 0);
    cr_assert_eq(v[1][7 + 23], 'Z');
    cr_assert_eq(v[1][7 + 19], '.');
    cr_assert_eq(events_counters()->events_written, 4);
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, repeats_fold_into_one_line_per_window, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");

    for (int i = 0; i < 1000; i++) {
        char key[32];
        snprintf(key, sizeof key, "session:%d", i);
        /* The command's case does not make a different event. */
        events_violation(r, S(i % 2 ? "getset" : "GETSET"), S(key), EFF_DROPS_TTL,
                         EACT_REWRITTEN, &client);
    }
    events_violation(r, S("SET"), S("session:x"), EFF_DROPS_TTL, EACT_REWRITTEN, NULL);
    run_for(&loop, 1300);       /* the 1 s window closes */
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    cr_assert_eq(count_matching(v, n, "\"event\":\"violation\"", NULL), 3);
    const char *first = find_line(v, n, "\"command\":\"GETSET\"", "\"key\":\"session:0\"");
    cr_assert_not_null(first);
    cr_assert_null(strstr(first, "\"count\""), "%s", first);
    cr_assert(strstr(first, "\"rule\":\"ttl \\\"session:\\\"\",\"prefix\":\"session:\","
                            "\"command\":\"GETSET\",\"effect\":\"drops-ttl\",\"action\":\"rewritten\","
                            "\"key\":\"session:0\",\"client\":\"127.0.0.1:5000\","
                            "\"client_name\":\"worker\",\"db\":3"), "%s", first);
    /* The last occurrence is the example of the folded line. */
    const char *folded = find_line(v, n, "\"count\":999", NULL);
    cr_assert_not_null(folded);
    cr_assert(strstr(folded, "\"key\":\"session:999\""), "%s", folded);
    const char *other = find_line(v, n, "\"command\":\"SET\"", NULL);
    cr_assert_not_null(other);
    cr_assert_null(strstr(other, "\"client\""));
    cr_assert_null(strstr(other, "\"count\""));

    cr_assert_eq(events_counters()->violations[EFF_DROPS_TTL][EACT_REWRITTEN], 1001);
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, quiet_window_ends_the_fold, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");

    events_violation(r, S("SET"), S("session:a"), EFF_DROPS_TTL, EACT_REWRITTEN, &client);
    events_violation(r, S("SET"), S("session:b"), EFF_DROPS_TTL, EACT_REWRITTEN, &client);
    run_for(&loop, 1200);       /* window 1 closes: count 1; window 2 starts */
    run_for(&loop, 1200);       /* window 2 closes empty: the entry leaves */
    events_violation(r, S("SET"), S("session:c"), EFF_DROPS_TTL, EACT_REWRITTEN, &client);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    cr_assert_eq(count_matching(v, n, "\"event\":\"violation\"", NULL), 3);
    cr_assert_not_null(find_line(v, n, "\"key\":\"session:b\"", "\"count\":1"));
    const char *again = find_line(v, n, "\"key\":\"session:c\"", NULL);
    cr_assert_not_null(again);
    cr_assert_null(strstr(again, "\"count\""), "written at once, not folded: %s", again);
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, shutdown_writes_what_is_folded, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *d = rule_for(cfg, "billing:1");

    for (int i = 0; i < 5; i++)
        events_durable_write(d, S("SET"), S("billing:1"), 0, &client);
    events_durable_write(d, S("EXPIRE"), S("billing:1"), 1, &client);
    events_durable_write(d, S("EXPIRE"), S("billing:2"), 1, &client);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    cr_assert_eq(count_matching(v, n, "\"event\":\"durable_write\"", NULL), 2);
    cr_assert_not_null(find_line(v, n, "\"event\":\"durable_write\"", "\"count\":4"));
    cr_assert_eq(count_matching(v, n, "\"event\":\"ttl_on_durable\"", NULL), 2);
    cr_assert_not_null(find_line(v, n, "\"event\":\"ttl_on_durable\"", "\"count\":1"));
    cr_assert_eq(events_counters()->durable_writes, 7);
    cr_assert_eq(events_counters()->ttl_on_durable, 2);
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, per_rule_counters, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *t = rule_for(cfg, "session:1");
    const struct rule *d = rule_for(cfg, "billing:1");
    const struct rule *def = rule_for(cfg, "other");
    cr_assert_eq(def, &cfg->rules.dflt);

    events_violation(t, S("PERSIST"), S("session:1"), EFF_PERSIST, EACT_REJECTED, NULL);
    events_violation(def, S("SET"), S("other"), EFF_DROPS_TTL, EACT_LOGGED, NULL);
    events_violation(def, S("SET"), S("other"), EFF_DROPS_TTL, EACT_LOGGED, NULL);
    events_durable_write(d, S("SET"), S("billing:1"), 0, NULL);

    size_t ti = (size_t)(t - cfg->rules.v), di = (size_t)(d - cfg->rules.v);
    cr_assert_eq(events_rule_violations(ti, EFF_PERSIST, EACT_REJECTED), 1);
    cr_assert_eq(events_rule_violations(ti, EFF_DROPS_TTL, EACT_LOGGED), 0);
    cr_assert_eq(events_rule_violations(cfg->rules.n, EFF_DROPS_TTL, EACT_LOGGED), 2);
    cr_assert_eq(events_rule_durable_writes(di), 1);
    cr_assert_eq(events_rule_durable_writes(ti), 0);
    cr_assert_eq(events_rule_violations(99, EFF_PERSIST, EACT_REJECTED), 0);
    finish(&loop);
    config_free(cfg);
    free(cfg);
}

Test(events, log_keys_hash_and_prefix, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "log_keys = hash");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");
    events_violation(r, S("SET"), S("session:secret"), EFF_DROPS_TTL, EACT_REWRITTEN, NULL);
    struct slice keys[2] = { S("session:k1"), S("nothing:k2") };
    events_unverified_keys(S("EVALSHA"), "sha=abc", keys, 2, NULL);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    char want[64], h[17];
    events_key_hash("session:secret", 14, h);
    snprintf(want, sizeof want, "\"key_hash\":\"%s\"", h);
    const char *line = find_line(v, n, "\"event\":\"violation\"", NULL);
    cr_assert_not_null(line);
    cr_assert(strstr(line, want), "%s", line);
    const char *opened = find_line(v, n, "\"event\":\"log_opened\"", "\"hash_id\":\"");
    cr_assert_not_null(opened);
    for (int i = 0; i < n; i++)
        cr_assert_null(strstr(v[i], "secret"), "key leaked: %s", v[i]);
    for (int i = 0; i < n; i++)
        cr_assert_null(strstr(v[i], "k1"), "key leaked: %s", v[i]);
    cr_assert_not_null(find_line(v, n, "\"event\":\"unverified\"", "\"key_hashes\":[\""));
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, log_keys_prefix, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "log_keys = prefix");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");
    events_violation(r, S("SET"), S("session:secret"), EFF_DROPS_TTL, EACT_REWRITTEN, NULL);
    struct slice keys[2] = { S("session:k1"), S("nothing:k2") };
    events_unverified_keys(S("EVALSHA"), "sha=abc", keys, 2, NULL);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    for (int i = 0; i < n; i++) {
        cr_assert_null(strstr(v[i], "secret"), "key leaked: %s", v[i]);
        cr_assert_null(strstr(v[i], "k1"), "key leaked: %s", v[i]);
    }
    cr_assert_not_null(find_line(v, n, "\"event\":\"violation\"", "\"prefix\":\"session:\""));
    cr_assert_not_null(find_line(v, n, "\"event\":\"unverified\"",
                                 "\"key_prefixes\":[\"session:\",\"\"]"));
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, binary_keys_are_escaped, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");
    struct slice key = { "session:\x00\n\xff\"", 12 };
    events_violation(r, S("SET"), key, EFF_DROPS_TTL, EACT_REWRITTEN, NULL);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    cr_assert_not_null(find_line(v, n, "\"key\":\"session:\\u0000\\n\\udcff\\\"\"", NULL));
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, unverified_fold_by_command_and_detail, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < 3; i++)
        events_unverified(S("SWAPDB"), "not judged by the proxy", &client);
    events_unverified(S("FOO.BAR"), "unknown command", &client);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    cr_assert_eq(count_matching(v, n, "\"command\":\"SWAPDB\"", NULL), 2);
    cr_assert_not_null(find_line(v, n, "\"command\":\"SWAPDB\",\"detail\":\"not judged by the proxy\"",
                                 "\"count\":2"));
    cr_assert_eq(count_matching(v, n, "\"command\":\"FOO.BAR\"", NULL), 1);
    cr_assert_eq(events_counters()->unverified, 4);
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

/* /dev/full: every write fails with ENOSPC. The proxy carries on, counting. */
Test(events, full_disk_counts_lost_events, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("/dev/full", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");
    events_violation(r, S("SET"), S("session:1"), EFF_DROPS_TTL, EACT_REWRITTEN, NULL);
    run_for(&loop, 50);
    events_violation(r, S("INCR"), S("session:1"), EFF_CREATES_WITHOUT_TTL, EACT_REWRITTEN, NULL);
    finish(&loop);
    cr_assert_eq(events_counters()->events_written, 0);
    cr_assert_eq(events_counters()->events_dropped, 6, "got %llu",
                 (unsigned long long)events_counters()->events_dropped);
    config_free(cfg);
    free(cfg);
}

Test(events, unopenable_file_at_start_is_an_error, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("no/such/dir/ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot open"), "%s", err);
    cr_assert_eq(uv_loop_close(&loop), 0, "a failed init leaves no handle behind");
    config_free(cfg);
    free(cfg);
}

Test(events, reopen_starts_a_new_file, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256], a[128], b[128];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");
    events_violation(r, S("SET"), S("session:1"), EFF_DROPS_TTL, EACT_REWRITTEN, NULL);
    run_for(&loop, 50);

    snprintf(a, sizeof a, "%s/ev.log", dir);
    snprintf(b, sizeof b, "%s/ev.log.1", dir);
    cr_assert_eq(rename(a, b), 0);
    events_reopen();
    events_violation(r, S("INCR"), S("session:2"), EFF_CREATES_WITHOUT_TTL, EACT_REWRITTEN, NULL);
    finish(&loop);

    int n1, n2;
    char **old = read_lines("ev.log.1", &n1);
    char **cur = read_lines("ev.log", &n2);
    cr_assert_not_null(find_line(old, n1, "\"command\":\"SET\"", NULL));
    cr_assert_null(find_line(old, n1, "\"command\":\"INCR\"", NULL));
    cr_assert(strstr(cur[0], "\"event\":\"log_opened\""), "%s", cur[0]);
    cr_assert_not_null(find_line(cur, n2, "\"command\":\"INCR\"", NULL));
    cr_assert_eq(n2, 2);
    free_lines(old, n1);
    free_lines(cur, n2);
    config_free(cfg);
    free(cfg);
}

Test(events, reload_flushes_old_folds_then_registers, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    const struct rule *r = rule_for(cfg, "session:1");
    for (int i = 0; i < 3; i++)
        events_violation(r, S("SET"), S("session:1"), EFF_DROPS_TTL, EACT_REWRITTEN, NULL);
    size_t ri = (size_t)(r - cfg->rules.v);
    cr_assert_eq(events_rule_violations(ri, EFF_DROPS_TTL, EACT_REWRITTEN), 3);

    struct config *next = load("ev.log", "log_keys = prefix");
    events_reconfigure(next);
    config_free(cfg);           /* the old config may go now */
    free(cfg);
    events_config_rejected("x.ini", "x.ini:3: unknown key 'foo'");
    cr_assert_eq(events_rule_violations(ri, EFF_DROPS_TTL, EACT_REWRITTEN), 0);
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    /* Folded count of the old rules, then 3 registrations, then the reload. */
    int folded = -1, reloaded = -1;
    for (int i = 0; i < n; i++) {
        if (strstr(v[i], "\"count\":2"))
            folded = i;
        if (strstr(v[i], "\"event\":\"config_reloaded\""))
            reloaded = i;
    }
    cr_assert_gt(folded, 0);
    cr_assert_gt(reloaded, folded);
    cr_assert_eq(count_matching(v, n, "\"event\":\"registration\"", NULL), 6);
    cr_assert_not_null(find_line(v, n, "\"event\":\"config_rejected\"",
                                 "\"reason\":\"x.ini:3: unknown key 'foo'\""));
    cr_assert_eq(events_counters()->config_reloads, 1);
    cr_assert_eq(events_counters()->config_rejected, 1);
    free_lines(v, n);
    config_free(next);
    free(next);
}

Test(events, backend_policy_levels, .init = make_dir, .fini = remove_dir)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config *cfg = load("ev.log", "");
    char err[256];
    cr_assert_eq(events_init(&loop, cfg, err, sizeof err), 0, "%s", err);
    events_backend_policy(cfg, "allkeys-lru", NULL);
    events_backend_policy(cfg, "volatile-ttl", NULL);
    events_backend_policy(cfg, "noeviction", NULL);
    events_backend_policy(cfg, NULL, "ERR unknown command 'CONFIG'");
    finish(&loop);

    int n;
    char **v = read_lines("ev.log", &n);
    cr_assert_not_null(find_line(v, n, "\"policy\":\"allkeys-lru\",\"level\":\"warn\"", NULL));
    cr_assert_not_null(find_line(v, n, "\"policy\":\"volatile-ttl\",\"level\":\"note\"", NULL));
    cr_assert_not_null(find_line(v, n, "\"policy\":\"noeviction\",\"level\":\"ok\"", NULL));
    cr_assert_not_null(find_line(v, n, "\"policy\":null,\"level\":\"unknown\"", "unknown command"));
    free_lines(v, n);
    config_free(cfg);
    free(cfg);
}

Test(events, off_counts_without_writing)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct config cfg;
    config_defaults(&cfg);
    char err[256];
    cr_assert_eq(events_init(&loop, &cfg, err, sizeof err), 0, "%s", err);
    events_violation(&cfg.rules.dflt, S("SET"), S("k"), EFF_DROPS_TTL, EACT_LOGGED, NULL);
    cr_assert_eq(events_counters()->violations[EFF_DROPS_TTL][EACT_LOGGED], 1);
    cr_assert_eq(events_rule_violations(0, EFF_DROPS_TTL, EACT_LOGGED), 1);
    finish(&loop);
    cr_assert_eq(events_counters()->events_written, 0);
    config_free(&cfg);
}
