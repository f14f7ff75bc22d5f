/*
 * audit_bg: the background audit (`audit_interval`, `audit_rate`,
 * `audit_memory` in [proxy]): the keyspace walked on the proxy's loop, the
 * keys classified as `ttlguard audit` classifies them, and the result kept
 * as gauges per rule and an `audit_pass` event per pass.
 *
 *   every audit_interval:  the servers: the backend, or (cluster = on) every
 *                          primary that serves slots, one after the other;
 *                          audit_from: a replica of each shard instead
 *                          (READONLY; its primary when it has none, with an
 *                          `audit_fallback` event), or one named server
 *     per server:          INFO ──▶ the databases that have keys
 *     per database:        [SELECT db] SCAN cursor COUNT rate/100 ──▶ keys
 *                          (wait until the keys fit under audit_rate)
 *                          PTTL [, MEMORY USAGE] per key ──▶ arep_classify()
 *     every second:        INFO again: loading, failover, replica sync, or
 *                          used_memory within 10% of maxmemory pause the walk
 *                          (`audit_paused` / `audit_resumed` events)
 *   end of the pass:       gauges ttlguard_audit_keys{rule,state} (and _bytes),
 *                          `audit_pass` event with the change since the last
 *                          pass and the `ttlguard audit --fix` command to run
 *
 * One backend connection of its own (the proxy's AUTH and TLS), to one
 * server at a time, one command in flight; it never writes (SCAN, PTTL,
 * MEMORY USAGE, INFO, SELECT, CLIENT SETNAME, READONLY only). audit_rate
 * is one budget for the whole pass, whichever server it reads. The position (server,
 * database, cursor) and the tallies so far survive a lost connection (the
 * batch being read is asked again), a refusal (-LOADING, -BUSY: INFO again,
 * the same batch later) and a reload that keeps the same rules; a reload
 * that changes the rules, or the backend, starts the pass over, and so does
 * a cluster primary that is no longer one (its shard is read again from
 * the primary the topology shows; while a primary is down and not replaced
 * the pass waits, paused "failover").
 *
 * Memory: the tallies per rule, at most PATTERNS_KEPT folded patterns per
 * table, one SCAN batch (COUNT_MAX keys or so) and the last pass's result;
 * nothing per key, so SCAN's rare duplicates (a table resizing) are counted
 * twice rather than filtered as `ttlguard audit` filters them.
 *
 * Errors: a lost or silent (REPLY_MAX_MS) connection is reconnected; a
 * refused command is asked again; what keeps the walk from going on is
 * audit_bg_problem() (on /healthz, which stays 200).
 *
 * Called from the loop thread only, like every module of the proxy.
 */
#ifndef TTLG_AUDIT_BG_H
#define TTLG_AUDIT_BG_H

#include <stdint.h>

struct loop_ctx;
struct sbuf;

/* Start when cfg->audit_interval is set, stop when not; after a reload,
 * take the new rules, rate and interval (ctx->cfg is the new config). */
void audit_bg_apply(struct loop_ctx *ctx);
void audit_bg_stop(void);
/* Reconnects and connect timeouts; now in monotonic ms. */
void audit_bg_cron(uint64_t now);
/* A reload changed the backend: reconnect, and start the pass over. */
void audit_bg_backend_changed(void);

/* What keeps the audit from walking (no connection, a refused command),
 * for /healthz; "" when nothing does or it is off. */
const char *audit_bg_problem(void);

/* The audit's families for /metrics (nothing when it is off). */
void audit_bg_metrics(struct sbuf *b);

#endif
