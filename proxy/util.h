/*
 * util: logging, allocation and address parsing shared by every module.
 *
 * Error convention (whole tree): functions that can fail return 0 on success
 * and -1 on failure, and write a human-readable reason into a caller-supplied
 * buffer (`char *err, size_t errlen`) when they take one. libuv calls return
 * negative UV_E* codes; we turn them into text with uv_strerror() at the edge.
 * Nobody reads errno after a call returns.
 */
#ifndef TTLG_UTIL_H
#define TTLG_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

/* A growable byte buffer; its owner frees p. */
struct sbuf {
    char *p;
    size_t len, cap;
};

void sbuf_reserve(struct sbuf *b, size_t more);
void sbuf_add(struct sbuf *b, const void *p, size_t n);
/* printf at the end of b. */
void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A growable FIFO of fixed-size elements, in an array used as a ring whose
 * size is a power of two: the session's pending replies, a shared
 * connection's and the watcher's owed replies. Zero-initialised it is empty;
 * its owner frees it with ring_free(). Elements are `size` bytes, the same
 * in every call on one ring. */
struct ring {
    char *p;
    uint32_t head, len, cap;        /* in elements; cap is 0 or a power of two */
};

/* The i-th element from the head, i < len. */
static inline void *ring_at(const struct ring *r, size_t size, uint32_t i)
{
    return r->p + (size_t)((r->head + i) & (r->cap - 1)) * size;
}

/* Doubles a full ring (to `first` elements when empty): ring_push()'s slow path. */
void ring_grow(struct ring *r, size_t size, uint32_t first);

/* Room for one more element at the tail (uninitialised), growing to `first`
 * elements (a power of two), then doubling. Inline: once per request. */
static inline void *ring_push(struct ring *r, size_t size, uint32_t first)
{
    if (r->len == r->cap)
        ring_grow(r, size, first);
    r->len++;
    return ring_at(r, size, r->len - 1);
}

/* Drop the element at the head (len > 0). */
static inline void ring_pop(struct ring *r)
{
    r->head = (r->head + 1) & (r->cap - 1);
    r->len--;
}
/* Empty it and give its memory back. */
void ring_free(struct ring *r);

/* A view into bytes owned by someone else: never freed through the slice. */
struct slice {
    const char *p;
    size_t len;
};

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

extern enum log_level log_threshold;
extern int log_json;        /* log_format = json: one JSON object per line */

void log_write(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_write(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_write(LOG_INFO, __VA_ARGS__)
#ifdef TTLG_DEBUG
#define log_debug(...) do { if (log_threshold <= LOG_DEBUG) log_write(LOG_DEBUG, __VA_ARGS__); } while (0)
#else
#define log_debug(...) do { } while (0)
#endif

/* Assertions that stay on in debug and sanitizer builds (like redis serverAssert). */
#ifdef TTLG_DEBUG
#define ASSERT(c) do { if (!(c)) ttlg_assert_fail(#c, __FILE__, __LINE__); } while (0)
#else
#define ASSERT(c) do { } while (0)
#endif
void ttlg_assert_fail(const char *cond, const char *file, int line) __attribute__((noreturn));

/* Allocation that cannot fail: out of memory aborts with a message, as redis does. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xmemdup(const void *p, size_t n);   /* NUL-terminated copy of n bytes */

/* Case-insensitive compare of a slice with a NUL-terminated ASCII word. */
int slice_eq_nocase(struct slice s, const char *word);

/* Two optional strings are the same: both NULL, or equal. */
int text_eq(const char *a, const char *b);

/* Parse a whole slice as a signed decimal integer as redis does (string2ll).
 * Returns 0 on success, -1 when not an integer or out of range. */
int slice_to_ll(struct slice s, long long *out);

/* v in decimal at out (room for 20 bytes), no NUL; returns the length. For
 * the hot paths that write RESP headers and numbers, where printf costs
 * several times this. */
size_t u64_to_dec(char *out, uint64_t v);

/* A listen or backend address: "host:port", "[v6]:port" or "unix:/path". */
struct addr {
    int is_unix;
    char host[256];     /* numeric address or name; or the socket path when is_unix */
    int port;
};

int addr_parse(const char *text, struct addr *a, char *err, size_t errlen);
/* The value of one hex digit (either case), or -1. */
int hex_digit_value(char c);

/* Format for messages: "127.0.0.1:6379" or "unix:/tmp/redis.sock". */
void addr_format(const struct addr *a, char *out, size_t outlen);

struct sockaddr_storage;
/* Only this host can reach it: a unix socket, localhost, 127.0.0.0/8, ::1
 * (or ::ffff:127.x.y.z). Other names count as reachable from elsewhere. */
int addr_is_loopback(const struct addr *a);
int sockaddr_is_loopback(const struct sockaddr_storage *ss);
/* A host:port to a socket address: numeric at once, a name through the
 * resolver (blocking: for start and reload only). 0, or -1 with err. */
int addr_resolve(const struct addr *a, struct sockaddr_storage *ss, char *err, size_t errlen);

/* Lowercase hex SHA-1 of data: the name Redis gives a script (EVALSHA). */
void sha1_hex(const void *data, size_t len, char out[41]);

/* Monotonic milliseconds and wall-clock milliseconds since the epoch. */
uint64_t now_ms_monotonic(void);
uint64_t now_ms_wall(void);

#endif
