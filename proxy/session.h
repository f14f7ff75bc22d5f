/*
 * session: one client connection (the client side); see the diagram at the
 * top of session.c. Its backend connection is backend.c's, the shared one
 * mux.c's; session_int.h is what they share.
 */
#ifndef TTLG_SESSION_H
#define TTLG_SESSION_H

#include <stdint.h>
#include <uv.h>

struct loop_ctx;
struct session;
struct tls_context;
struct target;

/* The client side as a whole (server.c holds it): every session, and what
 * they keep together. */
struct clients {
    struct loop_ctx *ctx;
    struct session *all;             /* all live sessions, doubly linked */
    int nsessions;                   /* allocated, closing ones included */
    int nclients;                    /* open client connections (not closing) */
    uint64_t paused_until;           /* monotonic ms: a CLIENT PAUSE seen lasts until then */
    uint64_t last_id;                /* the id the newest session got (CLIENT ID) */
    void (*gone)(struct clients *cl);    /* a session has freed itself */
    /* cluster = route: sessions with replies gathered this loop turn
     * (struct session's out), written by out_flush before the loop waits
     * again. */
    struct session *out_list;
    uv_prepare_t out_flush;          /* initialised on first use: out_flush.loop set */
};

/* Accept a pending connection on listener and start its session; tls: the
 * listener's TLS context (tls_listen), or NULL; target: where its requests
 * go (the backend, or a cluster node). */
void session_accept(struct clients *cl, uv_stream_t *listener, struct tls_context *tls,
                    struct target *target);

/* Periodic work (idle timeout, connect timeout, shutdown drain); now in monotonic ms. */
void session_cron(struct session *s, uint64_t now);

/* Shutdown: stop reading requests; close once owed replies are delivered. */
void session_drain(struct session *s);

/* Close now, dropping anything owed. */
void session_close(struct session *s);

/* Every session is gone: close what the client side still holds open. */
void clients_shutdown(struct clients *cl);

struct session *session_next(const struct session *s);

/* t moved elsewhere (a Sentinel switch): a connection of s's own to it is
 * lost, as when the server goes away. */
void session_backend_moved(struct session *s, const struct target *t);

/* The backend's commands are known (control.h): a session that
 * waited for them is served. */
void session_commands_ready(struct session *s);

#endif
