/*
 * mirror: the protocol state of a client connection, mirrored from the
 * requests that pass (see session_int.h).
 *
 * Pairing replies with requests needs to know how many replies a request
 * gets and what they mean, and the events and rewrites need to know who the
 * client is and where it stands:
 *
 *   track_request       AUTH, HELLO, RESET, MONITOR, SYNC, topology reads:
 *                       assumed to succeed, undone by the reply (reply.c)
 *   track_pubsub        (P|S)(UN)SUBSCRIBE: confirmations owed
 *   track_client_reply  CLIENT REPLY ON|OFF|SKIP: replies owed at all
 *   track_identity      SELECT, CLIENT SETNAME|TRACKING|PAUSE, WATCH, RESET
 *   track_carried       CLIENT SETINFO|NO-EVICT of a shared session
 *   multi_* track_multi MULTI, EXEC, DISCARD: the proxy's deferred follow-ups
 *
 * The words of CLIENT and HELLO come resolved (struct cmd_words, commands.h).
 */
#include <stdlib.h>

#include "session_int.h"
#include "util.h"

/* AUTH, HELLO, RESET, MONITOR: state that follows from a request, assumed
 * to succeed (later requests of the same pipeline are judged in it) and
 * undone by reply_done() when the reply says it did not. */
void track_request(struct session *s, const struct request *req, const struct req_plan *pl,
                   struct pending *p)
{
    long long ver;
    switch (pl->id) {
    case CID_AUTH:
        if (req->argc == 2 || req->argc == 3) {
            p->what = PW_CLIENT_AUTH;
            s->unauth = 0;
        }
        break;
    case CID_HELLO:
        p->what = PW_HELLO;
        p->subkind = s->resp3;
        if (req->argc >= 2 && slice_to_ll(req->argv[1], &ver) == 0 && (ver == 2 || ver == 3))
            s->resp3 = ver == 3;
        p->proto_gen = ++s->proto_gen;
        if (pl->words.hello & HELLO_AUTH_ARGS) {
            p->subkind |= 2;
            s->unauth = 0;
        }
        break;
    case CID_RESET:
        p->what = PW_RESET;
        s->proto_gen++;
        p->subkind = s->nchan + s->npat + s->nshard > 0 || s->sub_unsure > 0;
        if (p->remaining == 0)      /* no reply will say so: it unsubscribes now */
            s->nchan = s->npat = s->nshard = 0;
        s->resp3 = 0;
        s->authed = 0;              /* RESET logs the client out (of ttlguard too) */
        s->unauth = s->auth_required;
        break;
    case CID_MONITOR:
        p->what = PW_MONITOR;
        break;
    case CID_SYNC:
    case CID_PSYNC:
        p->what = PW_SYNC;
        break;
    case CID_CLUSTER:
    case CID_ROLE:
    case CID_INFO:
        if (s->ctx->cfg->cluster) {
            p->subkind = (uint8_t)cluster_topology_kind(pl->id, req->argc, req->argv);
            if (p->subkind != TOPO_NONE)
                p->what = PW_TOPOLOGY;
        }
        break;
    default:
        break;
    }
}

/* RESP2/RESP3 subscribe-family: how many regular replies does it get?
 * Returns 1 and fills p when id is one. */
int track_pubsub(struct session *s, const struct request *req, enum cmd_id id,
                        struct pending *p)
{
    int sub;
    enum sub_kind kind;
    switch (id) {
    case CID_SUBSCRIBE:     sub = 1; kind = SUB_CHANNEL; break;
    case CID_PSUBSCRIBE:    sub = 1; kind = SUB_PATTERN; break;
    case CID_SSUBSCRIBE:    sub = 1; kind = SUB_SHARD; break;
    case CID_UNSUBSCRIBE:   sub = 0; kind = SUB_CHANNEL; break;
    case CID_PUNSUBSCRIBE:  sub = 0; kind = SUB_PATTERN; break;
    case CID_SUNSUBSCRIBE:  sub = 0; kind = SUB_SHARD; break;
    default:                return 0;
    }
    if (sub && req->argc < 2)
        return 0;           /* arity error: one ordinary error reply */
    if (s->resp3) {
        p->remaining = 0;   /* every confirmation is a push */
        return 1;
    }
    p->what = PW_SUB;
    p->subkind = kind;
    p->remaining = req->argc > 1 ? req->argc - 1 : -1;
    return 1;
}

/* CLIENT REPLY ON|OFF|SKIP. Returns 1 when req is one of them. */
int track_client_reply(struct session *s, const struct request *req, const struct req_plan *pl,
                       int *replies)
{
    if (pl->id != CID_CLIENT || req->argc != 3 || pl->words.sub != CSUB_REPLY)
        return 0;
    switch (pl->words.arg) {
    case CARG_ON:
        s->reply_off = 0;
        s->reply_skip = 0;
        *replies = 1;
        return 1;
    case CARG_OFF:
        s->reply_off = 1;
        *replies = 0;
        return 1;
    case CARG_SKIP:
        if (!s->reply_off)
            s->reply_skip = 1;
        *replies = 0;
        return 1;
    default:
        return 0;
    }
}

/* CLIENT TRACKING ON, SETNAME, PAUSE, UNPAUSE. */
static void track_client(struct session *s, const struct request *req, const struct cmd_words *w)
{
    long long ms;
    if (req->argc >= 3 && w->sub == CSUB_TRACKING && w->arg == CARG_ON)
        s->pushes |= s->resp3;
    if (req->argc == 3 && w->sub == CSUB_SETNAME) {
        free(s->client_name);
        s->client_name = req->argv[2].len ? xmemdup(req->argv[2].p, req->argv[2].len) : NULL;
    } else if (req->argc >= 3 && w->sub == CSUB_PAUSE &&
               slice_to_ll(req->argv[2], &ms) == 0 && ms >= 0) {
        s->cl->paused_until = now_ms_monotonic() + (uint64_t)ms;
    } else if (req->argc == 2 && w->sub == CSUB_UNPAUSE) {
        s->cl->paused_until = 0;
    }
}

/* State the events and the rewrites need: SELECT, CLIENT SETNAME, WATCH,
 * pushes, RESET. Set when forwarded: a refused SELECT leaves a wrong db in an
 * event, nothing else. */
void track_identity(struct session *s, const struct request *req, const struct req_plan *pl)
{
    long long db;
    switch (pl->id) {
    case CID_SELECT:
        if (req->argc == 2 && slice_to_ll(req->argv[1], &db) == 0)
            s->db = (int)db;
        break;
    case CID_SUBSCRIBE:
    case CID_PSUBSCRIBE:
    case CID_SSUBSCRIBE:
        s->pushes |= s->resp3;
        break;
    case CID_CLIENT:
        track_client(s, req, &pl->words);
        break;
    case CID_WATCH:
        if (req->argc >= 2 && !s->in_multi)
            s->watching = 1;
        break;
    case CID_UNWATCH:
        if (req->argc == 1)
            s->watching = 0;
        break;
    case CID_RESET:
        if (req->argc == 1) {
            s->db = 0;
            s->pushes = 0;
            free(s->client_name);
            s->client_name = NULL;
            multi_reset(s);
        }
        break;
    default:
        break;
    }
}

void multi_reset(struct session *s)
{
    s->in_multi = 0;
    s->watching = 0;
    s->multi_dirty = 0;
    s->multi_fix.len = 0;
    s->multi_nfix = 0;
    s->multi_topo.len = 0;
    s->multi_topo_any = 0;
}

int multi_cmd(const struct request *req, enum cmd_id id)
{
    if (req->argc != 1)
        return MT_NONE;
    switch (id) {
    case CID_MULTI:     return MT_MULTI;
    case CID_EXEC:      return MT_EXEC;
    case CID_DISCARD:   return MT_DISCARD;
    default:            return MT_NONE;
    }
}

void track_multi(struct session *s, int mt)
{
    switch (mt) {
    case MT_MULTI:
        s->in_multi = 1;
        break;
    case MT_EXEC:
        if (!s->in_multi)
            break;      /* "EXEC without MULTI": Redis keeps the WATCH */
        if (s->multi_nfix > 0)
            send_internal(s, s->multi_fix.p, s->multi_fix.len, s->multi_nfix);
        multi_reset(s);
        break;
    case MT_DISCARD:
        if (s->in_multi)
            multi_reset(s);
        break;
    default:
        break;
    }
}

/* CLIENT SETINFO LIB-NAME|LIB-VER v, CLIENT NO-EVICT ON|OFF of a shared
 * session: remembered when Redis says +OK (apply_reply()). */
void track_carried(const struct request *req, const struct req_plan *pl, struct pending *p)
{
    const struct cmd_words *w = &pl->words;
    struct slice arg = req->argv[req->argc - 1];
    if (req->argc == 3 && w->sub == CSUB_NO_EVICT) {
        p->what = PW_CARRY;
        p->subkind = w->arg == CARG_ON ? CARRY_NO_EVICT_ON : CARRY_NO_EVICT_OFF;
        return;
    }
    if (req->argc != 4 || w->sub != CSUB_SETINFO ||
        (w->arg != CARG_LIB_NAME && w->arg != CARG_LIB_VER))
        return;
    p->subkind = w->arg == CARG_LIB_NAME ? CARRY_LIB_NAME : CARRY_LIB_VER;
    p->what = PW_CARRY;
    p->local = xmemdup(arg.p, arg.len);
    p->local_len = (uint32_t)arg.len;
    p->local_owned = 1;
}

/* Cluster: what each command queued in the client's MULTI is, so that
 * EXEC's reply can have its topology replies rewritten, and only those. */
void note_queued_topology(struct session *s, const struct request *req, enum cmd_id id)
{
    char kind = (char)cluster_topology_kind(id, req->argc, req->argv);
    sbuf_add(&s->multi_topo, &kind, 1);
    s->multi_topo_any |= kind != TOPO_NONE;
}
