/*
 * route: one address in front of a Redis Cluster (cluster = route); see route.c.
 *
 * For session.c and mux.c only. A routed session is a shared session
 * (SM_SHARED) with s->route set: each request goes to the shared connection
 * of the node that serves its keys' slot, and its replies reach the session
 * in request order whichever node answers first. A subscriber is SM_OWN
 * with s->route set: on a connection of its own to one node (ROUTE_OWN).
 */
#ifndef TTLG_ROUTE_H
#define TTLG_ROUTE_H

#include <stdint.h>

/* The entry points session.c calls on its request path stay out of line:
 * inlined (LTO), they would weigh on the non-routed path's code. */
#define ROUTE_ENTRY __attribute__((noinline))

struct session;
struct request;
struct req_plan;
struct target;
struct wbatch;
struct policy_ctx;
struct rewrite;

/* Accept: s becomes a routed session. Its client is read once the
 * backend's commands and the cluster's slots are known (route_cron()). */
void route_attach(struct session *s);
void route_free(struct session *s);
/* Cron: a session waiting for the commands and slots starts. */
void route_cron(struct session *s);

/* Before a request is judged. Returns 1 when route.c answered it itself (a
 * refusal, SELECT, -CROSSSLOT, -CLUSTERDOWN); 0 when it goes on to the node
 * that serves its slot (s->be.t is that node now), over a shared connection
 * or the session's pin (route_pin.h); ROUTE_WAIT when it waits until the
 * replies owed are in (HELLO changes the protocol, a pin moves); ROUTE_BLOCKED
 * when it waits behind a blocking command (the client is still read: Redis
 * reads a blocked client, and one that leaves ends the block). needs_own:
 * the request would need a connection of its own in the shared mode. */
#define ROUTE_WAIT      (-1)
#define ROUTE_BLOCKED   (-2)
/* ROUTE_OWN: (P|S)(UN)SUBSCRIBE; the session leaves routing for a connection
 * of its own to s->be.t, its subscriptions' node (SM_OWN, route kept), once
 * it is owed nothing, and comes back when it has no subscription left. */
#define ROUTE_OWN       (-3)
ROUTE_ENTRY int route_pick(struct session *s, const struct request *req,
                           const struct req_plan *pl, int needs_own);
/* The same for a subscriber on that connection: 1 when route.c answered it
 * (a subscription on another node, a RESP3 subscriber's command that the
 * node cannot answer as the cluster would); 0 when it goes there; with no
 * subscription left, ROUTE_WAIT while replies are owed, then ROUTE_BACK:
 * the session is routed again from this request. */
#define ROUTE_BACK      (-4)
int route_subscribed(struct session *s, const struct request *req, const struct req_plan *pl,
                     int needs_own);
/* A RESP2 subscriber's command that Redis refuses in that context: the node
 * checks its keys' slot first, so one with keys of another node's slots (or
 * of several) is refused here, in Redis's words (7.0 on, Valkey too).
 * Returns 1 when answered; 0: it goes to the node, for its own error. */
int route_sub_refused(struct session *s, const struct request *req, const struct req_plan *pl);

/* The rules rewrite the request (judged whole: its events, its verdict):
 * when it goes as several (an MSET over several slots), each part becomes
 * what the rules send for its keys alone (policy_rewrite_part()), and rw
 * the request as it is, which the session sends and counts rewritten, for
 * one reply (the parts' merged). Else nothing changes. */
ROUTE_ENTRY void route_rewrite(struct session *s, const struct request *req,
                               const struct policy_ctx *ctx, struct rewrite *rw);

/* The proxy's own reply (n bytes of p) to req, in its place; nothing when
 * CLIENT REPLY says the client gets none (plan_replies()). */
void route_answer(struct session *s, const struct request *req, const struct req_plan *pl,
                  const char *p, size_t n);

/* Instead of req, a request of the proxy's making (n bytes of p, no key)
 * to node t, whose reply the client gets in req's place (as CLIENT REPLY
 * says). */
void route_send_instead(struct session *s, const struct request *req, const struct req_plan *pl,
                        struct target *t, const char *p, size_t n);

/* The bytes gathered for the request being handled (session.c's batch
 * towards the backend, which is reset). */
ROUTE_ENTRY void route_take(struct session *s, struct wbatch *wb);
/* The request was handled: what was gathered goes to its node, with the
 * replies owed there (s->mux_owed); or, forwarded as it is, as several
 * (split by slot, or to every primary: route_merge.h). */
ROUTE_ENTRY void route_commit(struct session *s, const struct request *req,
                              struct wbatch *wb);

/* mux.c: node t's shared connection failed (was_ready: after it was up)
 * owing replies to request `unit` of s (called once per reply owed). */
void route_lost(struct session *s, uint32_t unit, const struct target *t, int was_ready);

/* mux.c: bytes of one reply for request `unit` of s, from node `from`. */
void route_reply(struct session *s, uint32_t unit, const struct target *from, const char *p,
                 size_t n, int done, char type, int start);

#endif
