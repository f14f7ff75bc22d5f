/*
 * events: the event log of durable-key registrations versus violations, and
 * the counters behind /metrics. The schema of the log is docs/events.md.
 *
 * The request path calls events_*() for every decision that touches a rule.
 * Those calls must be cheap: they bump counters, fold repeats of the same
 * (rule, command, effect, action) within `event_window` seconds into one
 * pending record, and queue lines for a writer that runs off the hot path.
 * Nothing here ever blocks or fails the request path: a full disk or an
 * unwritable file only increments events_dropped.
 *
 *   events_violation() ... ──▶ counters ──▶ fold table ──first──▶ line ──▶ out buffer
 *                                              │ repeat: count++          (4 MB at most)
 *                                              ▼                              │ uv_check, once
 *                                 window timer: one line with "count"  ──────▶│ per loop turn
 *                                                                             ▼
 *                                          libuv thread pool: open / write(2) / close
 *
 * All functions are called from the loop thread only. The rule pointers given
 * to them must belong to the config last passed to events_init() or
 * events_reconfigure().
 */
#ifndef TTLG_EVENTS_H
#define TTLG_EVENTS_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "rules.h"
#include "util.h"

enum ev_effect {
    EFF_CREATES_WITHOUT_TTL,    /* "creates-without-ttl" */
    EFF_DROPS_TTL,              /* "drops-ttl" */
    EFF_PERSIST,                /* "persist" */
    EFF_EXCEEDS_MAX_TTL,        /* "exceeds-max-ttl" */
    EFF_EXTENDS_TTL,            /* "extends-ttl" */
    EFF_MOVES_WITHOUT_TTL,      /* "moves-without-ttl": MOVE, COPY ... DB, MIGRATE of a key
                                   that may have none */
    EFF_FOUND_WITHOUT_TTL,      /* "found-without-ttl": the watcher saw a write leave one */
    EFF__COUNT
};

enum ev_action {
    EACT_REWRITTEN,             /* "rewritten" */
    EACT_REJECTED,              /* "rejected" */
    EACT_LOGGED,                /* "logged" */
    EACT_OBSERVED,              /* "observed": by the watcher, after the fact */
    EACT__COUNT
};

/* Can a violation have this effect and action? The watcher's are its own:
 * `found-without-ttl` goes with `observed` only. */
static inline int ev_pair_possible(enum ev_effect e, enum ev_action a)
{
    return (e == EFF_FOUND_WITHOUT_TTL) == (a == EACT_OBSERVED);
}

/* Who sent the command. addr and name may be NULL. */
struct ev_client {
    const char *addr;           /* "127.0.0.1:53122" or "unix" */
    const char *name;           /* CLIENT SETNAME, or NULL */
    int db;                     /* SELECTed db */
    const char *node;           /* cluster = on: the node it went to ("10.0.0.7:7000") */
};

/* Open the log named by cfg->events (NULL: off) and write `log_opened` and
 * one `registration` event per rule of cfg. Called at start; returns -1 with
 * err when the file cannot be opened at start (a bad path is a config error).
 * Counters work whether the log is on or not. */
int events_init(uv_loop_t *loop, const struct config *cfg, char *err, size_t errlen);

/* A reload was accepted: new settings (path, log_keys, window) and one
 * `registration` event per rule, then `config_reloaded`. Call it once cfg is
 * the running config and before the previous one is freed: the counts still
 * folded under the old rules are written first. Per-rule counters restart at
 * zero. A new path that cannot be opened keeps the old file (with a warning). */
void events_reconfigure(const struct config *cfg);
/* A reload was refused: `config_rejected` with the reason (file:line: ...). */
void events_config_rejected(const char *path, const char *reason);

/* SIGUSR1: reopen the file (logrotate). The open runs in the thread pool;
 * lines not yet written by then go to the new file, which starts with a
 * `log_opened` event. A failed open keeps the old file. No-op for stderr. */
void events_reopen(void);

/* Flush folded counts and pending lines, close the file and this module's
 * handles. Call it from inside the loop (where the server closes its own
 * handles): a write still in flight completes in a later turn of the loop. */
void events_shutdown(void);

void events_violation(const struct rule *r, struct slice cmd, struct slice key,
                      enum ev_effect effect, enum ev_action action, const struct ev_client *c);

/* A write to a key under a durable rule; sets_ttl: it also puts a TTL on it
 * (the `ttl_on_durable` warning). */
void events_durable_write(const struct rule *r, struct slice cmd, struct slice key,
                          int sets_ttl, const struct ev_client *c);

/* A command the proxy cannot judge touched keys under a rule (or is unknown):
 * scripts, SWAPDB, MIGRATE, unknown commands. Recorded once per command name
 * and detail in a window. detail is written as is: key names in it escape
 * log_keys, so pass them to events_unverified_keys() instead. */
void events_unverified(struct slice cmd, const char *detail, const struct ev_client *c);

/* The same with the keys involved (a script's declared keys: detail is then
 * e.g. "sha=<40 hex>"), written as `keys` under log_keys. The keys of the
 * last occurrence are the example of a folded line; at most 16 are kept. */
void events_unverified_keys(struct slice cmd, const char *detail, const struct slice *keys,
                            int nkeys, const struct ev_client *c);

/* A violation of a command whose classification is not the table's own:
 * detail says so (e.g. derived from the server's key specs). */
void events_violation_detail(const struct rule *r, struct slice cmd, struct slice key,
                             enum ev_effect effect, enum ev_action action, const char *detail,
                             const struct ev_client *c);

/* The backend's name and version, and what the proxy knows of its commands
 * (from_backend 0: assumed, with why), after each (re)connect of the control
 * connection that identified it. */
struct command_set;
void events_backend_server(const struct config *cfg, const struct command_set *set,
                           int from_backend, const char *why);

/* The backend's maxmemory-policy, read on the first backend connection:
 * policy is NULL when CONFIG GET was refused (managed services), with why. */
void events_backend_policy(const struct config *cfg, const char *policy, const char *why);
/* The watcher subscribed again after gap_ms without keyspace notifications
 * (missed: TTL checks it could not send since start). */
void events_watch_gap(uint64_t gap_ms, uint64_t missed);

/* Counters for /metrics. */
struct events_counters {
    uint64_t violations[EFF__COUNT][EACT__COUNT];   /* all rules together */
    uint64_t events_written;     /* lines written to the log */
    uint64_t events_dropped;     /* lines lost: buffer full, write failed, fold table full */
    uint64_t unverified;
    uint64_t durable_writes;     /* all durable rules together, ttl_on_durable included */
    uint64_t ttl_on_durable;
    uint64_t config_reloads;     /* accepted */
    uint64_t config_rejected;
};
const struct events_counters *events_counters(void);

/* Per-rule counts for /metrics, indexed like cfg->rules.v (and dflt last):
 * violations by effect and action, durable writes. Reset on reload. */
uint64_t events_rule_violations(size_t rule_index, enum ev_effect e, enum ev_action a);
uint64_t events_rule_durable_writes(size_t rule_index);
uint64_t events_rule_ttl_on_durable(size_t rule_index);

const char *ev_effect_name(enum ev_effect e);
const char *ev_action_name(enum ev_action a);

/* ---- JSON, shared with the admin endpoint (/rules) and `ttlguard report` ---- */

/* Every event the log has, by name (docs/events.md): written by this module
 * (audit_fix by `ttlguard audit`), read back by `ttlguard report`, from this
 * one table. */
#define EVENT_NAMES(X) \
    X(EVN_LOG_OPENED, "log_opened") \
    X(EVN_REGISTRATION, "registration") \
    X(EVN_VIOLATION, "violation") \
    X(EVN_DURABLE_WRITE, "durable_write") \
    X(EVN_TTL_ON_DURABLE, "ttl_on_durable") \
    X(EVN_UNVERIFIED, "unverified") \
    X(EVN_WATCH_GAP, "watch_gap") \
    X(EVN_BACKEND_SERVER, "backend_server") \
    X(EVN_BACKEND_POLICY, "backend_policy") \
    X(EVN_CONFIG_RELOADED, "config_reloaded") \
    X(EVN_CONFIG_REJECTED, "config_rejected") \
    X(EVN_AUDIT_FIX, "audit_fix") \
    X(EVN_AUDIT_PASS, "audit_pass") \
    X(EVN_AUDIT_FALLBACK, "audit_fallback") \
    X(EVN_AUDIT_PAUSED, "audit_paused") \
    X(EVN_AUDIT_RESUMED, "audit_resumed") \
    X(EVN_SENTINEL_SWITCH, "sentinel_switch") \
    X(EVN_SENTINEL_UNREACHABLE, "sentinel_unreachable") \
    X(EVN_SENTINEL_REACHABLE, "sentinel_reachable")

#define EVN_ENUM(id, name) id,
enum event_name { EVENT_NAMES(EVN_ENUM) EVN__COUNT };
#undef EVN_ENUM

/* An event whose members another module wrote: members is JSON object
 * members without braces (",\"a\":1" is wrong, "\"a\":1" right), after ts
 * and event. The background audit's events (audit_bg.c). */
void events_members(enum event_name e, const char *members, size_t len);

const char *event_name(enum event_name e);
/* The event called s (case-insensitive), or -1 for a name the log does not have. */
int event_name_lookup(struct slice s);

/* Text into a growable byte buffer (util.h's sbuf; sbuf_add, sbuf_printf). */
void evbuf_adds(struct sbuf *b, const char *s);
void evbuf_u64(struct sbuf *b, uint64_t v);

/* Append len bytes as a JSON string literal, quotes included. Keys and
 * prefixes are bytes, not text: valid UTF-8 is copied, '"' '\\' \b \f \n \r
 * \t get their short escapes, other control bytes and DEL are \u00XX, and a
 * byte that is not part of valid UTF-8 is \udcXX (XX = the byte, 80..ff: the
 * lone low surrogates of Python's "surrogateescape"), so every byte string
 * round-trips and nothing else decodes to U+DC80..U+DCFF. */
void evbuf_json_str(struct sbuf *b, const char *p, size_t len);

/* Append a Prometheus label value: \\, \" and newline escaped. */
void evbuf_prom_label(struct sbuf *b, const char *s);

/* Length of the valid UTF-8 sequence at p (1 to 4), or 0 when the bytes at p
 * are not one (overlong forms, surrogates and code points above U+10FFFF are
 * not). n is the number of bytes available. */
size_t events_utf8_len(const unsigned char *p, size_t n);

/* The members (no braces) of a rule as a JSON object: kind, rule (label),
 * prefix, then what the kind has (docs/events.md, `registration`). */
void events_rule_json(struct sbuf *b, const struct rule *r);

/* SipHash-2-4 of len bytes under a 128-bit key: log_keys = hash, and the
 * fold table (keyed, so clients cannot flood one bucket). */
uint64_t events_siphash(const uint8_t key[16], const void *p, size_t len);

/* log_keys = hash: the 16 hex digits written for key, under this process's
 * random key (out: 17 bytes). */
void events_key_hash(const char *key, size_t len, char out[17]);

#endif
