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
 * one unit. Limits: nesting depth RESP_MAX_DEPTH, header lines of
 * RESP_MAX_LINE bytes; beyond them, or on any byte that cannot start or
 * continue a reply, the scanner reports a protocol error.
 */
#ifndef TTLG_RESP_REPLY_H
#define TTLG_RESP_REPLY_H

#include <stddef.h>
#include <sys/types.h>

#define RESP_MAX_DEPTH 128
#define RESP_MAX_LINE  (64 * 1024)

struct reply_scanner;   /* defined below; treat as opaque outside resp_reply.c */

void reply_scanner_init(struct reply_scanner *s);

/* Scan buf[0..len). Returns the number of bytes consumed:
 *  - if a whole top-level reply ended inside buf, *done = 1 and the return
 *    value is the offset just past its last byte (the scanner is ready for
 *    the next reply);
 *  - otherwise *done = 0 and all len bytes were consumed (the scanner keeps
 *    its state for the next call).
 * Returns -1 on malformed input; reply_scanner_error() says why. */
ssize_t reply_scan(struct reply_scanner *s, const char *buf, size_t len, int *done);

/* Type byte of the top-level reply being scanned, or of the one just
 * completed: '+', '-', ':', '$', '*', '%', '~', '>', '_', ',', '#', '!', '=', '('.
 * For an attribute-prefixed reply it is the type of the reply after the
 * attribute. 0 before the first byte of a reply has been seen. */
char reply_scanner_type(const struct reply_scanner *s);

/* 1 when the scanner is between replies (nothing of the next one seen yet). */
int reply_scanner_idle(const struct reply_scanner *s);

const char *reply_scanner_error(const struct reply_scanner *s);

/* Implementation detail, exposed so sessions can embed the scanner (568
 * bytes on LP64: one 32-bit count per level is most of it). */
struct reply_scanner {
    unsigned char state;            /* where in a line or payload we are (RS_* in resp_reply.c) */
    char type;                      /* type byte of the top-level reply (see above) */
    char cur;                       /* type byte of the line being read */
    unsigned char busy;             /* 1 once a byte of the current reply was seen */
    unsigned char numflags;         /* sign, digits seen, '?' of the number line */
    unsigned char depth;            /* open aggregates, up to RESP_MAX_DEPTH */
    unsigned int linelen;           /* bytes of the current line so far */
    long long num;                  /* number being parsed in a line */
    long long bulk_left;            /* payload bytes still to skip (CRLF excluded) */
    const char *err;                /* static message after a protocol error */
    unsigned char attr[RESP_MAX_DEPTH / 8];   /* bit per level: it is an attribute */
    unsigned int remaining[RESP_MAX_DEPTH];   /* elements owed per level; UINT_MAX = streamed */
};

#endif
