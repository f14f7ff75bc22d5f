/*
 * rules: which TTL rule governs a key.
 *
 * A rule is bound to a key prefix (binary safe). The longest matching prefix
 * wins, so a [durable "a:b:"] inside a [ttl "a:"] carves out an exception and
 * the other way round. Keys that match no prefix fall under the default rule.
 *
 * A ruleset is immutable once built: the proxy swaps whole configs on reload,
 * it never edits a ruleset that sessions may be reading.
 */
#ifndef TTLG_RULES_H
#define TTLG_RULES_H

#include <stddef.h>
#include <stdint.h>

enum rule_kind {
    RULE_DEFAULT,       /* [default]: keys under no prefix */
    RULE_TTL,           /* [ttl "PREFIX"]: keys must carry a TTL */
    RULE_DURABLE,       /* [durable "PREFIX"]: accepted durable data */
};

enum rule_action {
    ACTION_ALLOW,       /* default rule only: no checks at all */
    ACTION_LOG,         /* forward unchanged, record the violation */
    ACTION_REWRITE,     /* rewrite the write so the key ends with a TTL */
    ACTION_REJECT,      /* refuse the command with a -TTLGUARD error */
};

enum rule_refresh {
    REFRESH_ALLOW,      /* EXPIRE on a key with a TTL may extend it */
    REFRESH_BOUND,      /* the first TTL is a bound: EXPIRE becomes EXPIRE ... LT */
};

/* A command the proxy cannot judge (an argument the command table does not
 * know, a server newer than the table, a module command without usable key
 * specs, SWAPDB, a name the backend did not list...). */
enum rule_unknown {
    UNKNOWN_PROTECT,    /* the default: as LOG, and under action = rewrite every key it may
                           write that the proxy can find is sent in a form that leaves it
                           with a TTL (the rule's, where it would end without one) */
    UNKNOWN_LOG,        /* forward it, record an `unverified` event */
    UNKNOWN_ALLOW,      /* forward it, record nothing */
    UNKNOWN_REJECT,     /* refuse it with a -TTLGUARD error */
};

struct rule {
    enum rule_kind kind;
    char *prefix;               /* raw bytes, NUL-terminated for convenience; "" for default */
    size_t prefix_len;
    char *label;                /* printable name for errors and events: ttl "session:", default */
    enum rule_action action;    /* durable rules: ACTION_ALLOW */
    long long ttl;              /* seconds given to keys without a TTL; 0 = unset */
    long long max_ttl;          /* seconds; 0 = no cap */
    enum rule_refresh refresh;
    enum rule_unknown unknown;  /* ttl and default rules */
    char *owner;                /* durable rules only, else NULL */
    char *reason;
    char *rebuild;
    int line;                   /* line of the section header in the config file; 0 for a built-in default */
};

struct ruleset {
    struct rule dflt;           /* always present; action ALLOW unless [default] says otherwise */
    struct rule *v;             /* prefix rules, sorted by prefix bytes (memcmp, shorter first on ties) */
    size_t n;
    size_t *parent;             /* parent[i]: index of the longest rule whose prefix is a proper
                                 * prefix of v[i]'s, or SIZE_MAX; lets rules_match back off from
                                 * a near miss without scanning */
    uint8_t first_byte[32];     /* bitmap of the first bytes of all prefixes: the no-rule fast path */
    int has_empty_prefix;       /* a rule with prefix "" matches every key */
};

/* The rule that governs key: the longest matching prefix, or &rs->dflt. Never NULL. */
const struct rule *rules_match(const struct ruleset *rs, const char *key, size_t len);

/* Building: rules_init() gives an empty set with an ALLOW default (its prefix
 * and label are allocated: set the other fields of rs->dflt in place).
 * rules_add() copies *r and takes ownership of its strings; a NULL label is
 * built from kind and prefix (ttl "session:"). rules_finish() sorts and
 * indexes and fails (with the reason in err) on a duplicate prefix; the set
 * must then only be freed. rules_match() is valid after a successful finish. */
void rules_init(struct ruleset *rs);
void rules_add(struct ruleset *rs, const struct rule *r);
int rules_finish(struct ruleset *rs, char *err, size_t errlen);
void rules_free(struct ruleset *rs);

const char *rule_action_name(enum rule_action a);     /* "allow", "log", "rewrite", "reject" */
const char *rule_refresh_name(enum rule_refresh r);   /* "allow", "bound" */
const char *rule_unknown_name(enum rule_unknown u);   /* "protect", "log", "allow", "reject" */
const char *rule_kind_name(enum rule_kind k);         /* "default", "ttl", "durable" */

/* Decode a quoted, binary-safe prefix as written in a section header:
 * "session:" or "bin\x00ary:" (escapes: \xHH \\ \" \n \r \t). text is the
 * whole quoted string, quotes included, nothing after the closing quote. On
 * success *out is a fresh NUL-terminated buffer of *outlen bytes that the
 * caller frees. */
int rules_unquote(const char *text, char **out, size_t *outlen, char *err, size_t errlen);
/* The reverse, for labels and events: printable ASCII as is, quoted, \" \\ \n
 * \r \t escaped and \xHH for any other byte. Returns a fresh string the caller
 * frees; rules_unquote() of it gives back the same bytes. */
char *rules_quote(const char *p, size_t len);

#endif
