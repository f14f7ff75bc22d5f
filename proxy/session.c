/*
 * session: one client, one backend connection, and the queue that keeps
 * their replies in order.
 *
 *            client                         ttlguard                          redis
 *  requests  ------> client_read --> req_next (resp_request) --> handle_request
 *                                        |                          |  push pending entry
 *                                        |                          |  raw span -> tob batch
 *                                        v                          v
 *                                   ibuf (partial only)        flush: try_write, copy rest
 *                                                                    ------------------> backend
 *  replies   <------ flush <-- toc batch <-- backend_read --> reply_scan (resp_reply)
 *                                   ^            pairs each complete reply with the
 *                                   |            head of the pending queue; LOCAL entries
 *                                   +----------- (our own replies) go out when they
 *                                                reach the head, never earlier
 *
 * Zero copy: bytes the proxy does not change are written straight from the
 * buffer they were read into (the loop's shared read buffer, or the session's
 * ibuf when a request spans reads), gathered into one writev per callback.
 * Only what the kernel does not take at once is copied, into a write chunk
 * owned by libuv's write queue. Replies are forwarded as they arrive, even
 * before they are complete: only their end matters to the queue.
 *
 * Bounded: when the write queue towards one side passes max_buffer, the
 * session stops reading from the other side; it resumes when the queue has
 * drained to half. The pending queue counts against the client side too.
 *
 * Pairing replies with requests needs to know how many replies a request
 * gets: CLIENT REPLY OFF/SKIP suppress them, RESP2 pub/sub confirmations come
 * one per channel, RESP3 pushes and MONITOR lines and pub/sub messages belong
 * to no request. The session mirrors that protocol state from what passes.
 *
 * With multiplex = on a session starts in B_SHARED: its requests go to one
 * backend connection shared by all such sessions (the mux, further down),
 * whose replies reach reply_bytes() through a FIFO of sessions instead of
 * the session's own backend_read(). Everything after the framing of a reply
 * is the same code for both.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "session.h"
#include "commands.h"
#include "events.h"
#include "stats.h"
#include "server.h"
#include "policy.h"
#include "resp_request.h"
#include "resp_reply.h"
#include "util.h"

#define READ_CHUNK      (64 * 1024)
#define PEEK_MAX        64      /* first bytes of a reply kept for inspection */
#define TAIL_MAX        32      /* last bytes of a reply kept for inspection */
#define IOV_MAX_BATCH   128
#define QUERY_MAX       (1024LL * 1024 * 1024)   /* redis client-query-buffer-limit */

enum backend_state {
    B_CONNECTING,   /* connect in flight; client not read */
    B_AUTH,         /* handshake: the proxy's AUTH (backend_password) or PING is answered
                       first; the client is not read yet */
    B_READY,        /* forwarding */
    B_DOWN,         /* no backend: requests are answered with an error */
    B_CLOSING,      /* uv_close in flight for the backend handle */
    B_CLOSED,       /* backend went away after READY: the session ends */
    B_SHARED,       /* multiplex = on: requests go over the shared connection (mux) */
};

enum pend_kind {
    PK_FORWARD,     /* the backend's reply goes to the client */
    PK_LOCAL,       /* our own reply, sent when it reaches the head */
    PK_INTERNAL,    /* the backend's reply is for the proxy (AUTH) */
};

enum pend_what {
    PW_PLAIN,
    PW_HELLO,       /* reply type tells the protocol: % is RESP3, * is RESP2 */
    PW_MONITOR,     /* +OK enters monitor mode */
    PW_RESET,       /* reply resets protocol state */
    PW_SUB,         /* RESP2 (un)subscribe: `remaining` confirmations */
    PW_AUTH,        /* backend AUTH sent by the proxy */
    PW_PING,        /* PING sent by the proxy: does the backend want AUTH from clients? */
    PW_CLIENT_AUTH, /* the client's AUTH (or HELLO ... AUTH): a failure undoes the
                       optimistic `unauth = 0` */
    PW_REPLACE,     /* PK_INTERNAL: the client gets `local` instead of the backend's reply */
    PW_POLICY,      /* PK_INTERNAL: CONFIG GET maxmemory-policy on a new backend connection */
    PW_QUEUED,      /* PK_INTERNAL: +QUEUED for the command in the proxy's own MULTI, or the
                       error that refused it (kept: EXEC will only say EXECABORT) */
    PW_EXEC_FIRST,  /* PK_INTERNAL: EXEC of the proxy's own MULTI: the client gets element 1 */
};

/* Where in an EXEC reply of the proxy's own MULTI the bytes are. */
enum exec_phase { XP_START, XP_HEADER, XP_FIRST, XP_REST, XP_ALL };

enum sub_kind { SUB_CHANNEL, SUB_PATTERN, SUB_SHARD };

struct pending {
    uint8_t kind;           /* enum pend_kind */
    uint8_t what;           /* enum pend_what */
    uint8_t subkind;        /* enum sub_kind, for PW_SUB */
    uint8_t local_owned;    /* `local` is malloc'ed and freed when popped */
    uint8_t rewritten;      /* for the latency histograms */
    int32_t remaining;      /* replies still owed; -1: "as many as subscriptions" (PW_SUB) */
    uint32_t local_len;
    const char *local;      /* PK_LOCAL: the reply bytes */
    uint64_t t0;            /* uv_hrtime() when forwarded (PK_FORWARD) */
};

/* Bytes gathered for one direction during one callback. Spans point into
 * read buffers that stay untouched until the batch is flushed; own bytes
 * (local replies) are copied into the arena and resolved at flush time. */
struct batch {
    uv_buf_t iov[IOV_MAX_BATCH];
    size_t arena_off[IOV_MAX_BATCH];    /* (size_t)-1: iov is a span */
    int n;
    size_t bytes;
    char *arena;
    size_t arena_len, arena_cap;
};

/* A write libuv did not finish at once: one allocation, freed in its callback. */
struct wchunk {
    uv_write_t req;
    struct session *s;
    size_t len;
    char data[];
};

union stream {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
};

struct session {
    struct server *srv;
    struct session *prev, *next;    /* srv->sessions */

    union stream client;
    union stream backend;
    uv_connect_t creq;
    int mux_owed;                   /* replies owed for bytes not yet handed to the mux */
    unsigned pin_wait:1;            /* a stateful request waits for a dedicated connection */
    uv_shutdown_t client_sreq;
    uv_shutdown_t backend_sreq;
    int handles;                    /* open uv handles; the session is freed at 0 */

    enum backend_state bstate;
    uint64_t connect_started;       /* monotonic ms of the last connect attempt */

    unsigned client_reading:1;      /* uv_read_start active on client */
    unsigned backend_reading:1;
    unsigned client_eof:1;          /* client half-closed: finish owed replies, then close */
    unsigned draining:1;            /* server shutdown: no new requests */
    unsigned close_after_flush:1;   /* protocol error or backend gone: close when written */
    unsigned closing:1;             /* uv_close called */
    unsigned resp3:1;
    unsigned monitor:1;
    unsigned reply_off:1;           /* CLIENT REPLY OFF */
    unsigned reply_skip:1;          /* CLIENT REPLY SKIP: the next command gets no reply */
    unsigned backend_counted:1;     /* counted in stats_proxy.backend_connections */
    unsigned in_multi:1;            /* between MULTI and EXEC/DISCARD */
    unsigned watching:1;            /* WATCH active: the proxy must not EXEC on its own */
    unsigned auth_required:1;       /* the backend answered NOAUTH to the proxy's PING */
    unsigned unauth:1;              /* the client has not authenticated (yet) */
    unsigned multi_dirty:1;         /* a command in this MULTI was rejected: EXEC aborts */
    int db;                         /* SELECTed db, for events */
    char *client_name;              /* CLIENT SETNAME, for events; NULL when unset */
    char *client_addr;              /* peer address, filled on first event */
    struct sbuf multi_fix;          /* follow-ups deferred to after EXEC */
    int multi_nfix;
    unsigned char xphase;           /* enum exec_phase */
    struct sbuf xerr;               /* queue-time error of the command in the proxy's MULTI */
    struct reply_scanner *xsub;     /* frames EXEC's first element; allocated on first use */

    /* Client input: only the partial request that spans reads lives here. */
    char *ibuf;
    size_t ilen, icap;
    struct req_framer *framer;

    /* Pending queue: ring buffer, one entry per reply owed to the client. */
    struct pending *q;
    uint32_t qhead, qlen, qcap;

    /* Reply side. */
    struct reply_scanner rs;
    char peek[PEEK_MAX];
    uint32_t peeklen;
    char tail[TAIL_MAX];
    uint32_t taillen;
    int nchan, npat, nshard;        /* RESP2 subscriptions, mirrored from confirmations */

    uint64_t last_active;           /* monotonic ms */
};

/* One batch per direction, shared by all sessions: callbacks do not nest.
 * Replies read from a shared backend connection go to many clients in one
 * callback: toc belongs to one session at a time and is flushed when the
 * next reply is for another one. */
static struct batch tob;    /* to the backend */
static struct batch toc;    /* to the client of toc_owner */
static struct session *toc_owner;

#define MUX_MAX_INFLIGHT 256    /* a session pipelining deeper gets its own connection */

static struct mux *mux_current;     /* one loop, one shared connection */
static int mux_paused(void);
static int mux_shareable(void);
static void mux_append(struct session *s);
static void mux_forget(struct session *s);
static void mux_session_settle(struct session *s);
static int needs_own_connection(const struct request *req);
static void reply_bytes(struct session *s, const char *p, size_t used, int done, char type,
                        int reply_start);
static void batch_add_copy(struct batch *b, const char *p, size_t n);

static void client_read_start(struct session *s);
static void client_read_stop(struct session *s);
static void client_maybe_resume(struct session *s);
static void on_backend_closed_then_serve(struct session *s);
static void backend_read_start(struct session *s);
static void backend_connect(struct session *s);
static void process_input(struct session *s, const char *data, size_t len, int in_ibuf);
static void maybe_finish(struct session *s);

/* ------------------------------------------------------------------------ */
/* Batches and writes                                                        */

static void batch_add(struct batch *b, const char *p, size_t n);

static void batch_reset(struct batch *b)
{
    b->n = 0;
    b->bytes = 0;
    b->arena_len = 0;
}

static void on_write(uv_write_t *req, int status)
{
    struct wchunk *c = (struct wchunk *)req;
    struct session *s = c->s;
    uv_stream_t *dst = req->handle;
    free(c);
    if (status < 0) {
        if (status != UV_ECANCELED && !s->closing) {
            log_debug("write error: %s", uv_strerror(status));
            session_close(s);
        }
        return;
    }
    if (s->closing)
        return;
    /* Resume the side we stopped reading once the queue drained to half. */
    size_t limit = s->srv->cfg->max_buffer;
    if (dst == &s->backend.stream) {
        client_maybe_resume(s);
    } else {
        if (!s->backend_reading && uv_stream_get_write_queue_size(dst) <= limit / 2)
            backend_read_start(s);
        if (s->bstate == B_SHARED)
            client_maybe_resume(s);
        maybe_finish(s);
    }
}

/* Write everything gathered in b to dst: what the kernel takes now is not
 * copied; the rest is copied into one chunk queued behind earlier writes.
 * Returns -1 if the stream failed (the session is being closed). */
static int batch_flush(struct session *s, struct batch *b, uv_stream_t *dst)
{
    if (b->n == 0)
        return 0;
    for (int i = 0; i < b->n; i++)
        if (b->arena_off[i] != (size_t)-1)
            b->iov[i].base = b->arena + b->arena_off[i];

    size_t total = b->bytes;
    size_t done = 0;
    int r = uv_try_write(dst, b->iov, (unsigned)b->n);
    if (r >= 0) {
        done = (size_t)r;
    } else if (r != UV_EAGAIN) {
        batch_reset(b);
        log_debug("write error: %s", uv_strerror(r));
        session_close(s);
        return -1;
    }
    if (done < total) {
        struct wchunk *c = xmalloc(sizeof *c + (total - done));
        c->s = s;
        c->len = total - done;
        char *out = c->data;
        size_t skip = done;
        for (int i = 0; i < b->n; i++) {
            size_t len = b->iov[i].len;
            if (skip >= len) {
                skip -= len;
                continue;
            }
            memcpy(out, b->iov[i].base + skip, len - skip);
            out += len - skip;
            skip = 0;
        }
        uv_buf_t buf = uv_buf_init(c->data, (unsigned)c->len);
        r = uv_write(&c->req, dst, &buf, 1, on_write);
        if (r < 0) {
            free(c);
            batch_reset(b);
            session_close(s);
            return -1;
        }
    }
    batch_reset(b);
    return 0;
}

/* Write what toc holds to its owner's client. */
static void flush_client(void)
{
    struct session *s = toc_owner;
    if (toc.n == 0)
        return;
    if (s->closing) {
        batch_reset(&toc);
        return;
    }
    s->srv->stats.bytes_to_clients += toc.bytes;
    if (batch_flush(s, &toc, &s->client.stream) < 0)
        return;
    if (uv_stream_get_write_queue_size(&s->client.stream) > s->srv->cfg->max_buffer) {
        if (s->backend_reading) {
            uv_read_stop(&s->backend.stream);
            s->backend_reading = 0;
        } else if (s->bstate == B_SHARED) {
            /* The shared connection is not paused for one slow reader: no
             * new requests instead; what is in flight is bounded. */
            client_read_stop(s);
        }
    }
}

static void flush_all(struct session *s)
{
    if (s->closing) {
        batch_reset(&tob);
        if (toc_owner == s)
            batch_reset(&toc);
        return;
    }
    if (tob.n > 0) {
        s->srv->stats.bytes_to_backends += tob.bytes;
        if (s->bstate == B_SHARED) {
            mux_append(s);
        } else {
            if (batch_flush(s, &tob, &s->backend.stream) < 0)
                return;
            if (s->client_reading &&
                uv_stream_get_write_queue_size(&s->backend.stream) > s->srv->cfg->max_buffer)
                client_read_stop(s);
        }
    }
    flush_client();
}

/* Add bytes for s's client (copied, or a span valid until the flush). */
static void toc_add(struct session *s, const char *p, size_t n, int copy)
{
    if (toc.n > 0 && toc_owner != s)
        flush_client();
    toc_owner = s;
    if (toc.n + 1 > IOV_MAX_BATCH)
        flush_all(s);
    if (copy)
        batch_add_copy(&toc, p, n);
    else
        batch_add(&toc, p, n);
}

static void batch_add(struct batch *b, const char *p, size_t n)
{
    if (n == 0)
        return;
    if (b->n > 0 && b->arena_off[b->n - 1] == (size_t)-1 &&
        b->iov[b->n - 1].base + b->iov[b->n - 1].len == p) {
        b->iov[b->n - 1].len += n;      /* adjacent span: extend */
    } else {
        ASSERT(b->n < IOV_MAX_BATCH);
        b->iov[b->n] = uv_buf_init((char *)p, (unsigned)n);
        b->arena_off[b->n] = (size_t)-1;
        b->n++;
    }
    b->bytes += n;
}

static void batch_add_copy(struct batch *b, const char *p, size_t n)
{
    if (b->arena_len + n > b->arena_cap) {
        b->arena_cap = (b->arena_len + n) * 2;
        b->arena = xrealloc(b->arena, b->arena_cap);
    }
    memcpy(b->arena + b->arena_len, p, n);
    ASSERT(b->n < IOV_MAX_BATCH);
    b->iov[b->n] = uv_buf_init(NULL, (unsigned)n);
    b->arena_off[b->n] = b->arena_len;
    b->n++;
    b->arena_len += n;
    b->bytes += n;
}

/* Flush a batch early when it is about to run out of iov slots. */
static void room_for(struct session *s, struct batch *b, int slots)
{
    if (b->n + slots > IOV_MAX_BATCH)
        flush_all(s);
}

/* ------------------------------------------------------------------------ */
/* Pending queue                                                             */

static struct pending *q_head(struct session *s)
{
    return s->qlen ? &s->q[s->qhead] : NULL;
}

static struct pending *q_push(struct session *s)
{
    if (s->qlen == s->qcap) {
        uint32_t ncap = s->qcap ? s->qcap * 2 : 16;
        struct pending *nq = xmalloc(sizeof *nq * ncap);
        for (uint32_t i = 0; i < s->qlen; i++)
            nq[i] = s->q[(s->qhead + i) % s->qcap];
        free(s->q);
        s->q = nq;
        s->qhead = 0;
        s->qcap = ncap;
    }
    struct pending *p = &s->q[(s->qhead + s->qlen) % s->qcap];
    s->qlen++;
    memset(p, 0, sizeof *p);
    p->remaining = 1;
    return p;
}

static void q_pop(struct session *s)
{
    struct pending *p = &s->q[s->qhead];
    if (p->local_owned)
        free((char *)p->local);
    s->qhead = (s->qhead + 1) % s->qcap;
    s->qlen--;
    if (s->qlen == 0 && s->qcap > 64) {     /* give memory back after a deep pipeline */
        free(s->q);
        s->q = NULL;
        s->qcap = 0;
        s->qhead = 0;
    }
}

/* The backend connection failed before it was ready: drop what waited for it. */
static void q_drop_backend_entries(struct session *s)
{
    uint32_t n = s->qlen;
    for (uint32_t i = 0; i < n; i++) {
        struct pending p = s->q[s->qhead];
        s->q[s->qhead].local_owned = 0;
        q_pop(s);
        if (p.kind == PK_LOCAL)
            *q_push(s) = p;
    }
}

/* Replies Redis will send on the shared connection for what s just queued. */
static void owe(struct session *s, int n)
{
    if (s->bstate == B_SHARED)
        s->mux_owed += n;
}

/* Too many requests in flight count against max_buffer like queued bytes:
 * a client that pipelines without reading cannot grow the queue forever. */
static int q_over_limit(struct session *s)
{
    return (size_t)s->qlen * sizeof(struct pending) > s->srv->cfg->max_buffer;
}

/* Send LOCAL entries that reached the head (only between replies). */
static void emit_locals(struct session *s)
{
    struct pending *p;
    while ((p = q_head(s)) != NULL && p->kind == PK_LOCAL) {
        toc_add(s, p->local, p->local_len, 1);
        q_pop(s);
    }
}

/* Start reading requests again if nothing holds them back. */
static void client_maybe_resume(struct session *s)
{
    if (s->client_reading || s->client_eof || s->draining || s->close_after_flush ||
        s->pin_wait || q_over_limit(s))
        return;
    if (s->bstate == B_READY) {
        if (uv_stream_get_write_queue_size(&s->backend.stream) > s->srv->cfg->max_buffer / 2)
            return;
    } else if (s->bstate == B_SHARED) {
        if (uv_stream_get_write_queue_size(&s->client.stream) > s->srv->cfg->max_buffer / 2 ||
            mux_paused())
            return;
    } else if (s->bstate != B_DOWN) {
        return;
    }
    client_read_start(s);
}

/* Queue a reply of our own behind everything owed so far.
 * text is copied unless is_static. */
static void queue_local(struct session *s, const char *text, size_t len, int is_static)
{
    struct pending *p = q_push(s);
    p->kind = PK_LOCAL;
    p->local = is_static ? text : xmemdup(text, len);
    p->local_owned = !is_static;
    p->local_len = (uint32_t)len;
}

static void queue_error(struct session *s, const char *msg)
{
    char line[512];
    int n = snprintf(line, sizeof line, "-%s\r\n", msg);
    if (n >= (int)sizeof line)
        n = sizeof line - 1;
    queue_local(s, line, (size_t)n, 0);
}

/* ------------------------------------------------------------------------ */
/* Session lifetime                                                          */

static void on_handle_closed(uv_handle_t *h)
{
    struct session *s = h->data;
    if (h == &s->backend.handle && s->backend_counted) {
        s->backend_counted = 0;
        stats_proxy.backend_connections--;
    }
    if (h == &s->backend.handle && !s->closing) {
        /* A failed connect attempt: the handle can be used again. */
        s->handles--;
        s->bstate = B_DOWN;
        q_drop_backend_entries(s);
        if (!s->draining && !s->close_after_flush)
            on_backend_closed_then_serve(s);
        return;
    }
    if (--s->handles > 0)
        return;
    mux_forget(s);
    if (toc_owner == s) {
        batch_reset(&toc);
        toc_owner = NULL;
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        s->srv->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->srv->nsessions--;
    server_session_gone(s->srv);
    while (s->qlen)
        q_pop(s);
    free(s->q);
    free(s->ibuf);
    free(s->client_name);
    free(s->client_addr);
    free(s->multi_fix.p);
    free(s->xsub);
    free(s->xerr.p);
    req_framer_free(s->framer);
    free(s);
}

void session_close(struct session *s)
{
    if (s->closing)
        return;
    s->closing = 1;
    s->srv->nclients--;
    if (!uv_is_closing(&s->client.handle))
        uv_close(&s->client.handle, on_handle_closed);
    if (s->handles > 1 && !uv_is_closing(&s->backend.handle))    /* backend handle open */
        uv_close(&s->backend.handle, on_handle_closed);
}

static void on_client_shutdown(uv_shutdown_t *req, int status)
{
    session_close(req->data);
}

/* Close once everything owed has been written to the client. */
static void maybe_finish(struct session *s)
{
    if (s->closing || !s->close_after_flush)
        return;
    if (s->qlen > 0 && (s->bstate == B_READY || s->bstate == B_SHARED))
        return;     /* replies still owed (a protocol error waits its turn) */
    if (uv_stream_get_write_queue_size(&s->client.stream) > 0)
        return;
    s->close_after_flush = 0;
    s->client_sreq.data = s;
    if (uv_shutdown(&s->client_sreq, &s->client.stream, on_client_shutdown) < 0)
        session_close(s);
}

static void finish_after_flush(struct session *s)
{
    client_read_stop(s);
    s->close_after_flush = 1;
    maybe_finish(s);
}

/* The backend connection is gone after it was ready: the client gets what
 * was already received and then its connection closes, as with Redis. */
static void backend_lost(struct session *s, const char *why)
{
    log_debug("backend connection lost: %s", why);
    s->bstate = B_CLOSED;
    if (s->backend_reading)
        uv_read_stop(&s->backend.stream);
    s->backend_reading = 0;
    if (reply_scanner_idle(&s->rs))
        emit_locals(s);
    flush_all(s);
    if (!s->closing)
        finish_after_flush(s);
}

/* ------------------------------------------------------------------------ */
/* Reading from the client                                                   */

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct session *s = h->data;
    if (s->ilen == 0 && (s->bstate == B_READY || s->bstate == B_DOWN || s->bstate == B_SHARED)) {
        buf->base = s->srv->rbuf;
        buf->len = s->srv->rbuf_size;
        return;
    }
    if (s->icap - s->ilen < READ_CHUNK) {
        size_t ncap = s->icap ? s->icap * 2 : 2 * READ_CHUNK;
        if (ncap < s->ilen + READ_CHUNK)
            ncap = s->ilen + READ_CHUNK;
        s->ibuf = xrealloc(s->ibuf, ncap);
        s->icap = ncap;
    }
    buf->base = s->ibuf + s->ilen;
    buf->len = s->icap - s->ilen;
}

static void on_backend_shutdown(uv_shutdown_t *req, int status)
{
    /* Nothing to do: the backend closes its side when it has answered. */
}

static void client_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct session *s = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        client_read_stop(s);
        if (nread != UV_EOF || (s->bstate != B_READY && s->bstate != B_SHARED) || s->qlen == 0) {
            session_close(s);
            return;
        }
        if (s->bstate == B_SHARED) {
            s->client_eof = 1;
            finish_after_flush(s);  /* once the replies owed are in */
            return;
        }
        /* Half-closed (e.g. `nc -N`): let Redis finish what it read, as if
         * the client were talking to it directly: pass the EOF on. */
        s->client_eof = 1;
        s->backend_sreq.data = s;
        if (uv_shutdown(&s->backend_sreq, &s->backend.stream, on_backend_shutdown) < 0)
            session_close(s);
        return;
    }
    s->srv->stats.bytes_from_clients += (uint64_t)nread;
    s->last_active = now_ms_monotonic();

    int in_ibuf = buf->base != s->srv->rbuf;
    if (in_ibuf) {
        s->ilen += (size_t)nread;
        process_input(s, s->ibuf, s->ilen, 1);
    } else {
        process_input(s, buf->base, (size_t)nread, 0);
    }
}

static void client_read_start(struct session *s)
{
    if (s->client_reading || s->closing)
        return;
    if (uv_read_start(&s->client.stream, client_alloc, client_read) == 0)
        s->client_reading = 1;
}

static void client_read_stop(struct session *s)
{
    if (!s->client_reading)
        return;
    uv_read_stop(&s->client.stream);
    s->client_reading = 0;
}

/* Protocol state that follows from a request, before it is forwarded. */
static void track_request(struct session *s, const struct request *req, struct pending *p)
{
    struct slice cmd = req->argv[0];
    switch (cmd.len) {
    case 4:
        /* Assume it succeeds, as for HELLO: Redis enforces the real limits. */
        if (slice_eq_nocase(cmd, "auth") && (req->argc == 2 || req->argc == 3)) {
            p->what = PW_CLIENT_AUTH;
            s->unauth = 0;
        }
        break;
    case 5:
        if (slice_eq_nocase(cmd, "hello")) {
            /* Later requests of the same pipeline are judged in the new
             * protocol: assume HELLO succeeds, undo when it fails. */
            long long ver;
            p->what = PW_HELLO;
            p->subkind = s->resp3;
            if (req->argc >= 2 && slice_to_ll(req->argv[1], &ver) == 0 && (ver == 2 || ver == 3))
                s->resp3 = ver == 3;
            for (int i = 2; i + 2 < req->argc; i++)
                if (slice_eq_nocase(req->argv[i], "auth")) {
                    p->subkind |= 2;
                    s->unauth = 0;
                }
        } else if (slice_eq_nocase(cmd, "reset")) {
            p->what = PW_RESET;
            s->resp3 = 0;
        }
        break;
    case 7:
        if (slice_eq_nocase(cmd, "monitor"))
            p->what = PW_MONITOR;
        break;
    default:
        break;
    }
}

/* RESP2/RESP3 subscribe-family: how many regular replies does it get?
 * Returns 1 and fills p when cmd is one. */
static int track_pubsub(struct session *s, const struct request *req, struct pending *p)
{
    struct slice cmd = req->argv[0];
    int sub;
    enum sub_kind kind;

    if (cmd.len < 9 || cmd.len > 12)
        return 0;
    if (slice_eq_nocase(cmd, "subscribe"))          { sub = 1; kind = SUB_CHANNEL; }
    else if (slice_eq_nocase(cmd, "psubscribe"))    { sub = 1; kind = SUB_PATTERN; }
    else if (slice_eq_nocase(cmd, "ssubscribe"))    { sub = 1; kind = SUB_SHARD; }
    else if (slice_eq_nocase(cmd, "unsubscribe"))   { sub = 0; kind = SUB_CHANNEL; }
    else if (slice_eq_nocase(cmd, "punsubscribe"))  { sub = 0; kind = SUB_PATTERN; }
    else if (slice_eq_nocase(cmd, "sunsubscribe"))  { sub = 0; kind = SUB_SHARD; }
    else return 0;

    if (sub && req->argc < 2)
        return 0;           /* arity error: one ordinary error reply */
    if (s->resp3) {
        p->remaining = 0;   /* every confirmation is a push */
        return 1;
    }
    p->what = PW_SUB;
    p->subkind = kind;
    p->remaining = req->argc > 1 ? req->argc - 1 : -1;
    return 1;
}

/* CLIENT REPLY ON|OFF|SKIP. Returns 1 when req is one of them. */
static int track_client_reply(struct session *s, const struct request *req, int *replies)
{
    if (req->argc != 3 || !slice_eq_nocase(req->argv[0], "client") ||
        !slice_eq_nocase(req->argv[1], "reply"))
        return 0;
    if (slice_eq_nocase(req->argv[2], "on")) {
        s->reply_off = 0;
        s->reply_skip = 0;
        *replies = 1;
    } else if (slice_eq_nocase(req->argv[2], "off")) {
        s->reply_off = 1;
        *replies = 0;
    } else if (slice_eq_nocase(req->argv[2], "skip")) {
        if (!s->reply_off)
            s->reply_skip = 1;
        *replies = 0;
    } else {
        return 0;
    }
    return 1;
}

/* Who is asking, for the event log. */
static const struct ev_client *client_info(struct session *s, struct ev_client *c)
{
    if (s->client_addr == NULL) {
        struct sockaddr_storage ss;
        int len = sizeof ss;
        char host[64] = "unix";
        int port = 0;
        if (s->client.handle.type == UV_TCP &&
            uv_tcp_getpeername(&s->client.tcp, (struct sockaddr *)&ss, &len) == 0) {
            if (ss.ss_family == AF_INET6) {
                uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
                port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
            } else {
                uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
                port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            }
        }
        char buf[96];
        if (port)
            snprintf(buf, sizeof buf, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
        else
            snprintf(buf, sizeof buf, "%s", host);
        s->client_addr = xstrdup(buf);
    }
    c->addr = s->client_addr;
    c->name = s->client_name;
    c->db = s->db;
    return c;
}

/* State the events need: SELECT, CLIENT SETNAME, RESET. Set when forwarded:
 * a refused SELECT leaves a wrong db in an event, nothing else. */
static void track_identity(struct session *s, const struct request *req)
{
    struct slice cmd = req->argv[0];
    long long db;
    if (req->argc == 2 && slice_eq_nocase(cmd, "select")) {
        if (slice_to_ll(req->argv[1], &db) == 0)
            s->db = (int)db;
    } else if (req->argc == 3 && slice_eq_nocase(cmd, "client") &&
               slice_eq_nocase(req->argv[1], "setname")) {
        free(s->client_name);
        s->client_name = req->argv[2].len ? xmemdup(req->argv[2].p, req->argv[2].len) : NULL;
    } else if (req->argc >= 2 && slice_eq_nocase(cmd, "watch")) {
        if (!s->in_multi)
            s->watching = 1;
    } else if (req->argc == 1 && slice_eq_nocase(cmd, "unwatch")) {
        s->watching = 0;
    } else if (req->argc == 1 && slice_eq_nocase(cmd, "reset")) {
        s->watching = 0;
        s->db = 0;
        free(s->client_name);
        s->client_name = NULL;
        s->in_multi = 0;
        s->multi_dirty = 0;
        s->multi_fix.len = 0;
        s->multi_nfix = 0;
    }
}

enum { MT_NONE, MT_MULTI, MT_EXEC, MT_DISCARD };

static int multi_cmd(const struct request *req)
{
    if (req->argc != 1)
        return MT_NONE;
    if (slice_eq_nocase(req->argv[0], "multi"))
        return MT_MULTI;
    if (slice_eq_nocase(req->argv[0], "exec"))
        return MT_EXEC;
    if (slice_eq_nocase(req->argv[0], "discard"))
        return MT_DISCARD;
    return MT_NONE;
}

/* A follow-up request whose reply the proxy swallows. Redis does not answer
 * it under CLIENT REPLY OFF, so then nothing is waited for. */
static void send_internal(struct session *s, const char *p, size_t len, int count)
{
    room_for(s, &tob, 1);
    batch_add_copy(&tob, p, len);
    if (s->reply_off)
        return;
    struct pending *e = q_push(s);
    e->kind = PK_INTERNAL;
    e->remaining = count;
    owe(s, count);
}

/* Returns 1 when req must wait for a dedicated backend connection (the
 * session leaves the shared one); it is then neither counted nor sent. */
static int handle_request(struct session *s, const struct request *req)
{
    struct server *srv = s->srv;
    if (s->bstate == B_SHARED && (s->qlen >= MUX_MAX_INFLIGHT || !mux_shareable() ||
                                  needs_own_connection(req)))
        return 1;
    srv->stats.requests++;

    if (s->bstate != B_READY && s->bstate != B_SHARED) {
        /* B_DOWN: nothing can run. Say why, then close, as redis-server
         * does when it cannot take a client; the next connection tries the
         * backend again. */
        queue_error(s, srv->down_reason);
        s->close_after_flush = 1;
        return 0;
    }

    /* Inside MULTI, Redis only queues a command: +QUEUED or an error, and
     * none of its effects on the connection until EXEC. */
    int mt = multi_cmd(req);
    int queued = s->in_multi && mt == MT_NONE;
    if (!queued && req->argc == 1 && slice_eq_nocase(req->argv[0], "reset")) {
        s->reply_off = 0;       /* RESET turns replies back on and answers */
        s->reply_skip = 0;
    }

    int replies = 1, skipped = 0;
    int client_reply = !queued && track_client_reply(s, req, &replies);
    if (!client_reply && (s->reply_off || s->reply_skip)) {
        replies = 0;
        skipped = s->reply_skip;
        s->reply_skip = 0;
    }

    static struct rewrite rw;
    enum verdict v = V_FORWARD;
    rw.followup.len = 0;
    rw.exec_first = 0;
    rw.orig_args.len = 0;
    rw.tail.len = 0;
    if (!policy_inactive(srv->cfg)) {
        struct ev_client c;
        struct policy_ctx ctx = { s->resp3, s->in_multi, 0, NULL };
        ctx.can_multi = !s->in_multi && !s->watching && replies && !s->reply_off;
        ctx.client = client_info(s, &c);
        v = policy_check(srv->cfg, req, &ctx, &rw);
    }
    if (v == V_REJECT) {
        srv->stats.rejected++;
        if (s->in_multi)
            s->multi_dirty = 1;     /* refused at queue time: EXEC must abort */
        if (replies) {
            queue_local(s, rw.err.p, rw.err.len, 0);
        } else if (skipped) {
            /* Redis still owes the SKIP to one command: give it a PING. */
            static const char ping[] = "*1\r\n$4\r\nPING\r\n";
            room_for(s, &tob, 1);
            batch_add_copy(&tob, ping, sizeof ping - 1);
        }
        return 0;
    }

    if (mt == MT_EXEC && s->in_multi && s->multi_dirty) {
        /* Redis would answer EXECABORT: discard the transaction instead. */
        static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
        static const char abort_line[] =
            "-EXECABORT Transaction discarded because of previous errors.\r\n";
        room_for(s, &tob, 1);
        batch_add_copy(&tob, discard, sizeof discard - 1);
        s->in_multi = 0;
        s->watching = 0;
        s->multi_dirty = 0;
        s->multi_fix.len = 0;
        s->multi_nfix = 0;
        if (replies) {
            struct pending *e = q_push(s);
            e->kind = PK_INTERNAL;
            e->what = PW_REPLACE;
            e->local = abort_line;
            e->local_len = sizeof abort_line - 1;
        }
        return 0;
    }
    if (!queued)
        track_identity(s, req);

    room_for(s, &tob, 3);
    if (v == V_REWRITE) {
        srv->stats.rewritten++;
        batch_add_copy(&tob, rw.pre.p, rw.pre.len);
        if (rw.orig_args.len)
            batch_add(&tob, rw.orig_args.p, rw.orig_args.len);
        if (rw.tail.len)
            batch_add_copy(&tob, rw.tail.p, rw.tail.len);
    } else {
        batch_add(&tob, req->raw.p, req->raw.len);
    }

    if (rw.exec_first > 0) {
        struct pending *e = q_push(s);
        e->kind = PK_INTERNAL;          /* +OK for MULTI */
        e = q_push(s);
        e->kind = PK_INTERNAL;
        e->what = PW_QUEUED;
        e = q_push(s);
        e->kind = PK_INTERNAL;          /* +QUEUED per EXPIRE */
        e->remaining = rw.exec_first - 2;
        e = q_push(s);
        e->kind = PK_INTERNAL;
        e->what = PW_EXEC_FIRST;
        e->rewritten = 1;
        e->t0 = uv_hrtime();
        owe(s, rw.exec_first + 1);
    } else if (replies) {
        struct pending pe = { .kind = PK_FORWARD, .remaining = 1, .rewritten = v == V_REWRITE,
                              .t0 = uv_hrtime() };
        if (!queued && !track_pubsub(s, req, &pe))
            track_request(s, req, &pe);
        if (pe.remaining != 0) {        /* RESP3 pub/sub: confirmations are pushes */
            *q_push(s) = pe;
            owe(s, pe.remaining);
        }
    }

    if (rw.followup.len > 0) {
        if (s->in_multi && mt == MT_NONE) {
            /* Inside MULTI the follow-up would add an element to EXEC's
             * reply: run it after EXEC instead. */
            if (s->multi_fix.len + rw.followup.len > s->multi_fix.cap) {
                s->multi_fix.cap = (s->multi_fix.len + rw.followup.len) * 2;
                s->multi_fix.p = xrealloc(s->multi_fix.p, s->multi_fix.cap);
            }
            memcpy(s->multi_fix.p + s->multi_fix.len, rw.followup.p, rw.followup.len);
            s->multi_fix.len += rw.followup.len;
            s->multi_nfix++;
        } else {
            send_internal(s, rw.followup.p, rw.followup.len, 1);
        }
    }

    switch (mt) {
    case MT_MULTI:
        s->in_multi = 1;
        break;
    case MT_EXEC:
        if (s->multi_nfix > 0)
            send_internal(s, s->multi_fix.p, s->multi_fix.len, s->multi_nfix);
        /* fall through */
    case MT_DISCARD:
        s->in_multi = 0;
        s->watching = 0;
        s->multi_dirty = 0;
        s->multi_fix.len = 0;
        s->multi_nfix = 0;
        break;
    default:
        break;
    }
    return 0;
}

/* Frame and handle every complete request in data[0..len). When the bytes
 * are in the shared read buffer, a trailing partial request is copied into
 * ibuf; when they are in ibuf, it is moved to the front. */
static void process_input(struct session *s, const char *data, size_t len, int in_ibuf)
{
    if (s->framer == NULL)
        s->framer = req_framer_new();
    req_framer_set_unauthenticated(s->framer, s->unauth);

    size_t pos = 0;
    struct request req;
    int rc;
    while (!s->draining && !s->close_after_flush &&
           (rc = req_next(s->framer, data, len, &pos, &req)) != 0) {
        if (rc < 0) {
            s->srv->stats.protocol_errors++;
            const char *msg = req_framer_error(s->framer);
            log_debug("client protocol error: %s", msg);
            queue_error(s, msg);
            pos = len;
            client_read_stop(s);
            s->close_after_flush = 1;
            break;
        }
        if (handle_request(s, &req) == 1) {
            /* Leave the shared connection: this request and the ones after
             * it wait in ibuf until the replies owed there are in. */
            pos = (size_t)(req.raw.p - data);
            req_framer_rewind(s->framer);
            s->pin_wait = 1;
            client_read_stop(s);
            break;
        }
    }
    if (reply_scanner_idle(&s->rs))
        emit_locals(s);
    flush_all(s);
    if (s->closing)
        return;

    size_t left = len - pos;
    if (left > QUERY_MAX) {
        log_warn("closing client: query buffer over %lld bytes", QUERY_MAX);
        session_close(s);
        return;
    }
    if (in_ibuf) {
        if (pos > 0 && left > 0) {
            memmove(s->ibuf, s->ibuf + pos, left);
            req_framer_moved(s->framer, pos, 0);
        }
        s->ilen = left;
    } else if (left > 0) {
        if (s->icap < left + READ_CHUNK) {
            free(s->ibuf);
            s->icap = left + READ_CHUNK;
            s->ibuf = xmalloc(s->icap);
        }
        memcpy(s->ibuf, data + pos, left);
        req_framer_moved(s->framer, pos, 0);
        s->ilen = left;
    }
    if (s->ilen == 0) {
        if (s->icap > 0) {       /* idle: hold no buffer */
            free(s->ibuf);
            s->ibuf = NULL;
            s->icap = 0;
        }
        req_framer_release(s->framer);
    }
    if (q_over_limit(s))
        client_read_stop(s);
    if (s->pin_wait)
        mux_session_settle(s);
    else if (s->close_after_flush)
        maybe_finish(s);
}

/* ------------------------------------------------------------------------ */
/* Reading from the backend                                                  */

static void backend_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct session *s = h->data;
    buf->base = s->srv->rbuf;
    buf->len = s->srv->rbuf_size;
}

/* Is the reply that just completed one that belongs to no request? */
static int unpaired_reply(struct session *s, char type, const struct pending *head)
{
    if (type == '>')
        return 1;
    if (s->monitor && type == '+' && s->peeklen > 1 && s->peek[1] >= '0' && s->peek[1] <= '9')
        return 1;       /* "+1700000000.123456 [0 127.0.0.1:5000] ..." */
    if (!s->resp3 && type == '*' && (s->nchan + s->npat + s->nshard > 0 ||
                                     (head && head->what == PW_SUB))) {
        /* RESP2 pub/sub message: *3 $7 message ..., *4 $8 pmessage ..., *3 $8 smessage */
        if ((s->peeklen >= 17 && memcmp(s->peek + 4, "$7\r\nmessage\r\n", 13) == 0) ||
            (s->peeklen >= 18 && (memcmp(s->peek + 4, "$8\r\npmessage\r\n", 14) == 0 ||
                                  memcmp(s->peek + 4, "$8\r\nsmessage\r\n", 14) == 0)))
            return 1;
    }
    return 0;
}

/* RESP2 subscription confirmation: *3 $N <kind> <name or nil> :<count> */
static void apply_confirmation(struct session *s)
{
    const char *p = s->peek + 4;
    size_t n = s->peeklen > 4 ? s->peeklen - 4 : 0;
    /* count: the last line ":<n>\r\n" of the reply, kept in tail */
    const char *t = NULL;
    for (int i = (int)s->taillen - 3; i >= 0; i--) {
        if (s->tail[i] == ':') {
            t = s->tail + i + 1;
            break;
        }
    }
    if (t == NULL)
        return;
    long long count = strtoll(t, NULL, 10);
    struct { const char *hdr; int *counter; } kinds[] = {
        { "$9\r\nsubscribe\r\n", &s->nchan },
        { "$11\r\nunsubscribe\r\n", &s->nchan },
        { "$10\r\npsubscribe\r\n", &s->npat },
        { "$12\r\npunsubscribe\r\n", &s->npat },
        { "$10\r\nssubscribe\r\n", &s->nshard },
        { "$12\r\nsunsubscribe\r\n", &s->nshard },
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t hl = strlen(kinds[i].hdr);
        if (n >= hl && memcmp(p, kinds[i].hdr, hl) == 0) {
            if (kinds[i].counter == &s->nshard) {
                s->nshard = (int)count;
            } else {
                /* channels and patterns share one count: the change tells */
                int total = s->nchan + s->npat;
                if (count > total)
                    (*kinds[i].counter)++;
                else if (count < total && *kinds[i].counter > 0)
                    (*kinds[i].counter)--;
            }
            return;
        }
    }
}

/* The reply to CONFIG GET maxmemory-policy: *2 $16 maxmemory-policy $N <policy>.
 * Reported when it differs from what the last connection saw. */
static void backend_policy_seen(struct session *s, char type)
{
    struct server *srv = s->srv;
    char policy[32] = "";
    const char *why = NULL;
    static const char hdr[] = "*2\r\n$16\r\nmaxmemory-policy\r\n$";
    size_t hl = sizeof hdr - 1;

    if (type == '*' && s->peeklen > hl && memcmp(s->peek, hdr, hl) == 0) {
        const char *p = memchr(s->peek + hl, '\n', s->peeklen - hl);
        if (p != NULL) {
            size_t n = (size_t)(s->peek + s->peeklen - (p + 1));
            const char *cr = memchr(p + 1, '\r', n);
            if (cr != NULL && (size_t)(cr - (p + 1)) < sizeof policy)
                memcpy(policy, p + 1, (size_t)(cr - (p + 1)));
        }
    }
    if (policy[0] == '\0')
        why = type == '-' ? "CONFIG GET refused by the backend" : "unexpected reply to CONFIG GET";
    if (strcmp(policy, srv->backend_policy) == 0 && (why == NULL) == srv->backend_policy_known)
        return;
    snprintf(srv->backend_policy, sizeof srv->backend_policy, "%s", policy);
    srv->backend_policy_known = why == NULL;
    events_backend_policy(srv->cfg, why ? NULL : policy, why);
}

/* A whole reply went by; pair it with the head of the queue. */
static void reply_done(struct session *s, char type)
{
    struct pending *head = q_head(s);
    if (unpaired_reply(s, type, head))
        return;
    if (head == NULL)
        return;         /* unsolicited (e.g. an error before the server closes) */
    ASSERT(head->kind != PK_LOCAL);

    switch (head->what) {
    case PW_HELLO:
        if (type == '-') {
            s->resp3 = head->subkind & 1;   /* refused: the protocol did not change */
            if (head->subkind & 2)
                s->unauth = s->auth_required;
        }
        break;
    case PW_CLIENT_AUTH:
        if (type == '-')
            s->unauth = s->auth_required;
        break;
    case PW_PING:
        s->auth_required = type == '-' && s->peeklen >= 7 && memcmp(s->peek, "-NOAUTH", 7) == 0;
        s->unauth = s->auth_required;
        s->bstate = B_READY;
        break;
    case PW_MONITOR:
        if (type == '+')
            s->monitor = 1;
        break;
    case PW_RESET:
        if (type == '+') {
            s->unauth = s->auth_required;   /* RESET logs out */
            s->resp3 = 0;
            s->monitor = 0;
            s->nchan = s->npat = s->nshard = 0;
            s->reply_off = s->reply_skip = 0;
        }
        break;
    case PW_SUB:
        if (type == '*')
            apply_confirmation(s);
        else
            head->remaining = 1;    /* an error ends it */
        break;
    case PW_POLICY:
        backend_policy_seen(s, type);
        break;
    case PW_REPLACE:
        toc_add(s, head->local, head->local_len, 1);
        break;
    case PW_AUTH:
        if (type == '+') {
            s->bstate = B_READY;
        } else {
            int n = (int)s->peeklen;
            while (n > 0 && (s->peek[n - 1] == '\r' || s->peek[n - 1] == '\n'))
                n--;
            snprintf(s->srv->down_reason, sizeof s->srv->down_reason,
                     "ERR ttlguard: backend %s refused the proxy's AUTH: %.*s",
                     s->srv->backend_name, n > 1 ? n - 1 : 0, s->peek + 1);
            log_error("%s", s->srv->down_reason + 4);
            s->bstate = B_CLOSING;
            uv_close(&s->backend.handle, on_handle_closed);
        }
        break;
    default:
        break;
    }
    if (--head->remaining <= 0) {
        if (head->kind == PK_FORWARD || head->what == PW_EXEC_FIRST)
            stats_latency_observe(head->rewritten, uv_hrtime() - head->t0);
        q_pop(s);
    }
}

/* Does the proxy need to look inside the reply being read? */
static int inspect(const struct session *s, const struct pending *head)
{
    return s->monitor || (!s->resp3 && s->nchan + s->npat + s->nshard > 0) ||
           (head != NULL && (head->what == PW_SUB || head->what == PW_AUTH ||
                             head->what == PW_POLICY || head->what == PW_PING));
}

/* EXEC's reply to the proxy's MULTI ... EXEC: *N, the command's reply, then
 * one reply per EXPIRE. Only the command's reply goes to the client. */
static void exec_first_filter(struct session *s, const char *p, size_t n)
{
    while (n > 0) {
        switch (s->xphase) {
        case XP_START:
            if (*p == '*' && !(n > 1 && p[1] == '-')) {
                s->xphase = XP_HEADER;
            } else if (s->xerr.len > 0) {
                /* EXECABORT: the command was refused when queued (OOM,
                 * READONLY, NOPERM...); that error is its reply. */
                toc_add(s, s->xerr.p, s->xerr.len, 1);
                s->xerr.len = 0;
                s->xphase = XP_REST;
            } else {
                s->xphase = XP_ALL;
            }
            break;
        case XP_HEADER: {
            const char *nl = memchr(p, '\n', n);
            if (nl == NULL)
                return;
            n -= (size_t)(nl + 1 - p);
            p = nl + 1;
            if (s->xsub == NULL)
                s->xsub = xmalloc(sizeof *s->xsub);
            reply_scanner_init(s->xsub);
            s->xphase = XP_FIRST;
            break;
        }
        case XP_FIRST: {
            int done = 0;
            ssize_t used = reply_scan(s->xsub, p, n, &done);
            if (used < 0) {
                s->xphase = XP_REST;
                return;
            }
            toc_add(s, p, (size_t)used, 0);
            p += used;
            n -= (size_t)used;
            if (done)
                s->xphase = XP_REST;
            break;
        }
        case XP_REST:
            return;
        case XP_ALL:
            toc_add(s, p, n, 0);
            return;
        }
    }
}

static void keep_peek_tail(struct session *s, const char *p, size_t n)
{
    if (s->peeklen < PEEK_MAX) {
        size_t k = PEEK_MAX - s->peeklen;
        if (k > n)
            k = n;
        memcpy(s->peek + s->peeklen, p, k);
        s->peeklen += (uint32_t)k;
    }
    if (n >= TAIL_MAX) {
        memcpy(s->tail, p + n - TAIL_MAX, TAIL_MAX);
        s->taillen = TAIL_MAX;
        return;
    }
    size_t keep = s->taillen;
    if (keep + n > TAIL_MAX)
        keep = TAIL_MAX - n;
    memmove(s->tail, s->tail + s->taillen - keep, keep);
    memcpy(s->tail + keep, p, n);
    s->taillen = (uint32_t)(keep + n);
}

/* `used` bytes of one reply for s (done: its last ones), as framed by the
 * scanner of the connection they came on. */
static void reply_bytes(struct session *s, const char *p, size_t used, int done, char type,
                        int reply_start)
{
    if (reply_start) {
        emit_locals(s);
        s->peeklen = 0;
        s->taillen = 0;
    }
    struct pending *head = q_head(s);
    if (head != NULL && head->what == PW_SUB && head->remaining < 0) {
        int n = head->subkind == SUB_CHANNEL ? s->nchan :
                head->subkind == SUB_PATTERN ? s->npat : s->nshard;
        head->remaining = n > 0 ? n : 1;
    }

    /* Keep the first and last bytes: enough to read pub/sub and monitor
     * replies and the proxy's own AUTH answer. */
    if (inspect(s, head))
        keep_peek_tail(s, p, used);

    if (head != NULL && head->what == PW_QUEUED && type != '>') {
        if (reply_start)
            s->xerr.len = 0;
        if (s->xerr.len + used > s->xerr.cap) {
            s->xerr.cap = s->xerr.len + used;
            s->xerr.p = xrealloc(s->xerr.p, s->xerr.cap);
        }
        memcpy(s->xerr.p + s->xerr.len, p, used);
        s->xerr.len += used;
        if (done && type != '-')
            s->xerr.len = 0;
    } else if (head != NULL && head->what == PW_EXEC_FIRST && type != '>') {
        if (reply_start)
            s->xphase = XP_START;
        exec_first_filter(s, p, used);
    } else if (head == NULL || head->kind != PK_INTERNAL || type == '>') {
        toc_add(s, p, used, 0);
    }
    if (done)
        reply_done(s, type);
}

static void backend_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct session *s = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        backend_lost(s, nread == UV_EOF ? "closed by the server" : uv_strerror((int)nread));
        return;
    }
    s->srv->stats.bytes_from_backends += (uint64_t)nread;

    int was_auth = s->bstate == B_AUTH;
    const char *p = buf->base;
    size_t left = (size_t)nread;
    while (left > 0 && !s->closing) {
        int reply_start = reply_scanner_idle(&s->rs);
        int done = 0;
        ssize_t used = reply_scan(&s->rs, p, left, &done);
        if (used < 0) {
            log_warn("backend protocol error: %s", reply_scanner_error(&s->rs));
            backend_lost(s, "protocol error");
            return;
        }
        reply_bytes(s, p, (size_t)used, done, reply_scanner_type(&s->rs), reply_start);
        p += used;
        left -= (size_t)used;
    }
    if (s->closing)
        return;
    if (reply_scanner_idle(&s->rs))
        emit_locals(s);
    flush_all(s);
    if (was_auth && s->bstate == B_READY && s->ilen > 0)
        process_input(s, s->ibuf, s->ilen, 1);     /* what waited for the handshake */
    if (!s->closing)
        client_maybe_resume(s);
    maybe_finish(s);
}

static void backend_read_start(struct session *s)
{
    if (s->backend_reading || s->closing || (s->bstate != B_READY && s->bstate != B_AUTH))
        return;
    if (uv_read_start(&s->backend.stream, backend_alloc, backend_read) == 0)
        s->backend_reading = 1;
}

/* ------------------------------------------------------------------------ */
/* Connecting to the backend                                                 */

static void backend_unavailable(struct session *s, const char *why)
{
    s->srv->stats.backend_connect_errors++;
    server_backend_failed(s->srv);
    snprintf(s->srv->down_reason, sizeof s->srv->down_reason,
             "ERR ttlguard: backend %s unavailable: %s", s->srv->backend_name, why);
    log_warn("backend %s unavailable: %s", s->srv->backend_name, why);
    s->bstate = B_CLOSING;
    uv_close(&s->backend.handle, on_handle_closed);
}

static void on_backend_closed_then_serve(struct session *s)
{
    /* Answer what the client already sent, then keep reading. */
    if (s->ilen > 0)
        process_input(s, s->ibuf, s->ilen, 1);
    else
        client_read_start(s);
}

/* Once per backend connection, when rules are active: which eviction policy
 * does this Redis run? Pipelined ahead of the client's bytes; Redis may refuse
 * it (managed services), which is reported, not fatal. */
static void send_policy_probe(struct session *s)
{
    static const char probe[] = "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$16\r\nmaxmemory-policy\r\n";
    if (policy_inactive(s->srv->cfg))
        return;
    batch_add_copy(&tob, probe, sizeof probe - 1);
    struct pending *p = q_push(s);
    p->kind = PK_INTERNAL;
    p->what = PW_POLICY;
    flush_all(s);
}

/* The proxy's own AUTH (backend_username, backend_password) as a request;
 * *len bytes, the caller frees the buffer. */
static char *auth_request(const struct config *cfg, size_t *len)
{
    const char *user = cfg->backend_username, *pass = cfg->backend_password;
    size_t cap = 64 + (user ? strlen(user) : 0) + strlen(pass);
    char *b = xmalloc(cap);
    int n;
    if (user != NULL)
        n = snprintf(b, cap, "*3\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
                     strlen(user), user, strlen(pass), pass);
    else
        n = snprintf(b, cap, "*2\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n", strlen(pass), pass);
    *len = (size_t)n;
    return b;
}

static void send_backend_auth(struct session *s)
{
    size_t len;
    char *auth = auth_request(s->srv->cfg, &len);
    batch_add_copy(&tob, auth, len);
    free(auth);
    struct pending *p = q_push(s);
    p->kind = PK_INTERNAL;
    p->what = PW_AUTH;
    s->bstate = B_AUTH;
    send_policy_probe(s);
    flush_all(s);
}

static void on_backend_connect(uv_connect_t *req, int status)
{
    struct session *s = req->data;
    if (s->closing || s->bstate != B_CONNECTING)
        return;             /* closed meanwhile (connect timeout) */
    if (status < 0) {
        backend_unavailable(s, uv_strerror(status));
        return;
    }
    s->srv->stats.backend_connects++;
    s->backend_counted = 1;
    stats_proxy.backend_connections++;
    if (s->backend.handle.type == UV_TCP)
        uv_tcp_nodelay(&s->backend.tcp, 1);
    s->bstate = B_READY;
    backend_read_start(s);
    if (s->srv->cfg->backend_password != NULL) {
        send_backend_auth(s);
        return;
    }
    /* Does the backend want clients to authenticate? Redis then refuses big
     * requests before AUTH (CVE-2021-32675): the proxy must refuse them too,
     * at the header, instead of buffering them. One round trip per
     * connection, before the client is read. */
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    batch_add_copy(&tob, ping, sizeof ping - 1);
    struct pending *p = q_push(s);
    p->kind = PK_INTERNAL;
    p->what = PW_PING;
    s->bstate = B_AUTH;
    send_policy_probe(s);
    flush_all(s);
}

static void backend_connect(struct session *s)
{
    struct server *srv = s->srv;
    int r;

    s->connect_started = now_ms_monotonic();
    s->bstate = B_CONNECTING;
    s->creq.data = s;
    s->backend.handle.data = s;
    if (srv->backend_addr.is_unix) {
        uv_pipe_init(srv->loop, &s->backend.pipe, 0);
        s->handles++;
        uv_pipe_connect(&s->creq, &s->backend.pipe, srv->backend_addr.host, on_backend_connect);
        return;
    }
    uv_tcp_init(srv->loop, &s->backend.tcp);
    s->handles++;
    if (!srv->backend_sa_ok) {
        backend_unavailable(s, "cannot resolve the host name");
        return;
    }
    r = uv_tcp_connect(&s->creq, &s->backend.tcp, (struct sockaddr *)&srv->backend_sa,
                       on_backend_connect);
    if (r < 0)
        backend_unavailable(s, uv_strerror(r));
}


/* ------------------------------------------------------------------------ */
/* The shared backend connection (multiplex = on)                            */
/*
 * Sessions that only send stateless commands share one backend connection,
 * as twemproxy does: their requests are gathered into one write per loop
 * iteration (uv_check), Redis answers them in order, and a FIFO with one
 * entry per reply says whose reply comes next. That saves the proxy a read
 * and a write per request, and Redis as many.
 *
 * The first request that would give the connection state of its own
 * (SELECT, AUTH, HELLO, MULTI, WATCH, CLIENT, blocking commands, pub/sub,
 * MONITOR, unknown commands, ...) pins the session: it stops reading, waits
 * for the replies it is owed on the shared connection, then opens a
 * dedicated one and goes on 1:1 from that request. So no client ever sees
 * a difference in what its commands do.
 */

struct mux {
    struct server *srv;
    union stream h;
    uv_connect_t creq;
    uv_check_t flusher;             /* writes `out` once per loop iteration */
    int ready;                      /* connected (and authenticated) */
    int shareable;                  /* probed: Redis does not want AUTH from clients */
    int paused;                     /* clients stopped: too many bytes not yet written */
    int auth_pending;               /* the proxy's AUTH is not answered yet */
    uint64_t probed;                /* monotonic ms of the last ACL GETUSER default */
    char *pbuf;                     /* its reply, as it arrives */
    size_t plen;
    int failed;                     /* closing: no new requests */
    int handles;
    struct reply_scanner rs;
    struct session **fifo;          /* whose reply is next; NULL: that session is gone */
    uint32_t fhead, flen, fcap;
    char *out;                      /* requests not yet written */
    size_t outlen, outcap;
};

static char mux_self;               /* fifo marker: the reply is for the mux itself */
static char mux_probe;              /* fifo marker: the reply to the periodic ACL probe */

static void mux_fifo_push(struct mux *m, struct session *s, int n)
{
    while (n-- > 0) {
        if (m->flen == m->fcap) {
            uint32_t ncap = m->fcap ? m->fcap * 2 : 256;
            struct session **nf = xmalloc(sizeof *nf * ncap);
            for (uint32_t i = 0; i < m->flen; i++)
                nf[i] = m->fifo[(m->fhead + i) % m->fcap];
            free(m->fifo);
            m->fifo = nf;
            m->fhead = 0;
            m->fcap = ncap;
        }
        m->fifo[(m->fhead + m->flen) % m->fcap] = s;
        m->flen++;
    }
}

static void mux_out(struct mux *m, const char *p, size_t n)
{
    if (m->outlen + n > m->outcap) {
        m->outcap = (m->outlen + n) * 2;
        m->out = xrealloc(m->out, m->outcap);
    }
    memcpy(m->out + m->outlen, p, n);
    m->outlen += n;
}

static void on_mux_closed(uv_handle_t *h)
{
    struct mux *m = h->data;
    if (--m->handles > 0)
        return;
    free(m->fifo);
    free(m->out);
    free(m->pbuf);
    free(m);
}

/* The shared connection failed or closed: sessions owed replies on it end
 * as they would with their own connection (what was received, then EOF). */
static void mux_fail(struct mux *m, const char *why)
{
    if (m->failed)
        return;
    m->failed = 1;
    if (mux_current == m)
        mux_current = NULL;
    log_warn("shared backend connection: %s", why);
    for (uint32_t i = 0; i < m->flen; i++) {
        struct session *s = m->fifo[(m->fhead + i) % m->fcap];
        if (s == NULL || s == (struct session *)&mux_self)
            continue;
        m->fifo[(m->fhead + i) % m->fcap] = NULL;
        if (s->closing || s->bstate != B_SHARED)
            continue;
        s->bstate = B_CLOSED;
        if (!m->ready) {
            /* never connected: answer as a session without a backend does */
            q_drop_backend_entries(s);
            queue_error(s, m->srv->down_reason);
            emit_locals(s);
            flush_all(s);
        }
        finish_after_flush(s);
    }
    if (m->ready)
        stats_proxy.backend_connections--;
    m->flen = 0;
    uv_close((uv_handle_t *)&m->h, on_mux_closed);
    uv_close((uv_handle_t *)&m->flusher, on_mux_closed);
}

/* Bytes for Redis not yet written on the shared connection. */
static size_t mux_backlog(const struct mux *m)
{
    return m->outlen + (m->ready ? uv_stream_get_write_queue_size(&m->h.stream) : 0);
}

static int mux_paused(void)
{
    return mux_current != NULL && mux_current->paused;
}

/* New requests may still go over the shared connection (a failed one is
 * replaced on the next request). */
static int mux_shareable(void)
{
    return mux_current == NULL || mux_current->shareable;
}

/* The shared connection drained: clients paused for it read again. */
static void mux_resume(struct mux *m)
{
    if (!m->paused || mux_backlog(m) > m->srv->cfg->max_buffer / 2)
        return;
    m->paused = 0;
    for (struct session *s = m->srv->sessions; s != NULL; s = s->next)
        if (s->bstate == B_SHARED && !s->client_reading)
            client_maybe_resume(s);
}

static void on_mux_write(uv_write_t *req, int status)
{
    struct mux *m = req->handle->data;
    free((struct wchunk *)req);
    if (status == 0 && !m->failed)
        mux_resume(m);
}

static void on_mux_check(uv_check_t *h)
{
    struct mux *m = h->data;
    uv_check_stop(h);
    if (!m->ready || m->failed || m->outlen == 0)
        return;
    uv_buf_t b = uv_buf_init(m->out, (unsigned)m->outlen);
    int r = uv_try_write(&m->h.stream, &b, 1);
    size_t done = r > 0 ? (size_t)r : 0;
    if (r < 0 && r != UV_EAGAIN) {
        mux_fail(m, uv_strerror(r));
        return;
    }
    if (done < m->outlen) {
        struct wchunk *c = xmalloc(sizeof *c + (m->outlen - done));
        c->s = NULL;
        c->len = m->outlen - done;
        memcpy(c->data, m->out + done, c->len);
        uv_buf_t wb = uv_buf_init(c->data, (unsigned)c->len);
        if (uv_write(&c->req, &m->h.stream, &wb, 1, on_mux_write) < 0) {
            free(c);
            mux_fail(m, "write failed");
            return;
        }
    }
    m->outlen = 0;
    if (m->outcap > 1024 * 1024) {
        free(m->out);
        m->out = NULL;
        m->outcap = 0;
    }
    mux_resume(m);
}

static void mux_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct mux *m = h->data;
    buf->base = m->srv->rbuf;
    buf->len = m->srv->rbuf_size;
}

/* After a reply for s: what the end of a backend read does for a session. */
static void mux_session_settle(struct session *s)
{
    if (s->closing)
        return;
    emit_locals(s);
    if (toc_owner == s && (s->close_after_flush || (s->pin_wait && s->qlen == 0))) {
        flush_client();     /* before the client is shut down or moves */
        if (s->closing)
            return;
    }
    if (s->pin_wait && s->qlen == 0) {
        /* Owed nothing on the shared connection any more: go 1:1. */
        flush_all(s);
        s->pin_wait = 0;
        s->bstate = B_DOWN;
        backend_connect(s);
        return;
    }
    client_maybe_resume(s);
    maybe_finish(s);
}

/* Redis keeps a connection logged in when a password is set later
 * (CONFIG SET requirepass, ACL SETUSER): the shared connection asks every
 * second whether the default user still needs none, and stops being shared
 * when it does. Sessions on it then move to connections of their own, where
 * Redis asks them to authenticate. */
static void mux_probe_reply(struct mux *m, const char *p, size_t n, int done, char type)
{
    if (m->plen + n <= 64 * 1024) {
        m->pbuf = xrealloc(m->pbuf, m->plen + n);
        memcpy(m->pbuf + m->plen, p, n);
        m->plen += n;
    }
    if (!done)
        return;
    if (type == '*' && !(memmem(m->pbuf, m->plen, "$6\r\nnopass\r\n", 12) != NULL &&
                         memmem(m->pbuf, m->plen, "$2\r\non\r\n", 8) != NULL)) {
        log_warn("the default user of %s now needs a password: multiplexing stops",
                 m->srv->backend_name);
        m->shareable = 0;
    }
    m->plen = 0;        /* an error (no permission for ACL): nothing learned */
}

void session_mux_cron(uint64_t now)
{
    static const char probe[] = "*3\r\n$3\r\nACL\r\n$7\r\nGETUSER\r\n$7\r\ndefault\r\n";
    struct mux *m = mux_current;
    if (m == NULL || !m->ready || m->failed || !m->shareable || now - m->probed < 1000)
        return;
    m->probed = now;
    mux_out(m, probe, sizeof probe - 1);
    mux_fifo_push(m, (struct session *)&mux_probe, 1);
    uv_check_start(&m->flusher, on_mux_check);
}

static void mux_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct mux *m = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        mux_fail(m, nread == UV_EOF ? "closed by the server" : uv_strerror((int)nread));
        return;
    }
    m->srv->stats.bytes_from_backends += (uint64_t)nread;
    const char *p = buf->base;
    size_t left = (size_t)nread;
    while (left > 0 && !m->failed) {
        int reply_start = reply_scanner_idle(&m->rs);
        int done = 0;
        ssize_t used = reply_scan(&m->rs, p, left, &done);
        if (used < 0) {
            mux_fail(m, reply_scanner_error(&m->rs));
            return;
        }
        struct session *s = m->flen ? m->fifo[m->fhead] : NULL;
        if (s == (struct session *)&mux_probe) {
            mux_probe_reply(m, p, (size_t)used, done, reply_scanner_type(&m->rs));
        } else if (s == (struct session *)&mux_self) {
            /* The proxy's AUTH, then its PING: a client that would have to
             * authenticate cannot share a connection that did it for it. */
            if (done && m->auth_pending) {
                m->auth_pending = 0;
                if (reply_scanner_type(&m->rs) == '-')
                    log_error("shared backend connection: the proxy's AUTH was refused");
            } else if (done && reply_scanner_type(&m->rs) == '+') {
                m->shareable = 1;   /* PING answered: no AUTH needed */
            }
        } else if (s != NULL && !s->closing) {
            reply_bytes(s, p, (size_t)used, done, reply_scanner_type(&m->rs), reply_start);
        }
        if (done && m->flen > 0) {
            m->fhead = (m->fhead + 1) % m->fcap;
            m->flen--;
            if (s != NULL && s != (struct session *)&mux_self && s != (struct session *)&mux_probe)
                mux_session_settle(s);
        }
        p += used;
        left -= (size_t)used;
    }
    if (toc.n > 0)
        flush_client();
}

static void on_mux_connect(uv_connect_t *req, int status)
{
    struct mux *m = req->data;
    if (m->failed)
        return;
    if (status < 0) {
        snprintf(m->srv->down_reason, sizeof m->srv->down_reason,
                 "ERR ttlguard: backend %s unavailable: %s", m->srv->backend_name,
                 uv_strerror(status));
        m->srv->stats.backend_connect_errors++;
        server_backend_failed(m->srv);
        mux_fail(m, uv_strerror(status));
        return;
    }
    m->srv->stats.backend_connects++;
    stats_proxy.backend_connections++;
    m->ready = 1;
    if (m->h.handle.type == UV_TCP)
        uv_tcp_nodelay(&m->h.tcp, 1);
    uv_read_start(&m->h.stream, mux_alloc, mux_read);
    if (m->outlen > 0)
        uv_check_start(&m->flusher, on_mux_check);
}

/* The shared connection, opened on first use. NULL when it cannot be. */
static struct mux *mux_get(struct server *srv)
{
    if (mux_current != NULL)
        return mux_current;
    if (!srv->backend_addr.is_unix && !srv->backend_sa_ok)
        return NULL;
    struct mux *m = xcalloc(1, sizeof *m);
    m->srv = srv;
    m->h.handle.data = m;
    m->creq.data = m;
    m->flusher.data = m;
    reply_scanner_init(&m->rs);
    uv_check_init(srv->loop, &m->flusher);
    m->handles = 2;
    int r;
    if (srv->backend_addr.is_unix) {
        uv_pipe_init(srv->loop, &m->h.pipe, 0);
        uv_pipe_connect(&m->creq, &m->h.pipe, srv->backend_addr.host, on_mux_connect);
        r = 0;
    } else {
        uv_tcp_init(srv->loop, &m->h.tcp);
        r = uv_tcp_connect(&m->creq, &m->h.tcp, (struct sockaddr *)&srv->backend_sa,
                           on_mux_connect);
    }
    mux_current = m;
    if (r < 0) {
        mux_fail(m, uv_strerror(r));
        return NULL;
    }
    if (srv->cfg->backend_password != NULL) {
        size_t len;
        char *auth = auth_request(srv->cfg, &len);
        mux_out(m, auth, len);
        free(auth);
        mux_fifo_push(m, (struct session *)&mux_self, 1);
        m->auth_pending = 1;
    }
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    mux_out(m, ping, sizeof ping - 1);
    mux_fifo_push(m, (struct session *)&mux_self, 1);
    return m;
}

/* flush_all() for a B_SHARED session: its gathered requests join the
 * shared connection's next write, and the FIFO learns whose replies those are. */
static void mux_append(struct session *s)
{
    struct mux *m = mux_get(s->srv);
    if (m == NULL) {
        batch_reset(&tob);
        s->bstate = B_CLOSED;
        finish_after_flush(s);
        return;
    }
    for (int i = 0; i < tob.n; i++) {
        const char *base = tob.arena_off[i] != (size_t)-1 ? tob.arena + tob.arena_off[i]
                                                         : tob.iov[i].base;
        mux_out(m, base, tob.iov[i].len);
    }
    batch_reset(&tob);
    mux_fifo_push(m, s, s->mux_owed);
    s->mux_owed = 0;
    uv_check_start(&m->flusher, on_mux_check);
    if (mux_backlog(m) > s->srv->cfg->max_buffer) {
        /* Redis is not keeping up: no more requests from this client until
         * the shared connection has drained to half. */
        m->paused = 1;
        client_read_stop(s);
    }
}

/* A session goes away: replies still owed to it are read and dropped. */
static void mux_forget(struct session *s)
{
    struct mux *m = mux_current;
    if (m == NULL)
        return;
    for (uint32_t i = 0; i < m->flen; i++)
        if (m->fifo[(m->fhead + i) % m->fcap] == s)
            m->fifo[(m->fhead + i) % m->fcap] = NULL;
}

/* Requests that give a connection state of its own, or block it: a session
 * sending one leaves the shared connection. */
static int needs_own_connection(const struct request *req)
{
    static const struct { const char *name; size_t len; } pin[] = {
#define P(n) { n, sizeof n - 1 }
        P("auth"), P("quit"), P("exec"), P("wait"), P("hello"), P("reset"), P("multi"),
        P("watch"), P("blpop"), P("brpop"), P("xread"), P("select"), P("client"),
        P("asking"), P("blmove"), P("blmpop"), P("bzmpop"), P("discard"), P("unwatch"),
        P("monitor"), P("readonly"), P("bzpopmin"), P("bzpopmax"), P("subscribe"),
        P("readwrite"), P("psubscribe"), P("ssubscribe"), P("brpoplpush"), P("xreadgroup"),
        P("unsubscribe"), P("punsubscribe"), P("sunsubscribe"), P("sync"), P("psync"),
        P("replconf"),
#undef P
    };
    struct slice cmd = req->argv[0];
    for (size_t i = 0; i < sizeof pin / sizeof pin[0]; i++)
        if (pin[i].len == cmd.len && slice_eq_nocase(cmd, pin[i].name))
            return 1;
    if (req->argc >= 2 && slice_eq_nocase(cmd, "script") && slice_eq_nocase(req->argv[1], "debug"))
        return 1;       /* the debugger is per connection */
    return !command_is_known(cmd.p, cmd.len);
}

void session_mux_shutdown(void)
{
    /* Every session is gone: what is still owed on it is for nobody. */
    if (mux_current != NULL)
        mux_fail(mux_current, "shutting down");
}

void session_backend_changed(void)
{
    /* Sessions owed replies on the old backend end as if it had closed;
     * the next request opens a shared connection to the new one. */
    if (mux_current != NULL)
        mux_fail(mux_current, "backend address changed by a reload");
}

/* ------------------------------------------------------------------------ */
/* Accept, cron, drain                                                       */

void session_accept(struct server *srv, uv_stream_t *listener)
{
    struct session *s = xcalloc(1, sizeof *s);
    s->srv = srv;
    s->bstate = B_DOWN;             /* no backend handle yet */
    s->client.handle.data = s;
    s->backend.handle.data = s;
    reply_scanner_init(&s->rs);

    if (listener->type == UV_TCP)
        uv_tcp_init(srv->loop, &s->client.tcp);
    else
        uv_pipe_init(srv->loop, &s->client.pipe, 0);
    s->handles = 1;
    if (uv_accept(listener, &s->client.stream) != 0) {
        s->closing = 1;
        uv_close(&s->client.handle, on_handle_closed);
        return;
    }
    /* link before anything can close it */
    s->next = srv->sessions;
    if (srv->sessions)
        srv->sessions->prev = s;
    srv->sessions = s;
    srv->nsessions++;
    srv->nclients++;
    srv->stats.clients_accepted++;
    s->last_active = now_ms_monotonic();

    if (srv->nclients > srv->cfg->max_clients) {
        /* As redis does: say why, then close. */
        static const char msg[] = "-ERR max number of clients reached\r\n";
        srv->stats.clients_rejected++;
        uv_buf_t b = uv_buf_init((char *)msg, sizeof msg - 1);
        uv_try_write(&s->client.stream, &b, 1);
        session_close(s);
        return;
    }
    if (listener->type == UV_TCP)
        uv_tcp_nodelay(&s->client.tcp, 1);
    struct mux *m;
    if (srv->cfg->multiplex && (m = mux_get(srv)) != NULL && m->shareable) {
        /* Until the shared connection has been probed, sessions go 1:1. */
        s->bstate = B_SHARED;
        client_read_start(s);
        return;
    }
    backend_connect(s);
}

void session_cron(struct session *s, uint64_t now)
{
    const struct config *cfg = s->srv->cfg;
    if (s->closing)
        return;
    if (s->bstate == B_CONNECTING && now - s->connect_started >= cfg->connect_timeout) {
        uv_close(&s->backend.handle, on_handle_closed);
        s->bstate = B_CLOSING;
        snprintf(s->srv->down_reason, sizeof s->srv->down_reason,
                 "ERR ttlguard: backend %s unavailable: connect timed out after %u ms",
                 s->srv->backend_name, cfg->connect_timeout);
        s->srv->stats.backend_connect_errors++;
        return;
    }
    if (s->bstate == B_DOWN && !s->client_reading && !s->closing && !s->close_after_flush &&
        !s->draining) {
        on_backend_closed_then_serve(s);
        return;
    }
    if (cfg->client_idle_timeout > 0 && s->qlen == 0 && !s->monitor &&
        s->nchan + s->npat + s->nshard == 0 &&
        now - s->last_active >= (uint64_t)cfg->client_idle_timeout * 1000) {
        session_close(s);
        return;
    }
    if (s->draining && s->qlen == 0 && reply_scanner_idle(&s->rs))
        finish_after_flush(s);
}

void session_drain(struct session *s)
{
    s->draining = 1;
    client_read_stop(s);
    if (s->qlen == 0 || (s->bstate != B_READY && s->bstate != B_SHARED))
        finish_after_flush(s);
}

struct session *session_next(const struct session *s)
{
    return s->next;
}
