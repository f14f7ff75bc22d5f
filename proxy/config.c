/*
 * config: the INI file turned into one validated struct config.
 *
 * inih parses the "key = value" lines; this file does everything around
 * them:
 *
 *   file ──getline──▶ line_reader() ──line──▶ inih ini_parse_stream() ──▶ on_key()
 *                        │ counts lines                                     │ conf_keys[] row:
 *                        │ parses [kind "PREFIX"] headers itself,           │ parser + offset
 *                        │ hands inih a placeholder "[s]"                   ▼
 *                        └──────────────▶ sections[] (file order) ──▶ check_section()
 *                                                                   ──▶ struct config + ruleset
 *
 * Why the reader does the headers instead of inih:
 *  - Debian's libinih 55 is built without INI_HANDLER_LINENO, so the handler
 *    is never told its line. inih calls the reader once per line and the
 *    handler for that line before reading the next, so the reader's count is
 *    the handler's line.
 *  - inih ends a section name at the first ']' (and at " ;"), but prefixes
 *    are binary safe: [ttl "a]b"] is a valid header.
 *  - A section without keys never reaches the handler, yet [durable "x"]
 *    alone must fail for its missing owner/reason/rebuild.
 * The reader also strips leading whitespace: Debian builds inih with
 * INI_ALLOW_MULTILINE, which would turn an indented key into a continuation
 * of the key above it.
 *
 * The first error wins: the reader stops feeding inih once there is one, and
 * the message is "PATH:LINE: what is wrong, what is expected".
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>
#include <openssl/crypto.h>

#include "config.h"
#include "tls.h"
#include "util.h"

#define TTL_MAX     2147483647LL    /* seconds: 68 years, far below redis' expire overflow */
#define DURATION_MAX 2147483647LL   /* seconds or milliseconds of the [proxy] timeouts */
#define MAX_BUFFER_MIN (16 * 1024)

enum section_kind { SECT_PROXY, SECT_DEFAULT, SECT_TTL, SECT_DURABLE, SECT_USER };

#define IN_PROXY    (1u << SECT_PROXY)
#define IN_DEFAULT  (1u << SECT_DEFAULT)
#define IN_TTL      (1u << SECT_TTL)
#define IN_DURABLE  (1u << SECT_DURABLE)
#define IN_USER     (1u << SECT_USER)

struct conf_key;

/* A value parser: stores the value of key k into *field (a member of struct
 * config or struct rule). On a bad value returns -1 with "what is wrong,
 * what is expected" in err. */
typedef int (*key_parser)(const struct conf_key *k, enum section_kind in, const char *value,
                          void *field, char *err, size_t errlen);

struct conf_key {
    const char *name;
    unsigned sections;      /* IN_* bits: where the key is valid */
    key_parser parse;
    size_t offset;          /* into struct config ([proxy]), struct rule (rule sections)
                               or struct auth_user ([user]) */
    long long min, max;     /* numbers and sizes */
    const char *unit;       /* what the number counts, for messages; text keys: what to write */
};

static int parse_addr(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_admin(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_optional(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_int(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_uint(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_ll(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_size(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_choice(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_action(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_refresh(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_unknown(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_onoff(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_text(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_listen(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_backend(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_audit_from(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_addr_list(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_port_range(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_secret(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_digest(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);
static int parse_duration(const struct conf_key *, enum section_kind, const char *, void *, char *, size_t);

#define CFG(f)  offsetof(struct config, f)
#define RULE(f) offsetof(struct rule, f)
#define USER(f) offsetof(struct auth_user, f)
#define MAX_PENDING_MAX (1 << 24)

/* Every key of every section. docs/config.md describes the same rows. */
static const struct conf_key conf_keys[] = {
    { "listen",              IN_PROXY, parse_listen,   CFG(listen),              0, 0, NULL },
    { "backend",             IN_PROXY, parse_backend,  CFG(backend),             0, 0, NULL },
    { "backend_username",    IN_PROXY, parse_optional, CFG(backend_username),    0, 0, NULL },
    { "backend_password",    IN_PROXY, parse_optional, CFG(backend_password),    0, 0, NULL },
    { "sentinel",            IN_PROXY, parse_addr_list, CFG(sentinel),           0, 0, NULL },
    { "sentinel_master",     IN_PROXY, parse_optional, CFG(sentinel_master),     0, 0, NULL },
    { "sentinel_username",   IN_PROXY, parse_optional, CFG(sentinel_username),   0, 0, NULL },
    { "sentinel_password",   IN_PROXY, parse_optional, CFG(sentinel_password),   0, 0, NULL },
    { "sentinel_tls",        IN_PROXY, parse_onoff,    CFG(sentinel_tls),        0, 0, NULL },
    { "client_password",     IN_PROXY, parse_secret,   CFG(client_password),     0, 0, NULL },
    { "protected_mode",      IN_PROXY, parse_choice,   CFG(protected_mode),      0, 0, "no|yes" },
    { "auth_timeout",        IN_PROXY, parse_uint,     CFG(auth_timeout),        0, DURATION_MAX, "seconds (0 = off)" },
    { "max_clients",         IN_PROXY, parse_int,      CFG(max_clients),         1, 1000000, "clients" },
    { "max_pending",         IN_PROXY, parse_int,      CFG(max_pending),         1, MAX_PENDING_MAX, "requests" },
    { "client_idle_timeout", IN_PROXY, parse_uint,     CFG(client_idle_timeout), 0, DURATION_MAX, "seconds (0 = off)" },
    { "max_buffer",          IN_PROXY, parse_size,     CFG(max_buffer),          MAX_BUFFER_MIN, 0, NULL },
    { "connect_timeout",     IN_PROXY, parse_uint,     CFG(connect_timeout),     1, DURATION_MAX, "milliseconds" },
    { "events",              IN_PROXY, parse_optional, CFG(events),              0, 0, NULL },
    { "admin",               IN_PROXY, parse_admin,    CFG(admin),               0, 0, NULL },
    { "admin_token",         IN_PROXY, parse_secret,   CFG(admin_token),         0, 0, NULL },
    { "log_keys",            IN_PROXY, parse_choice,   CFG(log_keys),            0, 0, "full|hash|prefix" },
    { "log_format",          IN_PROXY, parse_choice,   CFG(log_format),          0, 0, "text|json" },
    { "event_window",        IN_PROXY, parse_uint,     CFG(event_window),        1, DURATION_MAX, "seconds" },
    { "multiplex",           IN_PROXY, parse_onoff,    CFG(multiplex),           0, 0, NULL },
    { "watch",               IN_PROXY, parse_onoff,    CFG(watch),               0, 0, NULL },
    { "watch_configure",     IN_PROXY, parse_onoff,    CFG(watch_configure),     0, 0, NULL },
    { "audit_interval",      IN_PROXY, parse_duration, CFG(audit_interval),      0, DURATION_MAX, "seconds (0 or empty = off)" },
    { "audit_rate",          IN_PROXY, parse_uint,     CFG(audit_rate),          1, 10000000, "keys per second" },
    { "audit_memory",        IN_PROXY, parse_onoff,    CFG(audit_memory),        0, 0, NULL },
    { "audit_from",          IN_PROXY, parse_audit_from, CFG(audit_from),        0, 0, "primary|replica" },

    { "backend_tls",              IN_PROXY, parse_onoff,    CFG(backend_tls),              0, 0, NULL },
    { "backend_tls_ca_cert_file", IN_PROXY, parse_optional, CFG(backend_tls_ca_cert_file), 0, 0, NULL },
    { "backend_tls_ca_cert_dir",  IN_PROXY, parse_optional, CFG(backend_tls_ca_cert_dir),  0, 0, NULL },
    { "backend_tls_cert_file",    IN_PROXY, parse_optional, CFG(backend_tls_cert_file),    0, 0, NULL },
    { "backend_tls_key_file",     IN_PROXY, parse_optional, CFG(backend_tls_key_file),     0, 0, NULL },
    { "backend_tls_server_name",  IN_PROXY, parse_optional, CFG(backend_tls_server_name),  0, 0, NULL },
    { "backend_tls_verify",       IN_PROXY, parse_onoff,    CFG(backend_tls_verify),       0, 0, NULL },
    { "tls_listen",               IN_PROXY, parse_listen,   CFG(tls_listen),               0, 0, NULL },
    { "tls_cert_file",            IN_PROXY, parse_optional, CFG(tls_cert_file),            0, 0, NULL },
    { "tls_key_file",             IN_PROXY, parse_optional, CFG(tls_key_file),             0, 0, NULL },
    { "tls_ca_cert_file",         IN_PROXY, parse_optional, CFG(tls_ca_cert_file),         0, 0, NULL },
    { "tls_ca_cert_dir",          IN_PROXY, parse_optional, CFG(tls_ca_cert_dir),          0, 0, NULL },
    { "tls_auth_clients",         IN_PROXY, parse_choice,   CFG(tls_auth_clients),         0, 0, "no|optional|yes" },
    { "tls_protocols",            IN_PROXY, parse_optional, CFG(tls_protocols),            0, 0, NULL },
    { "tls_ciphers",              IN_PROXY, parse_optional, CFG(tls_ciphers),              0, 0, NULL },
    { "tls_ciphersuites",         IN_PROXY, parse_optional, CFG(tls_ciphersuites),         0, 0, NULL },

    { "cluster",                  IN_PROXY, parse_choice,     CFG(cluster),            0, 0, "off|on|route" },
    { "cluster_ports",            IN_PROXY, parse_port_range, CFG(cluster_port_min),   0, 0, NULL },
    { "cluster_announce",         IN_PROXY, parse_optional,   CFG(cluster_announce),   0, 0, NULL },

    { "action",  IN_DEFAULT | IN_TTL, parse_action,  RULE(action),  0, 0, NULL },
    { "ttl",     IN_DEFAULT | IN_TTL, parse_ll,      RULE(ttl),     1, TTL_MAX, "seconds" },
    { "max_ttl", IN_DEFAULT | IN_TTL, parse_ll,      RULE(max_ttl), 0, TTL_MAX, "seconds (0 = no cap)" },
    { "refresh", IN_DEFAULT | IN_TTL, parse_refresh, RULE(refresh), 0, 0, NULL },
    { "unknown", IN_DEFAULT | IN_TTL, parse_unknown, RULE(unknown), 0, 0, NULL },

    { "owner",   IN_DURABLE, parse_text, RULE(owner),   0, 0, "who owns these keys" },
    { "reason",  IN_DURABLE, parse_text, RULE(reason),  0, 0, "why they may live without a TTL" },
    { "rebuild", IN_DURABLE, parse_text, RULE(rebuild), 0, 0, "how to rebuild them if they are lost" },

    { "password_sha256",  IN_USER, parse_digest,   USER(password),         0, 0, NULL },
    { "backend_user",     IN_USER, parse_optional, USER(backend_username), 0, 0, NULL },
    { "backend_password", IN_USER, parse_optional, USER(backend_password), 0, 0, NULL },
};

#define NKEYS (sizeof conf_keys / sizeof conf_keys[0])

/* One section header of the file, with what its keys said. */
struct section {
    enum section_kind kind;
    int line;                       /* line of the header */
    struct rule rule;               /* rule sections: prefix and label owned here until
                                     * handed to the ruleset; [user]: only the label */
    struct auth_user user;          /* [user]: owned here until handed to cfg->users */
    int key_line[NKEYS];            /* line each conf_keys[] row was set on; 0 = not set */
};

struct parse {
    const char *path;
    FILE *f;
    char *buf;                      /* getline() buffer */
    size_t cap;
    int lineno;                     /* line last given to inih = line of the on_key() call */
    int err_line;                   /* line of the first error; 0 = none yet */
    char err[1024];                 /* the first error, without "PATH:LINE: " */
    int read_errno;                 /* set when reading the file failed */
    struct config *cfg;
    struct section *sec;            /* in file order; the last one is current */
    size_t nsec;
};

static void fail_at(struct parse *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_at(struct parse *p, int line, const char *fmt, ...)
{
    if (p->err_line != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    p->err_line = line;
}

static const char *section_name(const struct section *s)
{
    return s->kind == SECT_PROXY ? "proxy" : s->rule.label;     /* [user] has one too */
}

/* ---- values ------------------------------------------------------------ */

/* Digits only: no sign, no spaces, no junk; fails on overflow. */
static int parse_digits(const char *s, size_t len, unsigned long long *out)
{
    unsigned long long v = 0;
    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int config_parse_bytes(const char *text, size_t *out)
{
    static const struct { const char *suffix; unsigned long long mul; } units[] = {
        { "kb", 1024ULL }, { "mb", 1024ULL * 1024 }, { "gb", 1024ULL * 1024 * 1024 },
    };
    size_t len = strlen(text);
    unsigned long long mul = 1, v;

    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (len > 2 && strcasecmp(text + len - 2, units[i].suffix) == 0) {
            mul = units[i].mul;
            len -= 2;
            break;
        }
    }
    if (parse_digits(text, len, &v) < 0 || v > SIZE_MAX / mul)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
}

int config_parse_duration(const char *text, unsigned long long *secs)
{
    static const struct { char suffix; unsigned long long mul; } units[] = {
        { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 },
    };
    size_t len = strlen(text);
    unsigned long long mul = 1, v;

    if (len == 0) {
        *secs = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (len > 1 && (text[len - 1] | 0x20) == units[i].suffix) {
            mul = units[i].mul;
            len--;
            break;
        }
    }
    if (parse_digits(text, len, &v) < 0 || v > ULLONG_MAX / mul)
        return -1;
    *secs = v * mul;
    return 0;
}

static int bad_number(const struct conf_key *k, const char *value, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s = '%s': expected a whole number of %s from %lld to %lld",
             k->name, value, k->unit, k->min, k->max);
    return -1;
}

static int parse_number(const struct conf_key *k, const char *value, long long *out,
                        char *err, size_t errlen)
{
    unsigned long long v;
    if (parse_digits(value, strlen(value), &v) < 0 || v < (unsigned long long)k->min ||
        v > (unsigned long long)k->max)
        return bad_number(k, value, err, errlen);
    *out = (long long)v;
    return 0;
}

static int parse_int(const struct conf_key *k, enum section_kind in, const char *value,
                     void *field, char *err, size_t errlen)
{
    long long v;
    if (parse_number(k, value, &v, err, errlen) < 0)
        return -1;
    *(int *)field = (int)v;
    return 0;
}

static int parse_uint(const struct conf_key *k, enum section_kind in, const char *value,
                      void *field, char *err, size_t errlen)
{
    long long v;
    if (parse_number(k, value, &v, err, errlen) < 0)
        return -1;
    *(unsigned *)field = (unsigned)v;
    return 0;
}

/* Seconds, or a number with s, m, h or d; empty is 0 (unsigned field). */
static int parse_duration(const struct conf_key *k, enum section_kind in, const char *value,
                          void *field, char *err, size_t errlen)
{
    unsigned long long v;
    if (config_parse_duration(value, &v) < 0 || v > (unsigned long long)k->max) {
        snprintf(err, errlen, "%s = '%s': expected a duration: seconds, or a number with s, m, "
                 "h or d (like 3600, 90m, 1h, 1d), at most %lld seconds; 0 or empty = off",
                 k->name, value, k->max);
        return -1;
    }
    *(unsigned *)field = (unsigned)v;
    return 0;
}

static int parse_ll(const struct conf_key *k, enum section_kind in, const char *value,
                    void *field, char *err, size_t errlen)
{
    return parse_number(k, value, field, err, errlen);
}

static int parse_size(const struct conf_key *k, enum section_kind in, const char *value,
                      void *field, char *err, size_t errlen)
{
    size_t v;
    if (config_parse_bytes(value, &v) < 0 || v < (size_t)k->min) {
        snprintf(err, errlen, "%s = '%s': expected a size of at least 16kb: bytes, "
                 "or a number with kb, mb or gb (like 65536, 64kb, 4mb)", k->name, value);
        return -1;
    }
    *(size_t *)field = v;
    return 0;
}

/* Replaces a default value: the string it frees is one config_defaults()
 * allocated (a key set twice is an error before it gets here). */
static void set_string(void *field, const char *value)
{
    char **dst = field;
    free(*dst);
    *dst = value != NULL ? xstrdup(value) : NULL;
}

static int parse_addr(const struct conf_key *k, enum section_kind in, const char *value,
                      void *field, char *err, size_t errlen)
{
    struct addr a;
    char why[320];
    if (addr_parse(value, &a, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s = %s", k->name, why);
        return -1;
    }
    set_string(field, value);
    return 0;
}

/* The admin endpoint is HTTP on TCP; empty turns it off. */
static int parse_admin(const struct conf_key *k, enum section_kind in, const char *value,
                       void *field, char *err, size_t errlen)
{
    if (*value == '\0') {
        set_string(field, NULL);
        return 0;
    }
    struct addr a;
    char why[320];
    if (addr_parse(value, &a, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s = %s (or leave it empty for no admin endpoint)", k->name, why);
        return -1;
    }
    if (a.is_unix) {
        snprintf(err, errlen, "%s = '%s': expected host:port (the admin endpoint is TCP only) "
                 "or empty for none", k->name, value);
        return -1;
    }
    set_string(field, value);
    return 0;
}

/* Addresses separated by spaces, each checked; the field keeps them as
 * written. */
static int parse_addr_list(const struct conf_key *k, enum section_kind in, const char *value,
                           void *field, char *err, size_t errlen)
{
    if (value[strspn(value, " \t")] == '\0') {
        snprintf(err, errlen, "%s is empty: expected HOST:PORT [HOST:PORT ...]", k->name);
        return -1;
    }
    for (const char *p = value; *p != '\0';) {
        char one[512];
        size_t len = strcspn(p, " \t");
        snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), p);
        if (parse_addr(k, in, one, field, err, errlen) < 0)
            return -1;
        p += len;
        p += strspn(p, " \t");
    }
    set_string(field, value);
    return 0;
}

/* One address, or (for a cluster) seed addresses separated by spaces:
 * `backend` keeps the first, `backend_seeds` all of them. */
static int parse_backend(const struct conf_key *k, enum section_kind in, const char *value,
                         void *field, char *err, size_t errlen)
{
    /* The one key that fills two fields: its row's offset is `backend`. */
    struct config *cfg = (struct config *)((char *)field - offsetof(struct config, backend));
    char first[512];
    size_t n = strcspn(value, " \t");
    if (n >= sizeof first) {
        snprintf(err, errlen, "%s = '%.40s...': address too long", k->name, value);
        return -1;
    }
    memcpy(first, value, n);
    first[n] = '\0';
    if (parse_addr_list(k, in, value, field, err, errlen) < 0)
        return -1;
    set_string(field, first);
    set_string(&cfg->backend_seeds, value[n] != '\0' ? value : NULL);
    return 0;
}

/* "7401-7499": a range of TCP ports (cluster_port_min, then _max). */
static int parse_port_range(const struct conf_key *k, enum section_kind in, const char *value,
                            void *field, char *err, size_t errlen)
{
    int *range = field;
    char *end;
    long lo = strtol(value, &end, 10), hi;
    if (end == value || *end != '-' || (hi = strtol(end + 1, &end, 10), *end != '\0') ||
        lo < 1 || hi > 65535 || lo > hi) {
        snprintf(err, errlen, "%s = '%s': expected a range of ports FIRST-LAST, e.g. 7401-7499 "
                 "(1 to 65535, FIRST at most LAST)", k->name, value);
        return -1;
    }
    range[0] = (int)lo;
    range[1] = (int)hi;
    return 0;
}

/* A listener address; empty: none (listen and tls_listen, one at least). */
static int parse_listen(const struct conf_key *k, enum section_kind in, const char *value,
                        void *field, char *err, size_t errlen)
{
    if (*value == '\0') {
        set_string(field, NULL);
        return 0;
    }
    return parse_addr(k, in, value, field, err, errlen);
}

/* Free text where empty means unset (NULL). */
static int parse_optional(const struct conf_key *k, enum section_kind in, const char *value,
                          void *field, char *err, size_t errlen)
{
    set_string(field, *value != '\0' ? value : NULL);
    return 0;
}

/* A password ttlguard checks itself: only its SHA-256 is kept (auth.h).
 * Empty means unset. The value never appears in a message. */
static int parse_secret(const struct conf_key *k, enum section_kind in, const char *value,
                        void *field, char *err, size_t errlen)
{
    struct secret *sec = field;
    sec->set = *value != '\0';
    if (sec->set)
        auth_digest(value, strlen(value), sec->sha);
    return 0;
}

/* password_sha256: the digest itself, as 64 hex digits. */
static int parse_digest(const struct conf_key *k, enum section_kind in, const char *value,
                        void *field, char *err, size_t errlen)
{
    struct secret *sec = field;
    if (auth_parse_hex_digest(value, sec->sha) < 0) {
        snprintf(err, errlen, "%s: expected 64 hex digits (got %zu characters), the SHA-256 "
                 "of the password: printf %%s 'PASSWORD' | sha256sum", k->name, strlen(value));
        return -1;
    }
    sec->set = 1;
    return 0;
}

/* Free text that must say something (durable rules). */
static int parse_text(const struct conf_key *k, enum section_kind in, const char *value,
                      void *field, char *err, size_t errlen)
{
    if (*value == '\0') {
        snprintf(err, errlen, "%s is empty: say %s", k->name, k->unit);
        return -1;
    }
    set_string(field, value);
    return 0;
}

static int parse_onoff(const struct conf_key *k, enum section_kind in, const char *value,
                       void *field, char *err, size_t errlen)
{
    int *dst = field;
    if (strcmp(value, "on") == 0)
        *dst = 1;
    else if (strcmp(value, "off") == 0)
        *dst = 0;
    else {
        snprintf(err, errlen, "%s = '%s': expected on or off", k->name, value);
        return -1;
    }
    return 0;
}

/* One of the words in k->unit ("a|b|c"): its index, as an int (or an enum
 * whose values are those indexes). */
static int parse_choice(const struct conf_key *k, enum section_kind in, const char *value,
                        void *field, char *err, size_t errlen)
{
    const char *w = k->unit;
    char expected[128] = "";
    size_t used = 0;
    for (int i = 0; *w != '\0'; i++) {
        size_t n = strcspn(w, "|");
        if (strlen(value) == n && strncmp(value, w, n) == 0) {
            *(int *)field = i;
            return 0;
        }
        used += (size_t)snprintf(expected + used, sizeof expected - used, "%s%.*s",
                                 i == 0 ? "" : w[n] == '\0' ? " or " : ", ", (int)n, w);
        w += n + (w[n] == '|');
    }
    snprintf(err, errlen, "%s = '%s': expected %s", k->name, value, expected);
    return -1;
}

/* primary, replica, or the address of the server to read (a replica of
 * the backend): the one key that fills two fields, its row's offset is
 * `audit_from`. */
static int parse_audit_from(const struct conf_key *k, enum section_kind in, const char *value,
                            void *field, char *err, size_t errlen)
{
    struct config *cfg = (struct config *)((char *)field - offsetof(struct config, audit_from));
    struct addr a;
    char why[320];
    if (parse_choice(k, in, value, field, why, sizeof why) == 0) {
        set_string(&cfg->audit_from_addr, NULL);
        return 0;
    }
    if (addr_parse(value, &a, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s = '%s': expected primary, replica or the HOST:PORT of a "
                 "replica of the backend", k->name, value);
        return -1;
    }
    *(int *)field = AUDIT_FROM_ADDR;
    set_string(&cfg->audit_from_addr, value);
    return 0;
}

static int parse_action(const struct conf_key *k, enum section_kind in, const char *value,
                        void *field, char *err, size_t errlen)
{
    static const enum rule_action actions[] = {
        ACTION_ALLOW, ACTION_LOG, ACTION_REWRITE, ACTION_REJECT,
    };
    for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++) {
        if (strcmp(value, rule_action_name(actions[i])) != 0)
            continue;
        /* A ttl rule that allows everything is a durable rule without the
         * owner, reason and rebuild that make durable data accountable. */
        if (actions[i] == ACTION_ALLOW && in != SECT_DEFAULT)
            break;
        *(enum rule_action *)field = actions[i];
        return 0;
    }
    if (in == SECT_DEFAULT)
        snprintf(err, errlen, "%s = '%s': expected allow, log, rewrite or reject", k->name, value);
    else
        snprintf(err, errlen, "%s = '%s': expected log, rewrite or reject (keys that may live "
                 "without a TTL belong in a [durable \"PREFIX\"] section)", k->name, value);
    return -1;
}

static int parse_refresh(const struct conf_key *k, enum section_kind in, const char *value,
                         void *field, char *err, size_t errlen)
{
    enum rule_refresh *dst = field;
    if (strcmp(value, "allow") == 0)
        *dst = REFRESH_ALLOW;
    else if (strcmp(value, "bound") == 0)
        *dst = REFRESH_BOUND;
    else {
        snprintf(err, errlen, "%s = '%s': expected allow or bound", k->name, value);
        return -1;
    }
    return 0;
}

static int parse_unknown(const struct conf_key *k, enum section_kind in, const char *value,
                         void *field, char *err, size_t errlen)
{
    enum rule_unknown *dst = field;
    if (strcmp(value, "protect") == 0)
        *dst = UNKNOWN_PROTECT;
    else if (strcmp(value, "log") == 0)
        *dst = UNKNOWN_LOG;
    else if (strcmp(value, "allow") == 0)
        *dst = UNKNOWN_ALLOW;
    else if (strcmp(value, "reject") == 0)
        *dst = UNKNOWN_REJECT;
    else {
        snprintf(err, errlen, "%s = '%s': expected protect, log, allow or reject", k->name, value);
        return -1;
    }
    return 0;
}

/* ---- section headers ----------------------------------------------------- */

static void skip_blanks(const char **s)
{
    while (**s == ' ' || **s == '\t')
        (*s)++;
}

/* Where the quoted string starting at q (a '"') ends: its closing quote, or
 * NULL when there is none. Escapes are skipped here, checked by
 * rules_unquote(). */
static const char *quote_end(const char *q)
{
    for (const char *s = q + 1; *s != '\0'; s++) {
        if (*s == '\\' && s[1] != '\0')
            s++;
        else if (*s == '"')
            return s;
    }
    return NULL;
}

/* "ttl \"session:\"", "user \"app\"": a section as errors and events name it. */
static char *section_label(const char *kind, const char *name, size_t len)
{
    char *q = rules_quote(name, len);
    size_t n = strlen(kind) + strlen(q) + 2;
    char *label = xmalloc(n);
    snprintf(label, n, "%s %s", kind, q);
    free(q);
    return label;
}

static const char *const section_names[] = {
    [SECT_PROXY] = "proxy", [SECT_DEFAULT] = "default",
    [SECT_TTL] = "ttl", [SECT_DURABLE] = "durable", [SECT_USER] = "user",
};

/* The quoted prefix or name of a [ttl], [durable] or [user] header, at *sp:
 * unquoted into sec->rule.prefix, *sp moved past it. 0, or -1 with the error
 * recorded and nothing left to free. */
static int header_quoted(struct parse *p, const char *line, const char **sp,
                         struct section *sec)
{
    const char *s = *sp;
    const char *name = section_names[sec->kind];
    if (*s != '"') {
        if (sec->kind == SECT_USER)
            fail_at(p, p->lineno, "[user] needs a quoted name, like [user \"app\"]");
        else
            fail_at(p, p->lineno, "[%s] needs a quoted prefix, like [%s \"session:\"]; "
                    "for all keys use [default]", name, name);
        return -1;
    }
    const char *end = quote_end(s);
    if (end == NULL) {
        fail_at(p, p->lineno, "missing closing '\"' after the prefix in %s", line);
        return -1;
    }
    char *quoted = xmemdup(s, (size_t)(end + 1 - s));
    char why[256];
    int rc = rules_unquote(quoted, &sec->rule.prefix, &sec->rule.prefix_len, why, sizeof why);
    free(quoted);
    if (rc < 0) {
        fail_at(p, p->lineno, "%s in %s", why, line);
        return -1;
    }
    const char *bad = NULL;
    if (sec->kind == SECT_USER && (sec->rule.prefix_len == 0 ||
                                   strlen(sec->rule.prefix) != sec->rule.prefix_len ||
                                   strpbrk(sec->rule.prefix, " \t\r\n") != NULL))
        bad = "bad user name";
    else if (sec->rule.prefix_len == 0)
        bad = "empty prefix";
    if (bad != NULL) {
        free(sec->rule.prefix);
        sec->rule.prefix = NULL;
        if (sec->kind == SECT_USER)
            fail_at(p, p->lineno, "%s in %s: a name is not empty and has no "
                    "spaces, line breaks or NUL bytes", bad, line);
        else
            fail_at(p, p->lineno, "%s in [%s \"\"]: use [default] for a rule on "
                    "all keys", bad, name);
        return -1;
    }
    *sp = end + 1;
    return 0;
}

/* What is left of a header line after its name and prefix, at s: a ']' and
 * at most a comment. NULL, or what is wrong. */
static const char *header_rest(const char *s)
{
    skip_blanks(&s);
    if (*s != ']')
        return "expected ']' to close the section header";
    s++;
    skip_blanks(&s);
    if (*s != '\0' && *s != ';' && *s != '#')
        return "unexpected text after ']' (only a ; or # comment may follow)";
    return NULL;
}

/* A new section's rule defaults and label; a [user] takes its name over
 * from rule.prefix. */
static void section_init(struct parse *p, struct section *sec)
{
    const char *name = section_names[sec->kind];
    switch (sec->kind) {
    case SECT_PROXY:
        break;
    case SECT_DEFAULT:
        sec->rule.kind = RULE_DEFAULT;
        sec->rule.action = ACTION_ALLOW;
        sec->rule.label = xstrdup("default");
        break;
    case SECT_USER:
        sec->user.name = sec->rule.prefix;  /* the section owns it until it is handed over */
        sec->rule.prefix = NULL;
        sec->user.line = p->lineno;
        sec->rule.label = section_label(name, sec->user.name, strlen(sec->user.name));
        break;
    case SECT_TTL:
    case SECT_DURABLE:
        sec->rule.kind = sec->kind == SECT_TTL ? RULE_TTL : RULE_DURABLE;
        sec->rule.action = sec->kind == SECT_TTL ? ACTION_REWRITE : ACTION_ALLOW;
        sec->rule.label = section_label(name, sec->rule.prefix, sec->rule.prefix_len);
        break;
    }
    sec->rule.refresh = REFRESH_ALLOW;
    sec->rule.line = p->lineno;
}

/* An earlier section sec repeats (one [proxy], one [default], one section
 * per prefix or user name), or NULL. Configs hold hundreds of rules at most,
 * so a linear look-back is fine. */
static const struct section *section_repeated(const struct parse *p, const struct section *sec)
{
    for (size_t i = 0; i < p->nsec; i++) {
        const struct section *o = &p->sec[i];
        int same;
        if (sec->kind == SECT_PROXY || sec->kind == SECT_DEFAULT)
            same = o->kind == sec->kind;
        else if (sec->kind == SECT_USER)
            same = o->kind == SECT_USER && strcmp(o->user.name, sec->user.name) == 0;
        else
            same = (o->kind == SECT_TTL || o->kind == SECT_DURABLE) &&
                   o->rule.prefix_len == sec->rule.prefix_len &&
                   memcmp(o->rule.prefix, sec->rule.prefix, sec->rule.prefix_len) == 0;
        if (same)
            return o;
    }
    return NULL;
}

/* A header line: [proxy], [default], [ttl "PREFIX"], [durable "PREFIX"] or
 * [user "NAME"].
 * line starts with '[' and has no line break. Opens a new section or records
 * an error. */
static void header_parse(struct parse *p, const char *line)
{
    const char *s = line + 1;
    skip_blanks(&s);
    const char *word = s;
    while (isalnum((unsigned char)*s) || *s == '_' || *s == '-')
        s++;
    size_t wlen = (size_t)(s - word);

    int kind = -1;
    for (int i = 0; i < (int)(sizeof section_names / sizeof section_names[0]); i++) {
        if (strlen(section_names[i]) == wlen && memcmp(section_names[i], word, wlen) == 0)
            kind = i;
    }
    if (kind < 0) {
        fail_at(p, p->lineno, "unknown section [%.*s] (expected [proxy], [default], "
                "[ttl \"PREFIX\"], [durable \"PREFIX\"] or [user \"NAME\"])", (int)wlen, word);
        return;
    }

    struct section sec = { .kind = (enum section_kind)kind, .line = p->lineno };
    skip_blanks(&s);
    if (kind == SECT_TTL || kind == SECT_DURABLE || kind == SECT_USER) {
        if (header_quoted(p, line, &s, &sec) < 0)
            return;
    } else if (*s == '"') {
        fail_at(p, p->lineno, "[%s] takes no prefix", section_names[kind]);
        return;
    }
    const char *why = header_rest(s);
    if (why != NULL) {
        free(sec.rule.prefix);
        fail_at(p, p->lineno, "%s: %s", why, line);
        return;
    }

    section_init(p, &sec);
    const struct section *o = section_repeated(p, &sec);
    if (o != NULL) {
        if (sec.kind == SECT_PROXY || sec.kind == SECT_DEFAULT || sec.kind == SECT_USER)
            fail_at(p, p->lineno, "second [%s] section (the first is at line %d): "
                    "put all its keys in one", section_name(&sec), o->line);
        else
            fail_at(p, p->lineno, "duplicate prefix: [%s] repeats the prefix of [%s] at "
                    "line %d", sec.rule.label, o->rule.label, o->line);
        free(sec.rule.prefix);
        free(sec.rule.label);
        free(sec.user.name);
        return;
    }
    p->sec = xrealloc(p->sec, (p->nsec + 1) * sizeof *p->sec);
    p->sec[p->nsec++] = sec;
}

/* ---- inih callbacks ------------------------------------------------------ */

/* inih's fgets-style reader. See the top of the file for why it does more
 * than read. */
static char *line_reader(char *str, int num, void *stream)
{
    struct parse *p = stream;
    if (p->err_line != 0)
        return NULL;

    errno = 0;
    ssize_t n = getline(&p->buf, &p->cap, p->f);
    if (n < 0) {
        if (ferror(p->f))
            p->read_errno = errno ? errno : EIO;
        return NULL;
    }
    p->lineno++;
    char *line = p->buf;
    size_t len = (size_t)n;
    if (p->lineno == 1 && len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
        line += 3;                      /* UTF-8 byte order mark */
        len -= 3;
    }
    if (memchr(line, '\0', len) != NULL) {
        fail_at(p, p->lineno, "NUL byte in line (write binary prefixes with \\x00)");
        return NULL;
    }
    while (len > 0 && isspace((unsigned char)*line)) {
        line++;
        len--;
    }

    if (*line == ';' || *line == '#') {
        /* A whole-line comment may be longer than inih's line buffer. */
        snprintf(str, (size_t)num, "\n");
        return str;
    }
    if (*line == '[') {
        while (len > 0 && isspace((unsigned char)line[len - 1]))
            line[--len] = '\0';
        header_parse(p, line);
        if (p->err_line != 0)
            return NULL;
        /* Resets inih's "previous key"; the name itself is not used. */
        snprintf(str, (size_t)num, "[s]\n");
        return str;
    }
    /* Room for the text, its '\n' and the NUL, as fgets() would need. */
    size_t text = len > 0 && line[len - 1] == '\n' ? len - 1 : len;
    if (text + 2 > (size_t)num) {
        fail_at(p, p->lineno, "line too long: %zu bytes, at most %d fit in inih's line "
                "buffer (not counting indentation)", text, num - 2);
        return NULL;
    }
    memcpy(str, line, len + 1);
    return str;
}

static const struct conf_key *key_find(const char *name, enum section_kind in)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if ((conf_keys[i].sections & (1u << in)) && strcmp(conf_keys[i].name, name) == 0)
            return &conf_keys[i];
    }
    return NULL;
}

/* Edit distance of two short words (keys), for "did you mean". */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 64 || lb >= 64)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* An unknown key: the section's keys when they are few, else the nearest. */
static void unknown_key(struct parse *p, const struct section *s, const char *name)
{
    char valid[320] = "";
    size_t used = 0, best = (size_t)-1;
    const char *nearest = NULL;
    int fits = 1;
    for (size_t i = 0; i < NKEYS; i++) {
        if (!(conf_keys[i].sections & (1u << s->kind)))
            continue;
        size_t d = distance(name, conf_keys[i].name);
        if (d < best) {
            best = d;
            nearest = conf_keys[i].name;
        }
        int n = snprintf(valid + used, sizeof valid - used, "%s%s", used ? ", " : "",
                         conf_keys[i].name);
        if (n < 0 || (size_t)n >= sizeof valid - used)
            fits = 0;
        else
            used += (size_t)n;
    }
    if (fits)
        fail_at(p, p->lineno, "unknown key '%s' in [%s] (expected one of: %s)",
                name, section_name(s), valid);
    else if (best <= 2)
        fail_at(p, p->lineno, "unknown key '%s' in [%s] (did you mean '%s'? docs/config.md "
                "lists every key)", name, section_name(s), nearest);
    else
        fail_at(p, p->lineno, "unknown key '%s' in [%s] (docs/config.md lists every key)",
                name, section_name(s));
}

/* The inih handler: one call per "key = value" line, section name unused
 * (the reader tracks sections). Returns 0 on an error so that inih notes
 * the line too. */
static int on_key(void *user, const char *section, const char *name, const char *value)
{
    struct parse *p = user;
    if (p->nsec == 0) {
        fail_at(p, p->lineno, "'%s' is outside any section: put it under [proxy], [default], "
                "[ttl \"PREFIX\"], [durable \"PREFIX\"] or [user \"NAME\"]", name);
        return 0;
    }
    struct section *s = &p->sec[p->nsec - 1];
    const struct conf_key *k = key_find(name, s->kind);
    if (k == NULL) {
        unknown_key(p, s, name);
        return 0;
    }
    size_t idx = (size_t)(k - conf_keys);
    if (s->key_line[idx] != 0) {
        fail_at(p, p->lineno, "%s set twice in [%s] (first at line %d)",
                name, section_name(s), s->key_line[idx]);
        return 0;
    }
    s->key_line[idx] = p->lineno;

    char *base = s->kind == SECT_PROXY ? (char *)p->cfg :
                 s->kind == SECT_USER ? (char *)&s->user : (char *)&s->rule;
    char why[400];
    if (k->parse(k, s->kind, value, base + k->offset, why, sizeof why) < 0) {
        fail_at(p, p->lineno, "%s", why);
        return 0;
    }
    return 1;
}

/* ---- whole sections ------------------------------------------------------ */

static int key_set(const struct section *s, const char *name)
{
    return s->key_line[key_find(name, s->kind) - conf_keys] != 0;
}

/* The line a [proxy] key was set on, else the section header's. */
static int line_of(const struct section *s, const char *name)
{
    int line = name != NULL ? s->key_line[key_find(name, s->kind) - conf_keys] : 0;
    return line != 0 ? line : s->line;
}

/* Build one side's TLS context: certificates and keys are read now, so a
 * bad file fails the load (and a reload keeps the running config). */
static struct tls_context *load_tls_side(struct parse *p, const struct section *s,
                                         enum tls_side side, const struct tls_settings *st)
{
    const char *bad_key;
    char why[700];
    struct tls_context *ctx = tls_context_new(side, st, &bad_key, why, sizeof why);
    if (ctx == NULL)
        fail_at(p, line_of(s, bad_key), "%s %s", bad_key != NULL ? bad_key : "TLS", why);
    return ctx;
}

/* A context towards the backend_tls_* settings: the backend's (backend_tls),
 * and the Sentinels' (sentinel_tls) with the same files. */
static struct tls_context *load_to_backend(struct parse *p, const struct section *s)
{
    const struct config *c = p->cfg;
    struct tls_settings st = {
        .cert_file = c->backend_tls_cert_file, .key_file = c->backend_tls_key_file,
        .ca_cert_file = c->backend_tls_ca_cert_file, .ca_cert_dir = c->backend_tls_ca_cert_dir,
        .verify = c->backend_tls_verify, .protocols = c->tls_protocols,
        .ciphers = c->tls_ciphers, .ciphersuites = c->tls_ciphersuites,
    };
    return load_tls_side(p, s, TLS_TO_BACKEND, &st);
}

/* The TLS keys together: what each side needs, then its context. */
static void check_tls(struct parse *p, const struct section *s)
{
    struct config *c = p->cfg;
    if (c->listen == NULL && c->tls_listen == NULL) {
        fail_at(p, line_of(s, "listen"), "listen and tls_listen are both empty: ttlguard "
                "needs at least one address to listen on");
        return;
    }
    if (c->listen != NULL && c->tls_listen != NULL && strcmp(c->listen, c->tls_listen) == 0) {
        fail_at(p, line_of(s, "tls_listen"), "tls_listen = %s is the listen address too: "
                "give TLS clients a port of their own", c->tls_listen);
        return;
    }
    if ((c->backend_tls_cert_file == NULL) != (c->backend_tls_key_file == NULL)) {
        fail_at(p, line_of(s, c->backend_tls_cert_file ? "backend_tls_cert_file"
                                                       : "backend_tls_key_file"),
                "backend_tls_cert_file and backend_tls_key_file go together (a client "
                "certificate needs its key)");
        return;
    }
    if ((c->tls_cert_file == NULL) != (c->tls_key_file == NULL)) {
        fail_at(p, line_of(s, c->tls_cert_file ? "tls_cert_file" : "tls_key_file"),
                "tls_cert_file and tls_key_file go together");
        return;
    }
    if (c->tls_listen != NULL && c->tls_cert_file == NULL) {
        fail_at(p, line_of(s, "tls_listen"), "tls_listen needs tls_cert_file and tls_key_file "
                "(the certificate ttlguard shows its TLS clients)");
        return;
    }
    if (c->tls_listen != NULL && c->tls_auth_clients != 0 && c->tls_ca_cert_file == NULL &&
        c->tls_ca_cert_dir == NULL) {
        fail_at(p, line_of(s, "tls_auth_clients"), "tls_auth_clients asks for client "
                "certificates: set tls_ca_cert_file (or tls_ca_cert_dir), the CA they are "
                "verified against");
        return;
    }
    if (c->backend_tls && strncmp(c->backend, "unix:", 5) == 0) {
        fail_at(p, line_of(s, "backend_tls"), "backend_tls = on needs a host:port backend, "
                "not %s (Redis offers TLS on TCP only)", c->backend);
        return;
    }
    if (c->backend_tls) {
        c->backend_tls_ctx = load_to_backend(p, s);
        if (c->backend_tls_ctx == NULL)
            return;
    }
    if (c->tls_listen != NULL) {
        struct tls_settings st = {
            .cert_file = c->tls_cert_file, .key_file = c->tls_key_file,
            .ca_cert_file = c->tls_ca_cert_file, .ca_cert_dir = c->tls_ca_cert_dir,
            .auth_clients = c->tls_auth_clients, .protocols = c->tls_protocols,
            .ciphers = c->tls_ciphers, .ciphersuites = c->tls_ciphersuites,
        };
        c->client_tls_ctx = load_tls_side(p, s, TLS_FOR_CLIENTS, &st);
    }
}

/* The listener port of an address (0 for unix: or none). */
static int port_of(const char *text)
{
    struct addr a;
    char why[320];
    return text != NULL && addr_parse(text, &a, why, sizeof why) == 0 && !a.is_unix ? a.port : 0;
}

/* cluster = route: one address, no node listeners; what it does not
 * build yet is refused here rather than half done. */
static void check_route(struct parse *p, const struct section *s)
{
    const struct config *c = p->cfg;
    static const char *const node_keys[] = { "cluster_ports", "cluster_announce" };
    for (size_t i = 0; i < sizeof node_keys / sizeof node_keys[0]; i++) {
        if (key_set(s, node_keys[i])) {
            fail_at(p, line_of(s, node_keys[i]), "cluster = route has no node listeners: "
                    "%s is for cluster = on; remove it", node_keys[i]);
            return;
        }
    }
    if (!c->multiplex)
        fail_at(p, line_of(s, "multiplex"), "cluster = route sends every request over the "
                "shared connection of the node that owns its slot: multiplex = off is not "
                "supported with it (yet)");
    else if (c->watch)
        fail_at(p, line_of(s, "watch"), "cluster = route with watch = on is not supported "
                "yet (keyspace notifications are per node)");
    else if (c->client_password.set)
        fail_at(p, line_of(s, "client_password"), "cluster = route does not log clients in "
                "itself yet: client_password and [user] sections are not supported with it");
}

/* cluster = on and its keys. */
static void check_cluster(struct parse *p, const struct section *s)
{
    struct config *c = p->cfg;
    const char *owners[] = { "listen", "tls_listen", "admin" };
    const char *addrs[] = { c->listen, c->tls_listen, c->admin };
    if (!c->cluster) {
        if (c->backend_seeds != NULL)
            fail_at(p, line_of(s, "backend"), "backend lists several addresses: that is for "
                    "a cluster's seeds (cluster = on); one address otherwise");
        else if (c->audit_from == AUDIT_FROM_REPLICA)
            fail_at(p, line_of(s, "audit_from"), "audit_from = replica is for a cluster (its "
                    "replicas are in its topology): name the replica of the backend to read, "
                    "audit_from = HOST:PORT");
        return;
    }
    if (c->audit_from == AUDIT_FROM_ADDR) {
        fail_at(p, line_of(s, "audit_from"), "cluster = on takes audit_from = primary or "
                "replica (a replica of each shard), not one address (%s)", c->audit_from_addr);
        return;
    }
    if (strncmp(c->backend, "unix:", 5) == 0) {
        fail_at(p, line_of(s, "backend"), "cluster = on needs host:port seeds, not %s "
                "(cluster nodes talk TCP)", c->backend);
        return;
    }
    if (c->cluster == CLUSTER_ROUTE) {
        check_route(p, s);
        return;
    }
    if (c->cluster_port_min == 0) {
        fail_at(p, line_of(s, "cluster"), "cluster = on needs cluster_ports = FIRST-LAST: "
                "one port per cluster node, the addresses its clients are given");
        return;
    }
    if (c->listen != NULL && c->tls_listen != NULL) {
        fail_at(p, line_of(s, "tls_listen"), "cluster = on takes listen or tls_listen, not "
                "both: the node ports (cluster_ports) speak TLS when tls_listen is the entry "
                "port, plain TCP when listen is");
        return;
    }
    if (c->watch) {
        fail_at(p, line_of(s, "watch"), "cluster = on with watch = on is not supported yet "
                "(keyspace notifications are per node): run a ttlguard with watch = on and "
                "cluster = off against each primary");
        return;
    }
    for (int i = 0; i < 3; i++) {
        int port = port_of(addrs[i]);
        if (port >= c->cluster_port_min && port <= c->cluster_port_max) {
            fail_at(p, line_of(s, "cluster_ports"), "cluster_ports %d-%d holds the %s port "
                    "%d: the node listeners need the range to themselves",
                    c->cluster_port_min, c->cluster_port_max, owners[i], port);
            return;
        }
    }
    const char *entry = c->listen != NULL ? c->listen : c->tls_listen;
    if (c->cluster_announce == NULL && entry != NULL) {
        struct addr a;
        char why[320];
        if (addr_parse(entry, &a, why, sizeof why) == 0 &&
            (a.is_unix || strcmp(a.host, "0.0.0.0") == 0 || strcmp(a.host, "::") == 0))
            fail_at(p, line_of(s, c->listen != NULL ? "listen" : "tls_listen"),
                    "cluster = on with %s = %s: set cluster_announce, the host clients reach "
                    "the node ports at", c->listen != NULL ? "listen" : "tls_listen", entry);
    }
}

/* sentinel = ... and its keys: in place of backend. sentinel_tls: the
 * Sentinels are reached over TLS with the backend_tls_* files, whether the
 * primary is (backend_tls) or not, as client libraries keep the two apart. */
static void check_sentinel(struct parse *p, const struct section *s)
{
    struct config *c = p->cfg;
    if (c->sentinel == NULL) {
        const char *set = c->sentinel_master ? "sentinel_master" : c->sentinel_password
                          ? "sentinel_password" : c->sentinel_username ? "sentinel_username"
                          : line_of(s, "sentinel_tls") != s->line ? "sentinel_tls" : NULL;
        if (set != NULL)
            fail_at(p, line_of(s, set), "%s needs sentinel = HOST:PORT [HOST:PORT ...] "
                    "(sentinel_master, sentinel_username, sentinel_password and sentinel_tls "
                    "are the Sentinels' settings)", set);
        return;
    }
    if (strstr(c->sentinel, "unix:") != NULL)
        fail_at(p, line_of(s, "sentinel"), "sentinel = %s: Sentinels are reached at "
                "host:port (TCP)", c->sentinel);
    else if (c->sentinel_master == NULL || c->sentinel_master[0] == '\0')
        fail_at(p, line_of(s, "sentinel"), "sentinel needs sentinel_master = NAME, the "
                "master name the Sentinels monitor");
    else if (line_of(s, "backend") != s->line)
        fail_at(p, line_of(s, "backend"), "backend and sentinel exclude each other: with "
                "sentinel the backend is the primary the Sentinels name");
    else if (c->cluster)
        fail_at(p, line_of(s, "cluster"), "sentinel with cluster = %s is not supported: a "
                "cluster has no Sentinels", c->cluster == CLUSTER_ROUTE ? "route" : "on");
    else if (c->sentinel_username != NULL && c->sentinel_password == NULL)
        fail_at(p, line_of(s, "sentinel_username"), "sentinel_username needs "
                "sentinel_password: an ACL user needs both");
    else if (c->sentinel_tls)
        c->sentinel_tls_ctx = load_to_backend(p, s);
}

/* What no single key can check; errors at the section header's line. */
static void check_section(struct parse *p, const struct section *s)
{
    const struct rule *r = &s->rule;
    switch (s->kind) {
    case SECT_PROXY:
        if (p->cfg->backend_username != NULL && p->cfg->backend_password == NULL)
            fail_at(p, s->line, "[proxy] has backend_username but no backend_password: "
                    "an ACL user needs both");
        if (p->cfg->watch_configure && !p->cfg->watch)
            fail_at(p, line_of(s, "watch_configure"), "watch_configure = on needs watch = on");
        check_tls(p, s);
        check_cluster(p, s);
        check_sentinel(p, s);
        break;
    case SECT_DEFAULT:
    case SECT_TTL:
        if (r->action == ACTION_REWRITE && r->ttl == 0)
            fail_at(p, s->line, "[%s] has action = rewrite but no ttl: add ttl = SECONDS, "
                    "the TTL given to keys that would have none", r->label);
        else if (r->ttl != 0 && r->max_ttl != 0 && r->ttl > r->max_ttl)
            fail_at(p, s->line, "[%s] has ttl = %lld above max_ttl = %lld: ttl must be at "
                    "most max_ttl", r->label, r->ttl, r->max_ttl);
        break;
    case SECT_DURABLE: {
        static const char *const required[] = { "owner", "reason", "rebuild" };
        char missing[64] = "";
        for (size_t i = 0; i < 3; i++) {
            if (!key_set(s, required[i])) {
                if (*missing)
                    strcat(missing, ", ");
                strcat(missing, required[i]);
            }
        }
        if (*missing)
            fail_at(p, s->line, "[%s] is missing %s: a durable rule needs owner, reason "
                    "and rebuild", r->label, missing);
        break;
    }
    case SECT_USER:
        if (!s->user.password.set)
            fail_at(p, s->line, "[%s] has no password_sha256: add the SHA-256 of its "
                    "password (printf %%s 'PASSWORD' | sha256sum)", r->label);
        else if (s->user.backend_username != NULL && s->user.backend_password == NULL)
            fail_at(p, line_of(s, "backend_user"), "[%s] has backend_user but no "
                    "backend_password: an ACL user needs both", r->label);
        break;
    }
}

/* ---- client authentication and protected mode ----------------------------- */

/* The users clients log in as: `default` from client_password, then the
 * [user] sections, which from here the config owns. */
static void collect_users(struct parse *p)
{
    struct config *c = p->cfg;
    const struct section *proxy = NULL;
    for (size_t i = 0; i < p->nsec; i++)
        if (p->sec[i].kind == SECT_PROXY)
            proxy = &p->sec[i];
    if (c->client_password.set) {
        struct auth_user d = { .name = xstrdup("default"), .password = c->client_password,
                               .line = line_of(proxy, "client_password") };
        c->users.v = xrealloc(c->users.v, (c->users.n + 1) * sizeof d);
        c->users.v[c->users.n++] = d;
    }
    for (size_t i = 0; i < p->nsec && p->err_line == 0; i++) {
        struct section *s = &p->sec[i];
        if (s->kind != SECT_USER)
            continue;
        const struct auth_user *dup = auth_find(&c->users, s->user.name, strlen(s->user.name));
        if (dup != NULL) {
            fail_at(p, s->line, "[%s] sets the password of the default user, and so does "
                    "client_password at line %d: keep one of them", s->rule.label, dup->line);
            return;
        }
        c->users.v = xrealloc(c->users.v, (c->users.n + 1) * sizeof s->user);
        c->users.v[c->users.n++] = s->user;
        memset(&s->user, 0, sizeof s->user);
        if (c->cluster == CLUSTER_ROUTE) {
            fail_at(p, s->line, "[%s]: cluster = route does not log clients in itself yet: "
                    "[user] sections are not supported with it", s->rule.label);
            return;
        }
    }
}

const char *config_exposure_problem(const struct config *cfg, const char *listen_text)
{
    struct addr a;
    char why[320];
    if (listen_text == NULL || addr_parse(listen_text, &a, why, sizeof why) < 0 ||
        addr_is_loopback(&a) || !cfg->protected_mode || cfg->backend_password == NULL ||
        cfg->users.n > 0)
        return NULL;
    return "is reachable from other hosts, and ttlguard logs every client in to Redis with "
           "backend_password while clients do not authenticate to ttlguard: anyone who can "
           "connect would be in (protected mode). Set client_password or add a "
           "[user \"NAME\"] section so that clients must AUTH, or listen on 127.0.0.1 or "
           "a unix: socket, or set protected_mode = no if only trusted hosts can reach it";
}

/* Protected mode and the admin endpoint: what other hosts can reach must ask
 * for a password. */
static void check_exposure(struct parse *p)
{
    const struct config *c = p->cfg;
    const struct section *s = NULL;
    for (size_t i = 0; i < p->nsec; i++)
        if (p->sec[i].kind == SECT_PROXY)
            s = &p->sec[i];
    if (s == NULL)
        return;                         /* the defaults listen on loopback */
    const char *keys[] = { "listen", "tls_listen" };
    const char *addrs[] = { c->listen, c->tls_listen };
    for (int i = 0; i < 2; i++) {
        const char *why = config_exposure_problem(c, addrs[i]);
        if (why != NULL) {
            fail_at(p, line_of(s, keys[i]), "%s = %s %s", keys[i], addrs[i], why);
            return;
        }
    }
    struct addr a;
    char why[320];
    if (c->admin != NULL && !c->admin_token.set && addr_parse(c->admin, &a, why, sizeof why) == 0 &&
        !addr_is_loopback(&a))
        fail_at(p, line_of(s, "admin"), "admin = %s is reachable from other hosts and /metrics "
                "and /rules would answer anyone: set admin_token = SECRET (clients send "
                "Authorization: Bearer SECRET), or listen on 127.0.0.1", c->admin);
}

/* ---- public -------------------------------------------------------------- */

/* The [proxy] defaults; strings allocated so that config_free() and a key of
 * the file can free them alike. */
static void proxy_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->listen = xstrdup("127.0.0.1:6380");
    cfg->backend = xstrdup("127.0.0.1:6379");
    cfg->max_clients = 10000;
    cfg->max_pending = 100000;
    cfg->protected_mode = 1;
    cfg->auth_timeout = 10;
    cfg->client_idle_timeout = 0;
    cfg->max_buffer = 4 * 1024 * 1024;
    cfg->connect_timeout = 3000;
    cfg->log_keys = LOG_KEYS_FULL;
    cfg->event_window = 10;
    cfg->multiplex = 1;
    cfg->backend_tls_verify = 1;
    cfg->audit_rate = 1000;
}

void config_defaults(struct config *cfg)
{
    char err[8];
    proxy_defaults(cfg);
    rules_init(&cfg->rules);
    rules_finish(&cfg->rules, err, sizeof err);     /* no rules: cannot fail */
}

int config_load(const char *path, struct config *cfg, char *err, size_t errlen)
{
    struct parse p = { .path = path, .cfg = cfg };
    int rc = -1;

    proxy_defaults(cfg);
    rules_init(&cfg->rules);

    p.f = fopen(path, "r");
    if (p.f == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    int ini_line = ini_parse_stream(line_reader, &p, on_key, &p);
    if (p.read_errno != 0) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(p.read_errno));
        goto out;
    }
    /* inih's own complaints (a line that is not "key = value") come as a
     * line number; ours come with the line and a message. */
    if (ini_line > 0 && (p.err_line == 0 || ini_line < p.err_line)) {
        snprintf(err, errlen, "%s:%d: expected 'key = value', a [section] header or a comment",
                 path, ini_line);
        goto out;
    }
    if (ini_line < 0 && p.err_line == 0) {
        snprintf(err, errlen, "%s: inih failed (%d)", path, ini_line);
        goto out;
    }
    for (size_t i = 0; i < p.nsec && p.err_line == 0; i++)
        check_section(&p, &p.sec[i]);
    if (p.err_line == 0)
        collect_users(&p);
    if (p.err_line == 0)
        check_exposure(&p);
    if (p.err_line != 0) {
        snprintf(err, errlen, "%s:%d: %s", path, p.err_line, p.err);
        goto out;
    }

    /* Hand the rules over; from here the ruleset owns their strings. */
    for (size_t i = 0; i < p.nsec; i++) {
        struct section *s = &p.sec[i];
        if (s->kind == SECT_DEFAULT) {
            struct rule *d = &cfg->rules.dflt;
            d->action = s->rule.action;
            d->ttl = s->rule.ttl;
            d->max_ttl = s->rule.max_ttl;
            d->refresh = s->rule.refresh;
            d->unknown = s->rule.unknown;
            d->line = s->line;
        } else if (s->kind != SECT_PROXY && s->kind != SECT_USER) {
            rules_add(&cfg->rules, &s->rule);
            memset(&s->rule, 0, sizeof s->rule);
        }
    }
    char why[400];
    if (rules_finish(&cfg->rules, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s: %s", path, why);
        goto out;
    }
    cfg->path = xstrdup(path);
    rc = 0;

out:
    for (size_t i = 0; i < p.nsec; i++) {
        struct rule *r = &p.sec[i].rule;
        free(r->prefix);
        free(r->label);
        free(r->owner);
        free(r->reason);
        free(r->rebuild);
        free(p.sec[i].user.name);
        free(p.sec[i].user.backend_username);
        free(p.sec[i].user.backend_password);
    }
    free(p.sec);
    if (p.buf != NULL)
        OPENSSL_cleanse(p.buf, p.cap);      /* the last lines read may hold passwords */
    free(p.buf);
    if (p.f != NULL)
        fclose(p.f);
    if (rc < 0)
        config_free(cfg);
    return rc;
}

int config_events_to_stderr(const char *events)
{
    return events != NULL && strcmp(events, "stderr") == 0;
}

void config_free(struct config *cfg)
{
    free(cfg->path);
    free(cfg->listen);
    free(cfg->backend);
    free(cfg->backend_seeds);
    free(cfg->cluster_announce);
    free(cfg->audit_from_addr);
    free(cfg->backend_username);
    free(cfg->backend_password);
    free(cfg->sentinel);
    free(cfg->sentinel_master);
    free(cfg->sentinel_username);
    free(cfg->sentinel_password);
    auth_users_free(&cfg->users);
    free(cfg->events);
    free(cfg->admin);
    free(cfg->backend_tls_ca_cert_file);
    free(cfg->backend_tls_ca_cert_dir);
    free(cfg->backend_tls_cert_file);
    free(cfg->backend_tls_key_file);
    free(cfg->backend_tls_server_name);
    free(cfg->tls_listen);
    free(cfg->tls_cert_file);
    free(cfg->tls_key_file);
    free(cfg->tls_ca_cert_file);
    free(cfg->tls_ca_cert_dir);
    free(cfg->tls_protocols);
    free(cfg->tls_ciphers);
    free(cfg->tls_ciphersuites);
    tls_context_free(cfg->backend_tls_ctx);
    tls_context_free(cfg->client_tls_ctx);
    tls_context_free(cfg->sentinel_tls_ctx);
    rules_free(&cfg->rules);
    memset(cfg, 0, sizeof *cfg);
}
