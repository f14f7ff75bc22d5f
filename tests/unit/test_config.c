/*
 * Unit tests for config.c: the example file, defaults, values, and every
 * error with its PATH:LINE.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "util.h"

/* Writes text (len bytes) to a fresh temp file; returns its path (static,
 * valid until the next call). */
static const char *write_file(const char *text, size_t len)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/ttlg_test_config_XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

/* Loads text; asserts success. */
static void load_ok(const char *text, struct config *cfg)
{
    char err[512] = "";
    const char *path = write_file(text, strlen(text));
    int rc = config_load(path, cfg, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "config_load failed: %s\n--- file:\n%s", err, text);
    cr_assert_str_eq(cfg->path, path);
}

/* Loads len bytes of text; asserts the error is "PATH:line: " + a message
 * containing want, and that the config was left freed. */
static void load_err_n(const char *text, size_t len, int line, const char *want)
{
    struct config cfg;
    char err[1024] = "", prefix[128];
    const char *path = write_file(text, len);
    memset(&cfg, 0xab, sizeof cfg);
    int rc = config_load(path, &cfg, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, -1, "accepted:\n%s", text);
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    cr_assert_eq(strncmp(err, prefix, strlen(prefix)), 0, "want '%s...', got '%s'", prefix, err);
    cr_assert_not_null(strstr(err, want), "want '%s' in '%s'", want, err);
    cr_assert_null(cfg.listen);
    cr_assert_null(cfg.rules.v);
    cr_assert_null(cfg.rules.dflt.label);
}

static void load_err(const char *text, int line, const char *want)
{
    load_err_n(text, strlen(text), line, want);
}

/* The repository root, from this file's path as the compiler saw it. */
static const char *example_path(void)
{
    static char path[1024];
    const char *here = __FILE__;
    const char *tail = strstr(here, "tests/unit/test_config.c");
    cr_assert_not_null(tail, "cannot find the repository from %s", here);
    snprintf(path, sizeof path, "%.*sconfig/ttlguard.ini", (int)(tail - here), here);
    return path;
}

Test(config, example_file_loads)
{
    struct config cfg;
    char err[512] = "";
    int rc = config_load(example_path(), &cfg, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);

    cr_assert_str_eq(cfg.listen, "127.0.0.1:6380");
    cr_assert_str_eq(cfg.backend, "127.0.0.1:6379");
    cr_assert_null(cfg.backend_username);
    cr_assert_null(cfg.backend_password);
    cr_assert_eq(cfg.max_clients, 10000);
    cr_assert_eq(cfg.max_buffer, 4u << 20);
    cr_assert_str_eq(cfg.events, "stderr", "the first run shows registrations and violations");
    cr_assert_str_eq(cfg.admin, "127.0.0.1:9121", "...and serves /metrics on loopback");
    cr_assert_eq(cfg.log_format, 0);
    cr_assert_eq(cfg.event_window, 10);
    cr_assert_eq(cfg.multiplex, 1);

    cr_assert_eq(cfg.rules.dflt.action, ACTION_ALLOW);
    cr_assert_eq(cfg.rules.n, 2);
    const struct rule *s = rules_match(&cfg.rules, "session:abc", 11);
    cr_assert_str_eq(s->label, "ttl \"session:\"");
    cr_assert_eq(s->kind, RULE_TTL);
    cr_assert_eq(s->action, ACTION_REWRITE);
    cr_assert_eq(s->ttl, 900);
    cr_assert_eq(s->refresh, REFRESH_ALLOW);
    cr_assert_eq(s->max_ttl, 0);
    const struct rule *b = rules_match(&cfg.rules, "billing:ledger:2024", 19);
    cr_assert_eq(b->kind, RULE_DURABLE);
    cr_assert_str_eq(b->owner, "payments");
    cr_assert_str_eq(b->reason, "ledger of record; must never be evicted");
    cr_assert_str_eq(b->rebuild, "replay ledger_entries from Postgres");
    cr_assert_eq(rules_match(&cfg.rules, "cache:x", 7), &cfg.rules.dflt);
    config_free(&cfg);
}

static void assert_proxy_defaults(const struct config *cfg)
{
    cr_assert_str_eq(cfg->listen, "127.0.0.1:6380");
    cr_assert_str_eq(cfg->backend, "127.0.0.1:6379");
    cr_assert_null(cfg->backend_username);
    cr_assert_null(cfg->backend_password);
    cr_assert_eq(cfg->max_clients, 10000);
    cr_assert_eq(cfg->client_idle_timeout, 0);
    cr_assert_eq(cfg->max_buffer, 4 * 1024 * 1024);
    cr_assert_eq(cfg->connect_timeout, 3000);
    cr_assert_null(cfg->events);
    cr_assert_null(cfg->admin);
    cr_assert_eq(cfg->log_keys, LOG_KEYS_FULL);
    cr_assert_eq(cfg->event_window, 10);
    cr_assert_eq(cfg->rules.n, 0);
    cr_assert_eq(cfg->rules.dflt.action, ACTION_ALLOW);
    cr_assert_eq(rules_match(&cfg->rules, "k", 1), &cfg->rules.dflt);
}

Test(config, defaults)
{
    struct config cfg;
    config_defaults(&cfg);
    cr_assert_null(cfg.path);
    assert_proxy_defaults(&cfg);
    config_free(&cfg);
    config_free(&cfg);      /* freeing twice is harmless: config_free zeroes */
}

Test(config, empty_file_gives_defaults)
{
    struct config cfg;
    load_ok("", &cfg);
    assert_proxy_defaults(&cfg);
    config_free(&cfg);
    load_ok("; only a comment\n\n[proxy]\n[default]\n", &cfg);
    assert_proxy_defaults(&cfg);
    cr_assert_eq(cfg.rules.dflt.line, 4);
    config_free(&cfg);
}

Test(config, every_proxy_key)
{
    struct config cfg;
    load_ok("[proxy]\n"
            "listen = unix:/tmp/ttlg.sock\n"
            "backend = [::1]:7000\n"
            "backend_username = app\n"
            "backend_password = s3cret\n"
            "max_clients = 1000000\n"
            "client_idle_timeout = 300\n"
            "max_buffer = 16kb\n"
            "connect_timeout = 250\n"
            "events = /var/log/ttlguard/events.jsonl\n"
            "admin = 127.0.0.1:9121\n"
            "log_keys = hash\n"
            "event_window = 1\n"
            "multiplex = off\n", &cfg);
    cr_assert_str_eq(cfg.listen, "unix:/tmp/ttlg.sock");
    cr_assert_str_eq(cfg.backend, "[::1]:7000");
    cr_assert_str_eq(cfg.backend_username, "app");
    cr_assert_str_eq(cfg.backend_password, "s3cret");
    cr_assert_eq(cfg.max_clients, 1000000);
    cr_assert_eq(cfg.client_idle_timeout, 300);
    cr_assert_eq(cfg.max_buffer, 16384);
    cr_assert_eq(cfg.connect_timeout, 250);
    cr_assert_str_eq(cfg.events, "/var/log/ttlguard/events.jsonl");
    cr_assert_str_eq(cfg.admin, "127.0.0.1:9121");
    cr_assert_eq(cfg.log_keys, LOG_KEYS_HASH);
    cr_assert_eq(cfg.event_window, 1);
    cr_assert_eq(cfg.multiplex, 0);
    config_free(&cfg);

    load_ok("[proxy]\nlog_keys = prefix\nevents = stderr\nbackend_password = p\n"
            "admin =\nbackend_username =\n", &cfg);
    cr_assert_eq(cfg.log_keys, LOG_KEYS_PREFIX);
    cr_assert_str_eq(cfg.events, "stderr");
    cr_assert_str_eq(cfg.backend_password, "p");
    cr_assert_null(cfg.admin);
    cr_assert_null(cfg.backend_username);
    config_free(&cfg);
}

Test(config, parse_bytes)
{
    size_t v;
    cr_assert_eq(config_parse_bytes("4096", &v), 0);
    cr_assert_eq(v, 4096);
    cr_assert_eq(config_parse_bytes("0", &v), 0);
    cr_assert_eq(v, 0);
    cr_assert_eq(config_parse_bytes("64kb", &v), 0);
    cr_assert_eq(v, 64 * 1024);
    cr_assert_eq(config_parse_bytes("4mb", &v), 0);
    cr_assert_eq(v, 4 * 1024 * 1024);
    cr_assert_eq(config_parse_bytes("4MB", &v), 0);
    cr_assert_eq(v, 4 * 1024 * 1024);
    cr_assert_eq(config_parse_bytes("1Gb", &v), 0);
    cr_assert_eq(v, 1024 * 1024 * 1024);
    cr_assert_eq(config_parse_bytes("16KB", &v), 0);
    cr_assert_eq(v, 16384);

    v = 77;
    const char *bad[] = {
        "", "kb", "mb", "4k", "4 kb", " 4kb", "-1", "+1", "1.5mb", "4tb", "4kbb", "4b",
        "0x10", "18446744073709551616", "17179869184gb", "12 ",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(config_parse_bytes(bad[i], &v), -1, "accepted '%s'", bad[i]);
    cr_assert_eq(v, 77, "a failed parse must not write");
}

Test(config, max_buffer_in_file)
{
    struct config cfg;
    load_ok("[proxy]\nmax_buffer = 8MB\n", &cfg);
    cr_assert_eq(cfg.max_buffer, 8u << 20);
    config_free(&cfg);
    load_ok("[proxy]\nmax_buffer = 16384\n", &cfg);
    cr_assert_eq(cfg.max_buffer, 16384);
    config_free(&cfg);
    load_err("[proxy]\nmax_buffer = 16383\n", 2, "max_buffer = '16383': expected a size of at least 16kb");
    load_err("[proxy]\nmax_buffer = 4 mb\n", 2, "max_buffer = '4 mb'");
    load_err("[proxy]\nmax_buffer = 4m\n", 2, "like 65536, 64kb, 4mb");
}

Test(config, rules_sections)
{
    struct config cfg;
    load_ok("[default]\n"
            "action = rewrite\n"
            "ttl = 86400\n"
            "max_ttl = 604800\n"
            "refresh = bound\n"
            "\n"
            "[ttl \"a:\"]\n"
            "ttl = 60\n"
            "\n"
            "[durable \"a:keep:\"]\n"
            "owner = team\n"
            "reason = why\n"
            "rebuild = how\n"
            "\n"
            "[ttl \"a:keep:tmp:\"]\n"
            "action = reject\n"
            "refresh = bound\n"
            "max_ttl = 3600\n"
            "[ttl \"b:\"]\n"
            "action = log\n", &cfg);
    const struct rule *d = &cfg.rules.dflt;
    cr_assert_eq(d->action, ACTION_REWRITE);
    cr_assert_eq(d->ttl, 86400);
    cr_assert_eq(d->max_ttl, 604800);
    cr_assert_eq(d->refresh, REFRESH_BOUND);
    cr_assert_eq(d->line, 1);
    cr_assert_str_eq(d->label, "default");
    cr_assert_eq(cfg.rules.n, 4);

    const struct rule *r = rules_match(&cfg.rules, "a:1", 3);
    cr_assert_str_eq(r->label, "ttl \"a:\"");
    cr_assert_eq(r->action, ACTION_REWRITE);        /* the ttl section default */
    cr_assert_eq(r->ttl, 60);
    cr_assert_eq(r->refresh, REFRESH_ALLOW);
    cr_assert_eq(r->line, 7);
    r = rules_match(&cfg.rules, "a:keep:1", 8);
    cr_assert_eq(r->kind, RULE_DURABLE);
    cr_assert_eq(r->action, ACTION_ALLOW);
    cr_assert_eq(r->line, 10);
    r = rules_match(&cfg.rules, "a:keep:tmp:1", 12);
    cr_assert_eq(r->action, ACTION_REJECT);
    cr_assert_eq(r->ttl, 0);
    cr_assert_eq(r->max_ttl, 3600);
    cr_assert_eq(r->refresh, REFRESH_BOUND);
    cr_assert_eq(rules_match(&cfg.rules, "a:keep", 6)->ttl, 60);   /* shorter than the durable prefix */
    cr_assert_eq(rules_match(&cfg.rules, "b:1", 3)->action, ACTION_LOG);
    cr_assert_eq(rules_match(&cfg.rules, "", 0), d);
    cr_assert_eq(rules_match(&cfg.rules, "c", 1), d);
    config_free(&cfg);
}

Test(config, binary_prefixes)
{
    struct config cfg;
    load_ok("[ttl \"bin\\x00ary:\"]\nttl = 5\n"
            "[durable \"q\\\"uo\\\\te]; x\"]  ; a comment\nowner = o\nreason = r\nrebuild = b\n"
            "[ttl \"\\xff\"]\nttl = 7\n", &cfg);
    const struct rule *r = rules_match(&cfg.rules, "bin\0ary:1", 9);
    cr_assert_eq(r->prefix_len, 8);
    cr_assert_eq(memcmp(r->prefix, "bin\0ary:", 8), 0);
    cr_assert_str_eq(r->label, "ttl \"bin\\x00ary:\"");
    cr_assert_eq(rules_match(&cfg.rules, "bin", 3), &cfg.rules.dflt);
    cr_assert_eq(rules_match(&cfg.rules, "bin\0", 4), &cfg.rules.dflt);
    r = rules_match(&cfg.rules, "q\"uo\\te]; x!", 12);
    cr_assert_eq(r->kind, RULE_DURABLE);
    cr_assert_str_eq(r->label, "durable \"q\\\"uo\\\\te]; x\"");
    cr_assert_eq(rules_match(&cfg.rules, "\xff\x01", 2)->ttl, 7);
    config_free(&cfg);
}

Test(config, syntax_details)
{
    struct config cfg;
    /* Inline ; comments after a blank, # and ; comment lines, indentation,
     * CRLF, a UTF-8 BOM, a ; inside text, blanks in a header. */
    load_ok("\xEF\xBB\xBF; bom first\r\n"
            "# hash comment\r\n"
            "  [ proxy ]   # header comment\r\n"
            "    listen = 0.0.0.0:7777   ; inline\r\n"
            "\tbackend = 10.0.0.1:6379\r\n"
            "[ durable   \"k:\" ] \r\n"
            "  owner = a;b\r\n"
            "  reason = one ; two\r\n"
            "  rebuild = x\r\n", &cfg);
    cr_assert_str_eq(cfg.listen, "0.0.0.0:7777");
    cr_assert_str_eq(cfg.backend, "10.0.0.1:6379");
    const struct rule *r = rules_match(&cfg.rules, "k:1", 3);
    cr_assert_str_eq(r->owner, "a;b");
    cr_assert_str_eq(r->reason, "one");
    config_free(&cfg);

    /* A comment line longer than inih's line buffer is fine. */
    char big[1200];
    memset(big, 'c', sizeof big);
    big[0] = ';';
    snprintf(big + 1000, 200, "\n[proxy]\nmax_clients = 5\n");
    load_ok(big, &cfg);
    cr_assert_eq(cfg.max_clients, 5);
    config_free(&cfg);
}

Test(config, open_errors)
{
    struct config cfg;
    char err[512];
    memset(&cfg, 0xab, sizeof cfg);
    cr_assert_eq(config_load("/nonexistent/ttlguard.ini", &cfg, err, sizeof err), -1);
    cr_assert_str_eq(err, "/nonexistent/ttlguard.ini: cannot open: No such file or directory");
    cr_assert_null(cfg.listen);
    cr_assert_eq(config_load("/tmp", &cfg, err, sizeof err), -1);
    cr_assert_str_eq(err, "/tmp: cannot read: Is a directory");
}

Test(config, section_errors)
{
    load_err("[proxy]\n\n[foo]\n", 3, "unknown section [foo] (expected [proxy], [default], "
             "[ttl \"PREFIX\"], [durable \"PREFIX\"] or [user \"NAME\"])");
    load_err("[Proxy]\n", 1, "unknown section [Proxy]");
    load_err("[]\n", 1, "unknown section []");
    load_err("[ttl]\nttl = 5\n", 1, "[ttl] needs a quoted prefix, like [ttl \"session:\"]");
    load_err("\n[durable session:]\n", 2, "[durable] needs a quoted prefix");
    load_err("[ttl \"\"]\nttl = 5\n", 1, "empty prefix in [ttl \"\"]: use [default] for a rule on all keys");
    load_err("[durable \"\"]\n", 1, "empty prefix in [durable \"\"]: use [default]");
    load_err("[ttl \"abc]\n", 1, "missing closing '\"' after the prefix");
    load_err("[ttl \"a\\qb\"]\n", 1, "unknown escape '\\q'");
    load_err("[ttl \"a\\x1\"]\n", 1, "two hex digits");
    load_err("[ttl \"a\"\n", 1, "expected ']' to close the section header");
    load_err("[ttl \"a\" \"b\"]\n", 1, "expected ']' to close the section header");
    load_err("[proxy\n", 1, "expected ']' to close the section header");
    load_err("[proxy] x\n", 1, "unexpected text after ']'");
    load_err("[proxy \"x\"]\n", 1, "[proxy] takes no prefix");
    load_err("[default \"x\"]\n", 1, "[default] takes no prefix");
    load_err("[proxy]\n[default]\n[proxy]\n", 3, "second [proxy] section (the first is at line 1)");
    load_err("[default]\n[default]\n", 2, "second [default] section (the first is at line 1)");
    static const char nul[] = "[proxy]\nlisten = a\0b\n";
    load_err_n(nul, sizeof nul - 1, 2, "NUL byte in line");
}

Test(config, duplicate_prefix_names_both_lines)
{
    load_err("[ttl \"a:\"]\nttl = 1\n\n[ttl \"b:\"]\nttl = 2\n[durable \"a:\"]\n"
             "owner = o\nreason = r\nrebuild = b\n", 6,
             "duplicate prefix: [durable \"a:\"] repeats the prefix of [ttl \"a:\"] at line 1");
    /* Same bytes, spelled differently. */
    load_err("[ttl \"a:\"]\nttl = 1\n[ttl \"\\x61:\"]\nttl = 2\n", 3,
             "duplicate prefix: [ttl \"a:\"] repeats the prefix of [ttl \"a:\"] at line 1");
}

Test(config, key_errors)
{
    load_err("listen = 1.2.3.4:5\n", 1, "'listen' is outside any section");
    load_err("[proxy]\nlisten = 1.2.3.4:5\nlisten = 1.2.3.4:6\n", 3,
             "listen set twice in [proxy] (first at line 2)");
    load_err("[proxy]\nlisen = x\n", 2, "unknown key 'lisen' in [proxy] (did you mean "
             "'listen'? docs/config.md lists every key)");
    load_err("[proxy]\nzzzzzz = x\n", 2, "unknown key 'zzzzzz' in [proxy] (docs/config.md "
             "lists every key)");
    load_err("[proxy]\nmultiplex = yes\n", 2, "multiplex = 'yes': expected on or off");
    load_err("[proxy]\nListen = x\n", 2, "unknown key 'Listen'");
    load_err("[ttl \"a:\"]\nowner = x\n", 2,
             "unknown key 'owner' in [ttl \"a:\"] (expected one of: action, ttl, max_ttl, refresh, unknown)");
    load_err("[durable \"a:\"]\nttl = 5\n", 2,
             "unknown key 'ttl' in [durable \"a:\"] (expected one of: owner, reason, rebuild)");
    load_err("[default]\nowner = x\n", 2, "unknown key 'owner' in [default]");
    load_err("[proxy]\nttl = 5\n", 2, "unknown key 'ttl' in [proxy]");
    load_err("[proxy]\nmax_clients 5\n", 2, "expected 'key = value', a [section] header or a comment");
    load_err("[proxy]\n\nmax_clients = 5\njunk\n[foo]\n", 4, "expected 'key = value'");
    /* The first error wins, whichever side found it. */
    load_err("[proxy]\njunk\nmax_clients = 0\n", 2, "expected 'key = value'");
    load_err("[proxy]\nmax_clients = 0\njunk\n", 2, "max_clients = '0'");

    char line[400];
    memset(line, 'x', sizeof line);
    memcpy(line, "[proxy]\nevents = /", 18);
    strcpy(line + 300, "\nmax_clients = 5\n");
    load_err(line, 2, "line too long");

    /* inih's buffer holds 198 bytes of text; indentation does not count. */
    struct config cfg;
    char edge[300];
    snprintf(edge, sizeof edge, "[proxy]\n    events = /%0*d\n", 198 - 10, 0);
    load_ok(edge, &cfg);
    cr_assert_eq(strlen(cfg.events), 189);
    config_free(&cfg);
    snprintf(edge, sizeof edge, "[proxy]\n    events = /%0*d", 198 - 10, 0);
    load_ok(edge, &cfg);       /* last line without a line break */
    config_free(&cfg);
    snprintf(edge, sizeof edge, "[proxy]\nevents = /%0*d\n", 199 - 10, 0);
    load_err(edge, 2, "line too long: 199 bytes, at most 198 fit");
}

Test(config, proxy_value_errors)
{
    load_err("[proxy]\nlisten = localhost\n", 2, "listen = 'localhost': expected host:port or unix:/path");
    load_err("[proxy]\nlisten =\n", 2, "listen and tls_listen are both empty");
    load_err("[proxy]\nbackend = 1.2.3.4:99999\n", 2, "backend = '1.2.3.4:99999': port must be");
    load_err("[proxy]\nbackend = unix:\n", 2, "empty unix socket path");
    load_err("[proxy]\nmax_clients = 0\n", 2,
             "max_clients = '0': expected a whole number of clients from 1 to 1000000");
    load_err("[proxy]\nmax_clients = 1000001\n", 2, "from 1 to 1000000");
    load_err("[proxy]\nmax_clients = -5\n", 2, "max_clients = '-5'");
    load_err("[proxy]\nmax_clients = 10k\n", 2, "max_clients = '10k'");
    load_err("[proxy]\nmax_clients = 99999999999999999999999\n", 2, "from 1 to 1000000");
    load_err("[proxy]\nclient_idle_timeout = 1.5\n", 2,
             "client_idle_timeout = '1.5': expected a whole number of seconds (0 = off)");
    load_err("[proxy]\nconnect_timeout = 0\n", 2,
             "connect_timeout = '0': expected a whole number of milliseconds from 1 to 2147483647");
    load_err("[proxy]\nevent_window = 0\n", 2, "event_window = '0': expected a whole number of seconds from 1");
    load_err("[proxy]\nlog_keys = sha\n", 2, "log_keys = 'sha': expected full, hash or prefix");
    load_err("[proxy]\nadmin = unix:/tmp/a.sock\n", 2, "admin = 'unix:/tmp/a.sock': expected host:port");
    load_err("[proxy]\nadmin = 9121\n", 2, "admin = '9121': expected host:port or unix:/path "
             "(or leave it empty for no admin endpoint)");
    load_err("[proxy]\n# credentials\nbackend_username = app\n", 1,
             "[proxy] has backend_username but no backend_password");
    load_err("[proxy]\nbackend_username = app\nbackend_password =\n", 1,
             "has backend_username but no backend_password");
}

Test(config, rule_value_errors)
{
    load_err("[ttl \"a:\"]\nttl = 0\n", 2, "ttl = '0': expected a whole number of seconds from 1 to 2147483647");
    load_err("[ttl \"a:\"]\nttl = -60\n", 2, "ttl = '-60'");
    load_err("[ttl \"a:\"]\nttl = 60s\n", 2, "ttl = '60s'");
    load_err("[ttl \"a:\"]\nttl = 60 # one minute\n", 2, "ttl = '60 # one minute'");
    load_err("[ttl \"a:\"]\nttl = 2147483648\n", 2, "ttl = '2147483648'");
    load_err("[ttl \"a:\"]\nttl = 5\nmax_ttl = -1\n", 3,
             "max_ttl = '-1': expected a whole number of seconds (0 = no cap) from 0");
    load_err("[ttl \"a:\"]\nttl = 5\naction = allow\n", 3,
             "action = 'allow': expected log, rewrite or reject (keys that may live without "
             "a TTL belong in a [durable \"PREFIX\"] section)");
    load_err("[ttl \"a:\"]\naction = Rewrite\n", 2, "action = 'Rewrite': expected log, rewrite or reject");
    load_err("[default]\naction = drop\n", 2, "action = 'drop': expected allow, log, rewrite or reject");
    load_err("[default]\nrefresh = sliding\n", 2, "refresh = 'sliding': expected allow or bound");
    load_err("[durable \"a:\"]\nowner =\n", 2, "owner is empty: say who owns these keys");
    load_err("[durable \"a:\"]\nowner = o\nreason = r\nrebuild =   ; nothing\n", 4,
             "rebuild is empty: say how to rebuild them");
}

Test(config, section_level_errors_at_header_line)
{
    load_err("[proxy]\n\n[ttl \"session:\"]\naction = rewrite\nrefresh = bound\n", 3,
             "[ttl \"session:\"] has action = rewrite but no ttl: add ttl = SECONDS");
    load_err("[ttl \"session:\"]\n", 1, "has action = rewrite but no ttl");
    load_err("[default]\naction = rewrite\n", 1, "[default] has action = rewrite but no ttl");
    load_err("[proxy]\n[ttl \"a:\"]\nttl = 900\nmax_ttl = 600\n", 2,
             "[ttl \"a:\"] has ttl = 900 above max_ttl = 600: ttl must be at most max_ttl");
    load_err("[durable \"billing:ledger:\"]\nowner = payments\nreason = ledger\n\n[proxy]\n", 1,
             "[durable \"billing:ledger:\"] is missing rebuild: a durable rule needs owner, "
             "reason and rebuild");
    load_err("[ttl \"x:\"]\nttl = 1\n[durable \"d:\"]\nreason = r\n", 3, "is missing owner, rebuild");
    load_err("[durable \"d:\"]\n", 1, "is missing owner, reason, rebuild");
}

Test(config, rule_values_accepted)
{
    struct config cfg;
    /* ttl without rewrite is allowed; ttl == max_ttl is fine; default may
     * reject without a ttl. */
    load_ok("[default]\naction = reject\n"
            "[ttl \"a:\"]\naction = log\n"
            "[ttl \"b:\"]\nttl = 600\nmax_ttl = 600\n"
            "[ttl \"c:\"]\naction = reject\nttl = 10\n", &cfg);
    cr_assert_eq(cfg.rules.dflt.action, ACTION_REJECT);
    cr_assert_eq(rules_match(&cfg.rules, "a:", 2)->action, ACTION_LOG);
    cr_assert_eq(rules_match(&cfg.rules, "a:", 2)->ttl, 0);
    cr_assert_eq(rules_match(&cfg.rules, "b:", 2)->max_ttl, 600);
    cr_assert_eq(rules_match(&cfg.rules, "c:", 2)->ttl, 10);
    config_free(&cfg);
}

/* ---- TLS ------------------------------------------------------------------ */

/* A self-signed certificate and its key (and a second, unrelated key) made
 * with the openssl command into a fresh directory; returns the directory. */
static const char *make_cert(void)
{
    static char dir[64];
    char cmd[512];
    snprintf(dir, sizeof dir, "/tmp/ttlg_test_tls_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
             "-keyout %s/key.pem -out %s/cert.pem >/dev/null 2>&1 && "
             "openssl genrsa -out %s/other.pem 2048 >/dev/null 2>&1 && "
             "echo 'not a certificate' > %s/junk.pem", dir, dir, dir, dir);
    cr_assert_eq(system(cmd), 0, "openssl failed: %s", cmd);
    return dir;
}

static void remove_cert(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(config, tls_keys_load_contexts)
{
    const char *d = make_cert();
    char text[1024];
    struct config cfg;
    snprintf(text, sizeof text,
             "[proxy]\nlisten =\ntls_listen = 127.0.0.1:6390\n"
             "tls_cert_file = %s/cert.pem\ntls_key_file = %s/key.pem\n"
             "tls_ca_cert_file = %s/cert.pem\ntls_auth_clients = optional\n"
             "backend_tls = on\nbackend_tls_ca_cert_file = %s/cert.pem\n"
             "backend_tls_server_name = redis.internal\nbackend_tls_verify = off\n"
             "tls_protocols = \"TLSv1.2 TLSv1.3\"\n", d, d, d, d);
    load_ok(text, &cfg);
    cr_assert_null(cfg.listen);
    cr_assert_str_eq(cfg.tls_listen, "127.0.0.1:6390");
    cr_assert_not_null(cfg.client_tls_ctx);
    cr_assert_not_null(cfg.backend_tls_ctx);
    cr_assert_eq(cfg.tls_auth_clients, 1);
    cr_assert_eq(cfg.backend_tls_verify, 0);
    cr_assert_str_eq(cfg.backend_tls_server_name, "redis.internal");
    cr_assert_null(cfg.sentinel_tls_ctx);
    config_free(&cfg);

    /* Sentinel: the primary over TLS, the Sentinels too (sentinel_tls), or
     * the Sentinels alone; the same backend_tls_* files. */
    const char *both[] = { "backend_tls = on\nsentinel_tls = on", "backend_tls = on",
                           "sentinel_tls = on" };
    for (int i = 0; i < 3; i++) {
        snprintf(text, sizeof text, "[proxy]\nsentinel = 127.0.0.1:26379\n"
                 "sentinel_master = m\n%s\nbackend_tls_ca_cert_file = %s/cert.pem\n"
                 "backend_tls_cert_file = %s/cert.pem\nbackend_tls_key_file = %s/key.pem\n",
                 both[i], d, d, d);
        load_ok(text, &cfg);
        cr_assert_eq(cfg.backend_tls_ctx != NULL, i < 2, "%s", both[i]);
        cr_assert_eq(cfg.sentinel_tls_ctx != NULL, i != 1, "%s", both[i]);
        config_free(&cfg);
    }

    load_ok("[proxy]\n", &cfg);
    cr_assert_null(cfg.backend_tls_ctx, "TLS is off by default");
    cr_assert_null(cfg.client_tls_ctx);
    cr_assert_eq(cfg.backend_tls_verify, 1, "verification is on by default");
    config_free(&cfg);
    remove_cert(d);
}

Test(config, tls_file_errors_name_the_key_line_and_file)
{
    const char *d = make_cert();
    char text[1024], want[256];

    snprintf(text, sizeof text, "[proxy]\ntls_listen = 127.0.0.1:6390\n"
             "tls_cert_file = %s/missing.pem\ntls_key_file = %s/key.pem\n", d, d);
    snprintf(want, sizeof want, "tls_cert_file '%s/missing.pem': cannot open: No such file", d);
    load_err(text, 3, want);

    snprintf(text, sizeof text, "[proxy]\ntls_listen = 127.0.0.1:6390\n"
             "tls_cert_file = %s/junk.pem\ntls_key_file = %s/key.pem\n", d, d);
    snprintf(want, sizeof want, "tls_cert_file '%s/junk.pem': not a PEM certificate", d);
    load_err(text, 3, want);

    snprintf(text, sizeof text, "[proxy]\ntls_listen = 127.0.0.1:6390\n"
             "tls_key_file = %s/other.pem\ntls_cert_file = %s/cert.pem\n", d, d);
    snprintf(want, sizeof want, "'%s/other.pem' does not match the certificate", d);
    load_err(text, 3, want);

    snprintf(text, sizeof text, "[proxy]\nbackend_tls = on\n"
             "backend_tls_ca_cert_file = %s/junk.pem\n", d);
    load_err(text, 3, "backend_tls_ca_cert_file");

    snprintf(text, sizeof text, "[proxy]\nbackend_tls = on\n\n"
             "backend_tls_key_file = %s/junk.pem\nbackend_tls_cert_file = %s/cert.pem\n", d, d);
    snprintf(want, sizeof want, "backend_tls_key_file '%s/junk.pem': not a PEM private key", d);
    load_err(text, 4, want);

    snprintf(text, sizeof text, "[proxy]\nsentinel = 127.0.0.1:26379\nsentinel_master = m\n"
             "sentinel_tls = on\nbackend_tls_ca_cert_file = %s/junk.pem\n", d);
    load_err(text, 5, "backend_tls_ca_cert_file");

    load_err("[proxy]\nbackend_tls = on\ntls_protocols = TLSv1.2 SSLv3\n", 3,
             "tls_protocols 'TLSv1.2 SSLv3': unknown protocol 'SSLv3'");
    load_err("[proxy]\nbackend_tls = on\ntls_ciphers = NOPE\n", 3,
             "tls_ciphers 'NOPE': no usable cipher");
    remove_cert(d);
}

Test(config, tls_settings_that_do_not_fit)
{
    load_err("[proxy]\ntls_listen = 127.0.0.1:6390\n", 2, "tls_listen needs tls_cert_file");
    load_err("[proxy]\nlisten = 127.0.0.1:7000\ntls_listen = 127.0.0.1:7000\n", 3,
             "is the listen address too");
    load_err("[proxy]\ntls_cert_file = /x.pem\n", 2, "tls_cert_file and tls_key_file go together");
    load_err("[proxy]\nbackend_tls_key_file = /x.pem\n", 2,
             "backend_tls_cert_file and backend_tls_key_file go together");
    load_err("[proxy]\ntls_listen = 127.0.0.1:6390\ntls_cert_file = /c\ntls_key_file = /k\n"
             "tls_auth_clients = yes\n", 5, "set tls_ca_cert_file");
    load_err("[proxy]\nbackend = unix:/tmp/r.sock\nbackend_tls = on\n", 3,
             "needs a host:port backend");
    load_err("[proxy]\ntls_auth_clients = maybe\n", 2, "expected no, optional or yes");
    load_err("[proxy]\nlog_format = xml\n", 2, "log_format = 'xml': expected text or json");
    load_err("[proxy]\nbackend_tls = yes\n", 2, "backend_tls");
}

/* ---- Redis Cluster ----------------------------------------------------------- */

Test(config, cluster_keys)
{
    struct config cfg;
    load_ok("[proxy]\nlisten = 127.0.0.1:7400\nbackend = 127.0.0.1:7000  127.0.0.1:7001\n"
            "cluster = on\ncluster_ports = 7401-7499\ncluster_announce = 10.0.0.5\n", &cfg);
    cr_assert_eq(cfg.cluster, 1);
    cr_assert_str_eq(cfg.backend, "127.0.0.1:7000", "the first seed is the backend");
    cr_assert_str_eq(cfg.backend_seeds, "127.0.0.1:7000  127.0.0.1:7001");
    cr_assert_eq(cfg.cluster_port_min, 7401);
    cr_assert_eq(cfg.cluster_port_max, 7499);
    cr_assert_str_eq(cfg.cluster_announce, "10.0.0.5");
    config_free(&cfg);
}

Test(config, cluster_errors)
{
    load_err("[proxy]\nbackend = 127.0.0.1:7000 127.0.0.1:7001\n", 2,
             "backend lists several addresses: that is for a cluster's seeds (cluster = on)");
    load_err("[proxy]\nbackend = 127.0.0.1:7000 nope\ncluster = on\n", 2, "backend = 'nope'");
    load_err("[proxy]\ncluster = on\n", 2, "cluster = on needs cluster_ports = FIRST-LAST");
    load_err("[proxy]\ncluster = on\ncluster_ports = 10-5\n", 3,
             "cluster_ports = '10-5': expected a range of ports FIRST-LAST");
    load_err("[proxy]\ncluster_ports = 7401\n", 2, "expected a range of ports");
    load_err("[proxy]\nlisten = 127.0.0.1:7410\ncluster = on\ncluster_ports = 7401-7499\n", 4,
             "cluster_ports 7401-7499 holds the listen port 7410");
    load_err("[proxy]\nadmin = 127.0.0.1:7402\ncluster = on\ncluster_ports = 7401-7499\n", 4,
             "holds the admin port 7402");
    load_err("[proxy]\nbackend = unix:/tmp/r.sock\ncluster = on\ncluster_ports = 7401-7499\n", 2,
             "cluster = on needs host:port seeds");
    load_err("[proxy]\nlisten = 0.0.0.0:7400\ncluster = on\ncluster_ports = 7401-7499\n", 2,
             "set cluster_announce");
    /* listen and tls_listen together with cluster = on: test_cluster_tls.py (it needs
     * certificate files). */
}

Test(config, cluster_route)
{
    struct config cfg;
    load_ok("[proxy]\nlisten = 127.0.0.1:7400\nbackend = 127.0.0.1:7000 127.0.0.1:7001\n"
            "cluster = route\n", &cfg);
    cr_assert_eq(cfg.cluster, CLUSTER_ROUTE);
    cr_assert_str_eq(cfg.backend_seeds, "127.0.0.1:7000 127.0.0.1:7001");
    config_free(&cfg);
    load_err("[proxy]\ncluster = routed\n", 2, "cluster = 'routed': expected off, on or route");
    load_err("[proxy]\ncluster = route\ncluster_ports = 7401-7499\n", 3,
             "cluster = route has no node listeners: cluster_ports is for cluster = on");
    load_err("[proxy]\ncluster = route\ncluster_announce = 10.0.0.5\n", 3,
             "cluster_announce is for cluster = on");
    load_err("[proxy]\ncluster = route\nmultiplex = off\n", 3,
             "multiplex = off is not supported with it (yet)");
    load_err("[proxy]\ncluster = route\nwatch = on\n", 3, "cluster = route with watch = on");
    load_err("[proxy]\ncluster = route\nbackend = unix:/tmp/r.sock\n", 3,
             "needs host:port seeds");
    load_err("[proxy]\ncluster = route\nsentinel = 127.0.0.1:26379\nsentinel_master = m\n", 2,
             "sentinel with cluster = route is not supported: a cluster has no Sentinels");
    load_err("[proxy]\ncluster = route\n[user \"app\"]\npassword_sha256 = "
             "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\n", 3,
             "[user \"app\"]: cluster = route does not log clients in itself yet");
}

Test(config, parse_duration)
{
    unsigned long long v;
    static const struct { const char *text; unsigned long long secs; } good[] = {
        { "", 0 }, { "0", 0 }, { "3600", 3600 }, { "90s", 90 }, { "90S", 90 }, { "30m", 1800 },
        { "1h", 3600 }, { "1H", 3600 }, { "7d", 604800 }, { "0h", 0 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cr_assert_eq(config_parse_duration(good[i].text, &v), 0, "refused '%s'", good[i].text);
        cr_assert_eq(v, good[i].secs, "'%s' is %llu s, not %llu", good[i].text, good[i].secs, v);
    }
    v = 77;
    const char *bad[] = {
        "h", "s", "1.5h", "-1", "+1", " 1h", "1h ", "1 h", "1hh", "1w", "1ms", "0x10", "1e3",
        "18446744073709551616", "213503982334602d",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(config_parse_duration(bad[i], &v), -1, "accepted '%s'", bad[i]);
    cr_assert_eq(v, 77, "a failed parse must not write");
}

Test(config, audit_keys)
{
    struct config cfg;
    load_ok("", &cfg);
    cr_assert_eq(cfg.audit_interval, 0, "off by default");
    cr_assert_eq(cfg.audit_rate, 1000);
    cr_assert_eq(cfg.audit_memory, 0);
    config_free(&cfg);
    load_ok("[proxy]\naudit_interval = 1h\naudit_rate = 250\naudit_memory = on\n", &cfg);
    cr_assert_eq(cfg.audit_interval, 3600);
    cr_assert_eq(cfg.audit_rate, 250);
    cr_assert_eq(cfg.audit_memory, 1);
    config_free(&cfg);
    load_ok("[proxy]\naudit_interval = 900\n", &cfg);
    cr_assert_eq(cfg.audit_interval, 900);
    config_free(&cfg);
    load_ok("[proxy]\naudit_interval = 2d\n", &cfg);
    cr_assert_eq(cfg.audit_interval, 172800);
    config_free(&cfg);
    load_ok("[proxy]\naudit_interval =\n", &cfg);
    cr_assert_eq(cfg.audit_interval, 0, "empty is off");
    config_free(&cfg);
    load_ok("[proxy]\naudit_interval = 0\n", &cfg);
    cr_assert_eq(cfg.audit_interval, 0);
    config_free(&cfg);
}

Test(config, audit_key_errors)
{
    load_err("[proxy]\naudit_interval = 1w\n", 2, "audit_interval = '1w': expected a duration: "
             "seconds, or a number with s, m, h or d (like 3600, 90m, 1h, 1d)");
    load_err("[proxy]\naudit_interval = -1\n", 2, "audit_interval = '-1'");
    load_err("[proxy]\naudit_interval = 1.5h\n", 2, "audit_interval = '1.5h'");
    load_err("[proxy]\naudit_interval = 24856d\n", 2, "at most 2147483647 seconds");
    load_err("[proxy]\naudit_rate = 0\n", 2,
             "audit_rate = '0': expected a whole number of keys per second from 1 to 10000000");
    load_err("[proxy]\naudit_rate = 1k\n", 2, "audit_rate = '1k'");
    load_err("[proxy]\naudit_rate = 10000001\n", 2, "from 1 to 10000000");
    load_err("[proxy]\naudit_memory = yes\n", 2, "audit_memory = 'yes'");
}

Test(config, audit_with_cluster)
{
    struct config cfg;
    load_ok("[proxy]\nlisten = 127.0.0.1:7400\nbackend = 127.0.0.1:7000\ncluster = on\n"
            "cluster_ports = 7401-7499\naudit_interval = 1h\n", &cfg);
    cr_assert_eq(cfg.cluster, 1);
    cr_assert_eq(cfg.audit_interval, 3600, "every primary is walked (audit_bg.c)");
    cr_assert_eq(cfg.audit_from, AUDIT_FROM_PRIMARY, "primaries by default");
    config_free(&cfg);
    load_ok("[proxy]\nlisten = 127.0.0.1:7400\nbackend = 127.0.0.1:7000\ncluster = on\n"
            "cluster_ports = 7401-7499\naudit_from = replica\n", &cfg);
    cr_assert_eq(cfg.audit_from, AUDIT_FROM_REPLICA);
    cr_assert_null(cfg.audit_from_addr);
    config_free(&cfg);
    load_err("[proxy]\nlisten = 127.0.0.1:7400\nbackend = 127.0.0.1:7000\ncluster = on\n"
             "cluster_ports = 7401-7499\naudit_from = 127.0.0.1:7001\n", 6,
             "cluster = on takes audit_from = primary or replica (a replica of each shard), "
             "not one address (127.0.0.1:7001)");
}

Test(config, audit_from_single_server)
{
    struct config cfg;
    load_ok("[proxy]\naudit_from = 10.0.0.12:6379\n", &cfg);
    cr_assert_eq(cfg.audit_from, AUDIT_FROM_ADDR);
    cr_assert_str_eq(cfg.audit_from_addr, "10.0.0.12:6379");
    config_free(&cfg);
    load_ok("[proxy]\naudit_from = primary\n", &cfg);
    cr_assert_eq(cfg.audit_from, AUDIT_FROM_PRIMARY);
    cr_assert_null(cfg.audit_from_addr);
    config_free(&cfg);
    load_err("[proxy]\naudit_from = replica\n", 2, "audit_from = replica is for a cluster (its "
             "replicas are in its topology): name the replica of the backend to read, "
             "audit_from = HOST:PORT");
    load_err("[proxy]\naudit_from = replicas\n", 2, "audit_from = 'replicas': expected "
             "primary, replica or the HOST:PORT of a replica of the backend");
}

Test(config, sentinel_keys)
{
    struct config cfg;
    load_ok("[proxy]\nsentinel = 10.0.0.1:26379 10.0.0.2:26379  [::1]:26380\n"
            "sentinel_master = mymaster\nsentinel_username = s\nsentinel_password = pw\n", &cfg);
    cr_assert_str_eq(cfg.sentinel, "10.0.0.1:26379 10.0.0.2:26379  [::1]:26380");
    cr_assert_str_eq(cfg.sentinel_master, "mymaster");
    cr_assert_str_eq(cfg.sentinel_username, "s");
    cr_assert_str_eq(cfg.sentinel_password, "pw");
    config_free(&cfg);
    load_ok("[proxy]\n", &cfg);
    cr_assert_null(cfg.sentinel);
    cr_assert_null(cfg.sentinel_master);
    config_free(&cfg);
}

Test(config, sentinel_errors)
{
    load_err("[proxy]\nsentinel = 127.0.0.1:26379\n", 2, "sentinel needs sentinel_master = NAME");
    load_err("[proxy]\n\nsentinel_master = m\n", 3, "sentinel_master needs sentinel = "
             "HOST:PORT");
    load_err("[proxy]\nlisten = 127.0.0.1:6380\nsentinel_tls = on\n", 3,
             "sentinel_tls needs sentinel = HOST:PORT [HOST:PORT ...] (sentinel_master, "
             "sentinel_username, sentinel_password and sentinel_tls are the Sentinels' settings)");
    load_err("[proxy]\nsentinel_tls = maybe\n", 2, "sentinel_tls");
    load_err("[proxy]\nsentinel = 127.0.0.1:26379 nope\nsentinel_master = m\n", 2,
             "sentinel = 'nope': expected host:port");
    load_err("[proxy]\nsentinel =\nsentinel_master = m\n", 2, "sentinel is empty");
    load_err("[proxy]\nsentinel = unix:/tmp/s.sock\nsentinel_master = m\n", 2,
             "Sentinels are reached at host:port");
    load_err("[proxy]\nsentinel = 127.0.0.1:26379\nsentinel_master = m\nbackend = 127.0.0.1:1\n",
             4, "backend and sentinel exclude each other");
    load_err("[proxy]\nsentinel = 127.0.0.1:26379\nsentinel_master = m\ncluster = on\n"
             "cluster_ports = 7100-7105\n", 4, "sentinel with cluster = on is not supported");
    load_err("[proxy]\nsentinel = 127.0.0.1:26379\nsentinel_master = m\n"
             "sentinel_username = u\n", 4, "sentinel_username needs sentinel_password");
}
