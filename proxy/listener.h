/*
 * listener: a listening socket (host:port or a Unix socket) on the loop.
 *
 * Its owner (server.c for listen and tls_listen, cluster.c for the node
 * ports) fills addr, tls, target and on_accept; a connection waiting to be
 * accepted is handed back through on_accept, the way uv_listen hands it
 * (the owner accepts it on l->h). A failed accept is logged here.
 */
#ifndef TTLG_LISTENER_H
#define TTLG_LISTENER_H

#include <stddef.h>
#include <uv.h>

#include "util.h"

struct listener;
struct target;

typedef void (*listener_cb)(struct listener *l);

struct listener {
    uv_stream_t *h;                  /* a uv_tcp_t or uv_pipe_t of our own; NULL when closed */
    struct addr addr;
    int tls;                         /* its clients speak TLS (cfg->client_tls_ctx) */
    struct target *target;           /* where its sessions go */
    listener_cb on_accept;           /* a connection waits on h */
};

/* Listen on l->addr; 0, or -1 with the reason in err. */
int listener_open(struct listener *l, uv_loop_t *loop, char *err, size_t errlen);
/* Listen on `to` instead: once it is bound the old socket closes; -1 (the
 * reason in err) leaves l as it was. */
int listener_move(struct listener *l, uv_loop_t *loop, const struct addr *to, char *err,
                  size_t errlen);
/* Close (harmless when closed); a Unix socket's file is removed. */
void listener_close(struct listener *l);

#endif
