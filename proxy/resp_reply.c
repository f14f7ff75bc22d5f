/*
 * resp_reply: the reply framer (see resp_reply.h for the contract).
 *
 * A byte-driven state machine that only tracks where values end. It never
 * buffers: a bulk payload is skipped by arithmetic, a text line by memchr(),
 * and the only per-value memory is one counter (and one attribute bit) per
 * open aggregate.
 *
 *   type byte ─┬─ + - ( ,  ──▶ text line up to CRLF ─────────────────┐
 *              ├─ :        ──▶ number line ──────────────────────────┤
 *              ├─ $ ! =    ──▶ number line ─▶ payload ─▶ CRLF ───────┤
 *              │   $?      ──▶ ;N chunks (payload + CRLF) ... ;0 ────┤
 *              ├─ # _ .    ──▶ fixed line ───────────────────────────┤ element done
 *              └─ * % ~ > |──▶ number line ─▶ push a level ──────────┘   │
 *                  *? %? ~?──▶ push a streamed level (ends with '.')     │
 *                                                                        ▼
 *      pop every level whose count reaches 0; an attribute level does not
 *      count as an element of its parent (it prefixes the next element);
 *      at depth 0 the top-level reply is over.
 *
 * Lines follow hiredis's rule: a line ends at the first CRLF, a lone CR or
 * LF inside a text line is content. Text lines of + - ( are not limited in
 * length, because redis-server sends them as long as a script makes them
 * (redis.status_reply, redis.error_reply and big_number of any size), and
 * nothing of them is kept here. Every other line holds a number, a boolean
 * or nothing, so RESP_MAX_LINE bounds it generously.
 *
 * The level stack. Levels 0..RESP_INLINE_DEPTH-1 live in remaining[] and
 * attr[] inside the struct. Pushing one more moves the whole stack to one heap
 * block, `heap`: 1 << heap_shift counts followed by as many bits, doubled
 * whenever it fills; from then on every level is read there (rs_push_heap(),
 * rs_pop_heap()) until the reply ends, when the block is freed. It is not
 * shrunk on the way back up, so a reply hovering around a capacity boundary
 * cannot make it thrash. Shallow replies pay for this a test of s->heap per
 * push and per element inside an aggregate, and one per reply.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resp_reply.h"

_Static_assert(RESP_INLINE_DEPTH >= 8 && (RESP_INLINE_DEPTH & (RESP_INLINE_DEPTH - 1)) == 0,
               "RESP_INLINE_DEPTH must be a power of two, at least 8");

#define rs_unlikely(x) __builtin_expect(!!(x), 0)
/* Kept out of line so the hot paths stay small. */
#define RS_COLD __attribute__((cold, noinline))
#define RS_NOINLINE __attribute__((noinline))

enum {
    RS_TYPE,        /* expecting the type byte of an element */
    RS_NUM_FIRST,   /* first byte of a number line: digit, '-' or '?' */
    RS_NUM,         /* digits of a number line, up to its CR */
    RS_BOOL,        /* '#' seen: expecting 't' or 'f' */
    RS_CR,          /* expecting the CR of a fixed line (_ # . ? lines) */
    RS_LF,          /* expecting the LF of a number or fixed line */
    RS_TEXT,        /* inside a text line (+ - ( ,), looking for CRLF */
    RS_TEXT_CR,     /* text line whose last byte seen was CR */
    RS_PAYLOAD,     /* skipping bulk_left payload bytes */
    RS_PAYLOAD_CR,  /* expecting the CR after a payload */
    RS_PAYLOAD_LF,  /* expecting the LF after a payload */
    RS_CHUNK        /* inside a streamed string: expecting ';' */
};

/* numflags bits */
#define RS_NEG      1   /* the number line started with '-' */
#define RS_DIGITS   2   /* at least one digit seen */
#define RS_STREAM   4   /* the line was '?': size not known in advance */

/* remaining[] value of a streamed aggregate, which ends with '.' instead. */
#define RS_STREAMED UINT_MAX

/* Capacity in levels of the heap stack (only when s->heap is set). */
static size_t rs_heap_cap(const struct reply_scanner *s)
{
    return (size_t)1 << s->heap_shift;
}

/* Count of each open level, outermost first. */
static unsigned int *rs_levels(struct reply_scanner *s)
{
    return s->heap ? s->heap : s->remaining;
}

static void rs_drop_heap(struct reply_scanner *s)
{
    free(s->heap);
    s->heap = NULL;
    s->heap_shift = 0;
}

static RS_COLD ssize_t rs_fail(struct reply_scanner *s, const char *why)
{
    s->err = why;
    /* The error sticks and the levels are never read again. */
    if (s->heap)
        rs_drop_heap(s);
    s->depth = 0;
    return -1;
}

void reply_scanner_init(struct reply_scanner *s)
{
    memset(s, 0, sizeof(*s));
    s->state = RS_TYPE;
}

void reply_scanner_free(struct reply_scanner *s)
{
    free(s->heap);
    reply_scanner_init(s);
}

char reply_scanner_type(const struct reply_scanner *s)
{
    return s->type;
}

int reply_scanner_idle(const struct reply_scanner *s)
{
    return !s->busy && !s->err;
}

const char *reply_scanner_error(const struct reply_scanner *s)
{
    return s->err ? s->err : "no error";
}

/* An element just ended: pop every level it completes, in the stack
 * lv[]/bits[]. Returns 1 when it was the last byte of the top-level reply,
 * 0 when the reply goes on. */
static inline int rs_pop(struct reply_scanner *s, unsigned int *lv, unsigned char *bits)
{
    while (s->depth > 0) {
        unsigned int *left = &lv[s->depth - 1];
        unsigned char *bit;

        if (*left == RS_STREAMED || --*left > 0)
            return 0;
        s->depth--;
        bit = &bits[s->depth >> 3];
        if (*bit & (1u << (s->depth & 7))) {
            /* An attribute describes the element after it and is not one
             * itself: the parent still waits for that element. */
            *bit &= (unsigned char)~(1u << (s->depth & 7));
            return 0;
        }
    }
    return 1;
}

static RS_NOINLINE int rs_pop_heap(struct reply_scanner *s)
{
    return rs_pop(s, s->heap, (unsigned char *)(s->heap + rs_heap_cap(s)));
}

/* The inline stack is addressed directly: shallow replies pay a test of
 * s->heap per element and nothing else. */
static inline int rs_element_done(struct reply_scanner *s)
{
    if (s->depth == 0)      /* a top-level simple reply: the common case */
        return 1;
    if (rs_unlikely(s->heap != NULL))
        return rs_pop_heap(s);
    return rs_pop(s, s->remaining, s->attr);
}

/* The stack holds s->depth levels and is full: move it to the heap, or
 * double the heap block. Returns -1 when memory runs out. */
static RS_COLD int rs_grow(struct reply_scanner *s)
{
    size_t cap = s->heap ? rs_heap_cap(s) : RESP_INLINE_DEPTH;
    size_t ncap = cap * 2;
    unsigned int *h;
    unsigned char *bits;

    /* ncap counts and ncap bits: 4.125 bytes a level. Long before this
     * overflows, the reply would have used up the address space. */
    if (cap > SIZE_MAX / 2 / 5)
        return -1;
    h = realloc(s->heap, ncap * sizeof(*h) + ncap / 8);
    if (h == NULL)
        return -1;      /* s->heap, if any, is still valid; rs_fail frees it */
    bits = (unsigned char *)(h + ncap);
    if (s->heap == NULL) {
        memcpy(h, s->remaining, sizeof(s->remaining));
        memcpy(bits, s->attr, sizeof(s->attr));
        /* Those bits are cleared on the heap as their levels close: the
         * inline ones must be 0 when the levels come back inline. */
        memset(s->attr, 0, sizeof(s->attr));
    } else {
        /* The bits followed the old counts: move them after the new ones. */
        memmove(bits, (unsigned char *)(h + cap), cap / 8);
    }
    memset(bits + cap / 8, 0, (ncap - cap) / 8);
    s->heap = h;
    s->heap_shift = (unsigned char)__builtin_ctzll((unsigned long long)ncap);
    return 0;
}

/* Open an aggregate of `count` elements (RS_STREAMED: ended by '.') on the
 * heap stack, first moving the levels there or growing it if it is full. */
static RS_NOINLINE int rs_push_heap(struct reply_scanner *s, unsigned int count, int is_attr)
{
    size_t d = s->depth;

    if ((s->heap == NULL || d == rs_heap_cap(s)) && rs_grow(s) < 0)
        return -1;
    s->heap[d] = count;
    if (is_attr)
        ((unsigned char *)(s->heap + rs_heap_cap(s)))[d >> 3] |= (unsigned char)(1u << (d & 7));
    s->depth = d + 1;
    return 0;
}

/* Open an aggregate of `count` elements (RS_STREAMED: ended by '.').
 * Returns -1 when the level stack cannot grow. The attribute bits of the
 * levels not open are 0: an attribute level clears its own as it closes. */
static inline int rs_push(struct reply_scanner *s, unsigned int count, int is_attr)
{
    size_t d = s->depth;

    if (rs_unlikely(s->heap != NULL || d == RESP_INLINE_DEPTH))
        return rs_push_heap(s, count, is_attr);
    s->remaining[d] = count;
    if (is_attr)
        s->attr[d >> 3] |= (unsigned char)(1u << (d & 7));
    s->depth = d + 1;
    return 0;
}

/* A number line of type s->cur ended (its LF consumed). Sets the next state.
 * Returns 1 if that completed the top-level reply, 0 if not, -1 on error. */
static int rs_number_done(struct reply_scanner *s)
{
    long long n = s->num;
    int neg = s->numflags & RS_NEG;

    if (s->numflags & RS_STREAM) {
        /* "$?", "*?", "%?", "~?": only those were let through. */
        s->state = s->cur == '$' ? RS_CHUNK : RS_TYPE;
        if (s->cur != '$' && rs_push(s, RS_STREAMED, 0) < 0)
            return (int)rs_fail(s, "out of memory for a deeply nested reply");
        return 0;
    }
    s->state = RS_TYPE;
    switch (s->cur) {
    case ':':
        return rs_element_done(s);
    case '$': case '!': case '=': case ';':
        if (neg) {
            /* "$-1" is RESP2's null string; no other length is negative. */
            if (s->cur != '$' || n != 1)
                return (int)rs_fail(s, "invalid bulk length");
            return rs_element_done(s);
        }
        if (s->cur == ';' && n == 0)    /* ";0": end of a streamed string */
            return rs_element_done(s);
        s->bulk_left = n;
        s->state = n > 0 ? RS_PAYLOAD : RS_PAYLOAD_CR;
        return 0;
    default: {  /* * % ~ > | */
        int pairs = s->cur == '%' || s->cur == '|';

        if (neg) {
            /* "*-1" is RESP2's null array; no other count is negative. */
            if (s->cur != '*' || n != 1)
                return (int)rs_fail(s, "invalid aggregate length");
            return rs_element_done(s);
        }
        if (n > (long long)(RS_STREAMED - 1) >> pairs) {
            /* Four billion elements would be a reply of 16 GB or more:
             * refused rather than spending 8 bytes per level on counts. */
            return (int)rs_fail(s, "aggregate length out of range");
        }
        if (n == 0)     /* empty aggregate; an empty attribute is just skipped */
            return s->cur == '|' ? 0 : rs_element_done(s);
        if (rs_push(s, (unsigned int)(n << pairs), s->cur == '|') < 0)
            return (int)rs_fail(s, "out of memory for a deeply nested reply");
        return 0;
    }
    }
}

/* A fixed line (_ # .) ended. Same returns as rs_number_done. */
static int rs_fixed_done(struct reply_scanner *s)
{
    s->state = RS_TYPE;
    if (s->cur == '.')      /* end of the streamed aggregate on top */
        s->depth--;
    return rs_element_done(s);
}

ssize_t reply_scan(struct reply_scanner *s, const char *buf, size_t len, int *done)
{
    const char *p = buf, *end = buf + len;
    int r;

    *done = 0;
    if (s->err)
        return -1;

    while (p < end) {
        switch (s->state) {
        case RS_TYPE: {
            char c = *p++;

            if (!s->busy) {
                s->busy = 1;
                s->type = 0;
            }
            if (s->depth == 0 && c != '|')
                s->type = c;
            s->cur = c;
            s->linelen = 0;
            switch (c) {
            case '+': case '-': case '(': case ',':
                s->state = RS_TEXT;
                break;
            case ':': case '$': case '!': case '=':
            case '*': case '%': case '~': case '>': case '|':
                s->num = 0;
                s->numflags = 0;
                s->state = RS_NUM_FIRST;
                break;
            case '#':
                s->state = RS_BOOL;
                break;
            case '_':
                s->state = RS_CR;
                break;
            case '.':
                if (s->depth == 0 || rs_levels(s)[s->depth - 1] != RS_STREAMED)
                    return rs_fail(s, "'.' outside a streamed aggregate");
                s->state = RS_CR;
                break;
            default:
                return rs_fail(s, "invalid reply type byte");
            }
            break;
        }

        case RS_CHUNK:
            if (*p++ != ';')
                return rs_fail(s, "expected ';' in a streamed string");
            s->cur = ';';
            s->num = 0;
            s->numflags = 0;
            s->linelen = 0;
            s->state = RS_NUM_FIRST;
            break;

        case RS_NUM_FIRST:
            if (*p == '?') {
                if (s->cur != '$' && s->cur != '*' && s->cur != '%' && s->cur != '~')
                    return rs_fail(s, "invalid length");
                s->numflags = RS_STREAM;
                s->state = RS_CR;
                p++;
                break;
            }
            if (*p == '-') {
                s->numflags = RS_NEG;
                s->linelen = 1;
                p++;
            }
            s->state = RS_NUM;
            break;

        case RS_NUM:
            while (p < end) {
                unsigned int d = (unsigned char)*p - '0';

                if (d > 9)
                    break;
                /* An integer reply's value is not needed (and may be
                 * -9223372036854775808): only its width is checked. */
                if (s->cur == ':') {
                    if (++s->num > 19)
                        return rs_fail(s, "number out of range");
                } else {
                    if (s->num > (LLONG_MAX - d) / 10)
                        return rs_fail(s, "number out of range");
                    s->num = s->num * 10 + d;
                }
                s->numflags |= RS_DIGITS;
                if (++s->linelen > RESP_MAX_LINE)
                    return rs_fail(s, "line too long");
                p++;
            }
            if (p == end)
                break;
            if (*p++ != '\r' || !(s->numflags & RS_DIGITS))
                return rs_fail(s, s->cur == ':' ? "invalid integer" : "invalid length");
            s->state = RS_LF;
            break;

        case RS_BOOL:
            if (*p != 't' && *p != 'f')
                return rs_fail(s, "invalid boolean");
            p++;
            s->state = RS_CR;
            break;

        case RS_CR:
            if (*p++ != '\r')
                return rs_fail(s, "expected CRLF");
            s->state = RS_LF;
            break;

        case RS_LF:
            if (*p++ != '\n')
                return rs_fail(s, "expected CRLF");
            if (s->cur == '_' || s->cur == '#' || s->cur == '.')
                r = rs_fixed_done(s);
            else
                r = rs_number_done(s);
            if (r < 0)
                return -1;
            if (r > 0)
                goto reply_done;
            break;

        case RS_TEXT: {
            const char *cr = memchr(p, '\r', (size_t)(end - p));
            size_t n = (cr ? cr + 1 : end) - p;

            if (s->cur == ',' && (s->linelen += n) > RESP_MAX_LINE)
                return rs_fail(s, "line too long");
            p += n;
            if (cr)
                s->state = RS_TEXT_CR;
            break;
        }

        case RS_TEXT_CR:
            /* hiredis ends a line at the first CRLF only: a CR not followed
             * by LF is part of the line. */
            if (*p != '\n') {
                s->state = RS_TEXT;
                break;
            }
            p++;
            s->state = RS_TYPE;
            if (rs_element_done(s))
                goto reply_done;
            break;

        case RS_PAYLOAD: {
            size_t avail = (size_t)(end - p);

            if ((unsigned long long)s->bulk_left > avail) {
                s->bulk_left -= (long long)avail;
                p = end;
            } else {
                p += s->bulk_left;
                s->bulk_left = 0;
                s->state = RS_PAYLOAD_CR;
            }
            break;
        }

        case RS_PAYLOAD_CR:
            if (*p++ != '\r')
                return rs_fail(s, "missing CRLF after bulk payload");
            s->state = RS_PAYLOAD_LF;
            break;

        case RS_PAYLOAD_LF:
            if (*p++ != '\n')
                return rs_fail(s, "missing CRLF after bulk payload");
            if (s->cur == ';') {
                s->state = RS_CHUNK;
            } else {
                s->state = RS_TYPE;
                if (rs_element_done(s))
                    goto reply_done;
            }
            break;
        }
    }
    return (ssize_t)len;

reply_done:
    s->busy = 0;
    if (rs_unlikely(s->heap != NULL))
        rs_drop_heap(s);    /* depth is 0: an idle scanner holds no heap memory */
    *done = 1;
    return p - buf;
}
