/*
 * policy: a request and the rules -> FORWARD, REWRITE or REJECT.
 *
 *   request --command_lookup--> row of the command table
 *           --command_keys-----> keys written, each with its TTL effect
 *           --rules_match------> rule per key (longest prefix)
 *           --per key----------> nothing | violation (log / rewrite / reject) | durable write
 *           --per command------> one verdict: any reject rejects the command; else any
 *                                rewrite rewrites it (one atomic script for all its keys)
 *
 * Every decision that touches a rule is reported to the events module.
 */
#ifndef TTLG_POLICY_H
#define TTLG_POLICY_H

#include <stddef.h>

#include "commands.h"
#include "config.h"
#include "events.h"
#include "resp_request.h"

enum verdict {
    V_FORWARD,      /* send the request unchanged */
    V_REWRITE,      /* send rw->pre, the original argument bytes (rw->orig_args), rw->tail */
    V_REJECT,       /* answer rw->err (a whole "-TTLGUARD ...\r\n" line) instead */
};


/* What the policy wants sent. Buffers belong to the policy module and stay
 * valid until the next policy_check() call. */
struct rewrite {
    struct sbuf pre;        /* V_REWRITE: the new request, or its head when orig_args */
    struct slice orig_args; /* when .len > 0: the original request's bytes after its *N line */
    struct sbuf tail;       /* V_REWRITE: sent after orig_args */
    int exec_first;         /* > 0: the rewrite is MULTI ... EXEC; swallow this many replies,
                               then give the client the first element of EXEC's reply */
    struct sbuf followup;   /* when .len > 0: a request to send after this one, whose reply
                               the proxy swallows (blocking commands, scripts) */
    struct sbuf err;        /* V_REJECT: the error line, CRLF included */
    struct sbuf guard;      /* V_REWRITE: when .len > 0, the server may refuse the command
                               itself (-TTLGUARD ...): keep this for policy_guard_refused() */
    struct sbuf probe;      /* nprobe > 0: PTTL requests to send before this one, one per key
                               it carries to another database or server, whose replies the
                               proxy swallows; with V_FORWARD too */
    struct sbuf probe_ev;   /* their record, for policy_probe_answered() */
    int nprobe;
};

struct policy_ctx {
    const struct cmd_info *cmd; /* argv[0] resolved (command_resolve); NULL: unknown to Redis */
    int resp3;              /* the client speaks RESP3 (HELLO 3) */
    int in_multi;           /* between MULTI and EXEC: blocking commands do not block */
    int can_multi;          /* the proxy may wrap a command in MULTI/EXEC of its own: not in
                               MULTI, no WATCH active, replies not suppressed */
    const struct ev_client *client;
};

/* Empty rw: nothing to send but the request (policy_check() starts so). */
void policy_rewrite_reset(struct rewrite *rw);

/* Decide what to do with req under cfg. Cheap when no rule can apply. */
enum verdict policy_check(const struct config *cfg, const struct request *req,
                          const struct policy_ctx *ctx, struct rewrite *rw);

/* One part of a request policy_check() judged whole (cluster = route sends
 * an MSET whose keys lie in several slots as one MSET per slot): what
 * policy_check() would send for those keys alone, with no event recorded
 * (the whole's were) and no rejection (the whole would have been refused).
 * Only for commands judged key by key (route_merge.h's split commands), of
 * a known command (ctx->cmd with a row); rw as for policy_check(). */
enum verdict policy_rewrite_part(const struct config *cfg, const struct request *req,
                                 const struct policy_ctx *ctx, struct rewrite *rw);

/* A large request, judged from its head (req->head: the arguments before
 * its large one, resp_request.h) so that its rest can stream to Redis as it
 * arrives. ctx->can_multi as for policy_check(). */
enum stream_form {
    SF_FREE,        /* no rule can judge it: it streams as sent */
    SF_PLAIN,       /* it streams as sent: the rules it falls under only record (log,
                       durable); policy_check() of the whole request records what it did */
    SF_MULTI,       /* it streams inside the proxy's MULTI, sp->pre replacing its "*N"
                       line: where a rewrite rule gives a key its TTL, the held rewrite's
                       MULTI form when its large argument is its last (SET k v: SET k v
                       KEEPTTL; EXPIRE k ttl NX), else the command inside WRAP_LUA;
                       policy_check() of the whole request decides: EXEC, or DISCARD and
                       the rule's error */
    SF_HOLD,        /* it is held until whole and handled as any request */
};
/* What goes around a request streaming inside the proxy's MULTI. */
struct stream_plan {
    struct sbuf pre;        /* MULTI, and the request's new "*N" line (WRAP_LUA's head) */
    struct sbuf tail;       /* after the client's arguments, before EXEC or DISCARD: the
                               arguments appended (SET ... KEEPTTL), EXPIRE key ttl NX */
    int queued;             /* commands inside the MULTI: +QUEUED replies owed */
};
enum stream_form policy_stream_form(const struct config *cfg, const struct request *req,
                                    const struct policy_ctx *ctx, struct stream_plan *sp);

/* The server refused a request whose rewrite had a guard record, with error
 * err (its first errlen bytes): record the rejection. 1 when it was the
 * policy's own refusal (-TTLGUARD ...), 0 when another error. */
int policy_guard_refused(const struct config *cfg, const char *guard, size_t len,
                          const char *err, size_t errlen, const struct ev_client *client);

/* A reply to the probes of a carried key (rw->probe), `remaining` of them
 * still owed counting this one: when it says the key had no TTL (-1), or
 * refused the probe, record the command's event from rec (rw->probe_ev). */
void policy_probe_answered(const struct config *cfg, const char *rec, size_t len,
                           int remaining, int no_ttl, const struct ev_client *client);

/* 1 when cfg can never do anything but forward (no rules, default allow). */
int policy_inactive(const struct config *cfg);

#endif
