/*
 * resp_reply: the reply framer.
 *
 * Finds where each reply from the backend ends, in RESP2 and RESP3, without
 * building values or copying bytes: the proxy forwards reply bytes as they
 * arrive and only needs to know when one reply is over, to pair it with the
 * request at the head of the session's queue. Debian's hiredis 0.14.1 reads
 * RESP2 only, hence this small state machine of our own.
 *
 * It is resumable at any byte: a reply may be split anywhere across reads.
 * Types: + - : $ * (RESP2), _ , # ! = ( % ~ > | (RESP3), streamed strings
 * ($? then ;N chunks ending in ;0) and streamed aggregates (*? %? ~? ending
 * in .). An attribute (|) belongs to the reply that follows it: the pair is
 * one unit. Header lines are limited to RESP_MAX_LINE bytes; beyond that, or
 * on any byte that cannot start or continue a reply, the scanner reports a
 * protocol error.
 *
 * Nesting depth has no limit, as in Redis: a script returning a cyclic table
 * (local a = {} local b = {a} a[1] = b return a) gets a reply thousands of
 * levels deep (nested *1 until Lua's stack limit), and module replies can
 * nest further still. The scanner keeps a count and an attribute bit per
 * open aggregate: the first RESP_INLINE_DEPTH levels live inside the struct,
 * and a reply nested deeper moves them to a heap stack that doubles as
 * needed. Memory is bounded by the reply itself (each level costs at least
 * four bytes of input, and the stack about 4.1 bytes per level).
 *
 * Ownership: the heap stack belongs to the scanner. It is allocated when a
 * reply first goes deeper than RESP_INLINE_DEPTH and released when that reply
 * ends or on a protocol error, so shallow replies never allocate and an idle
 * or failed scanner holds no heap memory. A scanner still holds it when its
 * owner drops it in the middle of such a reply (the connection closes while a
 * deep reply is in flight): whoever embeds or allocates a struct
 * reply_scanner must call reply_scanner_free() before freeing or forgetting
 * it, and use reply_scanner_free(), not reply_scanner_init(), to reset one
 * that has been used (init would leak it). Do not copy the struct while it
 * holds heap memory (both copies would own the block).
 */
#ifndef TTLG_RESP_REPLY_H
#define TTLG_RESP_REPLY_H

#include <stddef.h>
#include <sys/types.h>

#define RESP_INLINE_DEPTH 16            /* levels kept inside the struct */
#define RESP_MAX_LINE     (64 * 1024)

struct reply_scanner;   /* defined below; treat as opaque outside resp_reply.c */

/* Make a scanner ready for its first reply. For raw memory (a new struct);
 * to reset one that has been used, call reply_scanner_free(). */
void reply_scanner_init(struct reply_scanner *s);

/* Release the heap memory the scanner holds, if any, and leave it as
 * reply_scanner_init() does (idle, type 0, no error): it can be dropped, or
 * used again right away. Safe on an idle, failed or just-initialized scanner,
 * and twice in a row. */
void reply_scanner_free(struct reply_scanner *s);

/* Scan buf[0..len). Returns the number of bytes consumed:
 *  - if a whole top-level reply ended inside buf, *done = 1 and the return
 *    value is the offset just past its last byte (the scanner is ready for
 *    the next reply);
 *  - otherwise *done = 0 and all len bytes were consumed (the scanner keeps
 *    its state for the next call).
 * Returns -1 on malformed input (or if a heap stack for a very deep reply
 * cannot be allocated); reply_scanner_error() says why. */
ssize_t reply_scan(struct reply_scanner *s, const char *buf, size_t len, int *done);

/* Type byte of the top-level reply being scanned, or of the one just
 * completed: '+', '-', ':', '$', '*', '%', '~', '>', '_', ',', '#', '!', '=', '('.
 * For an attribute-prefixed reply it is the type of the reply after the
 * attribute. 0 before the first byte of a reply has been seen. */
char reply_scanner_type(const struct reply_scanner *s);

/* 1 when the scanner is between replies (nothing of the next one seen yet). */
int reply_scanner_idle(const struct reply_scanner *s);

const char *reply_scanner_error(const struct reply_scanner *s);

/* Implementation detail, exposed so sessions can embed the scanner (112
 * bytes on LP64, most of it the inline counts). */
struct reply_scanner {
    unsigned int *heap;             /* NULL, or the stack of every level once deeper than
                                     * RESP_INLINE_DEPTH: 1 << heap_shift counts, then a
                                     * bit per level */
    size_t depth;                   /* open aggregates */
    union {                         /* never needed at the same time */
        long long num;              /* number being parsed in a line */
        long long bulk_left;        /* payload bytes still to skip (CRLF excluded) */
    };
    const char *err;                /* static message after a protocol error */
    unsigned int linelen;           /* bytes of the current line so far */
    unsigned char state;            /* where in a line or payload we are (RS_* in resp_reply.c) */
    char type;                      /* type byte of the top-level reply (see above) */
    char cur;                       /* type byte of the line being read */
    unsigned char busy;             /* 1 once a byte of the current reply was seen */
    unsigned char numflags;         /* sign, digits seen, '?' of the number line */
    unsigned char heap_shift;       /* log2 of the heap stack's capacity in levels */
    unsigned char attr[RESP_INLINE_DEPTH / 8];  /* bit per inline level: it is an attribute */
    unsigned int remaining[RESP_INLINE_DEPTH];  /* elements owed per inline level;
                                                 * UINT_MAX = streamed */
};

#endif
