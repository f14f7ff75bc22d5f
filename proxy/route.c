/*
 * route: ttlguard as one standalone-looking Redis in front of a Redis
 * Cluster (cluster = route).
 *
 * A routed session is a shared session (mux.c) whose requests each go to
 * the shared connection of the node that serves their keys' slot (the slot
 * map: cluster.c). Rules, events and replies are the session's own code:
 * route.c only picks the node, and puts the replies back in request order.
 *
 *   client ─▶ session: handle_request ─▶ route_pick: slot ─▶ node (s->be.t)
 *                │ judge, rewrite (every command of a rewrite goes to that node)
 *                └ route_commit: one unit per request ──▶ mux of node A ─▶ A
 *                                 (its bytes kept for a resend)  mux of node B ─▶ B
 *
 *   mux A ─┐ route_reply(unit): the head unit's reply goes to session_reply()
 *   mux B ─┘   as it arrives; a later unit's is parked (copied, whole replies)
 *              and given to session_reply() when its unit reaches the head, so
 *              the session sees its replies in request order, as from one server
 *
 * A connection answers in order, so the FIFO of each shared connection
 * names the unit each reply is for (mux.c's FE_ROUTED entries: a tag that
 * counts up with the session's units). A unit that gets several replies (the proxy's MULTI form, probes,
 * follow-ups) keeps all of them until the last is in: a redirect may come
 * after the first.
 *
 * Redirects are followed here and never reach the client: -MOVED (the slot
 * map is updated at once and the topology read again soon), -ASK (ASKING,
 * then the request, on the named node's connection) and -TRYAGAIN (after
 * the topology read it starts: 0.2 s, at most a second). -CLUSTERDOWN, which
 * every node answers while a failed primary's replica is not promoted yet,
 * goes the way of -TRYAGAIN, and so does a unit whose node cannot be reached
 * (its connection refused: nothing was sent) or whose slot has no owner. A
 * unit is sent again, whole, only when none of its replies shows that
 * anything ran (all are errors, or the proxy's MULTI's +OK): MAX_HOPS times
 * where a redirect names a node, for MAX_WAIT_NS where it waits for a
 * topology read; then the client gets what the cluster said (reply.c hides a
 * node address in it), or why the node cannot be reached. A node's connection
 * lost after it was up fails only the units in flight there (they may have
 * run: each gets an error, as a cluster client's connection to that node
 * drops); the session goes on with the other nodes.
 *
 * A request that goes as several (route_merge.h: MGET, MSET, DEL, UNLINK,
 * EXISTS, TOUCH over several slots, split by slot; DBSIZE, KEYS, FLUSHALL,
 * RANDOMKEY, INFO, CONFIG SET, SCRIPT LOAD, CLIENT PAUSE... to every
 * primary) is one pending entry to the session and one unit per part here,
 * each sent and redirected on its own; the session gets their merged reply
 * once the last part's is in. SCRIPT KILL and FUNCTION KILL go to every
 * primary too, each over a connection of its own (route_kill.h): the busy
 * node reads no more from the shared connection its script came on. An MSET under rules
 * too: the session judges it whole (its events, its verdict; a rule's
 * rejection refuses all of it, nothing sent), then route_rewrite() makes
 * each part what the rules send for its keys alone (the proxy's MULTI form
 * where a rule gives keys a TTL: the part's reply is EXEC's first element).
 * Parts are not one transaction: a part that fails (its node down) leaves
 * the others written, and the client gets the error. SCAN goes the same
 * way as one part: its cursor names a primary and that node's own cursor
 * (route_scan.h), so each call asks one primary and the client's scan
 * walks them one after the other.
 *
 * What one connection that others share cannot carry goes over a pin, a
 * connection of the session's own to one node (route_pin.c), as a cluster
 * client opens one: MULTI ... EXEC on the node of its first key's slot
 * (keys of another node get -CROSSSLOT where that node would say -MOVED,
 * and EXEC aborts), WATCH on the watched key's node, a blocking command
 * (BLPOP..., XREAD ... BLOCK) on its key's node. Its requests are units
 * like any other; only a transaction's redirects are not followed (the
 * node flagged it), a blocking command's move the pin.
 *
 * Pub/sub keeps its meaning. A cluster sends PUBLISH to every node, so a
 * subscriber leaves routing for a connection of its own to one node (the
 * way a shared session leaves for pub/sub: session.c, SM_OWN, s->route
 * kept), where mirror.c and reply.c do what they do for any subscriber
 * (RESP2 subscriber mode, RESP3 pushes):
 *
 *   SUBSCRIBE, PSUBSCRIBE ───▶ own connection to SLOT_CLASSIC's owner (one node
 *                              for everyone: PUBLISH and PUBSUB CHANNELS|NUMSUB|
 *                              NUMPAT go there too, their counts are the proxy's)
 *   SSUBSCRIBE ──────────────▶ own connection to its channels' slot's owner
 *   a later subscription elsewhere (SSUBSCRIBE of another node's slot, SUBSCRIBE
 *   on an SSUBSCRIBE's node that is not slot 0's): an error; one connection each
 *   none left, owed nothing ─▶ routed again (route_subscribed(): ROUTE_BACK)
 *
 * A RESP2 subscriber runs only (P|S)(UN)SUBSCRIBE, PING, QUIT, RESET: the
 * rest gets Redis's own refusal (from the node, or here when the node would
 * say -MOVED first). A RESP3 subscriber's other commands go to its node
 * when that node answers them as the cluster would (keys of its slots, no
 * whole keyspace), else an error says so. A subscriber's node that goes
 * away closes its client, as Redis going away does.
 *
 * CLIENT is about the proxy's own clients, as from one server: the proxy
 * answers it (route_client.c: names, ids, CLIENT LIST and KILL over its
 * sessions, CLIENT REPLY by dropping the nodes' replies itself, UNBLOCK
 * sent to the node a client is blocked on); CLIENT PAUSE and UNPAUSE go to
 * every primary, SETINFO and NO-EVICT are carried.
 *
 * What route.c does not build yet is refused before anything is sent, with
 * an error that says so (route_pick(): MONITOR, CLIENT TRACKING and the
 * rest of client-side caching, CLIENT NO-TOUCH, CLIENT inside MULTI, AUTH,
 * HELLO with AUTH or with more options than SETNAME, RESET, WAIT, WAITAOF,
 * a subscription after WATCH, and inside MULTI HELLO, pub/sub and what
 * would cover every primary); other keys in several slots get the
 * cluster's own -CROSSSLOT.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cluster.h"
#include "commands.h"
#include "control.h"
#include "identify.h"
#include "login.h"
#include "route.h"
#include "route_client.h"
#include "route_merge.h"
#include "route_kill.h"
#include "route_pin.h"
#include "route_scan.h"
#include "session_int.h"
#include "util.h"

#define MAX_HOPS        5               /* redirects followed for one request */
#define MAX_WAIT_NS     3000000000ull   /* a request waits this long at most for the cluster
                                           to serve its slot (-TRYAGAIN, -CLUSTERDOWN, its
                                           node unreachable): a failover's election ends
                                           about a second after the failure is agreed */
#define POOL            32              /* buffers a session keeps for its next units */
#define POOL_MAX_CAP    4096            /* ...each at most this big; freed when idle */
#define BUF_FIRST       256             /* a new buffer's first size */
#define SLOT_NONE       (-1)            /* the request names no key */
#define SLOT_CROSS      (-2)            /* ...keys of several slots */
#define SLOT_UNKNOWN    (-3)            /* ...keys the proxy cannot find */
#define SLOT_CLASSIC    0               /* SUBSCRIBE, PSUBSCRIBE and PUBSUB CHANNELS|NUMSUB|
                                           NUMPAT go to this slot's owner: one node for every
                                           session, so that PUBSUB counts what clients of the
                                           proxy subscribed */

const char route_crossslot[] = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
const char route_unserved[] = "-CLUSTERDOWN Hash slot not served\r\n";

/* Does a request go over the session's pin? */
enum pinned {
    PIN_NOT,
    PIN_STAYS,      /* yes: its redirects reach the client (a transaction's, or one a WATCH
                       holds: the node keeps their state, the request cannot go elsewhere) */
    PIN_FOLLOWS,    /* yes, a blocking command alone on it: nothing ran where a redirect
                       came from, the pin follows a -MOVED or -ASK to a known node at once
                       (route_pin_retarget()); what would wait reaches the client */
};

/* One request sent to a node, until its replies went to the session. */
struct unit {
    uint32_t tag;
    int slot;                   /* SLOT_NONE or its keys' slot */
    int owed;                   /* replies still owed by the node's connection */
    int total;                  /* replies the request gets (owed again when resent) */
    unsigned char hops;         /* redirects followed to the node they name */
    uint64_t waited;            /* loop_now_ns when it first waited for the cluster, or 0 */
    unsigned char holds;        /* several replies: kept until the last is in */
    unsigned char asking;       /* the next reply is to the proxy's ASKING: dropped */
    unsigned char live;         /* the reply in progress goes to the session as it comes */
    unsigned char redirect;     /* enum redirect_kind of the first redirect among its replies */
    unsigned char waiting;      /* sent again after the next topology read */
    unsigned char pinned;       /* enum pinned: sent over the session's pin (route_pin.h) */
    unsigned char side;         /* sent over a connection of its own (route_kill.h) */
    struct target *to;          /* where the redirect sends it (NULL: the slot's owner then) */
    struct sbuf req;            /* what was sent, for a resend */
    struct sbuf park;           /* whole replies not given yet: [type][size_t len][bytes]... */
    size_t part;                /* park offset of the reply being parked */
    /* One part of a request sent as several (route_merge.h): */
    unsigned char merge;        /* on its first part: enum merge of their replies */
    int parts;                  /* ...how many units it is, this one included */
    int nkeys;                  /* ...the client's key count (MERGE_ORDERED) */
    int *pos;                   /* the client's key index of each key of this part */
    int npos;
    int exec_first;             /* ...sent as the proxy's MULTI form: replies before EXEC's */
    struct scan_step scan;      /* on its first part, MERGE_SCAN: the node it scans */
};

struct route_state {
    struct session *s;
    struct ring units;          /* struct unit, in request order */
    uint32_t head;              /* tag of units[0] (the next unit's when empty) */
    uint32_t next;              /* tag of the next unit */
    struct sbuf cur;            /* the bytes of the request being handled */
    int slot;                   /* ...and its slot */
    unsigned char merge;        /* ...enum merge when it goes as several requests */
    unsigned char pinned;       /* ...enum pinned */
    unsigned char unowned;      /* ...its slot has no owner in the slot map (its primary
                                   failed): it waits for a topology read */
    int width;                  /* ...arguments per key (split by slot) */
    struct merge_part *split;   /* ...its parts, each rewritten by the rules (route_rewrite()) */
    int nsplit;
    struct scan_step scan;      /* ...SCAN: the primary its cursor points at */
    struct target *scan_to;     /* ...that primary */
    uint64_t scan_node;         /* ...and the node cursor it gets */
    unsigned hint;              /* requests without keys go to this slot's owner */
    int starting;               /* its client is not read until commands and slots are known */
    size_t parked;              /* bytes kept in units: at most max_buffer */
    struct cluster_wait wait;   /* units waiting for a topology read */
    struct sbuf spare[POOL];    /* buffers of units gone, for the next ones (no malloc
                                   per request) */
    int nspare;
};

/* ---- slots ---------------------------------------------------------------------- */

/* CRC16-CCITT (XMODEM), as Redis Cluster hashes keys (cluster.c
 * keyHashSlot), a byte at a time from a table made on first use. */
static uint16_t crc16(const char *p, size_t n)
{
    static uint16_t table[256];
    if (table[1] == 0) {
        for (int i = 0; i < 256; i++) {
            uint16_t crc = (uint16_t)(i << 8);
            for (int b = 0; b < 8; b++)
                crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
            table[i] = crc;
        }
    }
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++)
        crc = (uint16_t)((crc << 8) ^ table[((crc >> 8) ^ (unsigned char)p[i]) & 0xff]);
    return crc;
}

/* The key's slot: only the part between the first '{' and the next '}'
 * counts when it is not empty (a hash tag). */
static int key_slot(struct slice k)
{
    const char *open = memchr(k.p, '{', k.len);
    if (open != NULL) {
        size_t rest = k.len - (size_t)(open + 1 - k.p);
        const char *close = memchr(open + 1, '}', rest);
        if (close != NULL && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & (CLUSTER_SLOTS - 1);
    }
    return crc16(k.p, k.len) & (CLUSTER_SLOTS - 1);
}

/* Fold one more key into *slot: SLOT_CROSS once two differ. */
static void fold_key(int *slot, struct slice k)
{
    int ks = key_slot(k);
    if (*slot == SLOT_NONE)
        *slot = ks;
    else if (*slot >= 0 && *slot != ks)
        *slot = SLOT_CROSS;
}

/* Commands whose keys follow a count (movablekeys) and that the table has
 * no row for: the count's index; the keys follow it. */
static int numkeys_index(const struct cmd_arity *a)
{
    static const struct { const char *name; int at; } rows[] = {
        { "zunion", 1 }, { "zinter", 1 }, { "zdiff", 1 }, { "zintercard", 1 },
        { "sintercard", 1 }, { "lmpop", 1 }, { "zmpop", 1 }, { "blmpop", 2 }, { "bzmpop", 2 },
        { "eval", 2 }, { "evalsha", 2 },
        { "eval_ro", 2 }, { "evalsha_ro", 2 }, { "fcall", 2 }, { "fcall_ro", 2 },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (strlen(rows[i].name) == a->len && memcmp(rows[i].name, a->name, a->len) == 0)
            return rows[i].at;
    return -1;
}

/* The slot of the keys COMMAND's entry a finds in argv. */
static int arity_slot(const struct cmd_arity *a, int argc, const struct slice *argv)
{
    int slot = SLOT_NONE, at = a->movable ? numkeys_index(a) : -1;
    long long nk;
    if (at > 0) {
        if (at >= argc || slice_to_ll(argv[at], &nk) != 0 || nk < 0 || nk > argc - at - 1)
            return SLOT_NONE;           /* the node refuses it: any node will do */
        for (int i = at + 1; i <= at + nk; i++)
            fold_key(&slot, argv[i]);
        return slot;
    }
    if (a->movable && a->first <= 0)
        return SLOT_UNKNOWN;
    int last = a->last < 0 ? argc + a->last : a->last, step = a->step > 0 ? a->step : 1;
    for (int i = a->first; a->first > 0 && i <= last && i < argc; i += step)
        fold_key(&slot, argv[i]);
    return slot;
}

/* COMMAND's entry for the request's name: a binary search by name, kept
 * per command (cmd_info) in a small cache whose hits are checked against
 * the name (a new command set may reuse an address). */
static const struct cmd_arity *arity_of(const struct cmd_arities *t, const struct cmd_info *ci,
                                        struct slice name)
{
    static struct { const struct cmd_info *ci; const struct cmd_arity *a; } cache[64];
    unsigned h = (unsigned)(((uintptr_t)ci >> 4) & 63);
    const struct cmd_arity *a = cache[h].a;
    if (ci != NULL && cache[h].ci == ci && a >= t->v && a < t->v + t->n && a->len == name.len &&
        strncasecmp(a->name, name.p, name.len) == 0)
        return a;
    a = arities_find(t, name.p, name.len);
    if (ci != NULL) {
        cache[h].ci = ci;
        cache[h].a = a;
    }
    return a;
}

/* Keys COMMAND does not name: DEBUG OBJECT KEY and DEBUG DIGEST-VALUE
 * KEY... ask the key's node about it. The slot, or SLOT_NONE. */
static int debug_key_slot(const struct request *req)
{
    int slot = SLOT_NONE;
    if (req->argc < 3 || !slice_eq_nocase(req->argv[0], "debug"))
        return SLOT_NONE;
    if (req->argc == 3 && slice_eq_nocase(req->argv[1], "object"))
        fold_key(&slot, req->argv[2]);
    else if (slice_eq_nocase(req->argv[1], "digest-value"))
        for (int i = 2; i < req->argc; i++)
            fold_key(&slot, req->argv[i]);
    return slot;
}

/* COMMAND's entry for the request: its subcommand's, if it has one. */
static const struct cmd_arity *request_arity(const struct request *req,
                                             const struct req_plan *pl)
{
    const struct cmd_arities *t = &control_login()->cmds;
    const struct cmd_arity *a = arity_of(t, pl->ci, req->argv[0]);
    if (a != NULL && a->container && req->argc >= 2) {
        const struct cmd_arity *sub = arities_find_sub(t, a, req->argv[1].p, req->argv[1].len);
        if (sub != NULL)
            a = sub;
    }
    return a;
}

/* PUBSUB CHANNELS, NUMSUB and NUMPAT go to SLOT_CLASSIC's node, where the
 * classic subscriptions are (and PUBLISH: request_slot()), so that their
 * counts are the proxy's clients', as one server's would be. SHARDNUMSUB
 * asks its channels' slot; the others name none (SHARDCHANNELS goes to
 * every primary). */
static int pubsub_slot(const struct request *req)
{
    int slot = SLOT_NONE;
    if (req->argc < 2)
        return SLOT_NONE;
    struct slice w = req->argv[1];
    if (slice_eq_nocase(w, "channels") || slice_eq_nocase(w, "numsub") ||
        slice_eq_nocase(w, "numpat"))
        return SLOT_CLASSIC;
    for (int i = 2; i < req->argc && slice_eq_nocase(w, "shardnumsub"); i++)
        fold_key(&slot, req->argv[i]);
    return slot;
}

/* The slot of a request's keys: the table's row finds them where it has
 * one (writes, scripts), else COMMAND's key range of the server. PUBLISH,
 * which any node sends to every node, goes where SUBSCRIBE does: its
 * count of receivers is then the proxy's clients'. */
static int request_slot(const struct request *req, const struct req_plan *pl)
{
    static struct key_ref *keys;
    static int cap;
    if (slice_eq_nocase(req->argv[0], "publish"))
        return SLOT_CLASSIC;
    if (slice_eq_nocase(req->argv[0], "pubsub"))
        return pubsub_slot(req);
    if (pl->ci != NULL && pl->ci->row != NULL) {
        if (req->argc > cap) {
            cap = req->argc * 2;
            keys = xrealloc(keys, (size_t)cap * sizeof *keys);
        }
        int n = command_key_args(pl->ci, req->argc, req->argv, keys), slot = SLOT_NONE;
        for (int i = 0; i < n; i++)
            fold_key(&slot, req->argv[keys[i].argi]);
        if (n > 0)
            return slot;
    }
    const struct cmd_arity *a = request_arity(req, pl);
    if (a == NULL)
        return SLOT_NONE;               /* a command the node does not know: it says so */
    int slot = arity_slot(a, req->argc, req->argv);
    return slot == SLOT_NONE ? debug_key_slot(req) : slot;
}

/* ---- what route.c answers itself ------------------------------------------------- */

static int is_name(const struct request *req, const char *name)
{
    return slice_eq_nocase(req->argv[0], name);
}

/* Commands without keys that must cover every node to mean what they mean
 * on one server, and route.c does not send there (route_merge.h sends the
 * others): WAIT and WAITAOF (which writes? the client's went over several
 * connections). The rest that names no key goes to one primary, whose
 * answer is the cluster's: an arity or syntax error, SWAPDB's refusal,
 * FUNCTION LIST of what was loaded on every primary. */
static int waits_on_writes(const struct request *req)
{
    return is_name(req, "wait") || is_name(req, "waitaof");
}

void route_answer(struct session *s, const struct request *req, const struct req_plan *pl,
                  const char *p, size_t n)
{
    struct req_plan own = *pl;
    plan_replies(s, req, &own);
    if (own.replies)
        queue_local(s, p, n, 0);
}

/* Our own reply to the request, in its place (fmt: a printf format with
 * the command's name for %s). */
static void answer(struct session *s, const char *fmt, const struct request *req,
                   const struct req_plan *pl)
{
    char line[256], name[64];
    size_t n = req->argv[0].len < sizeof name - 1 ? req->argv[0].len : sizeof name - 1;
    for (size_t i = 0; i < n; i++) {
        char c = req->argv[0].p[i];
        name[i] = c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
    }
    name[n] = '\0';
    int len = snprintf(line, sizeof line, fmt, name);
    route_answer(s, req, pl, line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
}

/* SELECT as a cluster node answers it: 0 only. */
static const char *select_answer(const struct request *req)
{
    long long db;
    if (req->argc != 2)
        return "-ERR wrong number of arguments for 'select' command\r\n";
    if (slice_to_ll(req->argv[1], &db) != 0 || db < INT32_MIN || db > INT32_MAX)
        return "-ERR value is not an integer or out of range\r\n";
    return db == 0 ? "+OK\r\n" : "-ERR SELECT is not allowed in cluster mode\r\n";
}

/* EVAL, EVALSHA, FCALL (and their _RO forms) pin a shared session (a slow
 * script holds the connection); a routed session sends them to the node of
 * their keys, as a cluster client does: the proxy's own rewrites use them. */
static int script(const struct req_plan *pl)
{
    return pl->ci->row != NULL && (command_flags(pl->ci->row) & (CMD_SCRIPT | CMD_BLOCKING)) ==
                                  CMD_SCRIPT;
}

/* A cluster client's own commands. */
static int cluster_word(const struct request *req)
{
    return is_name(req, "readonly") || is_name(req, "readwrite") || is_name(req, "asking");
}

/* As a standalone server answers them: ttlguard is one server here. */
static const char no_cluster[] = "-ERR This instance has cluster support disabled\r\n";

/* The reply route.c gives instead of sending the request (a printf format
 * with the command's name for %s), or NULL: what its command says. */
static const char *refusal(struct session *s, const struct request *req,
                           const struct req_plan *pl, int needs_own)
{
    if (pl->id == CID_SELECT && !s->in_multi)
        return select_answer(req);      /* inside MULTI: queued, the node says at EXEC */
    if (pl->id == CID_CLUSTER)
        return no_cluster;
    if (!mux_shareable(s->ctx))
        return "-ERR ttlguard cluster = route: the cluster asks clients to log in; set "
               "backend_password (and backend_username) in [proxy]\r\n";
    if (pl->id == CID_HELLO && req->argc <= 2 && (s->in_multi || s->watching))
        return "-ERR ttlguard cluster = route does not support %s inside MULTI or after "
               "WATCH yet\r\n";        /* the pin that holds them keeps its protocol */
    if (pl->id == CID_HELLO && req->argc <= 2)
        return NULL;                    /* HELLO [2|3]: carried, as on a shared connection */
    if (needs_own && pl->ci != NULL && !script(pl))
        return cluster_word(req) ? no_cluster :
               "-ERR ttlguard cluster = route does not support %s yet\r\n";
    return NULL;
}

/* ...and for a request that names no key. */
static const char *keyless_refusal(const struct request *req)
{
    if (cluster_word(req))
        return no_cluster;
    if (waits_on_writes(req))
        return "-ERR ttlguard cluster = route does not support %s yet (it must cover "
               "every primary)\r\n";
    return NULL;
}

#define MERGE_FAIL 0xff     /* it would cover every primary, and one is down */

/* The primaries that serve slots, into a list that holds them all (each
 * serves one slot at least); their count, or -1 while one is down. */
static int primaries(struct target ***out)
{
    static struct target *all[CLUSTER_SLOTS];
    const char *down;
    *out = all;
    return cluster_primaries(all, CLUSTER_SLOTS, &down);
}

/* Does the request go as several (split by slot, or to every primary)? Its
 * merge, MERGE_NONE, or MERGE_FAIL. Under rules too: an MSET is judged
 * whole, then each part rewritten alone (route_rewrite()). */
static int several(struct session *s, const struct request *req)
{
    struct route_state *r = s->route;
    struct target **t;
    enum merge m = MERGE_NONE;
    if (r->slot == SLOT_CROSS) {
        m = merge_split_kind(&req->argv[0], &r->width);
        if (m != MERGE_NONE && (req->argc - 1) % r->width != 0) {
            r->slot = SLOT_NONE;        /* any node says what is wrong with it */
            return MERGE_NONE;
        }
        return m;
    }
    if (r->slot == SLOT_NONE)
        m = merge_fanout_kind(req->argc, req->argv);
    return m != MERGE_NONE && primaries(&t) <= 0 ? MERGE_FAIL : m;
}

/* The node the request goes to becomes s's target (events name it, its
 * requests are counted there). */
static void set_target(struct session *s, struct target *t)
{
    s->be.t->sessions--;
    t->sessions++;
    s->be.t = t;
}

/* SCAN: the primary its cursor points at and the node cursor that one
 * gets (route_scan.h), or what route.c answers itself. */
static const char *scan_plan(struct route_state *r, const struct request *req)
{
    struct scan_cursor c;
    struct target *const *t;
    const unsigned *lowest;
    if (scan_cursor_parse(req->argv[1], &c) != 0)
        return "-ERR invalid cursor\r\n";
    int n = cluster_slot_order(&t, &lowest), i = scan_pick(lowest, n, c.pos);
    if (i < 0)                          /* after the last primary: the scan is over */
        return "*2\r\n$1\r\n0\r\n*0\r\n";
    r->scan = (struct scan_step){ lowest[i], scan_check(t[i]->name),
                                  i + 1 < n ? lowest[i] + 1 : 0 };
    r->scan_to = t[i];
    r->scan_node = scan_resume(&c, &r->scan);
    return NULL;
}

/* What route.c answers itself once the request's slot is known, or NULL. */
static const char *slot_refusal(struct session *s, const struct request *req)
{
    struct route_state *r = s->route;
    r->merge = (unsigned char)several(s, req);
    if (r->merge == MERGE_FAIL)
        return "-CLUSTERDOWN The cluster is down\r\n";
    if (r->merge == MERGE_SCAN)
        return scan_plan(r, req);
    if (r->merge != MERGE_NONE)
        return NULL;
    if (r->slot == SLOT_NONE)
        return keyless_refusal(req);
    if (r->slot == SLOT_CROSS)
        return route_crossslot;
    if (r->slot == SLOT_UNKNOWN)
        return "-ERR ttlguard cluster = route cannot find the keys of %s\r\n";
    return NULL;
}

/* ---- rules over several slots ---------------------------------------------------- */

/* The parts route_rewrite() made, unless commit_parts() took them: the
 * request they were for did not go as several after all. */
static void drop_split(struct route_state *r)
{
    merge_parts_free(r->split, r->nsplit);
    r->split = NULL;
    r->nsplit = 0;
}

/* Part p's arguments (its keys, `width` arguments each, as merge_split()
 * grouped them) into argv; returns how many. */
static int part_argv(const struct request *req, int width, const struct merge_part *p,
                     struct slice *argv)
{
    int argc = 0;
    argv[argc++] = req->argv[0];
    for (int j = 0; j < p->npos; j++)
        for (int w = 0; w < width; w++)
            argv[argc++] = req->argv[1 + p->pos[j] * width + w];
    return argc;
}

void route_rewrite(struct session *s, const struct request *req, const struct policy_ctx *ctx,
                   struct rewrite *rw)
{
    static struct rewrite part;
    struct route_state *r = s->route;
    if (r->slot != SLOT_CROSS || r->merge == MERGE_NONE)
        return;                         /* it goes to one node, rewritten as it is */
    struct slice *argv = xmalloc((size_t)req->argc * sizeof *argv);
    r->split = merge_split(req->argc, req->argv, r->width, key_slot, &r->nsplit);
    for (int i = 0; i < r->nsplit; i++) {
        struct merge_part *p = &r->split[i];
        struct request one = { .argc = part_argv(req, r->width, p, argv), .argv = argv,
                               .inline_cmd = 1 };
        if (policy_rewrite_part(s->ctx->cfg, &one, ctx, &part) == V_FORWARD)
            continue;                   /* no rule rewrites its keys: it goes as it is */
        /* What the rules build for MSET on a connection the proxy may wrap in
         * MULTI (a routed request outside a pin): no probe, no follow-up. */
        ASSERT(part.nprobe == 0 && part.followup.len == 0 && part.orig_args.len == 0);
        p->req.len = 0;
        sbuf_add(&p->req, part.pre.p, part.pre.len);
        sbuf_add(&p->req, part.tail.p, part.tail.len);
        p->exec_first = part.exec_first;
    }
    free(argv);
    policy_rewrite_reset(rw);           /* the session sends the request as it is, counted
                                           rewritten, for its one reply: commit_parts() */
    sbuf_add(&rw->pre, req->raw.p, req->raw.len);
}

/* ---- what goes over the session's pin (route_pin.h) ------------------------------ */

#define PIN_NONE        (-1)    /* routed */
#define PIN_ANY         (-2)    /* routed, though on one server it needs a connection of its
                                   own: any node answers it as that server would */

/* XREAD and XREADGROUP block only with BLOCK, among the options before
 * STREAMS (XREADGROUP's from after GROUP group consumer). */
static int stream_read_blocks(const struct request *req, int group)
{
    for (int i = group ? 4 : 1; i < req->argc && !slice_eq_nocase(req->argv[i], "streams"); i++)
        if (slice_eq_nocase(req->argv[i], "block"))
            return 1;
    return 0;
}

/* A command that may block on its keys: PT_BLOCK; PIN_ANY for XREAD and
 * XREADGROUP without BLOCK; PIN_NONE for the others (WAIT, WAITAOF name no
 * key: no node of its own to wait on, they stay refused). */
static int blocking_use(const struct request *req, const struct req_plan *pl)
{
    if (pl->ci == NULL || pl->ci->row == NULL ||
        (command_flags(pl->ci->row) & (CMD_BLOCKING | CMD_SCRIPT)) != CMD_BLOCKING)
        return PIN_NONE;
    const struct cmd_arity *a = arity_of(&control_login()->cmds, pl->ci, req->argv[0]);
    if (a == NULL || (a->first <= 0 && !a->movable))
        return PIN_NONE;
    int group = is_name(req, "xreadgroup");
    if ((group || is_name(req, "xread")) && !stream_read_blocks(req, group))
        return PIN_ANY;
    return PT_BLOCK;
}

/* Does the request go over the session's pin (enum pin_take), or is it
 * routed (PIN_NONE, PIN_ANY)? Everything inside MULTI, MULTI and WATCH,
 * commands that block; EXEC, DISCARD, UNWATCH where a pin is (else any node
 * answers them: an error, or +OK). */
static int pin_use(const struct session *s, const struct request *req, const struct req_plan *pl)
{
    if (s->in_multi)
        return PT_QUEUED;
    switch (pl->id) {
    case CID_MULTI:
        return multi_cmd(req, pl->id) == MT_MULTI ? PT_MULTI : PIN_ANY;
    case CID_WATCH:
        return req->argc >= 2 ? PT_WATCH : PIN_ANY;
    case CID_EXEC:
    case CID_DISCARD:
    case CID_UNWATCH:
        return s->pin != NULL ? PT_OTHER : PIN_ANY;
    default:
        return blocking_use(req, pl);
    }
}

/* Inside MULTI, what route.c does not build yet: what needs a connection of
 * its own, but for what the node answers as it answers any transaction's
 * client (MULTI, EXEC, WATCH..., SELECT and blocking commands: queued, run
 * at EXEC). */
static int queued_needs_own(const struct request *req, const struct req_plan *pl,
                            int needs_own)
{
    switch (pl->id) {
    case CID_MULTI: case CID_EXEC: case CID_DISCARD: case CID_WATCH: case CID_UNWATCH:
    case CID_SELECT:
        return 0;
    default:
        return needs_own && blocking_use(req, pl) != PT_BLOCK;
    }
}

/* What a node answers itself about the keys of a request over the pin:
 * keys of several slots, or none where it must cover every primary (one
 * node's DBSIZE or FLUSHALL inside MULTI would not mean what it says).
 * CONFIG SET, DEBUG RELOAD, BGSAVE..., which go to every primary outside a
 * transaction, are the transaction's node's inside one: where it runs. */
static const char *pinned_slot_refusal(struct session *s, const struct request *req)
{
    struct route_state *r = s->route;
    if (r->slot == SLOT_CROSS)
        return route_crossslot;
    const char *no = slot_refusal(s, req);
    if (no == NULL && r->merge != MERGE_NONE && !merge_fanout_server(req->argc, req->argv))
        no = "-ERR ttlguard cluster = route does not support %s inside MULTI yet (it must "
             "cover every primary)\r\n";
    return no;
}

/* A request over the pin: refused as a cluster node refuses it, else where
 * route_pin_take() says. A refusal inside MULTI makes EXEC abort, as a
 * node's -CROSSSLOT does (it flags the transaction). */
static int pick_pinned(struct session *s, const struct request *req, const struct req_plan *pl,
                       enum pin_take how, int needs_own)
{
    struct route_state *r = s->route;
    struct target *t = NULL;
    int rc = 1;
    const char *no = refusal(s, req, pl, how == PT_QUEUED && queued_needs_own(req, pl, needs_own));
    if (no == NULL) {
        r->slot = request_slot(req, pl);
        no = pinned_slot_refusal(s, req);
    }
    if (no == NULL)
        rc = route_pin_take(s, how, r->slot, cluster_any_primary(r->hint), &t, &no);
    r->merge = MERGE_NONE;
    if (rc == 0) {
        r->pinned = how == PT_BLOCK && !s->watching ? PIN_FOLLOWS : PIN_STAYS;
        set_target(s, t);
    } else if (rc == 1) {
        s->multi_dirty |= s->in_multi;
        answer(s, no, req, pl);
    }
    return rc;
}

/* ---- pub/sub: a subscriber's connection of its own ------------------------------ */

static const char sub_limit[] = "-ERR ttlguard cluster = route: a subscribed connection stays "
                                "on its subscriptions' node; %s for another node's slot or "
                                "every primary is not supported there yet\r\n";

static int subscription(enum cmd_id id)
{
    switch (id) {
    case CID_SUBSCRIBE: case CID_PSUBSCRIBE: case CID_SSUBSCRIBE:
    case CID_UNSUBSCRIBE: case CID_PUNSUBSCRIBE: case CID_SUNSUBSCRIBE:
        return 1;
    default:
        return 0;
    }
}

/* The node of a subscription: SSUBSCRIBE's channels' slot's owner (all in
 * one slot, as a cluster wants them), else SLOT_CLASSIC's. */
static const char *sub_node(const struct request *req, const struct req_plan *pl,
                            struct target **t)
{
    int slot = pl->id == CID_SSUBSCRIBE ? request_slot(req, pl) : SLOT_CLASSIC;
    if (slot == SLOT_CROSS)
        return route_crossslot;
    *t = cluster_slot_target(slot >= 0 ? slot : SLOT_CLASSIC);
    return *t == NULL ? route_unserved : NULL;
}

/* (P|S)(UN)SUBSCRIBE leave routing: the session goes on over a connection
 * of its own to its subscriptions' node (session.c, as a shared session
 * that subscribes) until it has none left. */
static int pick_subscriber(struct session *s, const struct request *req,
                           const struct req_plan *pl)
{
    struct target *t = NULL;
    const char *no = refusal(s, req, pl, 0);
    if (no == NULL && s->watching)
        no = "-ERR ttlguard cluster = route does not support %s after WATCH yet\r\n";
    if (no == NULL)
        no = sub_node(req, pl, &t);
    if (no != NULL) {
        answer(s, no, req, pl);
        return 1;
    }
    set_target(s, t);
    return ROUTE_OWN;
}

/* A RESP3 subscriber's other commands (a RESP2 one runs none): they go to
 * its subscriptions' node when that node answers them as the cluster would
 * (keys of its slots, or none and not every primary's), else sub_limit. */
static const char *subscribed_refusal(struct session *s, const struct request *req,
                                      const struct req_plan *pl, int needs_own)
{
    struct route_state *r = s->route;
    const char *no = refusal(s, req, pl, 0);
    if (no != NULL || (pl->id == CID_HELLO && req->argc <= 2))
        return no;
    if (needs_own && pl->ci != NULL && !script(pl))
        return sub_limit;
    r->slot = request_slot(req, pl);
    no = slot_refusal(s, req);
    if (no == NULL && (r->merge != MERGE_NONE ||
                       (r->slot >= 0 && cluster_slot_target(r->slot) != s->be.t)))
        no = sub_limit;
    r->merge = MERGE_NONE;
    return no;
}

int route_sub_refused(struct session *s, const struct request *req, const struct req_plan *pl)
{
    char line[256];
    int slot = request_slot(req, pl);
    const struct cmd_arity *a = request_arity(req, pl);
    if (slot == SLOT_NONE || slot == SLOT_UNKNOWN || a == NULL ||
        (slot >= 0 && cluster_slot_target(slot) == s->be.t))
        return 0;
    int n = snprintf(line, sizeof line, "-ERR Can't execute '%.*s': only (P|S)SUBSCRIBE / "
                     "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
                     (int)(a->len < 64 ? a->len : 64), a->name);
    queue_local(s, line, (size_t)n, 0);
    return 1;
}

int route_subscribed(struct session *s, const struct request *req, const struct req_plan *pl,
                     int needs_own)
{
    struct target *t = NULL;
    const char *no = NULL;
    if (!subscription(pl->id) && (s->nchan + s->npat + s->nshard == 0 || s->sub_unsure > 0)) {
        emit_locals(s);                 /* subscriptions unsure: wait until they are known */
        return s->q.len > 0 ? ROUTE_WAIT : ROUTE_BACK;
    }
    switch (pl->id) {
    case CID_SUBSCRIBE: case CID_PSUBSCRIBE: case CID_SSUBSCRIBE:
        no = sub_node(req, pl, &t);
        if (no == NULL && t != s->be.t)
            no = "-ERR ttlguard cluster = route does not support %s yet on another node than "
                 "the connection's subscriptions' (SUBSCRIBE: slot 0's, SSUBSCRIBE: its "
                 "channels' slot's): use another connection\r\n";
        break;
    case CID_UNSUBSCRIBE: case CID_PUNSUBSCRIBE: case CID_SUNSUBSCRIBE:
    case CID_PING: case CID_QUIT: case CID_RESET:
        break;
    default:
        no = subscribed_refusal(s, req, pl, needs_own);
    }
    if (no == NULL)
        return 0;
    answer(s, no, req, pl);
    return 1;
}

int route_pick(struct session *s, const struct request *req, const struct req_plan *pl,
               int needs_own)
{
    struct route_state *r = s->route;
    r->pinned = PIN_NOT;
    r->unowned = 0;
    drop_split(r);
    if (route_pin_blocked(s))
        return ROUTE_BLOCKED;
    if (pl->id == CID_QUIT) {           /* as a server: +OK, nothing after it runs, closed */
        route_answer(s, req, pl, "+OK\r\n", 5);
        s->close_after_flush = 1;
        return 1;
    }
    int how = pin_use(s, req, pl);
    if (how >= 0)
        return pick_pinned(s, req, pl, (enum pin_take)how, needs_own);
    if (pl->id == CID_CLIENT) {
        if (route_client(s, req, pl))
            return 1;
        needs_own = 0;                  /* to a node: carried, every primary's, or refused there */
    }
    if (subscription(pl->id))
        return pick_subscriber(s, req, pl);
    const char *no = refusal(s, req, pl, needs_own && how != PIN_ANY);
    if (no == NULL && pl->id == CID_HELLO) {
        emit_locals(s);
        if (s->q.len > 0)
            return ROUTE_WAIT;          /* the protocol changes once nothing is owed */
    }
    if (no == NULL) {
        r->slot = request_slot(req, pl);
        no = slot_refusal(s, req);
    }
    struct target *t = NULL;
    if (no == NULL) {
        t = r->slot >= 0 ? cluster_slot_target(r->slot) : cluster_any_primary(r->hint);
        r->unowned = t == NULL && r->slot >= 0;
        if (t == NULL && !r->unowned)
            no = route_unserved;
    }
    if (no != NULL) {
        answer(s, no, req, pl);
        return 1;
    }
    if (t != NULL)                      /* unowned: counted where the session went last */
        set_target(s, t);
    return 0;
}

/* ---- units ---------------------------------------------------------------------- */

static struct unit *unit_at(struct route_state *r, uint32_t i)
{
    return ring_at(&r->units, sizeof(struct unit), i);
}

static struct unit *unit_of(struct route_state *r, uint32_t tag)
{
    uint32_t i = tag - r->head;        /* tags count up (and wrap) with the queue */
    return i < r->units.len ? unit_at(r, i) : NULL;
}

/* b's buffer goes back to the pool (or is freed); b is empty after. */
static void buf_put(struct route_state *r, struct sbuf *b)
{
    if (b->p != NULL && r->nspare < POOL && b->cap <= POOL_MAX_CAP)
        r->spare[r->nspare++] = (struct sbuf){ b->p, 0, b->cap };
    else
        free(b->p);
    *b = (struct sbuf){ 0 };
}

/* An empty b gets a buffer from the pool, or a new one. */
static void buf_get(struct route_state *r, struct sbuf *b)
{
    if (b->p != NULL)
        return;
    if (r->nspare > 0)
        *b = r->spare[--r->nspare];
    else
        sbuf_reserve(b, BUF_FIRST);
}

static void unit_clear_park(struct route_state *r, struct unit *u)
{
    r->parked -= u->park.len;
    buf_put(r, &u->park);
    u->part = 0;
}

static void unit_pop(struct route_state *r)
{
    struct unit *u = unit_at(r, 0);
    unit_clear_park(r, u);
    buf_put(r, &u->req);
    free(u->pos);
    ring_pop(&r->units);
    r->head++;
    if (r->units.len == 0 && r->units.cap > 64)
        ring_free(&r->units);
}

static void park_bytes(struct session *s, struct unit *u, const void *p, size_t n)
{
    struct route_state *r = s->route;
    buf_get(r, &u->park);
    sbuf_add(&u->park, p, n);
    r->parked += n;
    if (r->parked > s->ctx->cfg->max_buffer && !s->closing) {
        log_warn("client %s: more than max_buffer bytes of replies wait for an earlier "
                 "one (cluster = route): closing it", client_name(s));
        session_close(s);
    }
}

/* The unit's replies still owed are the error line err (CRLF included). */
static void unit_answer(struct session *s, struct unit *u, const char *err)
{
    for (int i = 0; i < u->owed - u->asking; i++) {
        size_t n = strlen(err);
        char type = '-';
        park_bytes(s, u, &type, 1);
        park_bytes(s, u, &n, sizeof n);
        park_bytes(s, u, err, n);
    }
    u->part = u->park.len;
    u->owed = 0;
    u->asking = 0;
}

/* A unit to resend has no node to go to: the client gets what a cluster
 * without an owner for the slot says, once per reply. */
static void unit_fail(struct session *s, struct unit *u)
{
    u->owed = u->total;
    unit_answer(s, u, route_unserved);
}

static void unit_unreached(struct session *s, struct unit *u, const struct target *t);
static void unit_unowned(struct session *s, struct unit *u);
static void deliver(struct session *s);

/* Send the unit to t (again): ASKING first after -ASK. */
static void unit_send(struct session *s, struct unit *u, struct target *t, int asking)
{
    static const char ask[] = "*1\r\n$6\r\nASKING\r\n";
    u->owed = u->total + asking;
    u->asking = (unsigned char)asking;
    u->redirect = 0;
    u->to = NULL;
    int rc;
    if (u->pinned) {
        route_pin_retarget(s, t);       /* a redirect followed: t is another node */
        rc = asking && route_pin_send(s, ask, sizeof ask - 1, 1, u->tag) < 0 ? -1 :
             route_pin_send(s, u->req.p, u->req.len, u->total, u->tag);
    } else if (u->side)
        rc = route_kill_send(s, t, u->req.p, u->req.len, u->tag);
    else
        rc = asking && mux_send(s, t, ask, sizeof ask - 1, 1, u->tag) < 0 ? -1 :
             mux_send(s, t, u->req.p, u->req.len, u->total, u->tag);
    if (rc < 0 && u->pinned)
        session_shared_lost(s, 0);
    else if (rc < 0)
        unit_unreached(s, u, t);
}

void route_take(struct session *s, struct wbatch *wb)
{
    buf_get(s->route, &s->route->cur);
    for (int i = 0; i < wb->n; i++) {
        const char *base = wb->arena_off[i] != (size_t)-1 ? wb->arena + wb->arena_off[i]
                                                          : wb->iov[i].base;
        sbuf_add(&s->route->cur, base, wb->iov[i].len);
    }
    wbatch_reset(wb);
}

/* A new unit at the end, for `total` replies of req (owned: moved in). */
static struct unit *unit_new(struct route_state *r, int slot, int total, struct sbuf *req)
{
    struct unit *u = ring_push(&r->units, sizeof *u, 16);
    *u = (struct unit){ .tag = r->next, .slot = slot, .total = total, .holds = total > 1,
                        .req = *req };
    *req = (struct sbuf){ 0 };
    r->next++;
    return u;
}

void route_send_instead(struct session *s, const struct request *req, const struct req_plan *pl,
                        struct target *t, const char *p, size_t n)
{
    struct route_state *r = s->route;
    struct req_plan own = *pl;
    plan_replies(s, req, &own);
    struct pending *e = q_push(s);
    e->kind = own.replies ? PK_FORWARD : PK_INTERNAL;
    e->t0 = loop_now_ns;
    set_target(s, t);
    buf_get(r, &r->cur);
    sbuf_add(&r->cur, p, n);
    s->ctx->stats.bytes_to_backends += n;
    unit_send(s, unit_new(r, SLOT_NONE, 1, &r->cur), t, 0);
}

/* RANDOMKEY's order of primaries: not the same for every call. */
static uint32_t route_random(void)
{
    static uint32_t x;
    if (x == 0)
        x = (uint32_t)loop_now_ns | 1;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

/* One part per primary, each the request as it is (route_pick() saw one
 * at least, in this same callback); shuffle: the primaries in random order. */
static struct merge_part *fanout_parts(const struct request *req, struct target ***out, int *n,
                                       int shuffle)
{
    struct target **prim;
    *n = primaries(&prim);
    *out = prim;
    ASSERT(*n > 0);
    for (int i = *n - 1; shuffle && i > 0; i--) {
        int j = (int)(route_random() % (uint32_t)(i + 1));
        struct target *t = prim[i];
        prim[i] = prim[j];
        prim[j] = t;
    }
    struct merge_part *parts = xcalloc((size_t)(*n > 0 ? *n : 1), sizeof *parts);
    for (int i = 0; i < *n; i++) {
        parts[i].slot = SLOT_NONE;
        sbuf_add(&parts[i].req, req->raw.p, req->raw.len);
    }
    return parts;
}

/* The parts of a request that goes as several: one per slot, one per
 * primary, or SCAN's one step. (*prim)[i]: part i's node when it has no
 * slot. */
static struct merge_part *make_parts(struct route_state *r, const struct request *req,
                                     struct target ***prim, int *n)
{
    struct merge_part *split = r->split;
    if (split != NULL) {                /* rewritten part by part */
        *n = r->nsplit;
        r->split = NULL;
        r->nsplit = 0;
        return split;
    }
    if (r->slot == SLOT_CROSS)
        return merge_split(req->argc, req->argv, r->width, key_slot, n);
    if (r->merge != MERGE_SCAN)
        return fanout_parts(req, prim, n, r->merge == MERGE_FIRST);
    struct merge_part *part = xcalloc(1, sizeof *part);
    part->slot = SLOT_NONE;
    scan_request(&part->req, req->argc, req->argv, r->scan_node);
    *prim = &r->scan_to;
    *n = 1;
    return part;
}

/* The request goes as several: one unit per part, each to its node (a
 * slot's owner, or each primary in turn); their replies are merged. */
static void commit_parts(struct session *s, const struct request *req)
{
    struct route_state *r = s->route;
    struct target **prim = NULL;
    int n;
    struct merge_part *parts = make_parts(r, req, &prim, &n);
    for (int i = 0; i < n && !s->closing; i++) {
        int exec_first = parts[i].exec_first;
        struct unit *u = unit_new(r, parts[i].slot, exec_first + 1, &parts[i].req);
        u->holds = 1;
        u->side = r->merge == MERGE_KILL;
        u->exec_first = exec_first;
        u->pos = parts[i].pos;
        u->npos = parts[i].npos;
        parts[i].pos = NULL;
        if (i == 0) {
            u->merge = r->merge;
            u->parts = n;
            u->nkeys = (req->argc - 1) / (r->width > 0 ? r->width : 1);
            u->scan = r->scan;
        }
        struct target *t = u->slot >= 0 ? cluster_slot_target(u->slot) : prim[i];
        if (t != NULL)
            unit_send(s, u, t, 0);
        else
            unit_unowned(s, u);
    }
    merge_parts_free(parts, n);
    r->cur.len = 0;
    s->mux_owed = 0;
}

void route_commit(struct session *s, const struct request *req, struct wbatch *wb)
{
    struct route_state *r = s->route;
    if (wb->n > 0) {
        s->ctx->stats.bytes_to_backends += wb->bytes;
        route_take(s, wb);
    }
    if (r->cur.len == 0) {
        route_pin_settle(s);            /* a pin taken for what a rule refused */
        return;
    }
    if (r->merge != MERGE_NONE && s->mux_owed == 1 && r->cur.len == req->raw.len &&
        memcmp(r->cur.p, req->raw.p, req->raw.len) == 0) {
        commit_parts(s, req);           /* forwarded as it is: it can go as several */
        deliver(s);                     /* what a node that cannot be reached answered */
        return;
    }
    if (s->mux_owed == 0) {             /* nothing will answer it: nothing to keep */
        if ((r->pinned ? route_pin_send(s, r->cur.p, r->cur.len, 0, 0) :
                         mux_send(s, s->be.t, r->cur.p, r->cur.len, 0, 0)) < 0)
            session_shared_lost(s, 0);
        r->cur.len = 0;
        return;
    }
    struct unit *u = unit_new(r, r->slot, s->mux_owed, &r->cur);
    u->pinned = r->pinned;
    s->mux_owed = 0;
    if (r->unowned)
        unit_unowned(s, u);
    else
        unit_send(s, u, s->be.t, 0);
    deliver(s);
}

/* ---- replies -------------------------------------------------------------------- */

struct rec {
    char type;
    const char *p;
    size_t n;
};

/* The parked reply at *off (advanced past it); 0 at the end. */
static int rec_next(const struct sbuf *park, size_t *off, struct rec *rc)
{
    if (*off >= park->len)
        return 0;
    rc->type = park->p[*off];
    memcpy(&rc->n, park->p + *off + 1, sizeof rc->n);
    rc->p = park->p + *off + 1 + sizeof rc->n;
    *off += 1 + sizeof rc->n + rc->n;
    return 1;
}

/* Was anything run by the node, as far as the unit's replies tell? Only
 * errors, and the +OK of the proxy's own MULTI first, say no. */
static int unit_ran(const struct unit *u)
{
    static const char multi[] = "*1\r\n$5\r\nMULTI\r\n";
    size_t off = 0;
    struct rec rc;
    for (int i = 0; rec_next(&u->park, &off, &rc); i++) {
        if (rc.type == '-' || (i == 0 && rc.n == 5 && memcmp(rc.p, "+OK\r\n", 5) == 0 &&
                               memmem(u->req.p, u->req.len, multi, sizeof multi - 1) != NULL))
            continue;
        return 1;
    }
    return 0;
}

/* The unit waits for the next topology read, then goes to its slot's owner
 * (on_topology()). */
static void unit_wait(struct session *s, struct unit *u)
{
    u->owed = 0;
    u->asking = 0;
    u->waiting = 1;
    cluster_wait(&s->route->wait);
}

/* May the unit wait for a topology read (again)? For MAX_WAIT_NS from its
 * first wait. */
static int may_wait(struct unit *u)
{
    if (u->waited == 0)
        u->waited = loop_now_ns;
    return loop_now_ns - u->waited < MAX_WAIT_NS;
}

/* The unit's slot has no owner in the slot map (its primary failed): it
 * waits for a topology read, a replica may take over; after MAX_WAIT_NS
 * (or at once for a part of no slot) the client gets what a cluster
 * without an owner for the slot says. */
static void unit_unowned(struct session *s, struct unit *u)
{
    if (u->slot >= 0 && may_wait(u))
        unit_wait(s, u);
    else
        unit_fail(s, u);
}

/* Every reply of a unit that met a redirect is in: send it again where the
 * redirect says (or, for -TRYAGAIN, -CLUSTERDOWN and nodes not known yet, to
 * the slot's owner after the next topology read), unless it ran or went far
 * enough. */
static void unit_redirected(struct session *s, struct unit *u)
{
    int waits = u->to == NULL || u->redirect == REDIR_TRYAGAIN;
    if (unit_ran(u) || (waits ? !may_wait(u) : u->hops >= MAX_HOPS)) {
        u->redirect = 0;                /* the client gets what the cluster said */
        return;
    }
    if (u->redirect != REDIR_CLUSTERDOWN)   /* no redirect: not among them */
        s->ctx->stats.route_redirects[u->redirect - REDIR_MOVED]++;
    unit_clear_park(s->route, u);
    if (waits) {
        unit_wait(s, u);
    } else {
        u->hops++;
        unit_send(s, u, u->to, u->redirect == REDIR_ASK);
    }
}

/* The first `used` bytes of the park went to the session (a reply being
 * parked stays). */
static void unpark(struct route_state *r, struct unit *u, size_t used)
{
    memmove(u->park.p, u->park.p + used, u->park.len - used);
    u->park.len -= used;
    u->part -= used;
    r->parked -= used;
}

/* A whole part's reply to merge: its one reply, or what the client gets of
 * the proxy's MULTI form (merge_exec_reply()), the proxy's own commands in
 * it that Redis refused counted as a request's are (reply.c). */
static struct merge_reply part_reply(struct session *s, const struct unit *u)
{
    size_t off = 0;
    struct rec rc;
    rec_next(&u->park, &off, &rc);
    struct slice one = { rc.p, rc.n };
    if (u->exec_first > 0) {
        struct slice *all = xmalloc((size_t)u->total * sizeof *all);
        int n = 0;
        for (off = 0; n < u->total && rec_next(&u->park, &off, &rc); n++) {
            all[n] = (struct slice){ rc.p, rc.n };
            if (rc.type == '-' && n != 1 && n < u->exec_first)    /* MULTI, EXPIRE */
                rewrite_refused(s, rc.p, rc.n);
        }
        one = merge_exec_reply(all, n);
        free(all);
    }
    return (struct merge_reply){ one.p, one.len, u->pos, u->npos };
}

/* The head units are the parts of one request: once every part's reply
 * is in, the client gets their merge. Returns 0 while one is owed. */
static int deliver_merged(struct session *s)
{
    struct route_state *r = s->route;
    struct unit *first = unit_at(r, 0);
    int n = first->parts, nkeys = first->nkeys;
    enum merge how = first->merge;
    for (int i = 0; i < n; i++) {
        struct unit *u = unit_at(r, (uint32_t)i);
        if (u->owed > 0 || u->redirect || u->waiting || u->park.len == 0)
            return 0;
    }
    struct merge_reply *mr = xcalloc((size_t)n, sizeof *mr);
    for (int i = 0; i < n; i++)
        mr[i] = part_reply(s, unit_at(r, (uint32_t)i));
    size_t len;
    char *out = how == MERGE_SCAN ? scan_reply(&first->scan, mr[0].p, mr[0].n, &len)
                                  : merge_replies(how, mr, n, nkeys, &len);
    free(mr);
    session_reply(s, out, len, 1, out[0], 1);     /* copied: session.c out_add() */
    free(out);
    for (int i = 0; i < n; i++)
        unit_pop(r);
    return 1;
}

/* Give the head units' whole replies to the session, in order. */
static void deliver(struct session *s)
{
    struct route_state *r = s->route;
    while (r->units.len > 0 && !s->closing) {
        struct unit *u = unit_at(r, 0);
        if (u->redirect || u->waiting || (u->holds && u->owed > 0))
            return;
        if (u->parts > 0) {
            if (!deliver_merged(s))
                return;
            continue;
        }
        size_t off = 0, used = 0;
        struct rec rc;
        while (rec_next(&u->park, &off, &rc) && off <= u->part) {
            session_reply(s, rc.p, rc.n, 1, rc.type, 1);
            used = off;
        }
        if (used > 0)
            unpark(r, u, used);
        if (u->owed > 0)
            return;
        unit_pop(r);
    }
}

/* The units waiting for a topology read go to their slot's owner now. */
static void on_topology(struct cluster_wait *w)
{
    struct route_state *r = (struct route_state *)((char *)w - offsetof(struct route_state, wait));
    struct session *s = r->s;
    for (uint32_t i = 0; i < r->units.len && !s->closing; i++) {
        struct unit *u = unit_at(r, i);
        if (!u->waiting)
            continue;
        u->waiting = 0;
        struct target *t = u->slot >= 0 ? cluster_slot_target(u->slot)
                                        : cluster_any_primary(r->hint);
        if (t != NULL)
            unit_send(s, u, t, 0);
        else
            unit_unowned(s, u);
    }
    deliver(s);
    session_settle(s);
}

/* Nothing of the unit reached node t (its connection never was up): a unit
 * of a slot is sent again to the slot's owner after a topology read, read
 * soon (the cluster may be promoting a replica of t), as a cluster client
 * retries, for MAX_WAIT_NS at most; then, and for a unit of no slot (a part
 * of a request to every primary cannot go elsewhere), the client gets why t
 * cannot be reached. */
static void unit_unreached(struct session *s, struct unit *u, const struct target *t)
{
    char err[sizeof t->down_reason + 3];
    cluster_refresh_soon();
    if (u->slot < 0 || !may_wait(u)) {
        snprintf(err, sizeof err, "-%s\r\n", t->down_reason);
        unit_answer(s, u, err);
        return;
    }
    unit_wait(s, u);
}

void route_lost(struct session *s, uint32_t tag, const struct target *t, int was_ready)
{
    struct route_state *r = s->route;
    struct unit *u = r != NULL && !s->closing ? unit_of(r, tag) : NULL;
    if (u == NULL || u->owed == 0)
        return;                         /* done at its first reply owed */
    if (u->live || u->part != u->park.len) {
        session_shared_lost(s, was_ready);  /* a reply cut short: as with one server */
        return;
    }
    if (!was_ready) {
        unit_unreached(s, u, t);
    } else {                            /* it may have run: as a cluster client's
                                           connection to t lost, for this request only */
        char err[sizeof t->name + 64];
        snprintf(err, sizeof err, "-ERR ttlguard: connection to %s lost\r\n", t->name);
        cluster_refresh_soon();
        unit_answer(s, u, err);
    }
    deliver(s);
    session_settle(s);
}

/* A reply begins: live when it can go to the session at once. */
static void reply_begins(struct session *s, struct unit *u, char type)
{
    u->live = u == unit_at(s->route, 0) && !u->holds && !u->asking && !u->redirect &&
              u->park.len == 0 && type != '-';
    if (u->live)
        return;
    u->part = u->park.len;
    size_t zero = 0;
    park_bytes(s, u, &type, 1);
    park_bytes(s, u, &zero, sizeof zero);
}

/* A parked reply is whole: dropped (ASKING's), or looked at (a redirect). */
static void reply_parked(struct session *s, struct unit *u, const struct target *from)
{
    struct route_state *r = s->route;
    size_t n = u->park.len - u->part - 1 - sizeof n;
    memcpy(u->park.p + u->part + 1, &n, sizeof n);
    const char *p = u->park.p + u->part + 1 + sizeof n;
    if (u->asking) {
        u->asking = 0;
        r->parked -= u->park.len - u->part;
        u->park.len = u->part;
    } else if (p[0] == '-' && !u->redirect) {
        struct target *to;
        int kind = cluster_redirect(p, n, from, &to);   /* the slot map learns it either way */
        if (u->pinned == PIN_NOT || (u->pinned == PIN_FOLLOWS && to != NULL &&
                                     kind != REDIR_TRYAGAIN)) {
            u->redirect = (unsigned char)kind;
            u->to = to;
        }
    }
    u->part = u->park.len;
}

void route_reply(struct session *s, uint32_t tag, const struct target *from, const char *p,
                 size_t n, int done, char type, int start)
{
    struct route_state *r = s->route;
    struct unit *u = r != NULL && !s->closing ? unit_of(r, tag) : NULL;
    if (u == NULL)
        return;
    if (start)
        reply_begins(s, u, type);
    if (u->live)
        session_reply(s, p, n, done, type, start);
    else
        park_bytes(s, u, p, n);
    if (!done || s->closing)
        return;
    u->owed--;
    if (!u->live)
        reply_parked(s, u, from);
    u->live = 0;
    if (u->owed == 0 && u->redirect)
        unit_redirected(s, u);
    deliver(s);
    route_pin_settle(s);
    session_settle(s);
}

/* ---- a session's life ----------------------------------------------------------- */

static int route_ready(void)
{
    return control_facts()->commands_ready && cluster_slots_read();
}

void route_attach(struct session *s)
{
    struct route_state *r = xcalloc(1, sizeof *r);
    r->s = s;
    r->hint = (unsigned)((uintptr_t)s >> 4) * 2654435761u;
    r->wait.done = on_topology;
    r->starting = 1;
    s->route = r;
    route_cron(s);
}

void route_cron(struct session *s)
{
    struct route_state *r = s->route;
    if (r->units.len == 0)              /* idle: its memory back */
        while (r->nspare > 0)
            free(r->spare[--r->nspare].p);
    if (!s->route->starting || !route_ready())
        return;
    s->route->starting = 0;
    session_resume(s);
}

void route_free(struct session *s)
{
    struct route_state *r = s->route;
    if (r == NULL)
        return;
    route_pin_free(s);
    route_kill_forget(s);
    drop_split(r);
    if (r->wait.waiting)
        cluster_unwait(&r->wait);
    while (r->units.len > 0)
        unit_pop(r);
    ring_free(&r->units);
    free(r->cur.p);
    while (r->nspare > 0)
        free(r->spare[--r->nspare].p);
    free(r);
    s->route = NULL;
}
