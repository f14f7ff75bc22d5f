/*
 * session: the client side. One client connection, the queue that keeps its
 * replies in order, and where its requests go: its own backend connection
 * (backend.c) or the shared one (mux.c).
 *
 *            client                         ttlguard                          redis
 *  requests  ------> client_read --> req_next (resp_request) --> handle_request
 *                                        |                    command_resolve: one lookup
 *                                        |                    policy_check: forward / rewrite /
 *                                        |                                  reject
 *                                        v                    push pending entry, bytes -> tob
 *                                   ibuf (partial only)       flush: own bconn | mux_append
 *                                                                    ------------------> backend
 *  replies   <------ flush <-- toc batch <-- session_reply <-- bconn (own) or mux FIFO
 *                                   ^           (reply.c) pairs each complete reply with
 *                                   |           the head of the pending queue; LOCAL
 *                                   +---------- entries (our own replies) go out when
 *                                               they reach the head, never earlier
 *
 * Zero copy: bytes the proxy does not change are written straight from the
 * buffer they were read into (the loop's shared read buffer, or the session's
 * ibuf when a request spans reads), gathered into one writev per callback
 * (wbatch.h). Replies are forwarded as they arrive, even before they are
 * complete: only their end matters to the queue.
 *
 * Bounded: when the write queue towards one side passes max_buffer, the
 * session stops reading from the other side; it resumes when the queue has
 * drained to half. The pending queue counts against the client side too.
 *
 * Pairing replies with requests needs to know how many replies a request
 * gets: CLIENT REPLY OFF/SKIP suppress them, RESP2 pub/sub confirmations come
 * one per channel, RESP3 pushes and MONITOR lines and pub/sub messages belong
 * to no request. The session mirrors that protocol state from what passes
 * (mirror.c). When ttlguard logs its clients in itself, session_login.c
 * does the session's part.
 * After SYNC/PSYNC the connection carries a replication stream: from that
 * reply on, backend bytes are relayed unframed.
 *
 * With multiplex = on (the default) a session starts on a connection of its
 * own and joins a shared one with its next shareable request, once one was
 * answered (consider_sharing()). There, SELECT and HELLO 2|3 move it to the
 * shared connection of its new state; a request that needs a connection of
 * its own (needs_own()) waits for the replies owed on the shared connection,
 * then the session opens its own, has its state replayed there, and goes on
 * 1:1 from that request.
 *
 * With cluster = route a session is routed (route.c: SM_SHARED, s->route),
 * and leaves for a connection of its own the same way only to subscribe
 * (ROUTE_OWN), to one node; it is routed again once it has no subscription
 * left and is owed nothing (routed_own()).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <openssl/crypto.h>

#include "cluster.h"
#include "commands.h"
#include "control.h"
#include "events.h"
#include "login.h"
#include "route.h"
#include "route_client.h"
#include "route_pin.h"
#include "sentinel.h"
#include "session_int.h"
#include "tls.h"
#include "util.h"

#define READ_CHUNK      (64 * 1024)
#define STREAM_MIN      (64 * 1024)     /* a bulk this long may stream (stream_head()) */
#define QUERY_MAX       (1024LL * 1024 * 1024)   /* redis client-query-buffer-limit */
#define MUX_MAX_INFLIGHT 256    /* a session pipelining deeper gets its own connection */
#define CLIENT_TLS_HANDSHAKE_MS 10000   /* a TLS client that has not finished its handshake
                                           by then is closed */

/* Where the request of a shared session goes. */
enum route {
    RT_HERE,        /* over the shared connection of the session's state */
    RT_SELECT,      /* a valid SELECT: the session moves, the proxy answers */
    RT_WAIT,        /* the state changes while replies are owed: wait for them */
    RT_PIN,         /* to a connection of its own */
    RT_ANSWERED,    /* cluster = route answered it itself (route_pick()) */
    RT_BLOCKED,     /* cluster = route: it waits behind a blocking command */
};

/* One batch per direction, shared by all sessions: callbacks do not nest.
 * Replies read from a shared backend connection go to many clients in one
 * callback: toc belongs to one session at a time and is flushed when the
 * next reply is for another one. */
static struct wbatch tob;   /* to the backend */
static struct wbatch toc;   /* to the client of toc_owner */
static struct session *toc_owner;

static void client_read_start(struct session *s);
static void process_input(struct session *s, const char *data, size_t len, int in_ibuf);

static void session_set_mode(struct session *s, enum session_mode m)
{
    s->mode = m;
}

/* ------------------------------------------------------------------------ */
/* Writes                                                                    */

static void on_client_written(void *ctx, int status)
{
    struct session *s = ctx;
    if (status < 0) {
        if (status != UV_ECANCELED && !s->closing) {
            log_debug("write error: %s", xport_strerror(&s->client, status));
            session_close(s);
        }
        return;
    }
    if (s->closing)
        return;
    /* Resume the side we stopped reading once the queue drained to half. */
    if (s->mode == SM_OWN && !s->be.reading &&
        xport_backlog(&s->client) <= s->ctx->cfg->max_buffer / 2)
        bconn_read_start(&s->be);
    if (s->mode == SM_SHARED)
        session_resume(s);
    maybe_finish(s);
}

void session_flush_client(void)
{
    struct session *s = toc_owner;
    if (toc.n == 0)
        return;
    if (s->closing) {
        wbatch_reset(&toc);
        return;
    }
    s->ctx->stats.bytes_to_clients += toc.bytes;
    if (wbatch_flush(&toc, &s->client, on_client_written, s) < 0) {
        session_close(s);
        return;
    }
    if (xport_backlog(&s->client) > s->ctx->cfg->max_buffer) {
        if (s->mode == SM_OWN)
            bconn_read_stop(&s->be);
        else                        /* shared: the connection is not paused for one slow
                                       reader; no backend: answers of our own */
            client_read_stop(s);
    }
}

static void flush_requests(struct session *s)
{
    if (tob.n == 0)
        return;
    if (s->mode != SM_OWN && s->mode != SM_SHARED) {
        wbatch_reset(&tob);             /* the backend is gone: nothing to send to */
        return;
    }
    s->ctx->stats.bytes_to_backends += tob.bytes;
    if (s->route != NULL && s->mode == SM_SHARED) {
        route_take(s, &tob);            /* the request's node is known when it is handled */
        return;
    }
    if (s->mode == SM_SHARED) {
        if (mux_append(s, &tob) < 0) {
            wbatch_reset(&tob);
            session_shared_lost(s, 0);
        }
        return;
    }
    if (bconn_write(&s->be, &tob) < 0)
        return;
    if (s->client_reading && bconn_backlog(&s->be) > s->ctx->cfg->max_buffer)
        client_read_stop(s);
}

static void flush_all(struct session *s)
{
    if (s->closing) {
        wbatch_reset(&tob);
        if (toc_owner == s)
            wbatch_reset(&toc);
        return;
    }
    flush_requests(s);
    session_flush_client();
}

/* A route session's client gets its replies in one write per loop turn:
 * its requests went to several nodes, whose replies come in several reads
 * of the turn (a pipeline over three nodes would be answered in up to three
 * writes, each waking the client). Copied: the reads' buffers are reused.
 * Written by a prepare handle, which runs before the loop waits again:
 * whatever phase of the turn queued them (a read, a timer, a check, a
 * close), they are out before the proxy sleeps. */
static void out_write(struct session *s)
{
    size_t n = s->out.len;
    if (n == 0 || s->closing)
        return;
    s->out.len = 0;
    s->ctx->stats.bytes_to_clients += n;
    if (xport_write(&s->client, s->out.p, n, on_client_written, s) < 0) {
        session_close(s);
        return;
    }
    if (s->out.cap > 64 * 1024) {       /* give a large reply's memory back */
        free(s->out.p);
        s->out = (struct sbuf){ 0 };
    }
    if (xport_backlog(&s->client) > s->ctx->cfg->max_buffer)
        client_read_stop(s);
    maybe_finish(s);
}

static void on_out_flush(uv_prepare_t *h)
{
    struct clients *cl = h->data;
    struct session *s = cl->out_list;
    cl->out_list = NULL;
    uv_prepare_stop(h);
    while (s != NULL) {
        struct session *next = s->out_next;
        s->out_queued = 0;
        out_write(s);
        s = next;
    }
}

static void out_add(struct session *s, const char *p, size_t n)
{
    struct clients *cl = s->cl;
    sbuf_add(&s->out, p, n);
    if (s->out_queued)
        return;
    s->out_queued = 1;
    s->out_next = cl->out_list;
    if (cl->out_list == NULL) {
        if (cl->out_flush.loop == NULL) {
            uv_prepare_init(s->ctx->loop, &cl->out_flush);
            cl->out_flush.data = cl;
        }
        uv_prepare_start(&cl->out_flush, on_out_flush);
    }
    cl->out_list = s;
}

static void out_forget(struct session *s)
{
    for (struct session **pp = &s->cl->out_list; s->out_queued && *pp != NULL;
         pp = &(*pp)->out_next) {
        if (*pp == s) {
            *pp = s->out_next;
            s->out_queued = 0;
        }
    }
    free(s->out.p);
}

void clients_shutdown(struct clients *cl)
{
    if (cl->out_flush.loop != NULL && !uv_is_closing((uv_handle_t *)&cl->out_flush))
        uv_close((uv_handle_t *)&cl->out_flush, NULL);
}

/* Add bytes for s's client (copied, or a span valid until the flush). */
void toc_add(struct session *s, const char *p, size_t n, int copy)
{
    if (s->parked) {
        park_add(s, 'R', p, n);
        return;
    }
    if (s->route != NULL) {
        out_add(s, p, n);
        return;
    }
    if (toc.n > 0 && toc_owner != s)
        session_flush_client();
    toc_owner = s;
    if (wbatch_full(&toc, 1))
        session_flush_client();
    if (copy)
        wbatch_add_copy(&toc, p, n);
    else
        wbatch_add(&toc, p, n);
}

/* Requests gathered for the backend: flush early when iov slots run out. */
void tob_add(struct session *s, const char *p, size_t n, int copy)
{
    if (wbatch_full(&tob, 1))
        flush_requests(s);
    if (copy)
        wbatch_add_copy(&tob, p, n);
    else
        wbatch_add(&tob, p, n);
}

/* ------------------------------------------------------------------------ */
/* Pending queue                                                             */

struct pending *q_head(struct session *s)
{
    return s->q.len ? ring_at(&s->q, sizeof(struct pending), 0) : NULL;
}

struct pending *q_push(struct session *s)
{
    struct pending *p = ring_push(&s->q, sizeof *p, 16);
    memset(p, 0, sizeof *p);
    p->remaining = 1;
    return p;
}

void q_pop(struct session *s)
{
    struct pending *p = q_head(s);
    if (p->local_owned)
        free((char *)p->local);
    if (p->what == PW_SUB || (p->what == PW_RESET && p->subkind))
        s->sub_unsure--;
    ring_pop(&s->q);
    if (s->q.len == 0 && s->q.cap > 64)     /* give memory back after a deep pipeline */
        ring_free(&s->q);
}

/* Replies Redis will send on the shared connection for what s just queued. */
void owe(struct session *s, int n)
{
    if (s->mode == SM_SHARED)
        s->mux_owed += n;
}

/* Too many requests in flight count against max_buffer like queued bytes:
 * a client that pipelines without reading cannot grow the queue forever. */
static int q_over_limit(struct session *s)
{
    return (size_t)s->q.len * sizeof(struct pending) > s->ctx->cfg->max_buffer;
}

/* Is a reply for s being read right now? Our own replies must wait for it. */
static int reply_in_progress(const struct session *s)
{
    return s->mode == SM_OWN && !reply_scanner_idle(&s->be.rs);
}

/* Send LOCAL entries that reached the head (only between replies). */
void emit_locals(struct session *s)
{
    struct pending *p;
    while ((p = q_head(s)) != NULL && p->kind == PK_LOCAL) {
        toc_add(s, p->local, p->local_len, 1);
        q_pop(s);
    }
}

/* Queue a reply of our own behind everything owed so far.
 * text is copied unless is_static. */
void queue_local(struct session *s, const char *text, size_t len, int is_static)
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

/* The backend will not answer what waited for it: the entries owed a reply
 * by the backend are dropped, or with `answer` get it instead (Redis's own
 * error line, without '-'), each in its place; the proxy's own are dropped. */
static void q_fail_backend_entries(struct session *s, const char *answer)
{
    uint32_t n = s->q.len;
    for (uint32_t i = 0; i < n; i++) {
        struct pending p = *q_head(s);
        q_head(s)->local_owned = 0;
        q_pop(s);
        if (p.kind == PK_LOCAL)
            *q_push(s) = p;
        else if (p.kind == PK_FORWARD && answer != NULL)
            queue_error(s, answer);
    }
}

/* ------------------------------------------------------------------------ */
/* Session lifetime                                                          */

void free_secret(char *p)
{
    if (p != NULL)
        OPENSSL_cleanse(p, strlen(p));
    free(p);
}

static void judged_free(struct session *s);

static void session_free(struct session *s)
{
    mux_forget(s);
    route_free(s);
    out_forget(s);
    if (toc_owner == s) {
        wbatch_reset(&toc);
        toc_owner = NULL;
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        s->cl->all = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (s->cwait.waiting)
        cluster_unwait(&s->cwait);
    s->cl->nsessions--;
    s->be.t->sessions--;
    s->cl->gone(s->cl);
    while (s->q.len)
        q_pop(s);
    ring_free(&s->q);
    free(s->ibuf);
    free(s->client_name);
    free(s->lib_name);
    free(s->lib_ver);
    free(s->client_addr);
    free_secret(s->be_user);
    free_secret(s->be_pass);
    free(s->multi_fix.p);
    if (s->xsub != NULL)
        reply_scanner_free(s->xsub);
    free(s->xsub);
    free(s->xerr.p);
    free(s->held.p);
    free(s->park.p);
    free(s->multi_topo.p);
    judged_free(s);
    req_framer_free(s->framer);
    free(s);
}

static void handle_gone(struct session *s)
{
    if (--s->handles == 0)
        session_free(s);
}

static void on_client_closed(uv_handle_t *h)
{
    handle_gone(h->data);
}

void session_close(struct session *s)
{
    if (s->closing)
        return;
    s->closing = 1;
    s->cl->nclients--;
    if (!uv_is_closing(&s->client.h.handle))
        xport_close(&s->client, on_client_closed);
    bconn_close(&s->be);
}

static void on_client_shutdown(uv_shutdown_t *req, int status)
{
    session_close(req->data);
}

/* Close once everything owed has been written to the client. */
void maybe_finish(struct session *s)
{
    if (s->closing || !s->close_after_flush || s->parked)
        return;
    if (s->q.len > 0 && (s->mode == SM_OWN || s->mode == SM_SHARED))
        return;     /* replies still owed (a protocol error waits its turn) */
    if (xport_backlog(&s->client) > 0 || s->out.len > 0)
        return;
    s->close_after_flush = 0;
    s->client_sreq.data = s;
    if (xport_shutdown(&s->client, &s->client_sreq, on_client_shutdown) < 0)
        session_close(s);
}

static void finish_after_flush(struct session *s)
{
    client_read_stop(s);
    s->close_after_flush = 1;
    maybe_finish(s);
}

/* The backend went away after it was ready: the client gets what was
 * already received and then its connection closes, as with Redis. */
static void backend_lost(struct session *s, const char *why)
{
    log_debug("backend connection lost: %s", why);
    int mid_reply = reply_in_progress(s);
    session_set_mode(s, SM_LOST);
    if (!mid_reply)
        emit_locals(s);
    flush_all(s);
    if (!s->closing)
        finish_after_flush(s);
}

/* No backend for s (it never connected, or its TLS session was refused
 * before the backend answered): what it sent is answered with the reason,
 * then it closes, as redis-server does when it cannot take a client; the
 * next connection tries the backend again. */
static void backend_unavailable(struct session *s)
{
    session_set_mode(s, SM_DOWN);
    q_fail_backend_entries(s, s->be.t->down_reason);
    if (s->ilen > 0) {
        process_input(s, s->ibuf, s->ilen, 1);
    } else if (s->q.len > 0) {
        emit_locals(s);             /* what it had sent is answered: then it closes */
        flush_all(s);
        if (!s->closing)
            finish_after_flush(s);
    } else {
        client_read_start(s);
    }
}

void session_shared_lost(struct session *s, int was_ready)
{
    if (s->closing || s->mode != SM_SHARED)
        return;
    session_set_mode(s, was_ready ? SM_LOST : SM_DOWN);
    if (!was_ready) {
        q_fail_backend_entries(s, NULL);
        queue_error(s, s->be.t->down_reason);
        emit_locals(s);
        flush_all(s);
    }
    if (!s->closing)
        finish_after_flush(s);
}

/* ------------------------------------------------------------------------ */
/* Reading from the client                                                   */

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct session *s = h->data;
    if (s->ilen == 0) {
        buf->base = s->ctx->rbuf;
        buf->len = s->ctx->rbuf_size;
        return;
    }
    if (s->icap - s->ilen < READ_CHUNK) {
        size_t ncap = s->icap ? s->icap * 2 : 2 * READ_CHUNK;
        if (ncap < s->ilen + READ_CHUNK)
            ncap = s->ilen + READ_CHUNK;
        if (s->iwant > s->icap)         /* a held large request: its size at once */
            ncap = s->iwant > s->ilen + READ_CHUNK ? s->iwant : s->ilen + READ_CHUNK;
        s->ibuf = xrealloc(s->ibuf, ncap);
        s->icap = ncap;
    }
    buf->base = s->ibuf + s->ilen;
    buf->len = s->icap - s->ilen;
}

static void client_eof(struct session *s)
{
    /* Mid-stream: closing its connection is what keeps Redis from running
     * the truncated request. Blocked (cluster = route's pin): closing it is
     * what makes the node forget the blocked client, as Redis does when a
     * blocked client leaves. */
    if ((s->mode != SM_OWN && s->mode != SM_SHARED) || s->q.len == 0 ||
        (s->framer != NULL && req_framer_streaming(s->framer)) || route_pin_blocked(s)) {
        session_close(s);
        return;
    }
    s->client_eof = 1;
    if (s->mode == SM_SHARED) {
        finish_after_flush(s);      /* once the replies owed are in */
        return;
    }
    /* Half-closed (e.g. `nc -N`): let Redis finish what it read, as if the
     * client were talking to it directly: pass the EOF on. */
    bconn_shutdown(&s->be);
}

static void client_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct session *s = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        client_read_stop(s);
        if (nread == UV_EOF) {
            client_eof(s);
        } else {
            if (nread == UV_EPROTO)
                log_info("client %s: %s", client_name(s), xport_strerror(&s->client, (int)nread));
            session_close(s);
        }
        return;
    }
    if (s->end_on_input) {
        session_close(s);           /* its backend went away at a switch */
        return;
    }
    loop_clock_update();
    s->ctx->stats.bytes_from_clients += (uint64_t)nread;
    s->last_active = now_ms_monotonic();
    s->replied_in_read = 0;

    if (buf->base != s->ctx->rbuf) {
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
    if (xport_read_start(&s->client, client_alloc, client_read) == 0)
        s->client_reading = 1;
}

void client_read_stop(struct session *s)
{
    if (!s->client_reading)
        return;
    xport_read_stop(&s->client);
    s->client_reading = 0;
}

void session_pause(struct session *s)
{
    client_read_stop(s);
}

/* Start reading requests again if nothing holds them back. */
void session_resume(struct session *s)
{
    if (s->client_reading || s->client_eof || s->draining || s->close_after_flush ||
        s->pin_wait || s->switch_wait || s->replaying || s->cap_wait || q_over_limit(s))
        return;
    switch (s->mode) {
    case SM_OWN:
        if (bconn_backlog(&s->be) > s->ctx->cfg->max_buffer / 2)
            return;
        break;
    case SM_SHARED:
        if (xport_backlog(&s->client) > s->ctx->cfg->max_buffer / 2 ||
            mux_paused(s))
            return;
        break;
    case SM_AUTH:
    case SM_DOWN:
        if (xport_backlog(&s->client) > s->ctx->cfg->max_buffer / 2)
            return;
        break;
    default:
        return;
    }
    client_read_start(s);
}

/* The reply to SYNC/PSYNC is next: from here on the connection carries a
 * replication stream (an RDB payload without a trailing CRLF, newlines as
 * keepalives, then commands), relayed unframed for the rest of its life. */
void enter_replica(struct session *s)
{
    s->replica = 1;
    if (s->mode == SM_OWN)
        bconn_set_raw(&s->be);
}

/* ------------------------------------------------------------------------ */
/* Who is asking, for the event log                                          */

/* The client's address, for log lines. */
const char *client_name(struct session *s)
{
    struct ev_client c;
    return session_client(s, &c)->addr;
}

/* The host of an address in host, and its port. */
static int sockaddr_host(const struct sockaddr_storage *ss, char *host, size_t n)
{
    if (ss->ss_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)ss, host, n);
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    }
    uv_ip4_name((const struct sockaddr_in *)ss, host, n);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

/* host and port as Redis writes an address ("unix" without a port). */
static const char *addr_text(const char *host, int port, char *buf, size_t n)
{
    if (port)
        snprintf(buf, n, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    else
        snprintf(buf, n, "%s", host);
    return buf;
}

const char *session_local_addr(const struct session *s, char *buf, size_t n)
{
    struct sockaddr_storage ss;
    int len = sizeof ss, port = 0;
    char host[64] = "unix";
    if (s->client.h.handle.type == UV_TCP &&
        uv_tcp_getsockname(&s->client.h.tcp, (struct sockaddr *)&ss, &len) == 0)
        port = sockaddr_host(&ss, host, sizeof host);
    return addr_text(host, port, buf, n);
}

const struct ev_client *session_client(struct session *s, struct ev_client *c)
{
    if (s->client_addr == NULL) {
        struct sockaddr_storage ss;
        int len = sizeof ss;
        char host[64] = "unix", buf[96];
        int port = 0;
        if (s->client.h.handle.type == UV_TCP &&
            uv_tcp_getpeername(&s->client.h.tcp, (struct sockaddr *)&ss, &len) == 0)
            port = sockaddr_host(&ss, host, sizeof host);
        s->client_addr = xstrdup(addr_text(host, port, buf, sizeof buf));
    }
    c->addr = s->client_addr;
    c->name = s->client_name;
    c->db = s->db;
    c->node = s->ctx->cfg->cluster ? s->be.t->name : NULL;
    return c;
}

/* ------------------------------------------------------------------------ */
/* Handling one request                                                      */

/* A follow-up request whose reply the proxy swallows. Redis does not answer
 * it under CLIENT REPLY OFF, so then nothing is waited for; a node does in
 * cluster = route, where the proxy keeps CLIENT REPLY itself (route_client.c). */
void send_internal(struct session *s, const char *p, size_t len, int count)
{
    tob_add(s, p, len, 1);
    if (s->reply_off && s->route == NULL)
        return;
    struct pending *e = q_push(s);
    e->kind = PK_INTERNAL;
    e->rewritten = 1;
    e->remaining = count;
    owe(s, count);
}

/* Does req need a connection of its own, whatever the session's queue?
 * Connection state the proxy can carry for a session on a shared connection
 * does not: SELECT of a database Redis has, HELLO 2|3 without AUTH or
 * SETNAME, CLIENT SETINFO and CLIENT NO-EVICT. Everything with CS_PIN does,
 * and so do CLIENT SETNAME and the other CLIENT forms (other clients'
 * CLIENT LIST would tell), a SELECT Redis refuses (its own error), and
 * commands Redis does not know. */
static int needs_own(const struct request *req, const struct req_plan *pl)
{
    long long v;
    if (pl->ci == NULL)
        return 1;
    switch (pl->id) {
    case CID_SELECT:
        return req->argc != 2 || slice_to_ll(req->argv[1], &v) != 0 || v < 0 ||
               v >= control_facts()->databases;
    case CID_HELLO:
        return req->argc > 2 || (req->argc == 2 && (slice_to_ll(req->argv[1], &v) != 0 ||
                                                    (v != 2 && v != 3)));
    case CID_CLIENT:
        return !((req->argc == 4 && pl->words.sub == CSUB_SETINFO) ||
                 (req->argc == 3 && pl->words.sub == CSUB_NO_EVICT));
    case CID_SCRIPT:        /* the script debugger is per connection */
        return req->argc >= 2 && slice_eq_nocase(req->argv[1], "debug");
    default:
        return (pl->ci->sflags & CS_PIN) != 0;
    }
}

/* A SELECT or a protocol-changing HELLO moves a shared session to the
 * shared connection of its new state, only once nothing is owed where it
 * is, so that its replies keep their order. */
static int changes_shared_state(const struct session *s, const struct request *req,
                                enum cmd_id id)
{
    return id == CID_SELECT ||
           (id == CID_HELLO && req->argc == 2 && (req->argv[1].p[0] == '3') != s->resp3);
}

static enum route shared_route(struct session *s, const struct request *req,
                               const struct req_plan *pl)
{
    if (s->route != NULL) {
        int r = route_pick(s, req, pl, needs_own(req, pl));
        return r > 0 ? RT_ANSWERED : r == ROUTE_WAIT ? RT_WAIT :
               r == ROUTE_BLOCKED ? RT_BLOCKED : r == ROUTE_OWN ? RT_PIN : RT_HERE;
    }
    if (s->q.len >= MUX_MAX_INFLIGHT || !mux_shareable(s->ctx) || needs_own(req, pl))
        return RT_PIN;
    if (!changes_shared_state(s, req, pl->id))
        return RT_HERE;
    emit_locals(s);         /* our own replies at the head are owed nothing */
    if (s->q.len > 0)
        return RT_WAIT;
    return pl->id == CID_SELECT ? RT_SELECT : RT_HERE;
}

/* While a CLIENT PAUSE sent through the proxy lasts, Redis holds each
 * connection's commands back one by one: clients that would share a
 * connection would wait behind each other instead (INFO blocked_clients
 * would count one). Nobody joins a shared connection then. */
static int paused(const struct clients *cl)
{
    return cl->paused_until != 0 && now_ms_monotonic() < cl->paused_until;
}

/* multiplex = on: a session starts on a connection of its own, and joins
 * the shared connection of its state with a request that can be shared,
 * once an earlier request has been answered and nothing is owed. So a
 * client that only connects, sets its state or sends one command is a
 * client of its own to Redis (INFO connected_clients, CLIENT LIST, CLIENT
 * KILL), as it is without the proxy; one that ever sends a command that
 * needs its own connection stays on it. */
static void consider_sharing(struct session *s, const struct request *req,
                             const struct req_plan *pl)
{
    if (needs_own(req, pl) || s->be_pass != NULL) {
        s->stateful = 1;            /* a backend login of its own cannot share either */
        return;
    }
    if (s->stateful || s->served == 0 || pl->id == CID_SELECT || pl->id == CID_HELLO ||
        pl->id == CID_CLIENT || s->q.len > 0 || tob.n > 0 || bconn_backlog(&s->be) > 0 ||
        reply_in_progress(s) || !mux_shareable(s->ctx) || paused(s->cl) || mux_attach(s) < 0)
        return;
    bconn_close(&s->be);
    session_set_mode(s, SM_SHARED);
    s->unauth = 0;
}

/* CLIENT REPLY and MULTI decide whether the client gets a reply. */
void plan_replies(struct session *s, const struct request *req, struct req_plan *pl)
{
    pl->mt = multi_cmd(req, pl->id);
    pl->queued = s->in_multi && pl->mt == MT_NONE;
    if (!pl->queued && pl->id == CID_RESET && req->argc == 1)
        s->reply_off = 0;       /* RESET turns replies back on and answers, unless
                                 * it is the command a CLIENT REPLY SKIP skips:
                                 * Redis clears OFF and a SKIP yet to come, not
                                 * the skip of the running command */
    pl->replies = 1;
    pl->skipped = 0;
    int client_reply = !pl->queued && track_client_reply(s, req, pl, &pl->replies);
    if (!client_reply && (s->reply_off || s->reply_skip)) {
        pl->replies = 0;
        pl->skipped = s->reply_skip;
        s->reply_skip = 0;
    }
    s->replied_in_read |= pl->replies;
}

static enum verdict judge(struct session *s, const struct request *req,
                          const struct req_plan *pl, struct rewrite *rw)
{
    if (policy_inactive(s->ctx->cfg)) {
        policy_rewrite_reset(rw);
        return V_FORWARD;
    }
    struct ev_client c;
    struct policy_ctx ctx = {
        .cmd = pl->ci, .resp3 = s->resp3, .in_multi = s->in_multi,
        .can_multi = !s->in_multi && !s->watching && pl->replies && !s->reply_off &&
                     !s->pushes,
        .client = session_client(s, &c),
    };
    enum verdict v = policy_check(s->ctx->cfg, req, &ctx, rw);
    if (v == V_REWRITE && s->route != NULL)
        route_rewrite(s, req, &ctx, rw);    /* an MSET over several slots: part by part */
    return v;
}

static void answer_rejection(struct session *s, const struct req_plan *pl,
                             const struct rewrite *rw)
{
    s->ctx->stats.rejected++;
    if (s->in_multi)
        s->multi_dirty = 1;     /* refused at queue time: EXEC must abort */
    if (pl->replies) {
        queue_local(s, rw->err.p, rw->err.len, 0);
    } else if (pl->skipped && s->route == NULL) {
        /* Redis still owes the SKIP to one command: give it a PING. */
        static const char ping[] = "*1\r\n$4\r\nPING\r\n";
        tob_add(s, ping, sizeof ping - 1, 1);
    }
}

/* EXEC after a rejected command: Redis would answer EXECABORT, so the
 * transaction is discarded and the client gets that answer. */
static void abort_exec(struct session *s, const struct req_plan *pl)
{
    static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
    static const char abort_line[] =
        "-EXECABORT Transaction discarded because of previous errors.\r\n";
    tob_add(s, discard, sizeof discard - 1, 1);
    multi_reset(s);
    if (pl->replies || s->route != NULL) {     /* route: the node answers, the proxy drops it */
        struct pending *e = q_push(s);
        e->kind = PK_INTERNAL;
        e->what = pl->replies ? PW_REPLACE : PW_PLAIN;
        e->local = abort_line;
        e->local_len = sizeof abort_line - 1;
        owe(s, 1);
    }
}

static void send_request(struct session *s, const struct request *req, enum verdict v,
                         const struct req_plan *pl, const struct rewrite *rw)
{
    if (rw->nprobe > 0)
        tob_add(s, rw->probe.p, rw->probe.len, 1);
    if (v != V_REWRITE) {
        tob_add(s, req->raw.p, req->raw.len, pl->raw_copy);
        return;
    }
    s->ctx->stats.rewritten++;
    tob_add(s, rw->pre.p, rw->pre.len, 1);
    if (rw->orig_args.len)
        tob_add(s, rw->orig_args.p, rw->orig_args.len, 0);
    if (rw->tail.len)
        tob_add(s, rw->tail.p, rw->tail.len, 1);
}

/* cluster = route, RESP3: a subscription's confirmations are pushes, which
 * no reply follows. A PING of the proxy's after it has one: until it is
 * answered the subscriptions are unsure, and the subscriber neither leaves
 * its node nor has a command judged by them (route_subscribed()). */
static void fence_pushes(struct session *s)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    tob_add(s, ping, sizeof ping - 1, 1);
    struct pending *e = q_push(s);
    e->kind = PK_INTERNAL;
    e->what = PW_SUB;                   /* its +PONG ends it (apply_reply()) */
    s->sub_unsure++;
}

/* The pending entries for what was sent. */
static void expect_replies(struct session *s, const struct request *req,
                           const struct req_plan *pl, enum verdict v, const struct rewrite *rw)
{
    if (rw->nprobe > 0) {
        struct pending *e = q_push(s);
        e->kind = PK_INTERNAL;
        e->what = PW_PROBE;
        e->remaining = rw->nprobe;
        e->local = xmemdup(rw->probe_ev.p, rw->probe_ev.len);
        e->local_len = (uint32_t)rw->probe_ev.len;
        e->local_owned = 1;
        owe(s, rw->nprobe);
    }
    if (rw->exec_first > 0) {
        struct pending *e = q_push(s);
        e->kind = PK_INTERNAL;          /* +OK for MULTI */
        e->rewritten = 1;
        e = q_push(s);
        e->kind = PK_INTERNAL;
        e->what = PW_QUEUED;
        e = q_push(s);
        e->kind = PK_INTERNAL;          /* +QUEUED per EXPIRE */
        e->rewritten = 1;
        e->remaining = rw->exec_first - 2;
        e = q_push(s);
        e->kind = PK_INTERNAL;
        e->what = PW_EXEC_FIRST;
        e->rewritten = 1;
        e->t0 = loop_now_ns;
        owe(s, rw->exec_first + 1);
        return;
    }
    if (pl->queued && s->ctx->cfg->cluster)
        note_queued_topology(s, req, pl->id);
    if (s->replica)
        return;
    if (!pl->replies && s->route == NULL) {
        /* Under CLIENT REPLY OFF|SKIP Redis still applies HELLO, RESET, AUTH:
         * no reply will confirm or undo them, so they count as sent. */
        struct pending unused = { .kind = PK_FORWARD, .remaining = 0 };
        if (!pl->queued && pl->id != CID_CLIENT)
            track_request(s, req, pl, &unused);
        return;
    }
    struct pending pe = { .kind = PK_FORWARD, .remaining = 1, .rewritten = v == V_REWRITE,
                          .t0 = loop_now_ns };
    if (pl->id == CID_CLIENT)
        track_carried(req, pl, &pe);
    else if (!pl->queued && !track_pubsub(s, req, pl->id, &pe))
        track_request(s, req, pl, &pe);
    if (pl->mt == MT_EXEC && s->in_multi && s->multi_topo_any) {
        /* EXEC's reply holds topology replies: which elements, the entry says. */
        pe.what = PW_TOPOLOGY;
        pe.subkind = TOPO_EXEC;
        pe.local = xmemdup(s->multi_topo.p, s->multi_topo.len);
        pe.local_len = (uint32_t)s->multi_topo.len;
        pe.local_owned = 1;
    }
    if (rw->guard.len > 0 && !pl->queued && pe.what == PW_PLAIN) {
        pe.what = PW_GUARD;
        pe.local = xmemdup(rw->guard.p, rw->guard.len);
        pe.local_len = (uint32_t)rw->guard.len;
        pe.local_owned = 1;
    }
    if (!pl->replies) {                 /* cluster = route: the node's reply is dropped */
        pe.kind = PK_INTERNAL;
        pe.rewritten = 0;
    }
    if (pe.remaining != 0) {            /* RESP3 pub/sub: confirmations are pushes */
        *q_push(s) = pe;
        owe(s, pe.remaining);
        s->sub_unsure += pe.what == PW_SUB || (pe.what == PW_RESET && pe.subkind);
    } else if (s->route != NULL) {
        fence_pushes(s);
    }
    if (pe.what == PW_SYNC && s->q.len == 1)
        enter_replica(s);
}

static void send_followup(struct session *s, const struct req_plan *pl, const struct rewrite *rw)
{
    if (rw->followup.len == 0)
        return;
    if (s->in_multi && pl->mt == MT_NONE) {
        /* Inside MULTI the follow-up would add an element to EXEC's reply:
         * run it after EXEC instead. */
        struct sbuf *f = &s->multi_fix;
        if (f->len + rw->followup.len > f->cap) {
            f->cap = (f->len + rw->followup.len) * 2;
            f->p = xrealloc(f->p, f->cap);
        }
        memcpy(f->p + f->len, rw->followup.p, rw->followup.len);
        f->len += rw->followup.len;
        s->multi_nfix++;
        return;
    }
    send_internal(s, rw->followup.p, rw->followup.len, 1);
}

/* SELECT of a shared session: it moves to the shared connection of that
 * database; Redis would say +OK. */
static void select_shared(struct session *s, const struct request *req,
                          const struct req_plan *pl)
{
    long long db;
    slice_to_ll(req->argv[1], &db);
    s->db = (int)db;
    if (pl->replies)
        queue_local(s, "+OK\r\n", 5, 1);
}

/* Will Redis run a command in the client's pub/sub context? */
enum pubsub_verdict {
    PS_RUNS,
    PS_REFUSED,     /* a RESP2 subscriber's: only (P|S)(UN)SUBSCRIBE, PING, QUIT and RESET
                       run, the rest is refused ("Can't execute ...") and changes nothing */
    PS_UNKNOWN,     /* that depends on replies still owed (a subscription change, a RESET) */
};

static enum pubsub_verdict pubsub_context(const struct session *s, enum cmd_id id)
{
    if (s->resp3 || (s->nchan + s->npat + s->nshard == 0 && s->sub_unsure == 0))
        return PS_RUNS;
    switch (id) {
    case CID_SUBSCRIBE: case CID_PSUBSCRIBE: case CID_SSUBSCRIBE:
    case CID_UNSUBSCRIBE: case CID_PUNSUBSCRIBE: case CID_SUNSUBSCRIBE:
    case CID_PING: case CID_QUIT: case CID_RESET:
        return PS_RUNS;
    default:
        return s->sub_unsure > 0 ? PS_UNKNOWN : PS_REFUSED;
    }
}

/* ...so it goes to Redis as it is, for Redis's own error: no rule judges it
 * and the proxy mirrors nothing it would have changed (HELLO, MULTI, CLIENT
 * REPLY, AUTH). */
static void forward_refused(struct session *s, const struct request *req)
{
    s->ctx->stats.requests++;
    s->be.t->requests++;
    s->served++;
    tob_add(s, req->raw.p, req->raw.len, 0);
    if (s->reply_off || s->reply_skip) {
        s->reply_skip = 0;
        return;
    }
    struct pending *e = q_push(s);
    e->kind = PK_FORWARD;
    e->t0 = loop_now_ns;
}

/* The address the client reached ttlguard at: host and port (0: not TCP).
 * A TLS client that sent SNI gets that name as the host: it is the name it
 * connects by and verifies ttlguard's certificate against. */
static int client_reached(const struct session *s, char *host, size_t hostlen)
{
    struct sockaddr_storage ss;
    int len = sizeof ss, port;
    if (s->client.h.handle.type != UV_TCP ||
        uv_tcp_getsockname(&s->client.h.tcp, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    port = sockaddr_host(&ss, host, hostlen);
    const char *sni = s->client.tls != NULL ? tls_client_sni(s->client.tls) : NULL;
    if (sni != NULL)
        snprintf(host, hostlen, "%s", sni);
    return port;
}

/* SENTINEL asked of ttlguard itself, when it follows Sentinel (sentinel.h). */
static int answer_sentinel(struct session *s, const struct request *req)
{
    char host[256] = "";
    struct sbuf out = { 0 };
    if (s->ctx->cfg->sentinel == NULL ||
        !sentinel_answer(s->ctx->cfg, req, host, client_reached(s, host, sizeof host), &out))
        return 0;
    s->ctx->stats.requests++;
    queue_local(s, out.p, out.len, 0);
    free(out.p);
    return 1;
}

/* cluster = route: a subscriber is on a connection of its own to its
 * subscriptions' node (ROUTE_OWN). route.c answers what that node cannot
 * (ps: what Redis does with the request in the subscriber's context); one
 * with no subscription left is routed again once owed nothing (not
 * mid-push: its connection closes). Returns 1 when handled (*h). */
static int routed_own(struct session *s, const struct request *req, const struct req_plan *pl,
                      enum pubsub_verdict ps, enum handled *h)
{
    int r = ps == PS_REFUSED ? route_sub_refused(s, req, pl) :
            route_subscribed(s, req, pl, needs_own(req, pl));
    if (r == ROUTE_BACK && !reply_in_progress(s)) {
        bconn_close(&s->be);
        session_set_mode(s, SM_SHARED);
        return 0;
    }
    if (r == 0)
        return 0;
    if (r > 0) {
        s->ctx->stats.requests++;
        s->be.t->requests++;
    }
    *h = r > 0 ? HR_DONE : HR_WAIT;
    return 1;
}

static enum handled handle_request(struct session *s, const struct request *req)
{
    struct req_plan pl = { .ci = command_resolve(control_facts()->commands, req->argv[0].p,
                                                 req->argv[0].len) };
    pl.id = pl.ci != NULL ? pl.ci->id : CID_OTHER;
    pl.words = command_words(pl.id, req->argc, req->argv);
    struct request fwd = *req;
    enum handled h;
    if (s->mode == SM_OWN) {        /* a subscriber has a connection of its own */
        enum pubsub_verdict ps = pubsub_context(s, pl.id);
        if (ps == PS_UNKNOWN)
            return HR_WAIT;
        if (s->route != NULL && routed_own(s, req, &pl, ps, &h))
            return h;
        if (ps == PS_REFUSED) {
            forward_refused(s, req);
            return HR_DONE;
        }
    }
    if (s->ttlg_auth && client_login(s, req, &pl, &fwd, &h))
        return h;
    req = &fwd;
    if (s->route != NULL && pl.id == CID_HELLO && route_hello_setname(s, req, &pl, &fwd)) {
        s->ctx->stats.requests++;
        return HR_DONE;
    }
    if (answer_sentinel(s, req))
        return HR_DONE;
    if (s->mode == SM_OWN && s->ctx->cfg->multiplex && s->route == NULL)
        consider_sharing(s, req, &pl);
    enum route rt = s->mode == SM_SHARED ? shared_route(s, req, &pl) : RT_HERE;
    /* AUTH, or HELLO ... AUTH. Redis 8.0 and Valkey 8.1 send no reply at all
     * to a failed AUTH that arrives while an earlier reply of the connection
     * is still pending (redis#15640): the proxy, which pairs replies with
     * requests by count, would then give every later reply to the wrong
     * request. On its own connection a session sends one only when nothing
     * is owed (the shared connection is left for one that way already). */
    if (s->mode == SM_OWN && s->q.len > 0 && login_carries_auth(pl.id, &pl.words))
        return HR_WAIT;
    if (s->mode == SM_OWN)
        s->served++;
    if (rt == RT_PIN)
        return HR_PIN;
    if (rt == RT_WAIT)
        return HR_WAIT;
    if (rt == RT_BLOCKED)
        return HR_BLOCKED;
    s->ctx->stats.requests++;
    s->be.t->requests++;
    if (rt == RT_SELECT) {
        plan_replies(s, req, &pl);
        select_shared(s, req, &pl);
        return HR_DONE;
    }
    if (rt == RT_ANSWERED)
        return HR_DONE;
    if (s->mode != SM_OWN && s->mode != SM_SHARED) {
        queue_error(s, s->be.t->down_reason);
        s->close_after_flush = 1;
        return HR_DONE;
    }

    plan_replies(s, req, &pl);
    static struct rewrite rw;
    enum verdict v = judge(s, req, &pl, &rw);
    if (v == V_REJECT) {
        answer_rejection(s, &pl, &rw);
    } else if (pl.mt == MT_EXEC && s->in_multi && s->multi_dirty) {
        abort_exec(s, &pl);
    } else {
        if (!pl.queued)
            track_identity(s, req, &pl);
        send_request(s, req, v, &pl, &rw);
        expect_replies(s, req, &pl, v, &rw);
        send_followup(s, &pl, &rw);
        track_multi(s, pl.mt);
        if (pl.id == CID_RESET && req->argc == 1 && !pl.queued && s->mode == SM_OWN)
            relogin(s);             /* RESET logged the connection out of Redis */
    }
    if (s->route != NULL && s->mode == SM_SHARED)
        route_commit(s, req, &tob); /* what went, to its node (a DISCARD of abort_exec()) */
    return HR_DONE;
}

/* Empty requests came before the next one. Redis 7.0 and 8.6 (and Valkey)
 * reset the client after each (processInputBuffer: resetClient() with no
 * command), which ends a pending CLIENT REPLY SKIP: the command after them is
 * answered. Redis behind the proxy must see one too, or it would skip that
 * reply. Redis 8.0 resets nothing: the SKIP waits for the next command. */
static void empty_request(struct session *s)
{
    if (!s->reply_skip || (command_set_features(control_facts()->commands) & FT_EMPTY_NO_RESET))
        return;
    s->reply_skip = 0;
    if (s->route == NULL)               /* cluster = route: the SKIP was the proxy's */
        tob_add(s, "\r\n", 2, 1);
}

/* ------------------------------------------------------------------------ */
/* Large requests                                                            */

/* The ids of commands the session acts on besides forwarding them (login,
 * state, pub/sub, transactions, scripts, topology): those are held whole.
 * The others, the policy's own ids included, are only forwarded. */
static int only_forwarded(enum cmd_id id)
{
    return id == CID_OTHER || id == CID_SET || id == CID_SETNX || id == CID_GETSET ||
           id == CID_MSET || id == CID_ZADD || id == CID_ZINCRBY;
}

/* A large request streaming under a rule (policy_stream_form()): what its
 * judgement needs once it is whole. */
struct stream_judged {
    enum stream_form form;      /* SF_PLAIN or SF_MULTI */
    int total;                  /* its arguments: */
    int big;                    /* argv[0..big) copied from its head, argv[big] the large one */
    struct slice *argv;
    char *bytes;                /* argv[0..big)'s bytes */
    uint64_t t0;                /* loop_now_ns when its head was read */
    struct sbuf tail;           /* SF_MULTI: sent after it (struct stream_plan) */
    int queued;                 /* ...and the commands in the proxy's MULTI */
};

static void judged_free(struct session *s)
{
    if (s->judged == NULL)
        return;
    free(s->judged->argv);
    free(s->judged->bytes);
    free(s->judged->tail.p);
    free(s->judged);
    s->judged = NULL;
}

/* Keep what the judgement of the whole request will need from its head. */
static void judged_keep(struct session *s, const struct request *req, enum stream_form form,
                        const struct stream_plan *sp)
{
    struct stream_judged *j = xcalloc(1, sizeof *j);
    size_t n = 0;
    j->form = form;
    sbuf_add(&j->tail, sp->tail.p, sp->tail.len);
    j->queued = sp->queued;
    j->total = (int)req->head->total;
    j->big = req->argc;
    j->argv = xmalloc(sizeof *j->argv * (size_t)j->total);
    for (int i = 0; i < req->argc; i++)
        n += req->argv[i].len;
    j->bytes = xmalloc(n > 0 ? n : 1);
    n = 0;
    for (int i = 0; i < req->argc; i++) {
        memcpy(j->bytes + n, req->argv[i].p, req->argv[i].len);
        j->argv[i] = (struct slice){ j->bytes + n, req->argv[i].len };
        n += req->argv[i].len;
    }
    j->t0 = loop_now_ns;
    s->judged = j;
}

/* The end of the proxy's MULTI around a streamed request (after the tail
 * of its plan): EXEC, and the client gets the command's reply; or DISCARD,
 * and the rule's error. */
static void judged_close_multi(struct session *s, enum verdict v, const struct rewrite *rw)
{
    static const char exec[] = "*1\r\n$4\r\nEXEC\r\n";
    static const char discard[] = "*1\r\n$7\r\nDISCARD\r\n";
    struct stream_judged *j = s->judged;
    if (j->tail.len > 0)
        tob_add(s, j->tail.p, j->tail.len, 1);
    struct pending *e = q_push(s);
    e->kind = PK_INTERNAL;              /* +QUEUED, or the command's refusal */
    e->what = PW_QUEUED;
    if (j->queued > 1) {
        e = q_push(s);
        e->kind = PK_INTERNAL;          /* +QUEUED per EXPIRE */
        e->rewritten = 1;
        e->remaining = j->queued - 1;
    }
    e = q_push(s);
    e->kind = PK_INTERNAL;
    if (v == V_REJECT) {
        s->ctx->stats.rejected++;
        tob_add(s, discard, sizeof discard - 1, 1);
        e->what = PW_REPLACE;           /* DISCARD's +OK: the rule's error instead */
        e->local = xmemdup(rw->err.p, rw->err.len);
        e->local_len = (uint32_t)rw->err.len;
        e->local_owned = 1;
    } else {
        s->ctx->stats.rewritten += v == V_REWRITE;
        tob_add(s, exec, sizeof exec - 1, 1);
        e->what = PW_EXEC_FIRST;
        e->rewritten = 1;
        e->t0 = j->t0;
    }
    owe(s, j->queued + 1);
}

/* A request that streamed under a rule is whole: judged as any request,
 * the large argument standing as an empty one (no rule reads a value), for
 * the events, and for its MULTI's end. */
static void judge_streamed(struct session *s)
{
    struct stream_judged *j = s->judged;
    int n = req_framer_tail(s->framer, j->argv + j->big + 1, j->total - j->big - 1);
    j->argv[j->big] = (struct slice){ "", 0 };
    struct request whole = { .argc = j->big + 1 + (n > 0 ? n : 0), .argv = j->argv,
                             .inline_cmd = 1 };     /* no raw bytes to reuse */
    struct ev_client c;
    struct policy_ctx ctx = {
        .cmd = command_resolve(control_facts()->commands, j->argv[0].p, j->argv[0].len),
        .resp3 = s->resp3, .can_multi = j->form == SF_MULTI, .client = session_client(s, &c),
    };
    static struct rewrite rw;
    enum verdict v = policy_check(s->ctx->cfg, &whole, &ctx, &rw);
    if (j->form == SF_MULTI)
        judged_close_multi(s, v, &rw);
    judged_free(s);
}

/* A large request's head goes as sent, or inside the proxy's MULTI: pre,
 * then the head's bytes after its "*N" line. */
static void send_stream_head(struct session *s, const struct request *req, enum stream_form form,
                             const struct sbuf *pre)
{
    if (form != SF_MULTI) {
        tob_add(s, req->raw.p, req->raw.len, 0);
        return;
    }
    const char *args = (const char *)memchr(req->raw.p, '\n', req->raw.len) + 1;
    tob_add(s, pre->p, pre->len, 1);
    tob_add(s, args, req->raw.len - (size_t)(args - req->raw.p), 0);
    struct pending *e = q_push(s);
    e->kind = PK_INTERNAL;              /* +OK for MULTI */
    e->rewritten = 1;
    owe(s, 1);
}

/* The head of a request with a large argument (resp_request.h). It streams
 * when what the proxy does with it is decided before its rest: an
 * authenticated client, no subscriptions, a command only forwarded, and the
 * rules of the keys before the large argument allow it (policy_stream_form():
 * as sent, or inside the proxy's MULTI and judged once whole). It then needs
 * the session's own connection: a shared connection never carries a partial
 * request, since a client that stalls or leaves mid-value would hold up or
 * break the others' requests. A session that streamed keeps its own
 * connection, as a client that sends large values has one without the proxy.
 * Else it is held until whole, and handled as any other. */
static enum handled stream_head(struct session *s, const struct request *req)
{
    if (req->argc < 1)
        return HR_HOLD;             /* the large argument is the command's name */
    const struct cmd_info *ci = command_resolve(control_facts()->commands, req->argv[0].p,
                                                req->argv[0].len);
    if (ci == NULL || !only_forwarded(ci->id) || s->unauth || s->replica ||
        s->monitor || (s->ttlg_auth && !s->authed) || s->nchan + s->npat + s->nshard > 0 ||
        s->sub_unsure > 0 || s->pushes || s->route != NULL)
        return HR_HOLD;
    struct policy_ctx ctx = {       /* no event is written from the head: no client */
        .cmd = ci, .resp3 = s->resp3,
        .can_multi = !s->in_multi && !s->watching && !s->reply_off && !s->reply_skip,
    };
    static struct stream_plan sp;
    enum stream_form form = policy_stream_form(s->ctx->cfg, req, &ctx, &sp);
    if (form == SF_HOLD)
        return HR_HOLD;
    if (s->mode == SM_SHARED) {
        s->stateful = 1;
        return HR_PIN;
    }
    if (s->mode != SM_OWN)
        return HR_HOLD;
    s->stateful = 1;
    s->served++;
    s->ctx->stats.requests++;
    s->be.t->requests++;
    struct req_plan pl = { .ci = ci, .id = ci->id };
    plan_replies(s, req, &pl);
    send_stream_head(s, req, form, &sp.pre);
    if (form != SF_FREE)
        judged_keep(s, req, form, &sp);
    if (form == SF_MULTI)
        return HR_STREAM;           /* its replies are owed once it is whole */
    /* What expect_replies() does for a command only forwarded (kept out of
     * it: the per-request path keeps it inlined). */
    if (pl.queued && s->ctx->cfg->cluster)
        note_queued_topology(s, req, pl.id);
    if (pl.replies) {
        struct pending *e = q_push(s);
        e->kind = PK_FORWARD;
        e->t0 = loop_now_ns;
        owe(s, 1);
    }
    return HR_STREAM;
}

/* A protocol error in a streamed request: Redis has its beginning. It gets
 * the rest as the client sent it, and answers the error and closes as it
 * does without the proxy; the client is read no more. */
static void stream_refused(struct session *s, const char *p, size_t n)
{
    if (s->judged != NULL && s->judged->form == SF_MULTI) {
        struct pending *e = q_push(s);  /* the error goes to the client */
        e->kind = PK_FORWARD;
        e->t0 = s->judged->t0;
        owe(s, 1);
    }
    judged_free(s);
    tob_add(s, p, n, 0);
    client_read_stop(s);
    s->close_after_flush = 1;
}

/* Keep what is left of the input: a trailing partial request is copied
 * into ibuf when the bytes are in the shared read buffer, moved to its
 * front when they are in ibuf. Returns -1 when the session closed. */
static int keep_rest(struct session *s, const char *data, size_t len, size_t pos, int in_ibuf)
{
    size_t left = len - pos;
    if (left > QUERY_MAX) {
        log_warn("closing client: query buffer over %lld bytes", QUERY_MAX);
        session_close(s);
        return -1;
    }
    if (in_ibuf) {
        if (pos > 0 && left > 0) {
            memmove(s->ibuf, s->ibuf + pos, left);
            req_framer_moved(s->framer, pos, 0);
        }
        s->ilen = left;
    } else if (left > 0) {
        if (s->icap < left + READ_CHUNK || s->icap < s->iwant) {
            free(s->ibuf);
            s->icap = left + READ_CHUNK > s->iwant ? left + READ_CHUNK : s->iwant;
            s->ibuf = xmalloc(s->icap);
        }
        memcpy(s->ibuf, data + pos, left);
        req_framer_moved(s->framer, pos, 0);
        s->ilen = left;
    }
    if (s->ilen == 0) {
        req_framer_moved(s->framer, len, 0);    /* everything was consumed */
        s->iwant = 0;
        if (s->icap > 0) {       /* idle: hold no buffer */
            free(s->ibuf);
            s->ibuf = NULL;
            s->icap = 0;
        }
        req_framer_release(s->framer);
    }
    return 0;
}

/* max_pending replies are owed: the next request waits until one is in.
 * Our own replies at the head are owed nothing: they go first. */
static int pending_full(struct session *s)
{
    if ((uint32_t)s->ctx->cfg->max_pending > s->q.len)
        return 0;
    if (!reply_in_progress(s))
        emit_locals(s);
    s->cap_wait = (uint32_t)s->ctx->cfg->max_pending <= s->q.len;
    return s->cap_wait;
}

/* A reply came in: requests held back by max_pending go on. */
static void pending_resume(struct session *s)
{
    if (!s->cap_wait || s->closing || s->q.len >= (uint32_t)s->ctx->cfg->max_pending)
        return;
    s->cap_wait = 0;
    process_input(s, s->ibuf, s->ilen, 1);
}

/* Frame and handle every complete request in data[0..len). */
static void process_input(struct session *s, const char *data, size_t len, int in_ibuf)
{
    if (s->framer == NULL) {
        s->framer = req_framer_new();
        req_framer_set_stream(s->framer, REQ_HAND_MIN, STREAM_MIN);
    }
    int unauth = s->unauth || (s->ttlg_auth && !s->authed);    /* the framer's limits */
    req_framer_set_unauthenticated(s->framer, unauth);
    req_framer_set_inline_join(s->framer, command_set_features(control_facts()->commands) & FT_INLINE_JOIN);

    size_t pos = 0;
    struct request req;
    int rc;
    while (!s->draining && !s->close_after_flush &&
           (rc = req_next(s->framer, data, len, &pos, &req)) != 0) {
        if (rc == REQ_PART) {
            tob_add(s, req.raw.p, req.raw.len, 0);
            if (s->judged != NULL && !req_framer_streaming(s->framer))
                judge_streamed(s);
            continue;
        }
        if (rc < 0 && req_framer_streaming(s->framer)) {
            stream_refused(s, data + pos, len - pos);
            pos = len;
            break;
        }
        if (rc < 0) {
            s->ctx->stats.protocol_errors++;
            const char *msg = req_framer_error(s->framer);
            log_debug("client protocol error: %s", msg);
            queue_error(s, msg);
            pos = len;
            client_read_stop(s);
            s->close_after_flush = 1;
            break;
        }
        if (req_framer_take_empty(s->framer))
            empty_request(s);       /* before it, whatever becomes of this request */
        enum handled h = pending_full(s) ? HR_WAIT :
                         req.head != NULL ? stream_head(s, &req) : handle_request(s, &req);
        if (h == HR_HOLD) {
            req_framer_hold(s->framer);
            /* Its size so far: the head, the large bulk, a little for what follows. */
            s->iwant = req.raw.len + (size_t)req.head->big_len + 2 + READ_CHUNK;
            continue;
        }
        if (h == HR_STREAM) {
            pos = req_framer_stream(s->framer);
            continue;
        }
        if (h != HR_DONE) {
            /* Leave the shared connection, or move to another one, or
             * authenticate, or wait for replies under max_pending: this
             * request and the ones after it wait in ibuf until the replies
             * owed are in (or the connection is open). */
            pos = (size_t)(req.raw.p - data);
            req_framer_rewind(s->framer);
            if (h == HR_PIN)
                s->pin_wait = 1;
            else if ((h == HR_WAIT || h == HR_BLOCKED) && s->cap_wait == 0)
                s->switch_wait = 1;
            /* Behind a blocking command the client is read on, as Redis
             * reads a blocked client: its EOF ends the block (client_eof()).
             * What it sends meanwhile waits in ibuf, up to max_buffer. */
            if (h != HR_BLOCKED || len - pos > s->ctx->cfg->max_buffer)
                client_read_stop(s);
            break;
        }
        if (s->mode == SM_WAIT) {
            client_read_stop(s);    /* logged in: the rest waits for the connection */
            break;
        }
        /* The pre-AUTH limits go off for the next request once this one
         * logged in. A RESET turns them on again where ttlguard answers the
         * next request itself (its own logins): at once as Redis does, or
         * behind Valkey 9 once the requests it read ahead are done
         * (login_parses_ahead()). Else Redis answers it, under its own. */
        int now = s->unauth || (s->ttlg_auth && !s->authed);
        if (!now || (s->ttlg_auth && (unauth || req.inline_cmd ||
                                      !login_parses_ahead(control_login()))))
            unauth = now;
        req_framer_set_unauthenticated(s->framer, unauth);
    }
    if (!reply_in_progress(s))
        emit_locals(s);
    flush_all(s);
    if (s->closing || keep_rest(s, data, len, pos, in_ibuf) < 0)
        return;
    if (q_over_limit(s))
        client_read_stop(s);
    if (s->pin_wait || s->switch_wait)
        session_settle(s);
    else if (s->close_after_flush)
        maybe_finish(s);
}

/* ------------------------------------------------------------------------ */
/* The session's own backend connection                                      */

/* A request of the proxy's own, argc words, RESP encoded at the end of out:
 * one request (for a count). */
static int add_request(struct sbuf *out, int argc, const struct slice *argv)
{
    char hdr[32];
    sbuf_add(out, hdr, (size_t)snprintf(hdr, sizeof hdr, "*%d\r\n", argc));
    for (int i = 0; i < argc; i++) {
        sbuf_add(out, hdr, (size_t)snprintf(hdr, sizeof hdr, "$%zu\r\n", argv[i].len));
        sbuf_add(out, argv[i].p, argv[i].len);
        sbuf_add(out, "\r\n", 2);
    }
    return 1;
}

#define SL(lit) ((struct slice){ lit, sizeof lit - 1 })

int session_state_requests(const struct session *s, struct sbuf *out)
{
    char db[24];
    int n = 0;
    if (s->db != 0) {
        struct slice a[2] = { SL("SELECT"), { db, (size_t)snprintf(db, sizeof db, "%d", s->db) } };
        n += add_request(out, 2, a);
    }
    if (s->resp3) {
        struct slice a[2] = { SL("HELLO"), SL("3") };
        n += add_request(out, 2, a);
    }
    if (s->lib_name != NULL) {
        struct slice a[4] = { SL("CLIENT"), SL("SETINFO"), SL("LIB-NAME"),
                              { s->lib_name, strlen(s->lib_name) } };
        n += add_request(out, 4, a);
    }
    if (s->lib_ver != NULL) {
        struct slice a[4] = { SL("CLIENT"), SL("SETINFO"), SL("LIB-VER"),
                              { s->lib_ver, strlen(s->lib_ver) } };
        n += add_request(out, 4, a);
    }
    if (s->no_evict) {
        struct slice a[3] = { SL("CLIENT"), SL("NO-EVICT"), SL("ON") };
        n += add_request(out, 3, a);
    }
    if (s->route != NULL && s->client_name != NULL) {   /* a pin: named as its client */
        struct slice a[3] = { SL("CLIENT"), SL("SETNAME"),
                              { s->client_name, strlen(s->client_name) } };
        n += add_request(out, 3, a);
    }
    return n;
}

/* A session that was shared gets its own connection: the state it carried
 * there is set on it first, so that what the client sees is unchanged. The
 * client's requests follow once Redis has answered, in a write of their
 * own: Redis's view of them (CLIENT LIST qbuf=, cmd=) is then the same as
 * without the proxy. */
static void replay_state(struct session *s)
{
    static struct sbuf state;
    state.len = 0;
    int n = session_state_requests(s, &state);
    if (n == 0)
        return;
    tob_add(s, state.p, state.len, 1);
    while (n-- > 0)
        q_push(s)->kind = PK_INTERNAL;
    s->replaying = 1;
    flush_all(s);
}

/* The client's requests that waited for the connection (and its replay). */
static void serve_waiting(struct session *s)
{
    if (s->ilen > 0)
        process_input(s, s->ibuf, s->ilen, 1);
    if (!s->closing)
        session_resume(s);
}

static void be_ready(struct bconn *b)
{
    struct session *s = b->owner;
    const struct backend_facts *bf = control_facts();
    if (!bf->commands_ready && !policy_inactive(s->ctx->cfg)) {
        /* Rules judge commands by the backend's own table: wait for it
         * (session_commands_ready()). The client is not read meanwhile. */
        s->ident_wait = 1;
        return;
    }
    s->auth_required = !s->ttlg_auth && s->ctx->cfg->backend_password == NULL &&
                       bf->clients_must_auth;
    s->unauth = s->auth_required;
    session_set_mode(s, SM_OWN);
    if (s->was_shared)
        replay_state(s);
    if (!s->replaying)
        serve_waiting(s);
}

void session_commands_ready(struct session *s)
{
    if (!s->ident_wait || s->closing)
        return;
    s->ident_wait = 0;
    if (s->be.state == BC_READY)
        be_ready(&s->be);
}

static void be_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    session_reply(b->owner, p, n, done, type, start);
}

static void be_read_end(struct bconn *b)
{
    struct session *s = b->owner;
    if (s->closing)
        return;
    if (!reply_in_progress(s))
        emit_locals(s);
    flush_all(s);
    if (s->replaying && s->q.len == 0) {
        s->replaying = 0;
        serve_waiting(s);
    }
    if (s->switch_wait && s->q.len == 0 && !s->closing) {
        s->switch_wait = 0;         /* an AUTH waited for the replies owed */
        process_input(s, s->ibuf, s->ilen, 1);
    }
    pending_resume(s);
    if (!s->closing)
        session_resume(s);
    maybe_finish(s);
}

static void be_failed(struct bconn *b, const char *why, int was_ready)
{
    struct session *s = b->owner;
    if (s->closing)
        return;
    if (was_ready)
        backend_lost(s, why);
    else
        backend_unavailable(s);
}

static void be_closed(struct bconn *b)
{
    struct session *s = b->owner;
    if (s->reopen && !s->closing) {
        s->reopen = 0;              /* the handle is counted still: it is used again */
        bconn_connect(&s->be, 1);
        return;
    }
    handle_gone(s);
}

static void be_written(struct bconn *b, int status)
{
    session_resume(b->owner);
}

static const struct bconn_ops be_ops = {
    be_ready, be_reply, be_read_end, be_failed, be_closed, be_written,
};

void open_own_connection(struct session *s)
{
    session_set_mode(s, SM_WAIT);
    if (s->be.state != BC_IDLE) {
        s->reopen = 1;              /* the one it left for the shared one is still closing */
        return;
    }
    s->handles++;
    bconn_connect(&s->be, 1);
}

/* After a reply for s on the shared connection: what the end of a backend
 * read does for a session. */
void session_settle(struct session *s)
{
    if (s->closing)
        return;
    emit_locals(s);
    if (toc_owner == s && (s->close_after_flush || (s->pin_wait && s->q.len == 0))) {
        session_flush_client();     /* before the client is shut down or moves */
        if (s->closing)
            return;
    }
    if (s->pin_wait && s->q.len == 0) {
        /* Owed nothing on the shared connection any more: go 1:1. */
        flush_all(s);
        s->pin_wait = 0;
        s->was_shared = 1;
        open_own_connection(s);
        return;
    }
    if (s->switch_wait && s->q.len == 0) {
        /* Owed nothing where it is: the waiting SELECT/HELLO can move it. */
        s->switch_wait = 0;
        process_input(s, s->ibuf, s->ilen, 1);
        if (s->closing)
            return;
    }
    pending_resume(s);
    if (s->closing)
        return;
    session_resume(s);
    maybe_finish(s);
}

/* ------------------------------------------------------------------------ */
/* Accept, cron, drain                                                       */

/* The TLS handshake with a client ended: a failure is logged (a plain
 * client on the TLS port, a certificate refused) and the connection closed. */
static void on_client_tls(struct xport *x, const char *why)
{
    struct session *s = x->h.handle.data;
    if (why == NULL || s->closing)
        return;
    s->ctx->stats.tls_handshake_errors++;
    log_info("TLS handshake with client %s failed: %s", client_name(s), why);
    session_close(s);
}

/* Protected mode, as Redis has it: with no password anywhere (clients do not
 * log in to ttlguard, the proxy has no backend_password, and Redis asks
 * clients for none) only clients on this host are served. Others get the
 * backend's own -DENIED line (login.c), then are closed; what to change in
 * ttlguard's config is said in the log, at most once a minute. Returns 1
 * when s was refused. */
static int protected_refusal(struct session *s, int tls)
{
    static uint64_t last;
    const struct backend_facts *bf = control_facts();
    const struct config *cfg = s->ctx->cfg;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (!cfg->protected_mode || cfg->users.n > 0 || cfg->backend_password != NULL ||
        (bf->auth_known && bf->clients_must_auth) || s->client.h.handle.type != UV_TCP ||
        uv_tcp_getpeername(&s->client.h.tcp, (struct sockaddr *)&ss, &len) != 0 ||
        sockaddr_is_loopback(&ss))
        return 0;
    s->ctx->stats.clients_denied++;
    if (last == 0 || now_ms_monotonic() - last >= 60000) {
        last = now_ms_monotonic();
        log_warn("protected mode: client %s refused: it is not on this host and no password "
                 "is set anywhere. Set client_password in [proxy] or add a [user \"NAME\"] "
                 "section so that clients must AUTH, or set protected_mode = no if ttlguard is "
                 "not reachable from the internet; then reload (SIGHUP)", client_name(s));
    }
    size_t n;
    const char *msg = login_denied(control_login(), &n);
    uv_buf_t b = uv_buf_init((char *)msg, (unsigned)n);
    if (!tls)
        uv_try_write(&s->client.h.stream, &b, 1);
    session_close(s);
    return 1;
}

void session_accept(struct clients *cl, uv_stream_t *listener, struct tls_context *tls,
                    struct target *target)
{
    struct loop_ctx *ctx = cl->ctx;
    struct session *s = xcalloc(1, sizeof *s);
    s->ctx = ctx;
    s->cl = cl;
    session_set_mode(s, SM_DOWN);
    bconn_init(&s->be, ctx, &be_ops, s);
    s->be.t = target;           /* its own connections and its shared ones go there */
    target->sessions++;

    if (listener->type == UV_TCP)
        uv_tcp_init(ctx->loop, &s->client.h.tcp);
    else
        uv_pipe_init(ctx->loop, &s->client.h.pipe, 0);
    s->client.h.handle.data = s;
    s->handles = 1;
    if (uv_accept(listener, &s->client.h.stream) != 0) {
        s->closing = 1;
        uv_close(&s->client.h.handle, on_client_closed);
        return;
    }
    /* link before anything can close it */
    s->next = cl->all;
    if (cl->all)
        cl->all->prev = s;
    cl->all = s;
    s->id = ++cl->last_id;
    cl->nsessions++;
    cl->nclients++;
    ctx->stats.clients_accepted++;
    s->last_active = s->accepted = now_ms_monotonic();

    if (cl->nclients > ctx->cfg->max_clients) {
        /* As redis does: say why, then close (a TLS client before its
         * handshake cannot be told: it is closed, as redis does too). */
        static const char msg[] = "-ERR max number of clients reached\r\n";
        ctx->stats.clients_rejected++;
        uv_buf_t b = uv_buf_init((char *)msg, sizeof msg - 1);
        if (tls == NULL)
            uv_try_write(&s->client.h.stream, &b, 1);
        session_close(s);
        return;
    }
    if (protected_refusal(s, tls != NULL))
        return;
    if (listener->type == UV_TCP)
        uv_tcp_nodelay(&s->client.h.tcp, 1);
    if (tls != NULL && tls_start(&s->client, tls, NULL, on_client_tls) < 0) {
        session_close(s);
        return;
    }
    if (ctx->cfg->cluster == CLUSTER_ROUTE) {
        session_set_mode(s, SM_SHARED);     /* every request to its slot's node */
        route_attach(s);
        return;
    }
    if (ctx->cfg->users.n > 0) {
        s->ttlg_auth = 1;       /* no backend connection before the login */
        session_set_mode(s, SM_AUTH);
        session_resume(s);
        return;
    }
    open_own_connection(s);     /* multiplex = on: see consider_sharing() */
}

void session_cron(struct session *s, uint64_t now)
{
    const struct config *cfg = s->ctx->cfg;
    if (s->closing)
        return;
    bconn_cron(&s->be, now);
    if (s->closing)
        return;
    if (s->route != NULL)
        route_cron(s);
    if (s->client.tls != NULL && !tls_handshake_done(s->client.tls) &&
        now - s->accepted >= CLIENT_TLS_HANDSHAKE_MS) {
        s->ctx->stats.tls_handshake_errors++;
        log_info("TLS handshake with client %s failed: not done within %d ms",
                 client_name(s), CLIENT_TLS_HANDSHAKE_MS);
        session_close(s);
        return;
    }
    if (s->mode == SM_AUTH && cfg->auth_timeout > 0 &&
        now - s->accepted >= (uint64_t)cfg->auth_timeout * 1000) {
        log_debug("client %s did not log in within auth_timeout", client_name(s));
        session_close(s);
        return;
    }
    if (cfg->client_idle_timeout > 0 && s->q.len == 0 && !s->monitor && !s->replica &&
        s->nchan + s->npat + s->nshard == 0 &&
        now - s->last_active >= (uint64_t)cfg->client_idle_timeout * 1000) {
        session_close(s);
        return;
    }
    if (s->draining && s->q.len == 0 && !reply_in_progress(s))
        finish_after_flush(s);
}

void session_drain(struct session *s)
{
    s->draining = 1;
    client_read_stop(s);
    if (s->q.len == 0 || (s->mode != SM_OWN && s->mode != SM_SHARED))
        finish_after_flush(s);
}

struct session *session_next(const struct session *s)
{
    return s->next;
}

/* Nothing owed, nothing pending, nothing being read, streamed or waited
 * for, and nothing Redis would send unasked (pub/sub, MONITOR, a replication
 * stream, RESP3 tracking pushes): the client is between requests. */
static int idle_at_switch(const struct session *s)
{
    if (s->closing || s->draining || s->q.len > 0 || reply_in_progress(s) || s->ilen > 0 ||
        (s->framer != NULL && req_framer_streaming(s->framer)) || s->monitor || s->replica ||
        s->nchan + s->npat + s->nshard > 0 || s->pushes || s->pin_wait || s->switch_wait ||
        s->replaying || s->mux_owed > 0)
        return 0;
    return (s->mode == SM_OWN && s->be.state == BC_READY) || s->mode == SM_SHARED;
}

/* A Sentinel switch: the session's backend connection (own or shared) was
 * to the old primary, and nothing more goes there. One that waits for a
 * reply, or is in any transition, ends now as when Redis goes away. One
 * that is idle is not closed at once: a client library that finds its idle
 * connection closed reconnects without a word (redis-py) and its next
 * request would reach the new primary, which may lack a write the old one
 * acknowledged after the promotion. Its next request closes it instead,
 * unsent: the client sees that request fail. Called before the shared
 * connections fail (mux_backend_changed()). */
void session_backend_moved(struct session *s, const struct target *t)
{
    if (s->closing || s->be.t != t)
        return;
    if (idle_at_switch(s)) {
        if (s->mode == SM_OWN)
            bconn_close(&s->be);
        mux_forget(s);
        s->mux = NULL;
        session_set_mode(s, SM_LOST);
        s->end_on_input = 1;
        return;
    }
    if (s->be.state != BC_IDLE && s->be.state != BC_CLOSING)
        bconn_lose(&s->be, "the primary moved (Sentinel switch)");
    /* shared: mux_backend_changed() ends it */
}
