/*
 * server: the top of the proxy: the loop-wide state, signals and the cron.
 *
 *   listeners --on_accept--> session_accept() ...  (one session per client;
 *   (listener.c)            listen: plain, tls_listen: TLS, tls.c; a
 *                           cluster's node ports too, cluster.c)
 *   control.c        --> the proxy's own backend connection: what Redis wants
 *                        (AUTH from clients? eviction policy), never asked on a
 *                        client's connection
 *   cron (100 ms)    --> idle and connect timeouts, shutdown drain deadline,
 *                        control reconnects
 *   signals          --> SIGTERM/SIGINT: stop accepting, drain, exit 0
 *
 * The server owns what the loop shares (loop.h: struct loop_ctx) and the
 * client side as a whole (session.h: struct clients) and hands them down;
 * nothing below calls back up into it but through the callbacks it gives
 * (an accept, a session gone, the backend's commands read).
 *
 * One loop, one thread: sessions, config and counters are only touched from
 * loop callbacks.
 */
#ifndef TTLG_SERVER_H
#define TTLG_SERVER_H

#include "config.h"

/* Start listening and serving with cfg (ownership of cfg passes to the server,
 * which frees it, or its reloaded successors, on the way out).
 * Runs the loop until shutdown; returns the process exit status. */
int server_run(struct config *cfg, const char *listen_override, const char *backend_override);

#endif
