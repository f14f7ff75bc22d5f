/*
 * events: the event log of durable-key registrations versus violations, and
 * the counters behind /metrics.
 *
 * The request path calls events_*() for every decision that touches a rule.
 * Those calls must be cheap: they bump counters, fold repeats of the same
 * (rule, command, effect, action) within `event_window` seconds into one
 * pending record, and queue lines for a writer that runs off the hot path.
 * Nothing here ever blocks or fails the request path: a full disk or an
 * unwritable file only increments events_dropped.
 *
 * All functions are called from the loop thread only.
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
    EFF__COUNT
};

enum ev_action {
    EACT_REWRITTEN,             /* "rewritten" */
    EACT_REJECTED,              /* "rejected" */
    EACT_LOGGED,                /* "logged" */
    EACT__COUNT
};

/* Who sent the command. addr and name may be NULL. */
struct ev_client {
    const char *addr;           /* "127.0.0.1:53122" or "unix" */
    const char *name;           /* CLIENT SETNAME, or NULL */
    int db;                     /* SELECTed db */
};

/* Open the log named by cfg->events (NULL: off) and write one `registration`
 * event per rule of cfg. Called at start; returns -1 with err when the file
 * cannot be opened at start (a bad path is a config error). */
int events_init(uv_loop_t *loop, const struct config *cfg, char *err, size_t errlen);

/* A reload was accepted: new settings (path, log_keys, window) and one
 * `registration` event per rule, then `config_reloaded`. */
void events_reconfigure(const struct config *cfg);
/* A reload was refused: `config_rejected` with the reason (file:line: ...). */
void events_config_rejected(const char *path, const char *reason);

/* SIGUSR1: reopen the file (logrotate). */
void events_reopen(void);

/* Flush and close (shutdown). */
void events_shutdown(void);

void events_violation(const struct rule *r, struct slice cmd, struct slice key,
                      enum ev_effect effect, enum ev_action action, const struct ev_client *c);

/* A write to a key under a durable rule; sets_ttl: it also puts a TTL on it
 * (the `ttl_on_durable` warning). */
void events_durable_write(const struct rule *r, struct slice cmd, struct slice key,
                          int sets_ttl, const struct ev_client *c);

/* A command the proxy cannot judge touched keys under a rule (or is unknown):
 * scripts (detail: "sha=<40 hex> keys=a,b"), SWAPDB, MIGRATE, unknown commands.
 * Recorded once per command name and detail in a window. */
void events_unverified(struct slice cmd, const char *detail, const struct ev_client *c);

/* The backend's maxmemory-policy, read on the first backend connection:
 * policy is NULL when CONFIG GET was refused (managed services), with why. */
void events_backend_policy(const struct config *cfg, const char *policy, const char *why);

/* Counters for /metrics. */
struct events_counters {
    uint64_t violations[EFF__COUNT][EACT__COUNT];   /* all rules together */
    uint64_t events_written;
    uint64_t events_dropped;
    uint64_t unverified;
};
const struct events_counters *events_counters(void);

/* Per-rule counts for /metrics, indexed like cfg->rules.v (and dflt last):
 * violations by effect and action, durable writes. Reset on reload. */
uint64_t events_rule_violations(size_t rule_index, enum ev_effect e, enum ev_action a);
uint64_t events_rule_durable_writes(size_t rule_index);

const char *ev_effect_name(enum ev_effect e);
const char *ev_action_name(enum ev_action a);

#endif
