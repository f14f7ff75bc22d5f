/*
 * sentinel: the backend named by Redis Sentinel (`sentinel`, `sentinel_master`).
 *
 *   start, reload ──▶ sentinel_resolve(): ask the Sentinels in turn (blocking),
 *                     check the primary's ROLE; a Sentinel that refuses the login
 *                     or does not know the name is an error naming it
 *   on the loop   ──▶ SUBSCRIBE +promoted-slave and +switch-master on every
 *                     Sentinel; SENTINEL MASTER on each every 5 s, and at once
 *                     after a -READONLY from the primary (a switch missed:
 *                     followed when named under a newer config-epoch)
 *        a switch of the primary in use ──▶ hooks->moving(new) (server.c: old
 *             connections are lost, new clients wait) ──▶ ROLE on the new one,
 *             every 100 ms until master ──▶ hooks->confirmed() (clients go there)
 *        no Sentinel answered a round ──▶ ROLE on the primary in use: kept
 *             while it answers master (event, /healthz)
 *
 * The Sentinels are reached over TLS when sentinel_tls is on, the primary
 * (and its ROLE) when backend_tls is on: both with the backend_tls_* files.
 */
#ifndef TTLG_SENTINEL_H
#define TTLG_SENTINEL_H

#include <stddef.h>

#include "util.h"

struct config;
struct loop_ctx;
struct sbuf;
struct request;

/* The primary cfg's Sentinels name, its ROLE checked (blocking, bounded by
 * connect_timeout per connection). 0 with *primary set; -1 with
 * "sentinel HOST:PORT: what is wrong" in err. */
int sentinel_resolve(const struct config *cfg, struct addr *primary, char *err, size_t errlen);

/* What the server does when the primary moves. moving(to): the switch is
 * known; from now on nothing may be sent to the old primary, and to is the
 * backend, but not yet confirmed: new clients wait. confirmed(): to answered
 * ROLE as master. moving may come again before confirmed (another switch). */
struct sentinel_hooks {
    void (*moving)(const struct addr *to);
    void (*confirmed)(void);
};

/* Follow the Sentinels of ctx->cfg from primary on. */
void sentinel_start(struct loop_ctx *ctx, const struct addr *primary,
                    const struct sentinel_hooks *hooks);

/* The primary in use answered a client -READONLY: it may have been demoted
 * by a switch not heard of; the Sentinels are asked at once. */
void sentinel_readonly(void);

/* A reload was accepted: its Sentinel login applies; primary is what it resolved. */
void sentinel_apply(const struct addr *primary);

/* Whether the Sentinels (addresses, master name) differ: those apply at start only. */
int sentinel_config_changed(const struct config *a, const struct config *b);

void sentinel_stop(void);
void sentinel_free(void);

/* A client's SENTINEL command, when ttlguard follows Sentinel: answered as
 * a Sentinel would, naming ttlguard itself (host:port, the address the
 * client reached, or the name a TLS client sent as SNI; port 0: a unix
 * socket) as the master's address, so that a client library configured
 * for Sentinel can be pointed at ttlguard.
 * Returns 1 with the reply (RESP2) appended to out; 0: not one. */
int sentinel_answer(const struct config *cfg, const struct request *req, const char *host,
                    int port, struct sbuf *out);

/* /metrics families, and the /healthz line ("" when there is nothing to say). */
void sentinel_metrics(struct sbuf *b);
const char *sentinel_problem(void);

#endif
