/*
 * util: logging, allocation, small parsers. See util.h for the conventions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <limits.h>

#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <uv.h>

#include "util.h"

enum log_level log_threshold = LOG_INFO;
int log_json;

static const char *level_names[] = { "debug", "info", "warn", "error" };

void log_write(enum log_level level, const char *fmt, ...)
{
    if (level < log_threshold)
        return;

    char ts[32];
    struct timespec tv;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &tv);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - n, ".%03ldZ", tv.tv_nsec / 1000000);

    /* One fprintf per line so concurrent writers to stderr do not interleave
     * within a line. */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!log_json) {
        fprintf(stderr, "%s ttlguard %s: %s\n", ts, level_names[level], msg);
        return;
    }
    /* Log pipelines parse JSON: the message escaped as a JSON string. */
    char line[sizeof msg * 6 + 96], *o = line;
    o += sprintf(o, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts, level_names[level]);
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p == '"' || *p == '\\')
            o += sprintf(o, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            o += sprintf(o, "\\u%04x", *p);
        else
            *o++ = (char)*p;
    }
    fprintf(stderr, "%.*s\"}\n", (int)(o - line), line);
}

void ttlg_assert_fail(const char *cond, const char *file, int line)
{
    log_error("assertion failed: %s (%s:%d)", cond, file, line);
    abort();
}

static void oom(size_t n)
{
    log_error("out of memory allocating %zu bytes", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (p == NULL)
        oom(n);
    return p;
}

char *xstrdup(const char *s)
{
    return xmemdup(s, strlen(s));
}

char *xmemdup(const void *p, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

int slice_eq_nocase(struct slice s, const char *word)
{
    size_t n = strlen(word);
    return s.len == n && strncasecmp(s.p, word, n) == 0;
}

size_t u64_to_dec(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

int slice_to_ll(struct slice s, long long *out)
{
    /* Same acceptance as redis string2ll: optional '-', digits, no leading
     * zeros (except "0"), no spaces, fits in a long long. */
    const char *p = s.p;
    size_t len = s.len;
    int neg = 0;
    unsigned long long v = 0;

    if (len == 0 || len > 20)
        return -1;
    if (len == 1 && p[0] == '0') {
        *out = 0;
        return 0;
    }
    if (p[0] == '-') {
        neg = 1;
        p++;
        len--;
        if (len == 0)
            return -1;
    }
    if (p[0] < '1' || p[0] > '9')
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        if (v > (ULLONG_MAX - (unsigned)(p[i] - '0')) / 10)
            return -1;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1)
            return -1;
        *out = (long long)(0 - v);
    } else {
        if (v > LLONG_MAX)
            return -1;
        *out = (long long)v;
    }
    return 0;
}

int addr_parse(const char *text, struct addr *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (strncmp(text, "unix:", 5) == 0) {
        const char *path = text + 5;
        if (*path == '\0') {
            snprintf(err, errlen, "'%s': empty unix socket path", text);
            return -1;
        }
        if (strlen(path) >= 108) {      /* sun_path */
            snprintf(err, errlen, "'%s': unix socket path too long (max 107 bytes)", text);
            return -1;
        }
        a->is_unix = 1;
        snprintf(a->host, sizeof a->host, "%s", path);
        return 0;
    }

    const char *colon;
    const char *host = text;
    size_t hostlen;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':') {
            snprintf(err, errlen, "'%s': expected [ipv6]:port", text);
            return -1;
        }
        host = text + 1;
        hostlen = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL) {
            snprintf(err, errlen, "'%s': expected host:port or unix:/path", text);
            return -1;
        }
        hostlen = (size_t)(colon - text);
    }
    if (hostlen == 0 || hostlen >= sizeof a->host) {
        snprintf(err, errlen, "'%s': bad host", text);
        return -1;
    }
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 1 || port > 65535) {
        snprintf(err, errlen, "'%s': port must be a number from 1 to 65535", text);
        return -1;
    }
    memcpy(a->host, host, hostlen);
    a->host[hostlen] = '\0';
    a->port = (int)port;
    return 0;
}

int sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family != AF_INET6)
        return ss->ss_family == AF_UNIX;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

int addr_is_loopback(const struct addr *a)
{
    struct sockaddr_storage ss;
    if (a->is_unix || strcasecmp(a->host, "localhost") == 0)
        return 1;
    memset(&ss, 0, sizeof ss);
    if (uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)&ss) != 0)
        return 0;
    return sockaddr_is_loopback(&ss);
}

void addr_format(const struct addr *a, char *out, size_t outlen)
{
    if (a->is_unix)
        snprintf(out, outlen, "unix:%s", a->host);
    else if (strchr(a->host, ':') != NULL)
        snprintf(out, outlen, "[%s]:%d", a->host, a->port);
    else
        snprintf(out, outlen, "%s:%d", a->host, a->port);
}

uint64_t now_ms_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t now_ms_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* SHA-1 (FIPS 180-4), only to name scripts the way SCRIPT LOAD / EVALSHA do. */
static uint32_t rol32(uint32_t v, int n)
{
    return (v << n) | (v >> (32 - n));
}

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)      { f = (b & c) | (~b & d);          k = 0x5a827999; }
        else if (i < 40) { f = b ^ c ^ d;                   k = 0x6ed9eba1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8f1bbcdc; }
        else             { f = b ^ c ^ d;                   k = 0xca62c1d6; }
        uint32_t t = rol32(a, 5) + f + e + k + w[i];
        e = d; d = c; c = rol32(b, 30); b = a; a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

void sha1_hex(const void *data, size_t len, char out[41])
{
    uint32_t h[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0 };
    const unsigned char *p = data;
    unsigned char tail[128];
    size_t full = len & ~(size_t)63, rest = len - full;

    for (size_t i = 0; i < full; i += 64)
        sha1_block(h, p + i);
    memset(tail, 0, sizeof tail);
    memcpy(tail, p + full, rest);
    tail[rest] = 0x80;
    size_t tl = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tl - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tl == 128)
        sha1_block(h, tail + 64);
    for (int i = 0; i < 5; i++)
        snprintf(out + 8 * i, 9, "%08x", h[i]);
}

int addr_resolve(const struct addr *a, struct sockaddr_storage *ss, char *err, size_t errlen)
{
    if (uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)ss) == 0 ||
        uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
    char port[8];
    snprintf(port, sizeof port, "%d", a->port);
    int r = getaddrinfo(a->host, port, &hints, &res);
    if (r != 0) {
        snprintf(err, errlen, "cannot resolve '%s': %s", a->host, gai_strerror(r));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

void sbuf_reserve(struct sbuf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    b->cap = (b->len + more) * 2;
    b->p = xrealloc(b->p, b->cap);
}

void ring_grow(struct ring *r, size_t size, uint32_t first)
{
    uint32_t ncap = r->cap ? r->cap * 2 : first;
    char *np = xmalloc(size * ncap);
    /* Unwrapped into the new array: its head is 0. */
    for (uint32_t i = 0; i < r->len; i++)
        memcpy(np + (size_t)i * size, ring_at(r, size, i), size);
    free(r->p);
    r->p = np;
    r->head = 0;
    r->cap = ncap;
}

void ring_free(struct ring *r)
{
    free(r->p);
    r->p = NULL;
    r->head = r->len = r->cap = 0;
}

void sbuf_add(struct sbuf *b, const void *p, size_t n)
{
    if (n == 0)
        return;                 /* an empty sbuf has no buffer for memcpy() */
    sbuf_reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    sbuf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

int hex_digit_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int text_eq(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}
