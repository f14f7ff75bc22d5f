/*
 * commands: the Redis 7.0 command table.
 *
 * One row per command that can write a key (and the few the proxy must know
 * about for other reasons: scripts, blocking commands, commands it cannot
 * judge). For each key a command touches, the table says what the write does
 * to that key's TTL. The classes were checked against a real redis-server
 * 7.0.15, by experiment, not only by reading the docs: tests/unit/test_commands.c
 * and tests/integration/test_command_table.py keep it honest.
 */
#ifndef TTLG_COMMANDS_H
#define TTLG_COMMANDS_H

#include <stdio.h>
#include "util.h"

/* What a write does to one key's TTL. */
enum ttl_effect {
    TE_NONE = 0,    /* reads, deletes, pops, or modifies only an existing key keeping its TTL */
    TE_CREATE,      /* may create the key without a TTL; an existing TTL is kept (INCR, HSET, SADD,
                       APPEND, LPUSH, SETNX, SET ... NX, SET ... KEEPTTL, SMOVE/LMOVE destination) */
    TE_OVERWRITE,   /* may create the key without a TTL and drops (or replaces) an existing TTL
                       (SET, GETSET, MSET, *STORE destinations, BITOP, COPY ... REPLACE, RENAME target) */
    TE_PERSIST,     /* removes the TTL explicitly (PERSIST, GETEX ... PERSIST) */
    TE_SETS_TTL,    /* sets an explicit TTL (SET ... EX, SETEX, GETEX ... EX, EXPIRE family, RESTORE ttl>0) */
};

/* How the TTL argument of a TE_SETS_TTL key is expressed. */
enum ttl_unit {
    TTL_SEC,        /* relative seconds (EX, SETEX, EXPIRE) */
    TTL_MS,         /* relative milliseconds (PX, PSETEX, PEXPIRE, RESTORE without ABSTTL) */
    TTL_UNIX_SEC,   /* absolute unix seconds (EXAT, EXPIREAT) */
    TTL_UNIX_MS,    /* absolute unix milliseconds (PXAT, PEXPIREAT, RESTORE ... ABSTTL) */
};

/* Command flags. */
#define CMD_WRITE       (1u << 0)   /* the server flags it `write` */
#define CMD_BLOCKING    (1u << 1)   /* may block the client: must not be run inside a script */
#define CMD_SCRIPT      (1u << 2)   /* EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO:
                                       keys are declared, writes happen out of the proxy's sight */
#define CMD_UNVERIFIED  (1u << 3)   /* the proxy cannot judge it (SWAPDB, MIGRATE, ...): pass and record */
#define CMD_EXPIRE      (1u << 4)   /* EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: subject to refresh = bound;
                                       the NX/XX/GT/LT flags, if any, are argv[3..] (several may be
                                       given, e.g. XX GT; NX goes with none of the others) */
#define CMD_NOSCRIPT    (1u << 5)   /* not allowed inside a Lua script */

/* One key a command writes, as found in a concrete argv. */
struct key_ref {
    int argi;                   /* index of the key in argv */
    unsigned char effect;       /* enum ttl_effect, never TE_NONE in command_keys() output */
    unsigned char ttl_unit;     /* enum ttl_unit, for TE_SETS_TTL */
    int ttl_argi;               /* for TE_SETS_TTL: argv index of the TTL value; -1 otherwise */
};

struct command;     /* opaque row of the table */

/* Commands the proxy itself must recognise, beyond the keys they write: the
 * session and the policy switch on these ids after one lookup per request,
 * never on argv[0]'s text. */
enum cmd_id {
    CID_OTHER = 0,
    CID_ACL, CID_AUTH, CID_CLIENT, CID_CONFIG, CID_DISCARD, CID_EVAL, CID_EVAL_RO,
    CID_EVALSHA, CID_EVALSHA_RO, CID_EXEC, CID_GETSET, CID_HELLO, CID_MONITOR, CID_MULTI,
    CID_PSUBSCRIBE, CID_PSYNC, CID_PUNSUBSCRIBE, CID_RESET, CID_SCRIPT, CID_SELECT, CID_SET,
    CID_SETNX, CID_SSUBSCRIBE, CID_SUBSCRIBE, CID_SUNSUBSCRIBE, CID_SYNC, CID_UNSUBSCRIBE,
    CID_UNWATCH, CID_WATCH, CID_ZADD, CID_ZINCRBY,
};

/* Session flags of a command. */
#define CS_PIN          (1u << 0)   /* gives the connection a state of its own or blocks it
                                       (every CMD_BLOCKING and CMD_SCRIPT row too): a session
                                       sending it leaves the shared connection */

/* One lookup's worth of what the proxy knows about a command name. */
struct cmd_info {
    const struct command *row;  /* the table's row; NULL for reads the table leaves out */
    unsigned short id;          /* enum cmd_id */
    unsigned short sflags;      /* CS_* */
};

/* Look up argv[0] once per request (case-insensitive, binary safe): NULL
 * when redis-server does not know the name. */
const struct cmd_info *command_resolve(const char *name, size_t len);

/* Look up argv[0] (case-insensitive, binary safe). NULL when the command is
 * not in the table: the proxy treats such a command as one it cannot judge
 * only when it is not a known read-only command (see command_is_known()). */
const struct command *command_lookup(const char *name, size_t len);

/* 1 when name is a command redis-server 7.0.15 knows (read or write). */
int command_is_known(const char *name, size_t len);

const char *command_name(const struct command *c);     /* lowercase, e.g. "set" */
unsigned command_flags(const struct command *c);

/* 1 when argc fits the command's arity (N exact, -N at least N). */
int command_arity_ok(const struct command *c, int argc);

/* The keys argv writes, with their effects: only keys whose effect is not
 * TE_NONE. out must have room for argc entries. Returns the number of keys,
 * or -1 when the arguments are malformed in a way redis-server refuses
 * (wrong arity, bad option, bad numkeys): the proxy then forwards the command
 * unchanged and lets Redis answer the error. Returns -2 when the proxy cannot
 * judge this argv: always for CMD_UNVERIFIED commands, and for COPY ... DB n
 * (the destination is in another database); pass it and record it as
 * unverified. For CMD_SCRIPT commands the keys are the declared ones
 * (numkeys), each with effect TE_OVERWRITE; EVAL_RO, EVALSHA_RO and FCALL_RO
 * return no keys (redis refuses writes inside them). */
int command_keys(const struct command *c, int argc, const struct slice *argv, struct key_ref *out);

/* Print the table for `ttlguard commands`: one line per row, sorted by name,
 * fields separated by one space (tests/integration/test_command_table.py
 * parses it):
 *
 *   <name> <arity> <flags> [<role>@<where>:<effects> ...]
 *
 *   name     lowercase; a container's subcommands follow it ("xgroup|create")
 *   arity    as redis: N exactly, -N at least N arguments, the name included
 *   flags    comma-separated: write blocking script unverified expire noscript;
 *            "-" when none
 *   role     key, source or destination
 *   where    N           argv[N]
 *            N..L        a range from argv[N] to argv[N+L] (L > 0) or to
 *                        argv[argc+L] (L < 0); "/S" after it: every S-th;
 *                        "%D": the range is the first 1/D of the arguments
 *                        from argv[N] on (L counts back from its end)
 *            N+numkeys   argv[N] is the number of keys, which follow it
 *            after(W,F)  the key follows the word W, searched from argv[F]
 *                        (F < 0: from the end, backwards); a range may follow
 *            opt(W,...)  the key follows one of the option words W, the last
 *                        one given wins; absent without the option
 *   effects  "|"-separated ttl_effect_name()s the key can have; more than one:
 *            the arguments decide
 *
 * e.g. "set -3 write key@1:none|create|overwrite|sets-ttl",
 *      "zunionstore -4 write destination@1:overwrite source@2+numkeys:none" */
void commands_print(FILE *out);

const char *ttl_effect_name(enum ttl_effect e);  /* "none", "create", "overwrite", "persist", "sets-ttl" */

#endif
