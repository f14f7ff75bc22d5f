/*
 * backend: one connection to the backend, whoever owns it.
 *
 * Written once and used three ways: a session's own connection (1:1), the
 * shared connection (mux.c) and the proxy's control connection (control.c).
 *
 *   bconn_connect ─▶ CONNECTING ─▶ TLS ─▶ HANDSHAKE ─▶ READY ─▶ (lost) ─▶ CLOSING ─▶ IDLE
 *                        │ connect   │ backend │ the proxy's  │ replies framed and
 *                        │ timeout   │ _tls=on │ AUTH answered│ handed to ops->reply
 *                        └───────────┴─────────┴──────────────┴──▶ ops->failed, then ops->closed
 *
 * The bytes go through a transport (transport.h): plain, or TLS when
 * backend_tls is on, with the same code above it. connect_timeout bounds
 * the connect, the TLS handshake and the proxy's AUTH together.
 *
 * The state changes only in bconn_set_state() (backend.c). The owner sees:
 *   ready    the connection is usable (AUTH with backend_password done);
 *   reply    bytes of one reply as they arrive: `start` on its first bytes,
 *            `done` on its last; the reply framer (resp_reply) finds the ends,
 *            or, in raw mode (a replication stream), nothing is framed and
 *            every byte is handed over as it comes;
 *   read_end after every read, once all of its replies were handed over;
 *   failed   the connect failed (was_ready = 0: t->down_reason says why, in
 *            the words clients get) or the connection was lost after ready;
 *            the handle is already closing;
 *   closed   the handle is closed: the owner may free the bconn or connect it
 *            again.
 * Reads go to the loop's shared read buffer: the bytes given to `reply` are
 * valid until read_end returns.
 */
#ifndef TTLG_BACKEND_H
#define TTLG_BACKEND_H

#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "resp_reply.h"
#include "util.h"
#include "wbatch.h"

struct loop_ctx;
struct bconn;

/* Where backend connections go: [proxy] backend, or one node of a cluster
 * (cluster.c). A host name is resolved when set; after a failed connect it
 * is resolved again in the background (at most once a second), in case the
 * backend moved (containers do). */
struct target {
    struct loop_ctx *ctx;
    struct addr addr;
    char name[300];                  /* printable, for messages */
    char tls_name[256];              /* with backend_tls: the name its certificate must carry
                                        when set (a cluster node's announced host name);
                                        else backend_tls_server_name, else addr.host */
    char down_reason[512];           /* the error line sessions without this backend get */
    struct sockaddr_storage sa;      /* resolved address (TCP) */
    int sa_ok;
    uv_getaddrinfo_t gai;            /* the background resolution */
    int resolving;
    uint64_t last_resolve;           /* monotonic ms */
    uint64_t requests;               /* requests of client sessions that went here */
    int sessions;                    /* client sessions whose requests go here */
    int sentinel;                    /* a Sentinel: TLS with sentinel_tls (not backend_tls) */
};

/* Point t at a. blocking: resolve a host name now (start, reload); else in
 * the background (a connect before it is done fails and tries again). */
void target_set(struct target *t, struct loop_ctx *ctx, const struct addr *a, int blocking);
void target_cancel(struct target *t);

enum bconn_state {
    BC_IDLE,        /* no handle */
    BC_CONNECTING,  /* connect in flight */
    BC_TLS,         /* the TLS handshake is not done yet */
    BC_HANDSHAKE,   /* the proxy's AUTH is not answered yet */
    BC_READY,       /* usable */
    BC_CLOSING,     /* uv_close in flight */
};

struct bconn_ops {
    void (*ready)(struct bconn *b);
    void (*reply)(struct bconn *b, const char *p, size_t n, int done, char type, int start);
    void (*read_end)(struct bconn *b);
    void (*failed)(struct bconn *b, const char *why, int was_ready);
    void (*closed)(struct bconn *b);
    void (*written)(struct bconn *b, int status);   /* a queued write finished */
};

struct bconn {
    struct xport x;                 /* the socket, plain or TLS; x.h.handle.data is the bconn */
    uv_connect_t creq;
    uv_shutdown_t sreq;
    struct loop_ctx *ctx;
    struct target *t;               /* where it connects: ctx->backend unless set otherwise */
    const struct bconn_ops *ops;
    void *owner;
    unsigned char state;            /* enum bconn_state */
    unsigned reading:1;             /* uv_read_start active */
    unsigned counts:1;              /* serves clients: counted in stats_proxy.backend_connections
                                       while open (set by bconn_init; control clears it) */
    unsigned counted:1;             /* counted now */
    unsigned raw:1;                 /* replication stream: bytes are not framed */
    unsigned auth:1;                /* send the proxy's AUTH on connect (backend_password) */
    unsigned answered:1;            /* the backend has sent reply bytes on this connection */
    const char *user, *pass;        /* what it logs in as (the owner's copies); pass NULL:
                                       backend_username / backend_password of the config */
    uint64_t started;               /* monotonic ms of the connect */
    struct reply_scanner rs;
};

void bconn_init(struct bconn *b, struct loop_ctx *ctx, const struct bconn_ops *ops, void *owner);

/* Open the connection (state must be BC_IDLE). with_auth: send the proxy's
 * AUTH first when there is a password (b->pass, else backend_password). A
 * failure is reported through
 * ops->failed, possibly before this returns. */
void bconn_connect(struct bconn *b, int with_auth);

/* Write what wb gathered; a failure closes the connection (ops->failed). */
int bconn_write(struct bconn *b, struct wbatch *wb);
int bconn_write_bytes(struct bconn *b, const char *p, size_t n);

/* The backend went away for its owner (a Sentinel switch): ops->failed, as
 * when the connection is lost; why is what the owner is told. */
void bconn_lose(struct bconn *b, const char *why);

void bconn_read_start(struct bconn *b);
void bconn_read_stop(struct bconn *b);

/* Bytes queued towards the backend and not yet written. */
size_t bconn_backlog(const struct bconn *b);

/* Close (no callback but ops->closed). Safe in any state. */
void bconn_close(struct bconn *b);

/* Half-close: the backend finishes what it read, then closes its side. */
void bconn_shutdown(struct bconn *b);

/* Connect and handshake timeout. */
void bconn_cron(struct bconn *b, uint64_t now);

/* From now on replies are not framed: the connection relays a replication stream. */
void bconn_set_raw(struct bconn *b);

struct config;

/* The proxy's AUTH [user] pass as a request of *len bytes; the caller frees
 * it (and it holds a password: OPENSSL_cleanse before free). */
char *auth_request(const char *user, const char *pass, size_t *len);

#endif
