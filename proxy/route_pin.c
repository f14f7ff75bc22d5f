/*
 * route_pin: a routed session's connection of its own to one node
 * (cluster = route), for what a connection other clients share cannot
 * carry: a transaction, a WATCH, a command that blocks.
 *
 * A Redis Cluster runs a transaction on the node that owns its keys' slot,
 * keeps a WATCH on the watched key's node and blocks a client on the node
 * of the key it waits for; a cluster client opens a connection to that
 * node. ttlguard does the same for the session: a pin, a connection of the
 * session's own (mux.c's, with an owner), the session's state set on it
 * first as on any connection of its own (HELLO 3, CLIENT SETINFO:
 * session_state_requests()), and its CLIENT ID asked (the node's id for
 * it: CLIENT UNBLOCK of a session blocked there, route_client.c). What goes
 * over it is route.c's units like any request, so its replies keep their
 * place among the shared connections'.
 *
 *   MULTI ────────▶ pin to any primary: no key is known yet
 *   PING ... ─────▶ pin (kept in `since`)
 *   SET {k}a ─────▶ the slot's node takes the transaction: the pin moves
 *                   there once owed nothing (closed, opened there, MULTI and
 *                   `since` sent again, their replies the proxy's)
 *   GET {k}b ─────▶ pin, for the node's own answers (another slot of it:
 *                   -CROSSSLOT at EXEC); keys of another node: -CROSSSLOT
 *                   where the node says -MOVED, and EXEC aborts as after it
 *   EXEC ─────────▶ pin; answered, and nothing else holding it: closed
 *
 *   WATCH {k}a ───▶ pin to its node, until UNWATCH, EXEC or DISCARD: a
 *                   transaction after it must be on that node (-CROSSSLOT)
 *   BLPOP {k}a 0 ─▶ pin to its node; the session's next requests wait for
 *                   its reply (the client is still read: one that leaves
 *                   closes the pin, and the node forgets the blocked client)
 *
 * route.c decides which requests go over the pin and answers what a
 * cluster refuses; this file decides where the pin is, and when it ends.
 */
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "route_pin.h"
#include "session_int.h"
#include "util.h"

struct route_pin {
    struct mux *m;              /* its connection; NULL until its first request, or lost */
    struct target *t;           /* its node */
    unsigned char movable;      /* a MULTI without WATCH that named no key yet: the node of
                                   its first key takes the transaction */
    unsigned char blocking;     /* a command that may block went: the next ones wait */
    struct sbuf since;          /* ...what was sent since that MULTI, for a move */
    int nsince;                 /* ...and the replies it gets */
    long long node_id;          /* the node's CLIENT ID for its connection (0: not known) */
    char id_reply[24];          /* ...its reply as it comes */
    unsigned char id_len;
};

static int owed(const struct route_pin *p)
{
    return p->m != NULL ? mux_pin_owed(p->m) : 0;
}

/* A transaction or a WATCH holds the pin: its node keeps their state. */
static int held(const struct session *s)
{
    return s->in_multi || s->watching;
}

static void since_drop(struct route_pin *p)
{
    free(p->since.p);
    p->since = (struct sbuf){ 0 };
    p->nsince = 0;
}

static void pin_close(struct session *s)
{
    struct route_pin *p = s->pin;
    if (p->m != NULL)
        mux_pin_close(p->m);
    since_drop(p);
    free(p);
    s->pin = NULL;
}

/* The node of the transaction's first key takes it: the connection where
 * MULTI went closes (the node discards what was queued), and the next
 * request opens one to t with MULTI and `since` first. */
static void pin_move(struct route_pin *p, struct target *t)
{
    if (p->m != NULL)
        mux_pin_close(p->m);
    p->m = NULL;
    p->t = t;
}

/* A queued command with keys: the first (of a MULTI the pin may move with)
 * decides the transaction's node. Keys of another node get -CROSSSLOT where
 * that node would say -MOVED (both flag the transaction); keys of another
 * slot of the same node go, for the node's own answer (-CROSSSLOT at EXEC). */
static int take_queued(struct session *s, int slot, struct target *want, const char **no)
{
    struct route_pin *p = s->pin;
    if (slot < 0 || (want == p->t && !p->movable))
        return 0;
    if (!p->movable) {
        *no = route_crossslot;
        return 1;
    }
    if (want == p->t) {
        since_drop(p);                  /* not moved: nothing to send again */
    } else if (owed(p) > 0) {
        return -1;                      /* what went where MULTI did is answered first */
    } else {
        pin_move(p, want);
    }
    p->movable = 0;
    return 0;
}

/* MULTI, WATCH, a blocking command, or what ends a WATCH: to want, where a
 * pin that nothing holds may go; one that a WATCH holds stays. */
static int take_outside(struct session *s, enum pin_take how, struct target *want,
                        const char **no)
{
    struct route_pin *p = s->pin;
    if (p != NULL && p->t != want && !held(s) && owed(p) == 0)
        pin_close(s);
    p = s->pin;
    if (p == NULL) {
        p = s->pin = xcalloc(1, sizeof *p);
        p->t = want;
    } else if (p->t != want) {
        if (!s->watching)
            return -1;                  /* once the pin is answered, it goes */
        *no = how == PT_WATCH ? route_crossslot :
              "-ERR ttlguard cluster = route does not support %s yet on another node than "
              "WATCH's\r\n";
        return 1;
    }
    if (how == PT_MULTI) {
        p->movable = !s->watching;
        since_drop(p);
    }
    p->blocking |= how == PT_BLOCK;
    return 0;
}

int route_pin_take(struct session *s, enum pin_take how, int slot, struct target *any,
                   struct target **to, const char **no)
{
    struct target *want = slot >= 0 ? cluster_slot_target(slot) :
                          s->pin != NULL ? s->pin->t : any;
    if (want == NULL) {
        *no = route_unserved;
        return 1;
    }
    ASSERT(how != PT_QUEUED || s->pin != NULL);
    int rc = how == PT_QUEUED ? take_queued(s, slot, want, no) : take_outside(s, how, want, no);
    if (rc == 0)
        *to = s->pin->t;
    return rc;
}

/* The pin's connection, opened with the session's state and, after a move,
 * what the transaction sent before (their replies are the proxy's). */
static struct mux *pin_open(struct session *s, struct route_pin *p)
{
    static struct sbuf pre;
    pre.len = 0;
    int n = session_state_requests(s, &pre) + p->nsince;
    if (p->since.len > 0)
        sbuf_add(&pre, p->since.p, p->since.len);
    since_drop(p);
    p->m = mux_pin_open(s, p->t, pre.p, pre.len, n);
    return p->m;
}

int route_pin_send(struct session *s, const char *bytes, size_t n, int replies, uint32_t unit)
{
    struct route_pin *p = s->pin;
    if (p == NULL || (p->m == NULL && pin_open(s, p) == NULL))
        return -1;
    if (p->movable) {
        sbuf_add(&p->since, bytes, n);
        p->nsince += replies;
    }
    return mux_send_on(p->m, s, bytes, n, replies, unit);
}

void route_pin_retarget(struct session *s, struct target *t)
{
    if (s->pin == NULL || s->pin->t == t)
        return;
    pin_move(s->pin, t);
}

int route_pin_blocked(const struct session *s)
{
    return s->pin != NULL && s->pin->blocking && owed(s->pin) > 0;
}

struct target *route_pin_blocked_at(const struct session *s, long long *node_id)
{
    if (!route_pin_blocked(s) || s->pin->node_id <= 0)
        return NULL;
    *node_id = s->pin->node_id;
    return s->pin->t;
}

void route_pin_node_id(struct session *s, const struct mux *m, const char *p, size_t n,
                       int start, int done)
{
    struct route_pin *pin = s->pin;
    if (pin == NULL || pin->m != m)
        return;
    if (start)
        pin->id_len = 0;
    size_t room = sizeof pin->id_reply - 1 - pin->id_len, k = n < room ? n : room;
    memcpy(pin->id_reply + pin->id_len, p, k);
    pin->id_len = (unsigned char)(pin->id_len + k);
    pin->id_reply[pin->id_len] = '\0';
    if (done)                           /* ":<id>\r\n", or an error (an ACL without CLIENT) */
        pin->node_id = pin->id_reply[0] == ':' ? strtoll(pin->id_reply + 1, NULL, 10) : 0;
}

void route_pin_settle(struct session *s)
{
    struct route_pin *p = s->pin;
    if (p == NULL || owed(p) > 0)
        return;
    p->blocking = 0;
    if (held(s))
        return;
    pin_close(s);
}

/* The node is gone for the session, and a transaction or WATCH with it:
 * the session ends, as a client's connection to that node would. */
void route_pin_lost(struct session *s, int was_ready)
{
    if (s->pin != NULL)
        s->pin->m = NULL;
    session_shared_lost(s, was_ready);
}

void route_pin_free(struct session *s)
{
    if (s->pin != NULL)
        pin_close(s);
}
