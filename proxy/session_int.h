/*
 * session_int: what the client side (session.c, mirror.c, session_login.c,
 * reply.c) and the shared connection (mux.c) share. Not for other modules:
 * they use session.h.
 */
#ifndef TTLG_SESSION_INT_H
#define TTLG_SESSION_INT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cluster.h"
#include "commands.h"
#include "loop.h"
#include "policy.h"
#include "resp_reply.h"
#include "resp_request.h"
#include "session.h"
#include "wbatch.h"

#define PEEK_MAX        64      /* first bytes of a reply kept for inspection */
#define TAIL_MAX        32      /* last bytes of a reply kept for inspection */

/* Where a session's requests go. Changed only by session_set_mode(). */
enum session_mode {
    SM_AUTH,        /* ttlguard logs its clients in: this one has not yet, and has no
                       backend connection (client_password, [user]) */
    SM_WAIT,        /* its own connection is being opened: the client is not read */
    SM_OWN,         /* its own backend connection (1:1) */
    SM_SHARED,      /* the shared connection (multiplex = on) */
    SM_DOWN,        /* no backend: requests get its target's down_reason, then the session closes */
    SM_LOST,        /* the backend went away after it was ready: what was received goes
                       out, then the session closes */
};

enum pend_kind {
    PK_FORWARD,     /* the backend's reply goes to the client */
    PK_LOCAL,       /* our own reply, sent when it reaches the head */
    PK_INTERNAL,    /* the backend's reply is for the proxy */
};

enum pend_what {
    PW_PLAIN,
    PW_HELLO,       /* reply type tells the protocol: % is RESP3, * is RESP2 */
    PW_MONITOR,     /* +OK enters monitor mode */
    PW_RESET,       /* reply resets protocol state */
    PW_SUB,         /* RESP2 (un)subscribe: `remaining` confirmations */
    PW_CLIENT_AUTH, /* the client's AUTH (or HELLO ... AUTH): a failure undoes the
                       optimistic `unauth = 0` */
    PW_REPLACE,     /* PK_INTERNAL: the client gets `local` instead of the backend's reply */
    PW_QUEUED,      /* PK_INTERNAL: +QUEUED for the command in the proxy's own MULTI, or the
                       error that refused it (kept: EXEC will only say EXECABORT) */
    PW_EXEC_FIRST,  /* PK_INTERNAL: EXEC of the proxy's own MULTI: the client gets element 1 */
    PW_SYNC,        /* SYNC/PSYNC: from its reply on the connection is a replication stream */
    PW_TOPOLOGY,    /* CLUSTER SLOTS/SHARDS/NODES/REPLICAS (subkind: enum topo_kind): the
                       reply is held whole and its addresses rewritten (cluster.c); for an
                       EXEC (TOPO_EXEC) `local` has the kind of each element */
    PW_RELOGIN,     /* PK_INTERNAL: the proxy's AUTH on the session's own connection, after
                       RESET or a login as a user with another backend login */
    PW_CARRY,       /* CLIENT SETINFO / NO-EVICT of a shared session: +OK makes the session
                       remember it (`local`: the argument, owned; subkind: enum carried) */
    PW_GUARD,       /* a rewrite the server itself may refuse (-TTLGUARD ...): `local` holds
                       the policy's guard record (owned) for the event */
    PW_PROBE,       /* PK_INTERNAL: PTTL of keys a command carries elsewhere (`remaining` of
                       them): -1 records its event; `local`: the policy's record (owned) */
};

/* Where in an EXEC reply of the proxy's own MULTI the bytes are. */
enum exec_phase { XP_START, XP_HEADER, XP_FIRST, XP_REST, XP_ALL, XP_ERROR };

enum sub_kind { SUB_CHANNEL, SUB_PATTERN, SUB_SHARD };

/* State a shared session carries, replayed on its own connection. */
enum carried { CARRY_LIB_NAME, CARRY_LIB_VER, CARRY_NO_EVICT_ON, CARRY_NO_EVICT_OFF };

/* MULTI, EXEC, DISCARD (multi_cmd()). */
enum { MT_NONE, MT_MULTI, MT_EXEC, MT_DISCARD };

/* What handle_request() did with a request. */
enum handled {
    HR_DONE,        /* handled: forwarded, rewritten or answered */
    HR_PIN,         /* not handled: it waits for the session's own connection */
    HR_WAIT,        /* not handled: it waits until nothing is owed on the shared connection */
    HR_BLOCKED,     /* ...as HR_WAIT, behind a blocking command: the client is still read
                       (cluster = route: route_pin.h) */
    HR_CONNECT,     /* not handled: it waits for the connection its login opened */
    HR_STREAM,      /* a large request's head was sent: its rest passes as it arrives */
    HR_HOLD,        /* a large request's head: it is handled once it is whole */
};

/* What one request needs, decided before anything is sent. */
struct req_plan {
    const struct cmd_info *ci;  /* NULL: a command Redis does not know */
    enum cmd_id id;
    struct cmd_words words;     /* CLIENT's and HELLO's words, resolved with the command */
    int mt;                     /* MT_* */
    int queued;                 /* inside MULTI: Redis only queues it */
    int replies;                /* the client gets a reply */
    int skipped;                /* ... it does not, because of CLIENT REPLY SKIP */
    int raw_copy;               /* req->raw is not in the input: copy it (HELLO without AUTH) */
};

struct pending {
    uint8_t kind;           /* enum pend_kind */
    uint8_t what;           /* enum pend_what */
    uint8_t subkind;        /* enum sub_kind, for PW_SUB */
    uint8_t local_owned;    /* `local` is malloc'ed and freed when popped */
    uint8_t rewritten;      /* for the latency histograms; on PK_INTERNAL: the proxy's own part
                               of a rewrite (its MULTI, EXPIRE, a follow-up script), whose
                               error is a rewrite error */
    uint8_t proto_gen;      /* PW_HELLO: the session's proto_gen once it was sent (a refusal
                               undoes only the latest change) */
    int32_t remaining;      /* replies still owed; -1: "as many as subscriptions" (PW_SUB) */
    uint32_t local_len;
    const char *local;      /* PK_LOCAL: the reply bytes */
    uint64_t t0;            /* loop_now_ns when the request was read (PK_FORWARD) */
};

struct session {
    struct loop_ctx *ctx;
    struct clients *cl;
    struct session *prev, *next;    /* cl->all */
    uint64_t id;                    /* unique among the proxy's clients, from 1 (CLIENT ID in
                                       cluster = route: route_client.c) */

    struct xport client;            /* the client's socket, plain or TLS (tls_listen) */
    struct bconn be;                /* its own backend connection (SM_WAIT, SM_OWN) */
    uv_shutdown_t client_sreq;
    int handles;                    /* open uv handles; the session is freed at 0 */
    unsigned char mode;             /* enum session_mode */
    struct mux *mux;                /* the shared connection its requests went to last */
    struct route_state *route;      /* cluster = route: where its requests are (route.c) */
    struct route_pin *pin;          /* ...its connection of its own to one node, for a
                                       transaction, a WATCH, a blocking command (route_pin.c);
                                       NULL: none */
    int mux_owed;                   /* replies owed for bytes not yet handed to the mux */

    unsigned pin_wait:1;            /* a stateful request waits for a dedicated connection */
    unsigned switch_wait:1;         /* a SELECT/HELLO waits to move to another shared one,
                                       or an AUTH for the replies owed (own connection) */
    unsigned was_shared:1;          /* its own connection gets the state replayed */
    unsigned replaying:1;           /* ... and the client waits until Redis has answered it */
    unsigned no_evict:1;            /* CLIENT NO-EVICT ON (replayed after sharing) */
    unsigned stateful:1;            /* sent what needs its own connection: never shares */
    unsigned end_on_input:1;        /* idle at a Sentinel switch: its next request closes
                                       it, unsent (session_backend_moved()) */
    unsigned reopen:1;              /* its own connection is opened again once closed */
    unsigned ident_wait:1;          /* its connection is ready, the backend's commands not yet */
    unsigned served;                /* requests handled on its own connection */
    unsigned client_reading:1;      /* uv_read_start active on client */
    unsigned client_eof:1;          /* client half-closed: finish owed replies, then close */
    unsigned draining:1;            /* server shutdown: no new requests */
    unsigned close_after_flush:1;   /* protocol error or backend gone: close when written */
    unsigned closing:1;             /* uv_close called */
    unsigned resp3:1;
    unsigned monitor:1;
    unsigned replica:1;             /* after SYNC/PSYNC: replies are a replication stream */
    unsigned reply_off:1;           /* CLIENT REPLY OFF */
    unsigned reply_skip:1;          /* CLIENT REPLY SKIP: the next command gets no reply */
    unsigned in_multi:1;            /* between MULTI and EXEC/DISCARD */
    unsigned watching:1;            /* WATCH active: the proxy must not EXEC on its own */
    unsigned auth_required:1;       /* Redis wants this connection to authenticate */
    unsigned unauth:1;              /* the client has not authenticated (yet) */
    unsigned multi_dirty:1;         /* a command in this MULTI was rejected: EXEC aborts */
    unsigned pushes:1;              /* RESP3 and subscribed or tracking (until RESET): Redis
                                       7.0 writes a push as it happens, inside an EXEC reply
                                       too, so the proxy makes no MULTI of its own */
    unsigned ttlg_auth:1;           /* ttlguard logs this client in itself (login.c) */
    unsigned authed:1;              /* ...and it has logged in */
    unsigned cap_wait:1;            /* max_pending replies owed: requests wait in ibuf */
    unsigned replied_in_read:1;     /* a request of the client's last read gets a reply
                                       (login.h: replies_pending) */
    uint8_t proto_gen;              /* protocol changes sent (HELLO, RESET) */
    char *be_user, *be_pass;        /* the backend login of the user it logged in as; pass
                                       NULL: backend_username / backend_password */
    int db;                         /* SELECTed db, for events */
    char *client_name;              /* CLIENT SETNAME, for events; NULL when unset */
    char *lib_name, *lib_ver;       /* CLIENT SETINFO (replayed after sharing); NULL: unset */
    char *client_addr;              /* peer address, filled on first event */
    struct sbuf multi_fix;          /* follow-ups deferred to after EXEC */
    int multi_nfix;
    unsigned char xphase;           /* enum exec_phase */
    struct sbuf xerr;               /* queue-time error of the command in the proxy's MULTI */
    struct sbuf held;               /* cluster: a reply with node addresses, held whole */
    struct sbuf park;               /* cluster: what goes to the client while it waits for a
                                       topology read (park_add()) */
    struct cluster_wait cwait;      /* ...and its place among those waiting */
    struct sbuf out;                /* cluster = route: replies for the client, written once
                                       per loop turn (out_add()) */
    struct session *out_next;       /* ...in cl->out_list */
    unsigned out_queued:1;          /* ...it is in cl->out_list */
    unsigned parked:1;
    unsigned multi_topo_any:1;      /* ...one of them is a topology command */
    struct sbuf multi_topo;         /* cluster: enum topo_kind of each command queued in the
                                       client's MULTI, for EXEC's reply */
    struct reply_scanner *xsub;     /* frames EXEC's first element; allocated on first use */
    struct stream_judged *judged;   /* a large request streaming under a rule, judged once
                                       whole (session.c); NULL: none */

    /* Client input: only the partial request that spans reads lives here. */
    char *ibuf;
    size_t ilen, icap;
    size_t iwant;                   /* a held large request's size, as far as known: ibuf
                                       grows to it at once (0: none) */
    struct req_framer *framer;

    /* Pending queue: one struct pending per reply owed to the client. */
    struct ring q;

    /* Reply side. */
    char peek[PEEK_MAX];
    uint32_t peeklen;
    char tail[TAIL_MAX];
    uint32_t taillen;
    int nchan, npat, nshard;        /* subscriptions, mirrored from confirmations */
    uint32_t sub_unsure;            /* entries queued whose reply may change them (RESP2
                                       (un)subscribe; RESET while subscribed) */

    uint64_t last_active;           /* monotonic ms */
    uint64_t accepted;              /* monotonic ms: a TLS handshake must end in time */
};

/* session.c, for reply.c: the pending queue and the client batch */

struct pending *q_head(struct session *s);
void q_pop(struct session *s);
/* Our own replies that reached the head of the queue go out (between replies only). */
void emit_locals(struct session *s);
/* Bytes for s's client: copied, or a span valid until the flush. */
void toc_add(struct session *s, const char *p, size_t n, int copy);

/* Who s is, for an event (c is filled and returned). */
const struct ev_client *session_client(struct session *s, struct ev_client *c);
/* Close once everything owed has been written (close_after_flush). */
void maybe_finish(struct session *s);
/* The reply to SYNC/PSYNC is next: the connection becomes a replication stream. */
void enter_replica(struct session *s);

/* session.c, for mirror.c and session_login.c: the queue, the batch towards
 * Redis, the client */

/* A follow-up request whose reply the proxy swallows (count replies). */
void send_internal(struct session *s, const char *p, size_t len, int count);

struct pending *q_push(struct session *s);
/* n more replies are owed on the connection s's requests go to. */
void owe(struct session *s, int n);
/* Bytes for Redis: copied, or a span valid until the flush. */
void tob_add(struct session *s, const char *p, size_t n, int copy);
/* Our own reply, sent when it reaches the head of the queue. */
void queue_local(struct session *s, const char *text, size_t len, int is_static);
/* CLIENT REPLY and MULTI decide whether the client gets a reply. */
void plan_replies(struct session *s, const struct request *req, struct req_plan *pl);
void open_own_connection(struct session *s);
/* The requests that set the state s carries on a connection of its own
 * (SELECT, HELLO 3, CLIENT SETINFO, NO-EVICT), RESP encoded at the end of
 * out: how many. */
int session_state_requests(const struct session *s, struct sbuf *out);
void client_read_stop(struct session *s);
/* The client's address, for log lines. */
const char *client_name(struct session *s);
/* The address the client reached ttlguard at, "host:port" in buf ("unix"
 * for a Unix socket): buf. */
const char *session_local_addr(const struct session *s, char *buf, size_t n);
/* Free a string that holds a password (cleansed first); NULL is fine. */
void free_secret(char *p);

/* session_login.c, for session.c: ttlguard logs its clients in (ttlg_auth) */

/* AUTH and HELLO ... AUTH are answered here and nothing else passes before
 * them. Returns 1 when req was handled (*h: how), 0 when it goes on as *fwd
 * (req, or HELLO without its AUTH). */
int client_login(struct session *s, const struct request *req, struct req_plan *pl,
                 struct request *fwd, enum handled *h);
/* Log s's own connection in to Redis again as its backend login. */
void relogin(struct session *s);

/* mirror.c, for session.c: the protocol state mirrored from requests */

void track_request(struct session *s, const struct request *req, const struct req_plan *pl,
                   struct pending *p);
/* RESP2/RESP3 subscribe-family: returns 1 and fills p when id is one. */
int track_pubsub(struct session *s, const struct request *req, enum cmd_id id,
                 struct pending *p);
/* CLIENT REPLY ON|OFF|SKIP: returns 1 (and whether it gets a reply) when req is one. */
int track_client_reply(struct session *s, const struct request *req, const struct req_plan *pl,
                       int *replies);
void track_identity(struct session *s, const struct request *req, const struct req_plan *pl);
void track_carried(const struct request *req, const struct req_plan *pl, struct pending *p);
int multi_cmd(const struct request *req, enum cmd_id id);     /* MT_* */
void track_multi(struct session *s, int mt);
void multi_reset(struct session *s);
void note_queued_topology(struct session *s, const struct request *req, enum cmd_id id);

/* reply.c, for session.c and mux.c */

/* Bytes of one reply for s from the connection its requests went to. */
void session_reply(struct session *s, const char *p, size_t n, int done, char type, int start);

/* Redis refused the proxy's own part of a rewrite with error err (len
 * bytes, whole or its start): counted, and logged now and then (reply.c;
 * route.c for the parts of a split rewrite). */
void rewrite_refused(struct session *s, const char *err, size_t len);

/* reply.c, for session.c */

/* Cluster: while a redirect to a node not known yet waits for a topology
 * read, what would go to the client is kept in order instead: bytes as
 * they are ('R'), redirects to rewrite once the read is done ('M'). The
 * read's end gives them out (reply.c). */
void park_add(struct session *s, char kind, const char *p, size_t n);

/* session.c, for mux.c */

/* After a reply for s on the shared connection: deliver, resume, or move to 1:1. */
void session_settle(struct session *s);
/* Write what was gathered for the last session's client. */
void session_flush_client(void);
/* The shared connection is gone: s ends as if its own connection had. */
void session_shared_lost(struct session *s, int was_ready);
void session_resume(struct session *s);
void session_pause(struct session *s);

/* mux.c, for session.c */

int mux_shareable(const struct loop_ctx *ctx);
/* Join the shared connection of s's state at accept, so that losing it ends
 * s like Redis ends its clients. -1: there is none to be had. */
int mux_attach(struct session *s);
int mux_paused(const struct session *s);
/* Hand wb's requests to the shared connection, with s->mux_owed replies owed to s.
 * Returns -1 when there is no shared connection to be had. */
int mux_append(struct session *s, struct wbatch *wb);
void mux_forget(struct session *s);
/* cluster = route: n bytes of one request to t's shared connection, with
 * `owed` replies for request `unit` of s (route.c). -1: no connection to be had. */
int mux_send(struct session *s, struct target *t, const char *p, size_t n, int owed,
             uint32_t unit);
/* ...the same on connection m (NULL, or failed: -1). */
int mux_send_on(struct mux *m, struct session *s, const char *p, size_t n, int owed,
                uint32_t unit);

/* mux.c, for route_pin.c: a routed session's connection of its own to t,
 * never shared (its `owner`). Its CLIENT ID goes first (route_pin_node_id()),
 * then pre: requests whose npre replies are the proxy's (the session's state). NULL when it cannot be opened.
 * Its failure ends the session as a shared connection's does
 * (route_pin_lost() first). */
struct mux *mux_pin_open(struct session *s, struct target *t, const char *pre, size_t n,
                         int npre);
/* Replies still owed on it, the proxy's own included. */
int mux_pin_owed(const struct mux *m);
/* Close it: what it still owes is dropped (Redis drops the client, and
 * with it a transaction or a blocked command). */
void mux_pin_close(struct mux *m);

#endif
