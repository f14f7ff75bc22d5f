/*
 * resp_request: the request framer (see resp_request.h).
 *
 * Coordinates. Everything is an offset into the caller's buffer. hiredis keeps
 * its own copy of the bytes we feed it: a contiguous suffix of buf[0..fed).
 * When a callback hands us a pointer p into hiredis's buffer, the byte lies
 * at buffer offset  fed - r->len + (p - r->buf).  After a request completes,
 * hiredis may still hold the first bytes of the next one (leftover =
 * r->len - r->pos), i.e. buf[fed - leftover .. fed).
 *
 * hiredis is a reply parser: it accepts + - : as element types and is lenient
 * about numbers. Redis is not, so the framer checks what Redis checks itself:
 * the multibulk header line before hiredis sees it, element types and nil
 * bulks in the callbacks, and the pending bulk header whenever hiredis waits
 * for a payload (so a $600000000 is refused at once, not after 512 MB).
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/read.h>

#include "resp_request.h"

struct req_framer {
    redisReader *r;         /* created on first use, dropped by req_framer_release() */
    int busy;               /* hiredis holds a partial request starting at `start` */
    size_t start;           /* offset of the request hiredis is framing */
    size_t fed;             /* hiredis has been fed buf[..fed) (its buffer is a suffix of it) */
    size_t bulk_end;        /* > fed: hiredis waits for a bulk ending here; feed it at once */

    /* Arguments of the request being framed, as offsets into buf. */
    size_t *off;
    size_t *len;
    int argc;
    int argcap;
    struct slice *argv;     /* filled from off/len when a request completes */
    int argvcap;

    char *scratch;          /* unescaped inline arguments */
    size_t scratchcap;

    const char *cb_err;     /* protocol error detected in a callback (static string) */
    int unauth;             /* apply redis's limits for unauthenticated clients */
    int inline_join;        /* Valkey 9's inline splitting (req_framer_set_inline_join()) */
    int empty_seen;         /* an empty request was skipped (req_framer_take_empty()) */
    char err[160];

    /* Large requests: once a bulk of hand_min bytes or more is announced,
     * hiredis is dropped and the rest of the request is framed here, by
     * hand (hand_next()), fed being the cursor: a large payload is never
     * copied, and no byte is looked at twice. A bulk of stream_min bytes
     * or more that is not all in the buffer makes the request's head. */
    size_t hand_min;        /* REQ_HAND_MIN unless req_framer_set_stream() says */
    size_t stream_min;      /* 0: never */
    int hand;               /* the rest of the request is framed by hand */
    int hold;               /* the caller holds it whole (req_framer_hold()) */
    int head_found;         /* a large bulk not all in the buffer was met: `head` is set */
    int head_given;         /* the head was returned (REQ_HEAD) */
    int streaming;          /* its rest is returned in parts (req_framer_stream()) */
    size_t s_left;          /* bytes left of the bulk at the cursor, its CRLF included */
    long long s_args;       /* arguments after it */
    struct req_head head;
    size_t head_payload;    /* offset of the large bulk's first payload byte */

    /* While streaming, the arguments after the large one are kept for the
     * caller's judgement once the request is whole (req_framer_tail()):
     * off/len from index t_first on are offsets into `tail`. */
    int t_first;            /* the first of them in off/len */
    int t_keep;             /* the bulk at the cursor is copied into tail */
    struct sbuf tail;
};

/* hiredis needs a non-NULL object per element; we build none. */
static char dummy_obj;

static void *cb_fail(struct req_framer *f, const char *msg)
{
    f->cb_err = msg;
    return NULL;    /* hiredis turns NULL into an error and stops */
}

/* An argument at buf[off..off+len). */
static void add_arg(struct req_framer *f, size_t off, size_t len)
{
    if (f->argc == f->argcap) {
        f->argcap = f->argcap ? f->argcap * 2 : 16;
        f->off = xrealloc(f->off, sizeof *f->off * (size_t)f->argcap);
        f->len = xrealloc(f->len, sizeof *f->len * (size_t)f->argcap);
    }
    f->off[f->argc] = off;
    f->len[f->argc] = len;
    f->argc++;
}

static void *cb_string(const redisReadTask *task, char *str, size_t len)
{
    struct req_framer *f = task->privdata;
    redisReader *r = f->r;

    if (task->type == REDIS_REPLY_STATUS)
        return cb_fail(f, "Protocol error: expected '$', got '+'");
    if (task->type == REDIS_REPLY_ERROR)
        return cb_fail(f, "Protocol error: expected '$', got '-'");
    if (task->parent == NULL)    /* cannot happen: we only feed from a '*' */
        return cb_fail(f, "Protocol error: expected '*'");

    if (f->unauth && len > REQ_MAX_UNAUTH_BULK)
        return cb_fail(f, "Protocol error: unauthenticated bulk length");
    add_arg(f, f->fed - r->len + (size_t)(str - r->buf), len);
    return &dummy_obj;
}

static void *cb_array(const redisReadTask *task, int elements)
{
    struct req_framer *f = task->privdata;
    if (task->parent != NULL)
        return cb_fail(f, "Protocol error: expected '$', got '*'");
    return &dummy_obj;      /* top level: header already validated */
}

static void *cb_integer(const redisReadTask *task, long long value)
{
    return cb_fail(task->privdata, "Protocol error: expected '$', got ':'");
}

static void *cb_nil(const redisReadTask *task)
{
    if (task->type == REDIS_REPLY_ARRAY)    /* *-1 as an element */
        return cb_fail(task->privdata, "Protocol error: expected '$', got '*'");
    return cb_fail(task->privdata, "Protocol error: invalid bulk length");
}

static void cb_free(void *obj)
{
}

#define FEED_SLICE 4096

static redisReplyObjectFunctions req_functions = {
    cb_string, cb_array, cb_integer, cb_nil, cb_free,
};

struct req_framer *req_framer_new(void)
{
    struct req_framer *f = xcalloc(1, sizeof(struct req_framer));
    f->hand_min = REQ_HAND_MIN;
    return f;
}

static void reader_drop(struct req_framer *f)
{
    if (f->r != NULL) {
        redisReaderFree(f->r);
        f->r = NULL;
    }
    f->bulk_end = 0;
}

void req_framer_free(struct req_framer *f)
{
    if (f == NULL)
        return;
    reader_drop(f);
    free(f->off);
    free(f->len);
    free(f->argv);
    free(f->scratch);
    free(f->tail.p);
    free(f);
}

void req_framer_set_unauthenticated(struct req_framer *f, int on)
{
    f->unauth = on;
}

void req_framer_set_inline_join(struct req_framer *f, int on)
{
    f->inline_join = on;
}

void req_framer_rewind(struct req_framer *f)
{
    reader_drop(f);
    f->busy = 0;
    f->hand = 0;
}

void req_framer_set_stream(struct req_framer *f, size_t hand_min, size_t stream_min)
{
    f->hand_min = hand_min;
    f->stream_min = stream_min;
}

void req_framer_hold(struct req_framer *f)
{
    f->hold = 1;
}

size_t req_framer_stream(struct req_framer *f)
{
    f->streaming = 1;
    f->t_first = f->argc;           /* the large bulk is argc - 1 */
    f->t_keep = 0;
    f->tail.len = 0;
    return f->head_payload;
}

int req_framer_tail(struct req_framer *f, struct slice *argv, int max)
{
    int n = f->argc - f->t_first;
    if (n > max)
        return -1;
    for (int i = 0; i < n; i++) {
        argv[i].p = f->tail.p + f->off[f->t_first + i];
        argv[i].len = f->len[f->t_first + i];
    }
    return n;
}

int req_framer_streaming(const struct req_framer *f)
{
    return f->streaming;
}

int req_framer_idle(const struct req_framer *f)
{
    return !f->busy && !f->streaming;
}

const char *req_framer_error(const struct req_framer *f)
{
    return f->err;
}

void req_framer_release(struct req_framer *f)
{
    if (!f->busy)
        reader_drop(f);
    if (f->scratchcap > 4096) {
        free(f->scratch);
        f->scratch = NULL;
        f->scratchcap = 0;
    }
}

void req_framer_moved(struct req_framer *f, size_t from, size_t to)
{
    size_t d = from - to;
    /* Bytes before `from` are gone; hiredis never holds unconsumed ones there. */
    f->fed = f->fed >= from ? f->fed - d : to;
    if (!f->busy || f->streaming)
        return;
    f->start -= d;
    f->head_payload -= d;
    if (f->bulk_end > 0)
        f->bulk_end -= d;
    for (int i = 0; i < f->argc; i++)
        f->off[i] -= d;
}

static int fail(struct req_framer *f, const char *msg)
{
    snprintf(f->err, sizeof f->err, "ERR %.150s", msg);
    return -1;
}


/* hiredis found the error itself: say it the way redis-server does. Its
 * messages are 'Protocol error, got "x" as reply type byte' for an element
 * that is not a bulk, and bulk-length complaints otherwise. */
/* An element that is not a bulk string. */
static int fail_type(struct req_framer *f, char c)
{
    if (c == '\r' || c == '\n')
        c = ' ';                    /* as addReplyErrorFormat() does */
    char msg[64];
    snprintf(msg, sizeof msg, "Protocol error: expected '$', got '%c'", c);
    return fail(f, msg);
}

static int fail_hiredis(struct req_framer *f)
{
    const char *e = f->r->errstr;
    const char *q = strstr(e, "got \"");
    if (q != NULL) {
        char c = q[5];
        if (c == '\\') {             /* hiredis escaped it: \r \n \t \xHH ... */
            char n = q[6];
            if (n == 'x' && hex_digit_value(q[7]) >= 0 && hex_digit_value(q[8]) >= 0)
                c = (char)(hex_digit_value(q[7]) * 16 + hex_digit_value(q[8]));
            else
                c = n == 'n' ? '\n' : n == 'r' ? '\r' : n == 't' ? '\t' : n;
        }
        return fail_type(f, c);
    }
    /* The top-level header is checked before hiredis sees it: a multi-bulk
     * length it refuses is a nested array's, refused by Redis at its '*'. */
    if (strstr(e, "ulti-bulk length") != NULL)
        return fail_type(f, '*');
    return fail(f, "Protocol error: invalid bulk length");
}

/* Strict decimal of p[0..n) as redis string2ll accepts it. */
static int parse_ll(const char *p, size_t n, long long *v)
{
    struct slice s = { p, n };
    return slice_to_ll(s, v);
}

/* Redis's sdssplitargs(), writing unescaped arguments into f->scratch.
 * Returns argc, or -1 for unbalanced quotes. */
static int split_inline(struct req_framer *f, const char *p, const char *end)
{
    size_t need = (size_t)(end - p) + 1;
    if (f->scratchcap < need) {
        free(f->scratch);
        f->scratch = xmalloc(need);
        f->scratchcap = need;
    }
    char *out = f->scratch;
    int argc = 0;

    for (;;) {
        while (p < end && isspace((unsigned char)*p))
            p++;
        if (p == end || *p == '\0')
            break;

        int inq = 0, insq = 0, done = 0;
        char *arg = out;
        while (!done) {
            if (inq) {
                if (p == end)
                    return -1;
                if (*p == '\\' && p + 3 < end && p[1] == 'x' &&
                    hex_digit_value(p[2]) >= 0 && hex_digit_value(p[3]) >= 0) {
                    *out++ = (char)(hex_digit_value(p[2]) * 16 + hex_digit_value(p[3]));
                    p += 3;
                } else if (*p == '\\' && p + 1 < end) {
                    char c;
                    p++;
                    switch (*p) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: c = *p; break;
                    }
                    *out++ = c;
                } else if (*p == '"') {
                    /* Redis: the closing quote must be followed by a space or
                     * nothing; Valkey 9: the argument goes on */
                    if (f->inline_join)
                        inq = 0;
                    else if (p + 1 < end && !isspace((unsigned char)p[1]))
                        return -1;
                    else
                        done = 1;
                } else {
                    *out++ = *p;
                }
            } else if (insq) {
                if (p == end)
                    return -1;
                if (*p == '\\' && p + 1 < end && p[1] == '\'') {
                    p++;
                    *out++ = '\'';
                } else if (*p == '\'') {
                    if (f->inline_join)
                        insq = 0;
                    else if (p + 1 < end && !isspace((unsigned char)p[1]))
                        return -1;
                    else
                        done = 1;
                } else {
                    *out++ = *p;
                }
            } else {
                if (p == end) {
                    done = 1;
                    break;
                }
                switch (*p) {
                case ' ': case '\n': case '\r': case '\t': case '\0':
                    done = 1;
                    break;
                case '"':
                    inq = 1;
                    break;
                case '\'':
                    insq = 1;
                    break;
                default:
                    *out++ = *p;
                    break;
                }
            }
            if (p < end)
                p++;
        }

        if (argc == f->argcap) {
            f->argcap = f->argcap ? f->argcap * 2 : 16;
            f->off = xrealloc(f->off, sizeof *f->off * (size_t)f->argcap);
            f->len = xrealloc(f->len, sizeof *f->len * (size_t)f->argcap);
        }
        f->off[argc] = (size_t)(arg - f->scratch);
        f->len[argc] = (size_t)(out - arg);
        argc++;
    }
    return argc;
}

static void fill_argv(struct req_framer *f, const char *base, int argc, struct request *req)
{
    if (argc > f->argvcap) {
        free(f->argv);
        f->argvcap = f->argcap;         /* off/len already hold argc entries */
        f->argv = xmalloc(sizeof *f->argv * (size_t)f->argvcap);
    }
    for (int i = 0; i < argc; i++) {
        f->argv[i].p = base + f->off[i];
        f->argv[i].len = f->len[i];
    }
    req->argc = argc;
    req->argv = f->argv;
}

/* Inline request at buf[*pos]. Same return values as req_next(). */
static int inline_next(struct req_framer *f, const char *buf, size_t len, size_t *pos,
                       struct request *req)
{
    const char *start = buf + *pos;
    const char *nl = memchr(start, '\n', len - *pos);
    /* Redis looks for the newline with strchr(): a NUL byte hides it. */
    if (nl != NULL && memchr(start, '\0', (size_t)(nl - start)) != NULL)
        nl = NULL;
    if (nl == NULL) {
        if (len - *pos > REQ_MAX_INLINE)
            return fail(f, "Protocol error: too big inline request");
        return 0;
    }
    const char *end = nl;
    if (end > start && end[-1] == '\r')
        end--;

    int argc = split_inline(f, start, end);
    if (argc < 0)
        return fail(f, "Protocol error: unbalanced quotes in request");

    size_t next = (size_t)(nl + 1 - buf);
    if (argc == 0) {                /* empty line: Redis skips it */
        *pos = next;
        f->empty_seen = 1;
        return 2;
    }
    fill_argv(f, f->scratch, argc, req);
    req->raw.p = start;
    req->raw.len = next - *pos;
    req->inline_cmd = 1;
    req->head = NULL;
    *pos = next;
    return 1;
}

/* hiredis is waiting for more bytes. If what it waits for is a bulk payload,
 * check the declared length now, as Redis does when it reads the header. */
static void hand_mode(struct req_framer *f);

static int check_pending_bulk(struct req_framer *f)
{
    redisReader *r = f->r;
    /* hiredis has consumed the '$' type byte of the item it is on; its
     * length line starts at r->pos. */
    if (r->ridx < 0 || r->rstack[r->ridx].type != REDIS_REPLY_STRING || r->pos >= r->len)
        return 0;
    const char *hdr = r->buf + r->pos;
    size_t avail = r->len - r->pos;
    const char *cr = memchr(hdr, '\r', avail);
    if (cr == NULL) {
        if (avail + 1 > REQ_MAX_INLINE)     /* Redis counts from the '$' */
            return fail(f, "Protocol error: too big bulk count string");
        return 0;
    }
    long long n;
    if (parse_ll(hdr, (size_t)(cr - hdr), &n) != 0 || n < 0 || n > REQ_MAX_BULK)
        return fail(f, "Protocol error: invalid bulk length");
    if (f->unauth && n > REQ_MAX_UNAUTH_BULK)
        return fail(f, "Protocol error: unauthenticated bulk length");
    /* Where the payload (and its CRLF) ends in the caller's buffer: hiredis
     * gets it in one piece once it is all there, not a slice at a time
     * (each slice would grow hiredis's buffer again). */
    if ((size_t)(cr - hdr) + 1 >= avail || cr[1] != '\n')
        return 0;                       /* not the line hiredis will see, yet */
    size_t payload = f->fed - r->len + (size_t)(cr - r->buf) + 2;
    if ((size_t)n < f->hand_min || r->ridx != 1) {
        f->bulk_end = payload + (size_t)n + 2;
        return 0;
    }
    /* A bulk worth not copying: the rest of the request, this bulk's
     * header on, is framed by hand. */
    f->head.total = r->rstack[0].elements;
    f->fed = f->fed - r->len + (size_t)(hdr - 1 - r->buf);     /* at its '$' */
    reader_drop(f);
    hand_mode(f);
    return 0;
}

/* From f->fed on, the request's arguments are framed by hand. */
static void hand_mode(struct req_framer *f)
{
    f->hand = 1;
    f->hold = f->head_given = f->head_found = 0;
    f->s_left = 0;
    f->s_args = f->head.total - f->argc;
}

/* A bulk header framed by hand: "$len\r\n" at buf[*p], checked as Redis
 * checks it. 1: *p moved past it; 0: not all here yet; -1: protocol error. */
static int hand_header(struct req_framer *f, const char *buf, size_t len, size_t *p)
{
    /* As processMultibulkBuffer(): the type byte is looked at once a CR and
     * a byte after it are here; that byte is skipped unread. */
    const char *cr = memchr(buf + *p, '\r', len - *p);
    if (cr == NULL || (size_t)(cr - buf) + 1 >= len) {
        if (len - *p > REQ_MAX_INLINE)
            return fail(f, "Protocol error: too big bulk count string");
        return 0;
    }
    if (buf[*p] != '$')
        return fail_type(f, buf[*p]);
    long long n;
    if (parse_ll(buf + *p + 1, (size_t)(cr - buf) - *p - 1, &n) != 0 || n < 0 ||
        n > REQ_MAX_BULK)
        return fail(f, "Protocol error: invalid bulk length");
    if (f->unauth && n > REQ_MAX_UNAUTH_BULK)
        return fail(f, "Protocol error: unauthenticated bulk length");
    *p = (size_t)(cr - buf) + 2;
    f->s_left = (size_t)n + 2;
    f->s_args--;
    if (f->streaming) {
        /* A bulk after the large one: kept when small (an option, a
         * number), else only its length (its bytes pass unread). */
        f->t_keep = n <= REQ_TAIL_ARG_MAX;
        add_arg(f, f->tail.len, f->t_keep ? (size_t)n : 0);
        return 1;
    }
    if (!f->head_found && f->stream_min > 0 && (size_t)n >= f->stream_min &&
        len - *p < f->s_left) {
        /* The first large bulk not all here: the request's head ends here. */
        f->head_found = 1;
        f->head.big = f->argc;
        f->head.big_len = n;
        f->head_payload = *p;
    }
    add_arg(f, *p, (size_t)n);
    return 1;
}

/* Frame by hand as far as buf goes. Like Redis, the two bytes after a
 * payload are skipped unread. Returns -1 on a protocol error. */
static int hand_frame(struct req_framer *f, const char *buf, size_t len)
{
    size_t p = f->fed;
    while (p < len) {
        if (f->s_left > 0) {
            size_t n = len - p < f->s_left ? len - p : f->s_left;
            if (f->t_keep && f->s_left > 2)     /* the payload, not its CRLF */
                sbuf_add(&f->tail, buf + p, n < f->s_left - 2 ? n : f->s_left - 2);
            p += n;
            f->s_left -= n;
        } else if (f->s_args == 0) {
            break;
        } else {
            int rc = hand_header(f, buf, len, &p);
            if (rc <= 0) {
                f->fed = p;
                return rc;
            }
        }
    }
    f->fed = p;
    return 0;
}

/* The request framed by hand: whole, its head, a part of its rest, or
 * nothing yet (see req_framer_set_stream()). */
static int hand_next(struct req_framer *f, const char *buf, size_t len, size_t *pos,
                     struct request *req)
{
    if (hand_frame(f, buf, len) < 0)
        return -1;
    int done = f->s_left == 0 && f->s_args == 0;
    if (done)
        f->busy = f->hand = 0;
    req->inline_cmd = 0;
    req->head = NULL;
    if (f->streaming) {
        f->streaming = !done;
        if (f->fed == *pos)
            return 0;
        req->argc = 0;
        req->argv = NULL;
        req->raw.p = buf + *pos;
        req->raw.len = f->fed - *pos;
        *pos = f->fed;
        return REQ_PART;
    }
    if (done) {
        fill_argv(f, buf, f->argc, req);
        req->raw.p = buf + f->start;
        req->raw.len = f->fed - f->start;
        *pos = f->fed;
        return 1;
    }
    if (f->hold || f->head_given || !f->head_found)
        return 0;
    f->head_given = 1;
    fill_argv(f, buf, f->head.big, req);
    req->raw.p = buf + f->start;
    req->raw.len = f->head_payload - f->start;
    req->head = &f->head;
    return REQ_HEAD;
}

/* hand_min 0: the request at buf[start], its n arguments starting at
 * `args`, is framed by hand from its header on; hiredis never sees it. */
static int hand_start(struct req_framer *f, size_t start, size_t args, long long n,
                      const char *buf, size_t len, size_t *pos, struct request *req)
{
    if (f->r != NULL && f->fed > start)
        reader_drop(f);             /* hiredis read ahead into this request */
    f->busy = 1;
    f->start = start;
    f->argc = 0;
    f->fed = args;
    f->head.total = n;
    hand_mode(f);
    return hand_next(f, buf, len, pos, req);
}

static int resp_next(struct req_framer *f, const char *buf, size_t len, size_t *pos,
                     struct request *req)
{
    if (!f->busy) {
        /* The multibulk header, checked like processMultibulkBuffer(). */
        const char *hdr = buf + *pos + 1;
        const char *cr = memchr(hdr, '\r', len - *pos - 1);
        if (cr == NULL) {
            if (len - *pos > REQ_MAX_INLINE)
                return fail(f, "Protocol error: too big mbulk count string");
            return 0;
        }
        if ((size_t)(cr - buf) + 1 >= len)
            return 0;                   /* the \n is not here yet */
        long long n;
        if (parse_ll(hdr, (size_t)(cr - hdr), &n) != 0 || n > REQ_MAX_MULTIBULK)
            return fail(f, "Protocol error: invalid multibulk length");
        if (f->unauth && n > REQ_MAX_UNAUTH_MULTIBULK)
            return fail(f, "Protocol error: unauthenticated multibulk length");
        if (n <= 0) {                   /* *0 and *-1: nothing to run */
            if (f->r != NULL && f->fed > *pos)
                reader_drop(f);         /* hiredis saw these bytes: resync */
            *pos = (size_t)(cr - buf) + 2;
            f->fed = *pos;
            f->empty_seen = 1;
            return 2;
        }

        if (f->hand_min == 0)
            return hand_start(f, *pos, (size_t)(cr - buf) + 2, n, buf, len, pos, req);
        if (f->r == NULL) {
            f->r = redisReaderCreateWithFunctions(&req_functions);
            if (f->r == NULL)
                return fail(f, "out of memory");
            f->r->privdata = f;
            f->fed = *pos;
        } else if (f->fed < *pos) {
            f->fed = *pos;              /* hiredis is empty: start feeding here */
        }
        f->busy = 1;
        f->start = *pos;
        f->bulk_end = 0;
        f->argc = 0;
        f->cb_err = NULL;
    }

    /* Feed in slices: after every KiB it consumes, hiredis moves its whole
     * unread buffer to the front, so a deep pipeline fed at once would cost
     * time quadratic in its size. */
    void *reply = NULL;
    for (;;) {
        if (f->bulk_end > f->fed) {
            if (len < f->bulk_end)
                return 0;       /* the rest of a known bulk is not here yet */
            if (redisReaderFeed(f->r, buf + f->fed, f->bulk_end - f->fed) != REDIS_OK)
                return fail(f, "out of memory");
            f->fed = f->bulk_end;
            f->bulk_end = 0;
        } else if (len > f->fed) {
            size_t n = len - f->fed < FEED_SLICE ? len - f->fed : FEED_SLICE;
            if (redisReaderFeed(f->r, buf + f->fed, n) != REDIS_OK)
                return fail(f, "out of memory");
            f->fed += n;
        }
        if (redisReaderGetReply(f->r, &reply) != REDIS_OK) {
            if (f->cb_err != NULL)
                return fail(f, f->cb_err);
            return fail_hiredis(f);
        }
        if (reply != NULL)
            break;
        if (f->bulk_end > f->fed)
            continue;
        if (check_pending_bulk(f) < 0)
            return -1;
        if (f->hand)
            return hand_next(f, buf, len, pos, req);
        if (f->fed == len)
            return 0;
    }

    size_t leftover = f->r->len - f->r->pos;
    size_t end = f->fed - leftover;
    fill_argv(f, buf, f->argc, req);
    req->raw.p = buf + f->start;
    req->raw.len = end - f->start;
    req->inline_cmd = 0;
    req->head = NULL;
    *pos = end;
    f->busy = 0;
    return 1;
}

int req_framer_take_empty(struct req_framer *f)
{
    int seen = f->empty_seen;
    f->empty_seen = 0;
    return seen;
}

int req_next(struct req_framer *f, const char *buf, size_t len, size_t *pos, struct request *req)
{
    for (;;) {
        int rc;
        if (*pos >= len)
            return 0;
        if (f->hand)
            return hand_next(f, buf, len, pos, req);
        if (!f->busy && buf[*pos] != '*') {
            if (f->r != NULL && f->fed > *pos)
                reader_drop(f);         /* hiredis read ahead into an inline request */
            rc = inline_next(f, buf, len, pos, req);
        } else {
            rc = resp_next(f, buf, len, pos, req);
        }
        if (rc != 2)                    /* 2: skipped an empty request, go on */
            return rc;
    }
}
