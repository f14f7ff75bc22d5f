/*
 * audit_report: what `ttlguard audit` found, and how it is printed.
 *
 * The scanner hands every key it saw alive to arep_add() with its rule, TTL,
 * type and (with --memory) size. Counts are kept per rule, split by "has a
 * TTL" / "has none"; the five groups of the report are sums of those:
 *
 *   rule kind        no TTL                   TTL
 *   ttl              leaked (violation)       expiring
 *   default, strict  leaked (violation)       expiring
 *   default, allow   unregistered persistent  expiring
 *   durable          registered               registered with a TTL (warning)
 *
 * A [default] whose action is not `allow` is the strict policy of seed 002
 * (every key needs a TTL unless registered), so its keys without one are
 * leaked too. Leaked and unregistered keys are also folded into patterns
 * so a team sees which writers to fix or which data to register.
 *
 * Key names are binary: everything printed is escaped (printable ASCII as
 * is, \\ \" \n \r \t, other bytes \xHH). All memory here belongs to the
 * struct arep and is released by arep_free().
 */
#ifndef TTLG_AUDIT_REPORT_H
#define TTLG_AUDIT_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rules.h"

#define AREP_TTL_BUCKETS 6      /* <1m, 1m-1h, 1h-1d, 1d-7d, 7d-30d, >30d */
#define AREP_EXAMPLES 3         /* example keys kept per rule and state */
#define AREP_MAX_PATTERNS 65536 /* distinct patterns per table by default; the rest is
                                   "other" (arep.max_patterns) */

enum arep_ktype {
    KTYPE_STRING, KTYPE_LIST, KTYPE_SET, KTYPE_ZSET, KTYPE_HASH, KTYPE_STREAM,
    KTYPE_OTHER,                /* module types */
    KTYPE_NONE,                 /* TYPE said "none": the key is gone */
    KTYPE_COUNT
};

enum arep_group {
    AREP_LEAKED,                /* rule wants a TTL, key has none */
    AREP_EXPIRING,              /* ttl or default rule, key has a TTL */
    AREP_REGISTERED,            /* durable rule, no TTL */
    AREP_REGISTERED_TTL,        /* durable rule with a TTL: evictable (warning) */
    AREP_UNREGISTERED,          /* default rule (allow), no TTL */
    AREP_GROUPS
};

struct arep_example {
    char *key;                  /* raw bytes, owned */
    size_t len;
};

/* Keys of one rule in one state (or of one group, when summed for output). */
struct arep_tally {
    uint64_t keys;
    uint64_t memory;            /* bytes, MEMORY USAGE; only with --memory */
    uint64_t ttl[AREP_TTL_BUCKETS];
    uint64_t types[KTYPE_COUNT];
    struct arep_example ex[AREP_EXAMPLES];
    int nex;
};

struct arep_rule_stats {
    const struct rule *rule;    /* borrowed from the config */
    struct arep_tally no_ttl;
    struct arep_tally with_ttl;
};

struct arep_pattern {
    char *text;                 /* display form, NUL-terminated, owned; NULL = empty slot */
    size_t len;
    uint64_t hash;
    uint64_t keys;
    uint64_t memory;
    const struct rule *rule;    /* rule of the first key folded here */
    struct arep_example ex;     /* first key folded here */
};

struct arep_patterns {
    struct arep_pattern *v;     /* open addressing, cap a power of two */
    size_t cap;
    size_t n;
    uint64_t other_keys;        /* keys past max_patterns distinct patterns */
    uint64_t other_memory;
};

enum arep_fix_mode { AREP_FIX_OFF, AREP_FIX_DRY_RUN, AREP_FIX_APPLY };

#define AREP_MAX_NODES 1024     /* shards of one cluster audit */

/* --cluster: one node's share of the totals. */
struct arep_node {
    char name[300];             /* its address */
    char role[16];
    uint64_t keys;              /* keys classified there */
    uint64_t leaked;
};

/* What a rule was when the tallies began (arep_rebind compares it). */
struct arep_rule_sig {
    enum rule_kind kind;
    enum rule_action action;
    long long ttl;
    char *prefix;               /* owned */
    size_t prefix_len;
};

struct arep {
    /* What was audited (set by the caller; strings borrowed). */
    const char *config_path;
    char backend[300];
    int db;
    const char *match;          /* NULL = all keys */
    char role[16];              /* "master", "slave" (INFO replication) */
    char redis_version[32];
    int with_memory;
    int top;                    /* patterns to print */
    size_t max_patterns;        /* distinct patterns kept per table (AREP_MAX_PATTERNS;
                                   the background audit keeps fewer) */

    /* Per rule: v[i] is ruleset->v[i], v[nrules - 1] is the default rule. */
    struct arep_rule_stats *rules;
    size_t nrules;
    const struct ruleset *rs;
    struct arep_rule_sig *rule_sig;     /* [nrules]: the rules as they were at arep_init */

    struct arep_patterns patterns[2];   /* [0] leaked, [1] unregistered */

    uint64_t seen;              /* keys found alive and classified */
    uint64_t expired_during;    /* returned by SCAN, gone by PTTL/TYPE */
    uint64_t duplicates;        /* returned twice by SCAN, counted once */
    long long info_keys[2];     /* INFO keyspace keys= at start [0] and end [1]; -1 unknown */
    long long info_expires[2];
    uint64_t elapsed_ms;
    int interrupted;            /* stopped by a signal: partial report */

    /* --fix */
    enum arep_fix_mode fix;
    uint64_t fix_candidates;    /* leaked keys whose rule has a ttl */
    uint64_t fix_no_ttl;        /* leaked keys whose rule has no ttl to give */
    uint64_t fixed;             /* EXPIRE ... NX answered 1 */
    uint64_t fix_skipped;       /* answered 0: got a TTL meanwhile, or gone */
    uint64_t fix_errors;
    char fix_error[256];        /* first error reply */

    /* --cluster: a line per node walked (nodes[nnodes]). */
    struct arep_node *nodes;
    size_t nnodes;
};

void arep_init(struct arep *a, const struct ruleset *rs);
void arep_free(struct arep *a);

/* Account one live key: pttl_ms >= 0 is its TTL, -1 none. mem < 0 when
 * unknown. Returns the key's group. The key bytes are copied if kept. */
enum arep_group arep_add(struct arep *a, const struct rule *r, const char *key, size_t len,
                         long long pttl_ms, enum arep_ktype type, long long mem);

/* The group of a live key under rule r (the table above). */
enum arep_group arep_group_of(const struct rule *r, int has_ttl);

/* A reload gave a new ruleset: point the tallies at its rules when they are
 * the same rules (kind, action, ttl and prefix, in order) and return 0; -1
 * when they differ (the tallies then still name the old ones: start over).
 * The old rules may already be freed: only their addresses are compared. */
int arep_rebind(struct arep *a, const struct ruleset *rs);

/* One key SCAN returned, with what PTTL, TYPE (and MEMORY USAGE, mem < 0
 * when not asked) answered: counted as gone (expired_during) when it no
 * longer exists, else under its rule (rules_match, *rule when not NULL) by
 * arep_add(). Returns its group, or AREP_GONE. The one classification of
 * `ttlguard audit` and the background audit (audit_bg.c). */
#define AREP_GONE (-1)
int arep_classify(struct arep *a, const struct ruleset *rs, const char *key, size_t len,
                  long long pttl_ms, enum arep_ktype type, long long mem,
                  const struct rule **rule);

/* TYPE reply (a status string) to a type. */
enum arep_ktype arep_ktype_parse(const char *s, size_t len);

/* Leaked keys found (the exit status depends on it). */
uint64_t arep_leaked(const struct arep *a);

void arep_print_text(FILE *f, const struct arep *a, int exit_status);
void arep_print_json(FILE *f, const struct arep *a, int exit_status);
/* --html: one self-contained page (html.h) with the same numbers as the
 * text report, charts of leaked keys and memory by pattern and by rule, the
 * TTL distribution, the nodes of a cluster audit and the durable registry
 * with its owners. */
void arep_print_html(FILE *f, const struct arep *a, int exit_status);

/* Fold a key into its pattern (docs/audit.md, Patterns) in display form,
 * at most cap - 1 bytes plus a NUL (cap >= 8); returns its length. Also
 * used by `ttlguard report --html` for the keys of an event log. */
size_t arep_fold(const char *key, size_t len, char *out, size_t cap);

#endif
