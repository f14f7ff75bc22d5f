/*
 * session: one client connection (the client side); see the diagram at the
 * top of session.c. Its backend connection is backend.c's, the shared one
 * mux.c's; session_int.h is what they share.
 */
#ifndef TTLG_SESSION_H
#define TTLG_SESSION_H

#include <uv.h>

struct server;
struct session;
struct tls_context;
struct target;

/* Accept a pending connection on listener and start its session; tls: the
 * listener's TLS context (tls_listen), or NULL; target: where its requests
 * go (the backend, or a cluster node). */
void session_accept(struct server *srv, uv_stream_t *listener, struct tls_context *tls,
                    struct target *target);

/* Periodic work (idle timeout, connect timeout, shutdown drain); now in monotonic ms. */
void session_cron(struct session *s, uint64_t now);

/* Shutdown: stop reading requests; close once owed replies are delivered. */
void session_drain(struct session *s);

/* Close now, dropping anything owed. */
void session_close(struct session *s);

struct session *session_next(const struct session *s);

/* The backend's commands are known (server_set_commands()): a session that
 * waited for them is served. */
void session_commands_ready(struct session *s);

#endif
