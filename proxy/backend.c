/*
 * backend: one connection to the backend (see the state diagram in backend.h).
 */
#include <netdb.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "loop.h"
#include "stats.h"
#include "util.h"

/* ---- targets ------------------------------------------------------------------ */

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct target *t = req->data;
    t->resolving = 0;
    if (status == 0 && res != NULL) {
        memcpy(&t->sa, res->ai_addr, res->ai_addrlen);
        t->sa_ok = 1;
    } else if (status != UV_ECANCELED) {
        log_warn("cannot resolve backend '%s': %s", t->addr.host, uv_strerror(status));
    }
    uv_freeaddrinfo(res);
}

static int is_numeric(const struct addr *a, struct sockaddr_storage *ss)
{
    return uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)ss) == 0 ||
           uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)ss) == 0;
}

/* Resolve a host name in the background (at most once a second). */
static void resolve_later(struct target *t)
{
    static struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct sockaddr_storage ss;
    char port[8];
    uint64_t now = now_ms_monotonic();
    if (t->addr.is_unix || t->resolving || now - t->last_resolve < 1000 ||
        is_numeric(&t->addr, &ss))
        return;
    snprintf(port, sizeof port, "%d", t->addr.port);
    t->last_resolve = now;
    t->gai.data = t;
    if (uv_getaddrinfo(t->ctx->loop, &t->gai, on_resolved, t->addr.host, port, &hints) == 0)
        t->resolving = 1;
}

void target_set(struct target *t, struct loop_ctx *ctx, const struct addr *a, int blocking)
{
    char err[300];
    target_cancel(t);
    t->ctx = ctx;
    t->addr = *a;
    addr_format(a, t->name, sizeof t->name);
    t->sa_ok = 0;
    t->last_resolve = 0;
    if (a->is_unix)
        return;
    if (is_numeric(a, &t->sa)) {
        t->sa_ok = 1;
    } else if (!blocking) {
        resolve_later(t);
    } else if (addr_resolve(a, &t->sa, err, sizeof err) == 0) {
        t->sa_ok = 1;
    } else {
        log_warn("backend: %s", err);
    }
}

void target_cancel(struct target *t)
{
    if (t->resolving)
        uv_cancel((uv_req_t *)&t->gai);
}

/* A connect failed: the backend may have moved. */
static void target_failed(struct target *t)
{
    resolve_later(t);
}

/* ---- connections ---------------------------------------------------------------- */

static void bconn_set_state(struct bconn *b, enum bconn_state st)
{
    b->state = st;
}

void bconn_init(struct bconn *b, struct loop_ctx *ctx, const struct bconn_ops *ops, void *owner)
{
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->t = ctx->backend;
    b->ops = ops;
    b->owner = owner;
    b->counts = 1;
    reply_scanner_init(&b->rs);
}

static void on_bconn_closed(uv_handle_t *h)
{
    struct bconn *b = h->data;
    if (b->counted) {
        b->counted = 0;
        stats_proxy.backend_connections--;
    }
    reply_scanner_free(&b->rs);
    bconn_set_state(b, BC_IDLE);
    b->ops->closed(b);
}

static void bconn_close_handle(struct bconn *b)
{
    bconn_read_stop(b);
    bconn_set_state(b, BC_CLOSING);
    xport_close(&b->x, on_bconn_closed);
}

void bconn_close(struct bconn *b)
{
    if (b->state == BC_IDLE || b->state == BC_CLOSING)
        return;
    bconn_close_handle(b);
}

/* The connection failed. Before it was ready that is a backend the clients
 * cannot have: t->down_reason says why, in the words they get. A TLS
 * connection that fails before the backend said anything counts as not
 * ready too: under TLS 1.3 the server checks a client certificate after the
 * client's side of the handshake is done, and its refusal (an alert, or a
 * reset) comes on the first read. */
static void bconn_fail(struct bconn *b, const char *why, int reason_set)
{
    struct target *t = b->t;
    if (b->state == BC_IDLE || b->state == BC_CLOSING)
        return;
    int was_ready = b->state == BC_READY && (b->x.tls == NULL || b->answered);
    if (!was_ready) {
        b->ctx->stats.backend_connect_errors++;
        target_failed(t);
        if (!reason_set) {
            /* Bounded pieces: the line fits down_reason whole; the log
             * line below has all of the reason. */
            snprintf(t->down_reason, sizeof t->down_reason,
                     "ERR ttlguard: backend %.160s unavailable: %.300s", t->name, why);
            log_warn("backend %s unavailable: %s", t->name, why);
        }
    }
    bconn_close_handle(b);
    b->ops->failed(b, why, was_ready);
}

void bconn_lose(struct bconn *b, const char *why)
{
    if (b->state != BC_READY)
        snprintf(b->t->down_reason, sizeof b->t->down_reason,
                 "ERR ttlguard: backend %.160s: %.300s", b->t->name, why);
    bconn_fail(b, why, 1);
}

static void on_bconn_written(void *ctx, int status)
{
    struct bconn *b = ctx;
    if (status < 0) {
        if (status != UV_ECANCELED)
            bconn_fail(b, xport_strerror(&b->x, status), 0);
        return;
    }
    if (b->state != BC_CLOSING && b->state != BC_IDLE)
        b->ops->written(b, status);
}

int bconn_write(struct bconn *b, struct wbatch *wb)
{
    int r = wbatch_flush(wb, &b->x, on_bconn_written, b);
    if (r < 0)
        bconn_fail(b, xport_strerror(&b->x, r), 0);
    return r;
}

int bconn_write_bytes(struct bconn *b, const char *p, size_t n)
{
    int r = xport_write(&b->x, p, n, on_bconn_written, b);
    if (r < 0)
        bconn_fail(b, xport_strerror(&b->x, r), 0);
    return r;
}

size_t bconn_backlog(const struct bconn *b)
{
    return b->state == BC_IDLE ? 0 : xport_backlog(&b->x);
}

/* The answer to the proxy's AUTH: +OK makes the connection ready. */
static void handshake_reply(struct bconn *b, const char *p, size_t n, int done, char type)
{
    static char text[200];          /* callbacks do not nest: one is enough */
    static size_t tlen;
    size_t k = n < sizeof text - 1 - tlen ? n : sizeof text - 1 - tlen;
    memcpy(text + tlen, p, k);
    tlen += k;
    if (!done)
        return;
    size_t len = tlen;
    tlen = 0;
    if (type == '+') {
        bconn_set_state(b, BC_READY);
        b->ops->ready(b);
        return;
    }
    while (len > 0 && (text[len - 1] == '\r' || text[len - 1] == '\n'))
        len--;
    struct target *t = b->t;
    snprintf(t->down_reason, sizeof t->down_reason,
             "ERR ttlguard: backend %s refused the proxy's AUTH: %.*s",
             t->name, len > 1 ? (int)len - 1 : 0, text + 1);
    log_error("%s", t->down_reason + 4);
    char why[240];
    snprintf(why, sizeof why, "AUTH refused: %.*s", len > 1 ? (int)len - 1 : 0, text + 1);
    bconn_fail(b, why, 1);
}

static void bconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct bconn *b = h->data;
    buf->base = b->ctx->rbuf;
    buf->len = b->ctx->rbuf_size;
}

static void bconn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct bconn *b = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        bconn_fail(b, nread == UV_EOF ? "closed by the server" : xport_strerror(&b->x, (int)nread),
                   0);
        return;
    }
    loop_clock_update();
    b->ctx->stats.bytes_from_backends += (uint64_t)nread;
    b->answered = 1;
    const char *p = buf->base;
    size_t left = (size_t)nread;
    while (left > 0 && b->state >= BC_HANDSHAKE && b->state <= BC_READY) {
        if (b->raw) {
            b->ops->reply(b, p, left, 0, 0, 0);
            break;
        }
        int start = reply_scanner_idle(&b->rs);
        int done = 0;
        ssize_t used = reply_scan(&b->rs, p, left, &done);
        if (used < 0) {
            log_warn("backend protocol error: %s", reply_scanner_error(&b->rs));
            bconn_fail(b, "protocol error", 0);
            return;
        }
        char type = reply_scanner_type(&b->rs);
        if (b->state == BC_HANDSHAKE)
            handshake_reply(b, p, (size_t)used, done, type);
        else
            b->ops->reply(b, p, (size_t)used, done, type, start);
        p += used;
        left -= (size_t)used;
    }
    if (b->state == BC_READY)
        b->ops->read_end(b);
}

void bconn_read_start(struct bconn *b)
{
    if (b->reading || (b->state != BC_READY && b->state != BC_HANDSHAKE))
        return;
    if (xport_read_start(&b->x, bconn_alloc, bconn_on_read) == 0)
        b->reading = 1;
}

void bconn_read_stop(struct bconn *b)
{
    if (!b->reading)
        return;
    xport_read_stop(&b->x);
    b->reading = 0;
}

char *auth_request(const char *user, const char *pass, size_t *len)
{
    size_t cap = 64 + (user ? strlen(user) : 0) + strlen(pass);
    char *req = xmalloc(cap);
    int n;
    if (user != NULL)
        n = snprintf(req, cap, "*3\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
                     strlen(user), user, strlen(pass), pass);
    else
        n = snprintf(req, cap, "*2\r\n$4\r\nAUTH\r\n$%zu\r\n%s\r\n", strlen(pass), pass);
    *len = (size_t)n;
    return req;
}

static void send_auth(struct bconn *b)
{
    size_t n;
    const struct config *cfg = b->ctx->cfg;
    char *req = b->pass != NULL ? auth_request(b->user, b->pass, &n)
                                : auth_request(cfg->backend_username, cfg->backend_password, &n);
    bconn_write_bytes(b, req, n);
    OPENSSL_cleanse(req, n);
    free(req);
}

/* The transport is up (TCP connected, TLS handshake done): the proxy's AUTH,
 * or ready. */
static void bconn_connected(struct bconn *b)
{
    b->ctx->stats.backend_connects++;
    if (b->counts) {
        b->counted = 1;
        stats_proxy.backend_connections++;
    }
    if (b->auth) {
        bconn_set_state(b, BC_HANDSHAKE);
        bconn_read_start(b);
        send_auth(b);
        return;
    }
    bconn_set_state(b, BC_READY);
    bconn_read_start(b);
    b->ops->ready(b);
}

static void on_bconn_tls(struct xport *x, const char *why)
{
    struct bconn *b = x->h.handle.data;
    char text[240];
    if (b->state != BC_TLS)
        return;
    if (why != NULL) {
        snprintf(text, sizeof text, "TLS: %s", why);
        bconn_fail(b, text, 0);
        return;
    }
    bconn_connected(b);
}

/* The name the backend's certificate must carry: the target's own (a
 * cluster node's host name), backend_tls_server_name, or the address's host. */
static const char *tls_name(const struct bconn *b)
{
    const char *name = b->ctx->cfg->backend_tls_server_name;
    if (b->t->tls_name[0] != '\0')
        return b->t->tls_name;
    return name != NULL ? name : b->t->addr.host;
}

/* The TLS context of b's target: a Sentinel's (sentinel_tls) or the
 * backend's; NULL: plain TCP. */
static struct tls_context *tls_of(const struct bconn *b)
{
    const struct config *cfg = b->ctx->cfg;
    return b->t->sentinel ? cfg->sentinel_tls_ctx : cfg->backend_tls_ctx;
}

static void on_bconn_connect(uv_connect_t *req, int status)
{
    struct bconn *b = req->data;
    if (b->state != BC_CONNECTING)
        return;             /* closed meanwhile (connect timeout) */
    if (status < 0) {
        bconn_fail(b, uv_strerror(status), 0);
        return;
    }
    if (b->x.h.handle.type == UV_TCP)
        uv_tcp_nodelay(&b->x.h.tcp, 1);
    struct tls_context *tls = tls_of(b);
    if (tls == NULL) {
        bconn_connected(b);
        return;
    }
    bconn_set_state(b, BC_TLS);
    int r = tls_start(&b->x, tls, tls_name(b), on_bconn_tls);
    if (r < 0)
        bconn_fail(b, uv_strerror(r), 0);
}

void bconn_connect(struct bconn *b, int with_auth)
{
    struct loop_ctx *ctx = b->ctx;
    struct target *t = b->t;
    ASSERT(b->state == BC_IDLE);
    b->auth = with_auth && (b->pass != NULL || ctx->cfg->backend_password != NULL);
    b->raw = 0;
    b->answered = 0;
    b->started = now_ms_monotonic();
    reply_scanner_init(&b->rs);
    bconn_set_state(b, BC_CONNECTING);
    if (t->addr.is_unix) {
        uv_pipe_init(ctx->loop, &b->x.h.pipe, 0);
        b->x.h.handle.data = b;
        b->creq.data = b;
        uv_pipe_connect(&b->creq, &b->x.h.pipe, t->addr.host, on_bconn_connect);
        return;
    }
    uv_tcp_init(ctx->loop, &b->x.h.tcp);
    b->x.h.handle.data = b;
    b->creq.data = b;
    if (!t->sa_ok) {
        bconn_fail(b, "cannot resolve the host name", 0);
        return;
    }
    int r = uv_tcp_connect(&b->creq, &b->x.h.tcp, (struct sockaddr *)&t->sa,
                           on_bconn_connect);
    if (r < 0)
        bconn_fail(b, uv_strerror(r), 0);
}

static void on_bconn_shutdown(uv_shutdown_t *req, int status)
{
    /* Nothing to do: the backend closes its side when it has answered. */
}

void bconn_shutdown(struct bconn *b)
{
    if (b->state != BC_READY)
        return;
    b->sreq.data = b;
    if (xport_shutdown(&b->x, &b->sreq, on_bconn_shutdown) < 0)
        bconn_fail(b, "shutdown failed", 0);
}

void bconn_cron(struct bconn *b, uint64_t now)
{
    unsigned timeout = b->ctx->cfg->connect_timeout;
    if (b->state >= BC_CONNECTING && b->state <= BC_HANDSHAKE && now - b->started >= timeout) {
        char why[120];
        snprintf(why, sizeof why, b->state == BC_TLS ? "TLS: handshake timed out after %u ms "
                                                       "(does the backend speak TLS?)"
                                                     : "connect timed out after %u ms", timeout);
        bconn_fail(b, why, 0);
    }
}

void bconn_set_raw(struct bconn *b)
{
    b->raw = 1;
}
