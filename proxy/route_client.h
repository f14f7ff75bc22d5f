/*
 * route_client: CLIENT through cluster = route, about the proxy's own
 * clients (see route_client.c).
 */
#ifndef TTLG_ROUTE_CLIENT_H
#define TTLG_ROUTE_CLIENT_H

#include "session_int.h"

/* CLIENT outside MULTI. Returns 1 when the proxy answered it (its reply, or
 * a refusal, queued; or UNBLOCK's request of its own sent instead), 0 when it goes to a node as any request does: carried
 * on the shared connection (SETINFO, NO-EVICT), to every primary (PAUSE,
 * UNPAUSE), or for the node's own error (a wrong arity, an unknown
 * subcommand). */
int route_client(struct session *s, const struct request *req, const struct req_plan *pl);

/* HELLO protover SETNAME name: the name is the session's as with CLIENT
 * SETNAME, and HELLO protover goes on as *fwd (its bytes the proxy's, until
 * the next call). Returns 1 when the proxy answered it (a name Redis
 * refuses), 0 when it goes on (*fwd: req, or HELLO protover). */
int route_hello_setname(struct session *s, const struct request *req, struct req_plan *pl,
                        struct request *fwd);

#endif
