/*
 * reply: the reply side of a session. Bytes of each reply, as the backend
 * connection they came on frames them (its own, or a shared one), are
 * paired with the head of the session's pending queue and go to the client,
 * or to the proxy (replies to its own requests), or both (the first element
 * of EXEC's reply to the proxy's own MULTI). The protocol state that only a
 * reply can confirm is mirrored here: HELLO, AUTH, RESET, MONITOR, RESP2
 * subscription counts, the carried CLIENT SETINFO / NO-EVICT of a session
 * that may share, the start of a replication stream.
 *
 *   bconn / mux ──▶ session_reply(s, bytes, done, type, start)
 *                     │ replica: relayed unframed
 *                     │ keep first/last bytes when they must be read
 *                     │ head PW_QUEUED / PW_EXEC_FIRST: the proxy's MULTI form
 *                     │ cluster: topology replies and redirects held whole and
 *                     │ rewritten (cluster.c)
 *                     └ done ──▶ reply_done: unpaired? (push, pub/sub message,
 *                                MONITOR line, a node's own SUNSUBSCRIBE) else
 *                                apply_reply, pop the head
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "login.h"
#include "sentinel.h"
#include "session_int.h"
#include "stats.h"
#include "util.h"

/* Is the reply that just completed one that belongs to no request? */
static int unpaired_reply(struct session *s, char type, const struct pending *head)
{
    if (type == '>')
        return 1;
    if (s->monitor && type == '+' && s->peeklen > 1 && s->peek[1] >= '0' && s->peek[1] <= '9')
        return 1;       /* "+1700000000.123456 [0 127.0.0.1:5000] ..." */
    if (!s->resp3 && type == '*' && (s->nchan + s->npat + s->nshard > 0 ||
                                     (head && head->what == PW_SUB))) {
        /* RESP2 pub/sub message: *3 $7 message ..., *4 $8 pmessage ..., *3 $8 smessage */
        if ((s->peeklen >= 17 && memcmp(s->peek + 4, "$7\r\nmessage\r\n", 13) == 0) ||
            (s->peeklen >= 18 && (memcmp(s->peek + 4, "$8\r\npmessage\r\n", 14) == 0 ||
                                  memcmp(s->peek + 4, "$8\r\nsmessage\r\n", 14) == 0)))
            return 1;
    }
    return 0;
}

/* RESP2: an SUNSUBSCRIBE confirmation that no request asked for. A cluster
 * node sends one to each subscriber of a shard channel whose slot it gives
 * away (RESP3: a push, counted as any); the subscriber may be one no more. */
static int node_sunsubscribe(const struct session *s, char type, const struct pending *head)
{
    static const char hdr[] = "$12\r\nsunsubscribe\r\n";
    return !s->resp3 && type == '*' && s->nshard > 0 &&
           !(head != NULL && head->what == PW_SUB && head->subkind == SUB_SHARD) &&
           s->peeklen >= 4 + sizeof hdr - 1 && memcmp(s->peek + 4, hdr, sizeof hdr - 1) == 0;
}

/* Subscription confirmation: *3 (RESP2) or >3 (RESP3), $N <kind>, <name or
 * nil>, :<count>. Anything else is left alone. */
static void apply_confirmation(struct session *s)
{
    const char *p = s->peek + 4;
    size_t n = s->peeklen > 4 ? s->peeklen - 4 : 0;
    /* count: the last line ":<n>\r\n" of the reply, kept in tail */
    const char *t = NULL;
    for (int i = (int)s->taillen - 3; i >= 0; i--) {
        if (s->tail[i] == ':') {
            t = s->tail + i + 1;
            break;
        }
    }
    if (t == NULL)
        return;
    long long count = strtoll(t, NULL, 10);
    struct { const char *hdr; int *counter; } kinds[] = {
        { "$9\r\nsubscribe\r\n", &s->nchan },
        { "$11\r\nunsubscribe\r\n", &s->nchan },
        { "$10\r\npsubscribe\r\n", &s->npat },
        { "$12\r\npunsubscribe\r\n", &s->npat },
        { "$10\r\nssubscribe\r\n", &s->nshard },
        { "$12\r\nsunsubscribe\r\n", &s->nshard },
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t hl = strlen(kinds[i].hdr);
        if (n < hl || memcmp(p, kinds[i].hdr, hl) != 0)
            continue;
        if (kinds[i].counter == &s->nshard) {
            s->nshard = (int)count;
        } else {
            /* channels and patterns share one count: the change tells */
            int total = s->nchan + s->npat;
            if (count > total)
                (*kinds[i].counter)++;
            else if (count < total && *kinds[i].counter > 0)
                (*kinds[i].counter)--;
        }
        return;
    }
}

static void remember_carried(struct session *s, const struct pending *p)
{
    char **slot = p->subkind == CARRY_LIB_NAME ? &s->lib_name :
                  p->subkind == CARRY_LIB_VER ? &s->lib_ver : NULL;
    if (slot == NULL) {
        s->no_evict = p->subkind == CARRY_NO_EVICT_ON;
        return;
    }
    free(*slot);
    *slot = p->local_len ? xmemdup(p->local, p->local_len) : NULL;
}

/* Redis refused the proxy's AUTH on a client's connection (after RESET, or
 * for a user with a backend login of its own): its requests will get
 * Redis's errors. Said with Redis's words. */
static void relogin_refused(struct session *s)
{
    const char *end = memchr(s->peek, '\r', s->peeklen);
    int n = end != NULL ? (int)(end - s->peek) : (int)s->peeklen;
    log_warn("Redis refused ttlguard's login of a client's connection (backend_user, "
             "backend_password): %.*s", n > 1 ? n - 1 : 0, s->peek + 1);
}

/* What the reply to head changes in the session's mirrored state. */
static void apply_reply(struct session *s, struct pending *head, char type)
{
    switch (head->what) {
    case PW_HELLO:
        /* Refused: the protocol did not change, unless a later HELLO or
         * RESET (sent before this reply came) changed it since; nor did the
         * login (a later login waits for this reply, and a RESET sent
         * meanwhile set what a refusal sets). */
        if (type == '-' && head->proto_gen == s->proto_gen)
            s->resp3 = head->subkind & 1;
        if (type == '-' && (head->subkind & 2))
            s->unauth = s->auth_required;
        break;
    case PW_CLIENT_AUTH:
        if (type == '-')
            s->unauth = s->auth_required;
        break;
    case PW_MONITOR:
        if (type == '+')
            s->monitor = 1;
        break;
    case PW_RESET:
        /* What only a reply confirms; the protocol, the login and CLIENT
         * REPLY were reset when RESET was sent, and a HELLO 3 or AUTH
         * pipelined after it has set them again since. */
        if (type == '+') {
            s->monitor = 0;
            s->nchan = s->npat = s->nshard = 0;
        }
        break;
    case PW_SUB:
        if (type == '*')
            apply_confirmation(s);
        else
            head->remaining = 1;    /* an error ends it */
        break;
    case PW_REPLACE:
        toc_add(s, head->local, head->local_len, 1);
        break;
    case PW_CARRY:
        if (type == '+')
            remember_carried(s, head);
        break;
    case PW_GUARD:
        if (type == '-') {
            struct ev_client c;
            if (policy_guard_refused(s->ctx->cfg, head->local, head->local_len, s->peek,
                                     s->peeklen, session_client(s, &c)))
                s->ctx->stats.rejected++;
        }
        break;
    case PW_RELOGIN:
        if (type == '-')
            relogin_refused(s);
        break;
    case PW_PROBE: {
        struct ev_client c;
        int no_ttl = type != ':' || (s->peeklen >= 4 && memcmp(s->peek, ":-1\r", 4) == 0);
        policy_probe_answered(s->ctx->cfg, head->local, head->local_len, head->remaining,
                              no_ttl, session_client(s, &c));
        break;
    }
    default:
        break;
    }
}

/* Redis refused the proxy's own part of a rewrite (its MULTI or EXPIRE, a
 * follow-up script: an ACL without EXPIRE or EVAL, OOM): the client got
 * Redis's error or its command's reply, but the key may have no TTL.
 * Counted for /metrics, and said at most every 10 s with Redis's words. */
void rewrite_refused(struct session *s, const char *err, size_t len)
{
    static uint64_t last, since;
    uint64_t now = now_ms_monotonic();
    s->ctx->stats.rewrite_errors++;
    since++;
    if (last != 0 && now - last < 10000)
        return;
    const char *end = memchr(err, '\r', len);
    int n = end != NULL ? (int)(end - err) : (int)len;     /* "-ERR ..." */
    log_warn("Redis refused ttlguard's rewrite of a write under a rule (%llu time%s since "
             "the last warning): %.*s", (unsigned long long)since, since == 1 ? "" : "s",
             n > 1 ? n - 1 : 0, err + 1);
    last = now;
    since = 0;
}

/* A whole reply went by; pair it with the head of the queue. */
static void reply_done(struct session *s, char type)
{
    struct pending *head = q_head(s);
    int unasked = node_sunsubscribe(s, type, head);
    if (type == '>' || unasked)
        apply_confirmation(s);      /* RESP3: counted too, for a HELLO 2 later */
    if (unasked || unpaired_reply(s, type, head) || head == NULL)
        return;         /* a push, or unsolicited (an error before the server closes) */
    ASSERT(head->kind != PK_LOCAL);
    if (type == '-' && head->kind == PK_INTERNAL && head->rewritten &&
        head->what != PW_EXEC_FIRST)        /* its EXECABORT follows from the refusal */
        rewrite_refused(s, s->peek, s->peeklen);
    apply_reply(s, head, type);
    if (--head->remaining > 0)
        return;
    if (head->kind == PK_FORWARD || head->what == PW_EXEC_FIRST)
        stats_latency_observe(head->rewritten, loop_now_ns - head->t0);
    q_pop(s);
    emit_locals(s);
    head = q_head(s);
    if (head != NULL && head->what == PW_SYNC)
        enter_replica(s);
}

/* Does the proxy need to look inside the reply being read? */
static int inspect(const struct session *s, const struct pending *head, char type)
{
    return s->monitor || type == '-' || type == '>' ||
           (!s->resp3 && s->nchan + s->npat + s->nshard > 0) ||
           (head != NULL && (head->what == PW_SUB || head->what == PW_PROBE));
}

/* A whole reply of the backend's, from the proxy's hands: in a cluster, as
 * cluster_rewrite() has it (topology of kind, EXEC's with the kinds of its
 * elements, or a redirect). */
static void toc_add_reply(struct session *s, enum topo_kind kind, const struct pending *head,
                          const char *p, size_t n)
{
    size_t len;
    char *out = NULL;
    if (s->ctx->cfg->cluster && kind == TOPO_EXEC)
        out = cluster_rewrite_exec(head->local, head->local_len, p, n, &len);
    else if (s->ctx->cfg->cluster)
        out = cluster_rewrite(kind, p, n, s->be.t, &len);
    if (out != NULL) {
        toc_add(s, out, len, 1);
        free(out);
    } else {
        toc_add(s, p, n, 1);
    }
}

/* EXEC's reply to the proxy's MULTI ... EXEC: *N, the command's reply, then
 * one reply per EXPIRE. Only the command's reply goes to the client. In a
 * cluster, EXEC itself may answer a redirect (the slot moved after the
 * commands were queued: Redis checks the queued keys again at EXEC): it is
 * held whole in xerr (empty then) and rewritten as any redirect. */
static void exec_first_filter(struct session *s, const char *p, size_t n, int done)
{
    while (n > 0) {
        switch (s->xphase) {
        case XP_START:
            if (*p == '*' && !(n > 1 && p[1] == '-')) {
                s->xphase = XP_HEADER;
            } else if (s->xerr.len > 0) {
                /* EXECABORT: the command was refused when queued (OOM,
                 * READONLY, NOPERM, a cluster's MOVED...); that error is its
                 * reply. */
                toc_add_reply(s, TOPO_NONE, NULL, s->xerr.p, s->xerr.len);
                s->xerr.len = 0;
                s->xphase = XP_REST;
            } else {
                s->xphase = s->ctx->cfg->cluster ? XP_ERROR : XP_ALL;
            }
            break;
        case XP_HEADER: {
            const char *nl = memchr(p, '\n', n);
            if (nl == NULL)
                return;
            n -= (size_t)(nl + 1 - p);
            p = nl + 1;
            if (s->xsub == NULL)
                s->xsub = xcalloc(1, sizeof *s->xsub);
            else
                reply_scanner_free(s->xsub);
            reply_scanner_init(s->xsub);
            s->xphase = XP_FIRST;
            break;
        }
        case XP_FIRST: {
            int first_done = 0;
            ssize_t used = reply_scan(s->xsub, p, n, &first_done);
            if (used < 0) {
                s->xphase = XP_REST;
                return;
            }
            toc_add(s, p, (size_t)used, 0);
            p += used;
            n -= (size_t)used;
            if (first_done)
                s->xphase = XP_REST;
            break;
        }
        case XP_REST:
            return;
        case XP_ALL:
            toc_add(s, p, n, 0);
            return;
        case XP_ERROR:
            sbuf_add(&s->xerr, p, n);
            if (done) {
                toc_add_reply(s, TOPO_NONE, NULL, s->xerr.p, s->xerr.len);
                s->xerr.len = 0;
            }
            return;
        }
    }
}

static void keep_peek_tail(struct session *s, const char *p, size_t n)
{
    if (s->peeklen < PEEK_MAX) {
        size_t k = PEEK_MAX - s->peeklen;
        if (k > n)
            k = n;
        memcpy(s->peek + s->peeklen, p, k);
        s->peeklen += (uint32_t)k;
    }
    if (n >= TAIL_MAX) {
        memcpy(s->tail, p + n - TAIL_MAX, TAIL_MAX);
        s->taillen = TAIL_MAX;
        return;
    }
    size_t keep = s->taillen;
    if (keep + n > TAIL_MAX)
        keep = TAIL_MAX - n;
    memmove(s->tail, s->tail + s->taillen - keep, keep);
    memcpy(s->tail + keep, p, n);
    s->taillen = (uint32_t)(keep + n);
}

/* The queue-time error of the command in the proxy's own MULTI, kept for
 * EXEC's answer. */
static void keep_queue_error(struct session *s, const char *p, size_t n, int done, char type,
                             int start)
{
    if (start)
        s->xerr.len = 0;
    if (s->xerr.len + n > s->xerr.cap) {
        s->xerr.cap = s->xerr.len + n;
        s->xerr.p = xrealloc(s->xerr.p, s->xerr.cap);
    }
    memcpy(s->xerr.p + s->xerr.len, p, n);
    s->xerr.len += n;
    if (done && type != '-')
        s->xerr.len = 0;
}

/* Cluster: is this a reply with node addresses in it, which the client may
 * only see rewritten? Topology replies, and errors (-MOVED, -ASK). */
static int held(const struct session *s, const struct pending *head, char type)
{
    return s->ctx->cfg->cluster && type != '>' &&
           (head == NULL || head->kind != PK_INTERNAL) &&
           (type == '-' || (head != NULL && head->what == PW_TOPOLOGY));
}

static void session_unpark(struct session *s)
{
    if (!s->parked)
        return;
    s->parked = 0;
    if (s->cwait.waiting)
        cluster_unwait(&s->cwait);
    for (size_t off = 0; off < s->park.len;) {
        char kind = s->park.p[off];
        size_t n;
        memcpy(&n, s->park.p + off + 1, sizeof n);
        const char *p = s->park.p + off + 1 + sizeof n;
        if (kind == 'M')
            toc_add_reply(s, TOPO_NONE, NULL, p, n);
        else
            toc_add(s, p, n, 1);
        off += 1 + sizeof n + n;
    }
    s->park.len = 0;
    if (!s->closing)
        session_flush_client();
    maybe_finish(s);
}

static void on_topology_read(struct cluster_wait *w)
{
    struct session *s = (struct session *)((char *)w - offsetof(struct session, cwait));
    session_unpark(s);
}

void park_add(struct session *s, char kind, const char *p, size_t n)
{
    sbuf_add(&s->park, &kind, 1);
    sbuf_add(&s->park, &n, sizeof n);
    sbuf_add(&s->park, p, n);
    if (s->park.len > s->ctx->cfg->max_buffer)
        session_unpark(s);      /* waiting must not cost unbounded memory */
}

/* Keep the reply until it is whole, then hand the client its rewritten form.
 * A redirect to a node not known yet waits for the topology read it starts
 * (and everything after it for this client, in order). */
static void hold(struct session *s, const char *p, size_t n, int done, int start,
                 const struct pending *head)
{
    if (start)
        s->held.len = 0;
    sbuf_add(&s->held, p, n);
    if (!done)
        return;
    enum topo_kind kind = head != NULL && head->what == PW_TOPOLOGY ? head->subkind : TOPO_NONE;
    if (kind == TOPO_NONE &&
        (s->parked || !cluster_redirect_known(s->held.p, s->held.len, s->be.t))) {
        if (!s->parked) {
            s->parked = 1;
            s->cwait.done = on_topology_read;
            cluster_wait(&s->cwait);
        }
        park_add(s, 'M', s->held.p, s->held.len);
    } else {
        toc_add_reply(s, kind, head, s->held.p, s->held.len);
    }
    s->held.len = 0;
}

void session_reply(struct session *s, const char *p, size_t n, int done, char type, int start)
{
    if (s->closing)
        return;
    if (s->replica) {
        toc_add(s, p, n, 0);        /* a replication stream: relayed as it comes */
        return;
    }
    if (start) {
        emit_locals(s);
        s->peeklen = 0;
        s->taillen = 0;
    }
    struct pending *head = q_head(s);
    if (head != NULL && head->what == PW_SUB && head->remaining < 0) {
        int k = head->subkind == SUB_CHANNEL ? s->nchan :
                head->subkind == SUB_PATTERN ? s->npat : s->nshard;
        head->remaining = k > 0 ? k : 1;
    }
    /* Keep the first and last bytes: enough to read pub/sub, monitor and
     * error replies. */
    if (inspect(s, head, type))
        keep_peek_tail(s, p, n);

    if (head != NULL && head->what == PW_QUEUED && type != '>') {
        keep_queue_error(s, p, n, done, type, start);
    } else if (head != NULL && head->what == PW_EXEC_FIRST && type != '>') {
        if (start)
            s->xphase = XP_START;
        exec_first_filter(s, p, n, done);
    } else if (held(s, head, type)) {
        hold(s, p, n, done, start, head);
    } else if (head == NULL || head->kind != PK_INTERNAL || type == '>') {
        toc_add(s, p, n, 0);
    }
    if (!done)
        return;
    if (!s->ttlg_auth && login_is_noauth(s->peek, s->peeklen))
        s->auth_required = s->unauth = 1;   /* Redis says so: its limits apply */
    if (type == '-' && s->ctx->cfg->sentinel != NULL && s->peeklen >= 9 &&
        memcmp(s->peek, "-READONLY", 9) == 0)
        sentinel_readonly();        /* the client gets it as Redis sent it */
    reply_done(s, type);
}

