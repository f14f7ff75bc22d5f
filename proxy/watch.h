/*
 * watch: the backstop for writes the proxy never sees (`watch = on`).
 *
 * Scripts that write keys they did not declare, module commands, and
 * applications that talk to Redis directly can all leave a key under a ttl
 * rule without a TTL. The watcher hears about those writes from Redis's
 * keyspace notifications and checks each key after the fact:
 *
 *   sub  ─ PSUBSCRIBE __keyspace@*__:<prefix>*  per ttl rule (every key when the
 *   │      default rule is not allow); each notification names db, key, event
 *   ▼
 *   a write event on a key under a ttl rule (not del, expired, expire, pops...)
 *   │
 *   cmd ─ [SELECT db] EXPIRE key ttl NX   rewrite rules: :1 = it had none, now fixed
 *         [SELECT db] PTTL key            log and reject rules: -1 = found without
 *   │
 *   ▼ violation event: effect found-without-ttl, action observed, the event's
 *     name as the command, and the delay from the notification to the answer
 *
 * Two backend connections of its own (subscribers cannot send commands in
 * RESP2), with the proxy's AUTH and TLS. EXPIRE ... NX never touches a TTL
 * set meanwhile. The notifications need notify-keyspace-events to hold
 * K and g$lshztd (or A): read at connect and every 10 s; when flags are
 * missing the watcher says so (log, /healthz, /metrics) and sets them only
 * with `watch_configure = on`.
 *
 * While the subscription is down (backend restart, the server dropping a
 * subscriber that fell behind its pubsub output limit) writes go unseen: on
 * resubscribing the watcher says for how long, and that an audit of the
 * rules' prefixes is needed (ttlguard audit). While many checks are in
 * flight it stops reading notifications (backpressure: Redis holds them in
 * the subscriber's output buffer). Checks that cannot be sent (the command
 * connection down) are counted as missed, and said the same way.
 */
#ifndef TTLG_WATCH_H
#define TTLG_WATCH_H

#include <stdint.h>

struct loop_ctx;

struct watch_stats {
    uint64_t notifications;     /* keyspace notifications read */
    uint64_t checks;            /* keys checked (EXPIRE ... NX or PTTL sent) */
    uint64_t found;             /* keys found without a TTL */
    uint64_t fixed;             /* ...and given their rule's TTL */
    uint64_t missed;            /* checks that could not be sent */
    uint64_t resubscribed;      /* subscriptions lost and made again */
    uint64_t gap_ms;            /* time without a subscription, summed, since start */
    int subscribed;             /* 1 while notifications arrive */
    int flags_ok;               /* 1 when notify-keyspace-events has what it needs */
};

/* Start when cfg->watch (a no-op otherwise); after a reload, start, stop or
 * resubscribe to the new rules' prefixes. */
void watch_apply(struct loop_ctx *ctx);
void watch_stop(void);
void watch_cron(uint64_t now);
/* A reload changed the backend address: reconnect both. */
void watch_backend_changed(void);

const struct watch_stats *watch_stats(void);
/* What is wrong, for /healthz ("" when nothing is, or when the watcher is off). */
const char *watch_problem(void);

#endif
