/*
 * mux: the shared backend connection (multiplex = on).
 *
 * Sessions that only send stateless commands share one backend connection,
 * as twemproxy does: their requests are gathered into one write per loop
 * iteration (uv_check), Redis answers them in order, and a FIFO with one
 * entry per reply says whose reply comes next. That saves the proxy a read
 * and a write per request, and Redis as many.
 *
 *   session A ─┐ mux_append: bytes -> out, one FIFO entry per reply owed
 *   session B ─┼──────────────▶ out ──(uv_check: one write)──▶ bconn ──▶ Redis
 *   session C ─┘                                                  │
 *               ◀── session_reply(entry's session) ◀── FIFO head ◀┘
 *
 * The first request that would give the connection state of its own
 * (CS_PIN in the command table: SELECT, AUTH, HELLO, MULTI, WATCH, CLIENT,
 * blocking commands, pub/sub, MONITOR, unknown commands, ...) makes the
 * session leave: it stops reading, waits for the replies it is owed here,
 * then opens a connection of its own and goes on 1:1 from that request. So
 * no client ever sees a difference in what its commands do.
 *
 * Connection state that does not need a connection of its own: there is
 * one shared connection per database x protocol, opened on first use with
 * SELECT and HELLO 3 of its own (FIFO entries FE_INTERNAL: their replies
 * are the proxy's). A session that SELECTs a database or says HELLO 2/3 moves
 * to the connection of its new state (session.c, carry_state()), once it is
 * owed nothing where it is, so that its replies never come from two
 * connections at once.
 *
 * cluster = route pins a session to a node for a transaction, a WATCH or a
 * blocking command (route_pin.c): a mux with an `owner`, never in mux_list,
 * with the session's state set first; its FIFO entries are FE_ROUTED as on
 * the shared ones, and it closes once the session is done with it.
 *
 * The connection itself is a bconn (backend.c): connect, the proxy's AUTH,
 * reads and failure are the same code as a session's own connection. It may
 * be shared only while Redis asks no AUTH of clients (or the proxy logs in
 * for them): the control connection finds out (control.c).
 */
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "mux.h"
#include "route.h"
#include "route_pin.h"
#include "session_int.h"
#include "util.h"

/* Whose reply is next. */
enum fifo_kind {
    FE_SESSION,     /* the reply goes to `s` */
    FE_GONE,        /* its session closed: read and dropped */
    FE_INTERNAL,    /* the reply to the connection's own SELECT or HELLO: dropped */
    FE_ROUTED,      /* the reply goes to `s`'s request `unit` (cluster = route) */
    FE_PIN_ID,      /* the reply to a pin's CLIENT ID: its node's id for it (route_pin.h) */
};

struct fifo_entry {
    unsigned char kind;     /* enum fifo_kind */
    uint32_t unit;          /* FE_ROUTED: the request of s the reply is for (route.c) */
    struct session *s;
};

struct mux {
    struct mux *next;               /* mux_list */
    struct session *owner;          /* a routed session's pin (route_pin.c): the connection
                                       is its own, never in mux_list; NULL: shared */
    int db;                         /* the state every session on it shares */
    int resp3;
    struct clients *cl;             /* its sessions are among these */
    struct bconn be;
    uv_check_t flusher;             /* writes `out` once per loop iteration */
    int paused;                     /* clients stopped: too many bytes not yet written */
    int failed;                     /* closing: no new requests */
    int handles;                    /* be and flusher; freed at 0 */
    struct ring fifo;               /* struct fifo_entry: whose reply comes next */
    struct sbuf out;                /* requests not yet written */
};

static struct mux *mux_list;        /* the open shared connections, one per target (the
                                       backend, or a cluster node) x db x protocol */

static struct fifo_entry *fifo_at(struct mux *m, uint32_t i)
{
    return ring_at(&m->fifo, sizeof(struct fifo_entry), i);
}

static void fifo_push(struct mux *m, enum fifo_kind kind, struct session *s, int n)
{
    while (n-- > 0) {
        struct fifo_entry *e = ring_push(&m->fifo, sizeof(struct fifo_entry), 256);
        e->kind = kind;             /* `unit` is read for FE_ROUTED only */
        e->s = s;
    }
}

static void mux_handle_closed(struct mux *m)
{
    if (--m->handles > 0)
        return;
    ring_free(&m->fifo);
    free(m->out.p);
    free(m);
}

static void on_flusher_closed(uv_handle_t *h)
{
    mux_handle_closed(h->data);
}

/* The shared connection failed or closed: sessions owed replies on it end
 * as they would with their own connection (what was received, then EOF).
 * lost: Redis went away (not a reload or shutdown of ours): every session
 * on it ends, as every client of a Redis that restarts does. A routed
 * session is one node's client of several: its requests owed replies here
 * each get an error or go elsewhere (route_lost()), and it goes on. */
static void mux_fail(struct mux *m, const char *why, int was_ready, int lost)
{
    if (m->failed)
        return;
    m->failed = 1;
    for (struct mux **pp = &mux_list; *pp != NULL; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    if (m->owner != NULL)
        route_pin_lost(m->owner, was_ready);
    /* Redis going away is worth a warning; our own shutdown or reload is not. */
    log_write(lost || !was_ready ? LOG_WARN : LOG_INFO, "%s backend connection to %s "
              "(db %d, RESP%d): %s", m->owner != NULL ? "pinned" : "shared", m->be.t->name,
              m->db, m->resp3 ? 3 : 2, why);
    for (uint32_t i = 0; i < m->fifo.len; i++) {
        struct fifo_entry *e = fifo_at(m, i);
        if (e->kind == FE_ROUTED && m->owner == NULL)
            route_lost(e->s, e->unit, m->be.t, was_ready);  /* one node of several */
        else if (e->kind == FE_SESSION || e->kind == FE_ROUTED)
            session_shared_lost(e->s, was_ready);
        e->kind = FE_GONE;
    }
    m->fifo.len = 0;
    for (struct session *s = m->cl->all; s != NULL; s = s->next) {
        if (s->mux != m)
            continue;
        s->mux = NULL;
        if (lost && s->route == NULL)   /* a routed session goes on with the other nodes */
            session_shared_lost(s, 1);
    }
    bconn_close(&m->be);
    uv_close((uv_handle_t *)&m->flusher, on_flusher_closed);
}

/* Bytes for Redis not yet written on the shared connection. */
static size_t mux_backlog(const struct mux *m)
{
    return m->out.len + bconn_backlog(&m->be);
}

int mux_paused(const struct session *s)
{
    return s->mux != NULL && s->mux->paused;
}

int mux_in_use(void)
{
    return mux_list != NULL;
}

int mux_shareable(const struct loop_ctx *ctx)
{
    const struct backend_facts *bf = control_facts();
    return bf->auth_known && (ctx->cfg->backend_password != NULL || !bf->clients_must_auth);
}

/* The shared connection drained: clients paused for it read again. */
static void mux_resume(struct mux *m)
{
    if (!m->paused || mux_backlog(m) > m->cl->ctx->cfg->max_buffer / 2)
        return;
    m->paused = 0;
    for (struct session *s = m->cl->all; s != NULL; s = s->next)
        if (s->mode == SM_SHARED && s->mux == m && !s->client_reading)
            session_resume(s);
}

static void on_mux_check(uv_check_t *h)
{
    struct mux *m = h->data;
    uv_check_stop(h);
    if (m->be.state != BC_READY || m->failed || m->out.len == 0)
        return;
    size_t n = m->out.len;
    m->out.len = 0;
    if (bconn_write_bytes(&m->be, m->out.p, n) < 0)
        return;
    if (m->out.cap > 1024 * 1024) {
        free(m->out.p);
        m->out = (struct sbuf){ 0 };
    }
    mux_resume(m);
}

static void mux_ready(struct bconn *b)
{
    struct mux *m = b->owner;
    if (m->out.len > 0)
        uv_check_start(&m->flusher, on_mux_check);
}

/* cluster = route: the reply goes to its request's place in the session
 * (route.c); the entry is popped first, as route_reply() may send more on
 * this connection (a redirect followed). Pushes are nobody's: the commands
 * that ask for them are refused in that mode, or (pub/sub) go over a
 * connection of the session's own. */
static void mux_routed_reply(struct mux *m, const char *p, size_t n, int done, char type,
                             int start)
{
    struct fifo_entry head = *fifo_at(m, 0);
    if (type == '>')
        return;
    if (done)
        ring_pop(&m->fifo);
    route_reply(head.s, head.unit, m->be.t, p, n, done, type, start);
}

static void mux_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    struct mux *m = b->owner;
    struct fifo_entry *e = m->fifo.len ? fifo_at(m, 0) : NULL;
    if (e != NULL && e->kind == FE_SESSION) {
        session_reply(e->s, p, n, done, type, start);
    } else if (e != NULL && e->kind == FE_ROUTED) {
        mux_routed_reply(m, p, n, done, type, start);
        return;
    } else if (e != NULL && e->kind == FE_PIN_ID && type != '>') {
        route_pin_node_id(m->owner, m, p, n, start, done);
    }
    /* A push (`DEBUG PROTOCOL push`: pub/sub and tracking pin) goes to the
     * session whose reply comes next, and the reply still does. */
    if (!done || e == NULL || type == '>')
        return;                     /* e NULL: unsolicited (an error before a close) */
    struct fifo_entry head = *e;
    ring_pop(&m->fifo);
    if (head.kind == FE_SESSION)
        session_settle(head.s);
    else if (m->owner != NULL)
        route_pin_settle(m->owner);     /* the pin's own requests answered */
}

static void mux_read_end(struct bconn *b)
{
    session_flush_client();
}

static void mux_failed(struct bconn *b, const char *why, int was_ready)
{
    mux_fail(b->owner, why, was_ready, was_ready);
}

static void mux_closed(struct bconn *b)
{
    mux_handle_closed(b->owner);
}

static void mux_written(struct bconn *b, int status)
{
    struct mux *m = b->owner;
    if (!m->failed)
        mux_resume(m);
}

static const struct bconn_ops mux_ops = {
    mux_ready, mux_reply, mux_read_end, mux_failed, mux_closed, mux_written,
};

/* The connection's own state, before any session's bytes. */
static void mux_handshake(struct mux *m)
{
    char sel[64];
    static const char hello3[] = "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n";
    if (m->db != 0) {
        char num[24];
        int n = snprintf(num, sizeof num, "%d", m->db);
        int len = snprintf(sel, sizeof sel, "*2\r\n$6\r\nSELECT\r\n$%d\r\n%s\r\n", n, num);
        sbuf_add(&m->out, sel, (size_t)len);
        fifo_push(m, FE_INTERNAL, NULL, 1);
    }
    if (m->resp3) {
        sbuf_add(&m->out, hello3, sizeof hello3 - 1);
        fifo_push(m, FE_INTERNAL, NULL, 1);
    }
}

static struct mux *mux_new(struct clients *cl, struct target *t, int db, int resp3)
{
    struct mux *m = xcalloc(1, sizeof *m);
    m->cl = cl;
    m->db = db;
    m->resp3 = resp3;
    m->flusher.data = m;
    uv_check_init(cl->ctx->loop, &m->flusher);
    m->handles = 2;
    bconn_init(&m->be, cl->ctx, &mux_ops, m);
    m->be.t = t;
    return m;
}

/* The shared connection to target for db x protocol, opened on first use.
 * NULL when it cannot be. */
static struct mux *mux_get(struct clients *cl, struct target *t, int db, int resp3)
{
    for (struct mux *m = mux_list; m != NULL; m = m->next)
        if (m->be.t == t && m->db == db && m->resp3 == resp3)
            return m;
    if (!t->addr.is_unix && !t->sa_ok)
        return NULL;
    struct mux *m = mux_new(cl, t, db, resp3);
    m->next = mux_list;
    mux_list = m;
    mux_handshake(m);
    bconn_connect(&m->be, 1);
    return m->failed ? NULL : m;    /* NULL when the connect failed at once */
}

/* s queued requests on m: written this loop iteration. */
static inline __attribute__((always_inline)) void mux_queued(struct mux *m, struct session *s)
{
    if (m->be.state == BC_READY)
        uv_check_start(&m->flusher, on_mux_check);
    if (mux_backlog(m) > s->ctx->cfg->max_buffer) {
        /* Redis is not keeping up: no more requests from this client until
         * the shared connection has drained to half. */
        m->paused = 1;
        session_pause(s);
    }
}

int mux_attach(struct session *s)
{
    s->mux = mux_get(s->cl, s->be.t, s->db, s->resp3);
    return s->mux != NULL ? 0 : -1;
}

int mux_append(struct session *s, struct wbatch *wb)
{
    struct mux *m = mux_get(s->cl, s->be.t, s->db, s->resp3);
    if (m == NULL)
        return -1;
    s->mux = m;
    for (int i = 0; i < wb->n; i++) {
        const char *base = wb->arena_off[i] != (size_t)-1 ? wb->arena + wb->arena_off[i]
                                                          : wb->iov[i].base;
        sbuf_add(&m->out, base, wb->iov[i].len);
    }
    wbatch_reset(wb);
    fifo_push(m, FE_SESSION, s, s->mux_owed);
    s->mux_owed = 0;
    mux_queued(m, s);
    return 0;
}

int mux_send(struct session *s, struct target *t, const char *p, size_t n, int owed,
             uint32_t unit)
{
    return mux_send_on(mux_get(s->cl, t, s->db, s->resp3), s, p, n, owed, unit);
}

int mux_send_on(struct mux *m, struct session *s, const char *p, size_t n, int owed,
                uint32_t unit)
{
    if (m == NULL || m->failed)
        return -1;
    s->mux = m;
    sbuf_add(&m->out, p, n);
    while (owed-- > 0)
        *(struct fifo_entry *)ring_push(&m->fifo, sizeof(struct fifo_entry), 256) =
            (struct fifo_entry){ FE_ROUTED, unit, s };
    mux_queued(m, s);
    return 0;
}

struct mux *mux_pin_open(struct session *s, struct target *t, const char *pre, size_t n,
                         int npre)
{
    if (!t->addr.is_unix && !t->sa_ok)
        return NULL;
    static const char id[] = "*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n";
    struct mux *m = mux_new(s->cl, t, s->db, s->resp3);
    m->owner = s;
    sbuf_add(&m->out, id, sizeof id - 1);
    fifo_push(m, FE_PIN_ID, NULL, 1);
    if (n > 0)
        sbuf_add(&m->out, pre, n);
    fifo_push(m, FE_INTERNAL, NULL, npre);
    bconn_connect(&m->be, 1);
    return m->failed ? NULL : m;    /* NULL when the connect failed at once */
}

int mux_pin_owed(const struct mux *m)
{
    return (int)m->fifo.len;
}

void mux_pin_close(struct mux *m)
{
    if (m->failed)
        return;
    m->failed = 1;
    for (uint32_t i = 0; i < m->fifo.len; i++)
        fifo_at(m, i)->kind = FE_GONE;
    if (m->owner->mux == m)
        m->owner->mux = NULL;
    m->owner = NULL;
    bconn_close(&m->be);
    uv_close((uv_handle_t *)&m->flusher, on_flusher_closed);
}

static void mux_forget_on(struct mux *m, struct session *s)
{
    if (m == NULL || m->failed)
        return;
    for (uint32_t i = 0; i < m->fifo.len; i++) {
        struct fifo_entry *e = fifo_at(m, i);
        if ((e->kind == FE_SESSION || e->kind == FE_ROUTED) && e->s == s)
            e->kind = FE_GONE;
    }
}

/* A session goes away: replies still owed to it are read and dropped (a
 * routed session's, on every node's connection). */
void mux_forget(struct session *s)
{
    if (s->route == NULL) {
        mux_forget_on(s->mux, s);
        return;
    }
    for (struct mux *m = mux_list; m != NULL; m = m->next)
        mux_forget_on(m, s);
}

void mux_shutdown(void)
{
    /* Every session is gone: what is still owed on them is for nobody. */
    while (mux_list != NULL)
        mux_fail(mux_list, "shutting down", 1, 0);
}

void mux_backend_changed(int lost)
{
    while (mux_list != NULL)
        mux_fail(mux_list, lost ? "the primary moved (Sentinel switch)"
                                : "backend address changed by a reload", 1, lost);
}
