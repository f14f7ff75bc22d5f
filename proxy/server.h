/*
 * server: the listener, the loop-wide state and the periodic cron.
 *
 *   listeners --accept--> session_accept() ...  (one session per client;
 *                         listen: plain, tls_listen: TLS, tls.c)
 *   control.c        --> the proxy's own backend connection: what Redis wants
 *                        (AUTH from clients? eviction policy), never asked on a
 *                        client's connection
 *   cron (100 ms)    --> idle and connect timeouts, shutdown drain deadline,
 *                        control reconnects
 *   signals          --> SIGTERM/SIGINT: stop accepting, drain, exit 0
 *
 * One loop, one thread: sessions, config and counters are only touched from
 * loop callbacks.
 */
#ifndef TTLG_SERVER_H
#define TTLG_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "util.h"

struct session;
struct command_set;

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
};

/* A listening socket: `listen` (plain), `tls_listen`, or a cluster node's. */
struct listener {
    uv_stream_t *h;                  /* a uv_tcp_t or uv_pipe_t of our own; NULL when closed */
    struct addr addr;
    int tls;                         /* its clients speak TLS (cfg->client_tls_ctx) */
    struct server *srv;
    struct target *target;           /* where its sessions go */
};

struct server {
    uv_loop_t *loop;
    struct config *cfg;              /* current config; sessions read it per request */
    struct listener plain, secure;   /* listen, tls_listen */
    struct target backend;           /* [proxy] backend (a cluster's seed: its entry port) */
    char backend_policy[32];         /* maxmemory-policy last reported */
    int backend_policy_known;
    int auth_known;                  /* the control connection has said whether... */
    int clients_must_auth;           /* ...Redis wants AUTH from a client that connects now */
    int databases;                   /* CONFIG GET databases; 0 while unknown */
    uint64_t paused_until;           /* monotonic ms: a CLIENT PAUSE seen lasts until then */
    struct command_set *commands;    /* the backend's commands: the table as its server and
                                        version have it, and rows derived from its key specs */
    int commands_ready;              /* 0 until the control connection has identified the
                                        backend (or given up): sessions under rules wait */
    int backend_known;               /* commands came from the backend's own replies */

    int listen_override;             /* --listen / --backend given: a reload keeps them */
    int backend_override;

    uv_timer_t cron;
    uv_signal_t sig_term, sig_int, sig_hup, sig_usr1;

    struct session *sessions;        /* all live sessions, doubly linked */
    int nsessions;                   /* allocated, closing ones included */
    int nclients;                    /* open client connections (not closing) */

    int shutting_down;
    uint64_t shutdown_deadline;      /* monotonic ms */

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

/* Start listening and serving with cfg (ownership of cfg passes to the server,
 * which frees it, or its reloaded successors, on the way out).
 * Runs the loop until shutdown; returns the process exit status. */
int server_run(struct config *cfg, const char *listen_override, const char *backend_override);

/* Listen on l->addr (l->srv and l->target set); 0, or -1 with the reason in
 * err. server_unlisten() closes it (harmless when closed). */
int server_listen(struct listener *l, char *err, size_t errlen);
void server_unlisten(struct listener *l);

/* The backend's command set (ownership passes to srv; the old one is freed).
 * from_backend: it was read from the backend, not assumed. Sessions that
 * waited for it are served. */
void server_set_commands(struct server *srv, struct command_set *set, int from_backend);

/* Called by sessions when they have freed themselves. */
void server_session_gone(struct server *srv);

#endif
