/*
 * route_pin: a routed session's connection of its own to one node
 * (cluster = route); see route_pin.c.
 *
 * For route.c; route_pin_blocked() for session.c, route_pin_lost() and
 * route_pin_settle() for mux.c. A session has at most one pin (s->pin),
 * which lives from the request that needs it until it is owed nothing and
 * no transaction or WATCH holds it.
 */
#ifndef TTLG_ROUTE_PIN_H
#define TTLG_ROUTE_PIN_H

#include <stddef.h>
#include <stdint.h>

struct mux;
struct session;
struct target;

/* route.c's answers, as a cluster words them. */
extern const char route_crossslot[];        /* keys of several slots */
extern const char route_unserved[];         /* no primary serves the slot */

/* What a request that goes over the pin does to it. */
enum pin_take {
    PT_QUEUED,      /* inside MULTI: queued (EXEC and DISCARD too) */
    PT_MULTI,       /* MULTI */
    PT_WATCH,       /* WATCH */
    PT_BLOCK,       /* a command that may block */
    PT_OTHER,       /* EXEC, DISCARD, UNWATCH outside MULTI while a pin is open */
};

/* Take the pin for a request whose keys are in `slot` (-1: none). Returns 0
 * when it goes (*to: the pin's node; any: the node for a transaction that
 * names no key yet); -1 (ROUTE_WAIT) when it waits for the replies owed; 1
 * when the client gets *no instead (-CROSSSLOT: keys of another node than
 * the transaction's or the WATCH's). */
int route_pin_take(struct session *s, enum pin_take how, int slot, struct target *any,
                   struct target **to, const char **no);
/* The bytes of a request that went over the pin, with `replies` owed for
 * request `unit` (route.c); the first opens its connection. -1: no
 * connection to be had. */
int route_pin_send(struct session *s, const char *p, size_t n, int replies, uint32_t unit);
/* A blocking command alone on the pin met a redirect to t, once it was
 * owed nothing there: the pin goes to t (closed, opened there). */
void route_pin_retarget(struct session *s, struct target *t);
/* A request waits behind a blocking command on the pin: nothing else is
 * sent until it is answered, as Redis runs nothing else of a blocked client. */
int route_pin_blocked(const struct session *s);
/* The node a blocked session waits on, and the node's id for its pin's
 * connection (CLIENT UNBLOCK, route_client.c); NULL: not blocked there, or
 * that id not known. */
struct target *route_pin_blocked_at(const struct session *s, long long *node_id);
/* mux.c: bytes of the reply to the CLIENT ID that opens the pin's
 * connection m (its start and its end flagged). */
void route_pin_node_id(struct session *s, const struct mux *m, const char *p, size_t n,
                       int start, int done);
/* After a reply (or none sent): close the pin once it is owed nothing and
 * no transaction or WATCH holds it. */
void route_pin_settle(struct session *s);
/* mux.c: the pin's connection failed (was_ready: after it was ready); the
 * session ends with it. */
void route_pin_lost(struct session *s, int was_ready);
void route_pin_free(struct session *s);

#endif
