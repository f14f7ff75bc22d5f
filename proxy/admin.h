/*
 * admin: the HTTP endpoint on `admin = host:port` (docs/metrics.md).
 *
 *   GET /metrics   Prometheus text format (version 0.0.4)
 *   GET /healthz   200 "ok" when the backend answers PING, 503 and why otherwise
 *   GET /rules     the running rules as JSON
 *
 * HTTP/1.1 with keep-alive on the proxy's own loop, parsed by Debian's
 * libhttp-parser. Requests are bounded (8 KB of URL, headers and body), and
 * so are the connections (64) and what one connection may leave unread.
 */
#ifndef TTLG_ADMIN_H
#define TTLG_ADMIN_H

#include <stddef.h>

struct clients;
struct loop_ctx;

/* Listen on ctx->cfg->admin (nothing when it is NULL). Returns -1 with the
 * reason when the address cannot be bound: at start that is fatal. ctx and
 * clients must outlive the endpoint; the config, counters, backend address
 * and client count are read on every request, and what the control
 * connection learned (control.h). */
int admin_start(struct loop_ctx *ctx, const struct clients *clients, char *err, size_t errlen);

/* After a reload: listen on the new address when it changed (or stop when
 * it is now empty). A new address that cannot be bound keeps the old one,
 * with a warning. */
void admin_reconfigure(struct loop_ctx *ctx);

/* Shutdown: close the listener, the connections and a health check in
 * flight. Call it from inside the loop. */
void admin_stop(void);

#endif
