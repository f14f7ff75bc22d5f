/*
 * resp_request: the request framer.
 *
 * Turns the bytes a client sends into requests: the command name and its
 * arguments as slices, plus the raw span of bytes to forward unchanged.
 *
 *   RESP requests (*N\r\n$len\r\n...) are framed by hiredis's redisReader
 *   with object callbacks that record where each argument lies instead of
 *   copying it. Inline requests ("PING\r\n", as typed over telnet) are split
 *   here the way redis-server splits them (sdssplitargs rules). Protocol
 *   errors get the messages redis-server 7.0 gives, and lengths beyond its
 *   limits are refused before anything is buffered for them.
 *
 * The caller owns the input buffer. The framer reads from buf[*pos..len) and
 * never writes to it; argv slices point into buf (RESP) or into the framer's
 * scratch space (inline arguments with quotes or escapes) and stay valid
 * until the next call that moves or changes buf, or the next req_next().
 */
#ifndef TTLG_RESP_REQUEST_H
#define TTLG_RESP_REQUEST_H

#include <stddef.h>
#include "util.h"

/* redis-server 7.0 limits (proto-max-bulk-len default, inline buffer). */
#define REQ_MAX_BULK        (512LL * 1024 * 1024)
#define REQ_MAX_MULTIBULK   2147483647LL
#define REQ_MAX_INLINE      (64 * 1024)
#define REQ_HAND_MIN        4096    /* a bulk hiredis is not given (req_framer_set_stream()) */

/* The shape of a request returned early (REQ_HEAD): it has `total`
 * arguments, argv[big] is big_len bytes long and the first it lacks. */
struct req_head {
    long long total;
    int big;
    long long big_len;
};

struct request {
    int argc;
    struct slice *argv;         /* argv[0] is the command name as sent */
    struct slice raw;           /* the exact bytes of the request in the input buffer */
    int inline_cmd;             /* 1 for an inline request */
    const struct req_head *head;    /* REQ_HEAD: the rest of its shape; else NULL */
};

struct req_framer;

struct req_framer *req_framer_new(void);
void req_framer_free(struct req_framer *f);

#define REQ_HEAD 3
#define REQ_PART 4

/* Frame the next request from buf[*pos..len).
 * Returns  1: *req is filled, *pos moved past the request;
 *   REQ_HEAD: a large request's head (req_framer_set_stream()), *pos not moved;
 *   REQ_PART: the next bytes of a streamed request in req->raw (argc 0),
 *             *pos moved past them;
 *          0: more bytes are needed (bytes already seen are remembered; call
 *             again with the same buffer contents from *pos, possibly moved,
 *             plus more);
 *         -1: protocol error; req_framer_error() is the line to send to the
 *             client before closing ("ERR Protocol error: ..."). */
int req_next(struct req_framer *f, const char *buf, size_t len, size_t *pos, struct request *req);

/* The caller moved the unconsumed bytes of its buffer: what was at offset
 * `from` is now at offset `to` (to <= from). */
void req_framer_moved(struct req_framer *f, size_t from, size_t to);

/* The client has not authenticated to a Redis that requires it: refuse
 * multibulks of more than 10 arguments and bulks over 16 KiB at their
 * header, as redis-server does before AUTH. */
#define REQ_MAX_UNAUTH_MULTIBULK 10
#define REQ_MAX_UNAUTH_BULK      16384
void req_framer_set_unauthenticated(struct req_framer *f, int on);

/* Inline commands split as Valkey 9 does: a closing quote ends the quoted
 * part, not the argument ('it''s' is its); otherwise as Redis, where a
 * closing quote must be followed by a space. */
void req_framer_set_inline_join(struct req_framer *f, int on);

/* Large requests. A bulk of hand_min bytes or more (4 KiB by default) is
 * not given to hiredis (REQ_HAND_MIN): its payload is never copied, and the
 * rest of the request is framed by hand (hand_min 0: every RESP request,
 * from its header on). After req_framer_set_stream(f, hand_min,
 * stream_min), a RESP request with a bulk of stream_min bytes or more
 * (0: none) whose payload is not all in the buffer yet is
 * returned early as its head (REQ_HEAD): argv holds the arguments before
 * that bulk, raw its bytes up to the bulk's payload, req->head the rest of
 * its shape. Before the next call the caller either
 *   - streams it: req_framer_stream() returns the offset where the payload
 *     starts (raw's end; continue from there); the following calls return
 *     the rest of the request as REQ_PART, as it arrives, each byte once and
 *     nothing copied or parsed but the bulk headers; req_framer_streaming()
 *     is 0 once the last part was returned; or
 *   - holds it: req_framer_hold(); it is framed as usual and returned whole.
 * While streaming, a protocol error in a later bulk header is -1 as usual.
 * Once the last part was returned, req_framer_tail() gives the arguments
 * after the large one (into argv[0..max)): each of up to REQ_TAIL_ARG_MAX
 * bytes as sent, a longer one as an empty string. It returns how many, or
 * -1 when there are more than max. Call it before the next req_next(); the
 * bytes stay valid until the next request streams. */
#define REQ_TAIL_ARG_MAX 256
void req_framer_set_stream(struct req_framer *f, size_t hand_min, size_t stream_min);
size_t req_framer_stream(struct req_framer *f);
void req_framer_hold(struct req_framer *f);
int req_framer_streaming(const struct req_framer *f);
int req_framer_tail(struct req_framer *f, struct slice *argv, int max);

/* Forget what was framed after the last complete request: the next call
 * starts afresh at the offset it is given (the caller rewound its buffer). */
void req_framer_rewind(struct req_framer *f);

/* 1 when the framer holds no partial request. */
int req_framer_idle(const struct req_framer *f);

/* 1 when an empty request (an empty inline line, *0 or *-1) was skipped
 * since the last call: Redis runs no command for one, but resets the client
 * as after a command, which uses up a pending CLIENT REPLY SKIP. Clears it. */
int req_framer_take_empty(struct req_framer *f);

const char *req_framer_error(const struct req_framer *f);

/* Give back memory held for parsing when idle (memcached's rbuf_release). */
void req_framer_release(struct req_framer *f);

#endif
