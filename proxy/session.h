/*
 * session: one client connection and its own backend connection (1:1).
 * See the diagram at the top of session.c.
 */
#ifndef TTLG_SESSION_H
#define TTLG_SESSION_H

#include <uv.h>

struct server;
struct session;

/* Accept a pending connection on listener and start its session. */
void session_accept(struct server *srv, uv_stream_t *listener);

/* Periodic work (idle timeout, connect timeout, shutdown drain); now in monotonic ms. */
void session_cron(struct session *s, uint64_t now);

/* Shutdown: stop reading requests; close once owed replies are delivered. */
void session_drain(struct session *s);

/* Close now, dropping anything owed. */
void session_close(struct session *s);

struct session *session_next(const struct session *s);

/* Shutdown: close the shared backend connection once nothing is owed on it. */
void session_mux_shutdown(void);

/* Once a second: is the shared connection still allowed to be shared? */
void session_mux_cron(uint64_t now);

/* A reload changed the backend address: the shared connection is closed. */
void session_backend_changed(void);

#endif
