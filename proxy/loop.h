/*
 * loop: what every module on the event loop shares. server.c owns it and
 * hands it down; the layers below (backend, watch, cluster, control, the
 * client side, admin) are given it instead of the server:
 *
 *   loop_ctx ── loop          the libuv loop
 *            ── cfg           the config in force (a reload swaps it)
 *            ── backend       where backend connections go unless told otherwise
 *            ── rbuf          the shared read buffer
 *            ── stats         the counters /metrics shows
 *   loop_now_ns               the clock of the current loop callback
 *
 * One loop, one thread: only loop callbacks touch any of it.
 */
#ifndef TTLG_LOOP_H
#define TTLG_LOOP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct config;
struct target;

/* Counters, monotonically increasing, read by the admin endpoint. */
struct stats {
    uint64_t clients_accepted;
    uint64_t clients_rejected;       /* max_clients reached */
    uint64_t clients_denied;         /* protected mode: not from loopback, no password */
    uint64_t auth_errors;            /* client logins refused (client_password, [user]) */
    uint64_t backend_connects;
    uint64_t backend_connect_errors;
    uint64_t requests;               /* requests framed from clients */
    uint64_t rewritten;              /* requests rewritten by a TTL rule */
    uint64_t rejected;               /* requests refused by a TTL rule */
    uint64_t bytes_from_clients;
    uint64_t bytes_to_backends;
    uint64_t bytes_from_backends;
    uint64_t bytes_to_clients;
    uint64_t protocol_errors;
    uint64_t tls_handshake_errors;   /* TLS clients whose handshake failed or timed out */
    uint64_t rewrite_errors;         /* the proxy's own part of a rewrite refused by Redis */
    uint64_t route_redirects[3];     /* cluster = route: -MOVED, -ASK, -TRYAGAIN followed */
};

struct loop_ctx {
    uv_loop_t *loop;
    struct config *cfg;              /* the config in force; sessions read it per request */
    struct target *backend;          /* [proxy] backend (a cluster's seed: its entry port) */
    /* Shared read buffer: sessions with no partial request read into it, so
     * an idle session holds no read buffer at all. */
    char *rbuf;
    size_t rbuf_size;
    struct stats stats;
};

/* The clock of the current loop callback: read once per callback (a read,
 * a timer), not per request. */
extern uint64_t loop_now_ns;

static inline void loop_clock_update(void)
{
    loop_now_ns = uv_hrtime();
}

#endif
