/*
 * commands: the command table, per server.
 *
 * One row per command that can write a key (and the few the proxy must know
 * about for other reasons: scripts, blocking commands, commands it cannot
 * judge). For each key a command touches, the table says what the write does
 * to that key's TTL. Rows and names carry the first Redis and Valkey version
 * that has them; a command set is the table as one server has it (Redis 7.0.15,
 * 8.0.6, 8.6.3, Valkey 8.1.1, 9.1.2 are verified, by experiment, not only by
 * reading the docs: tests/unit/test_commands.c and
 * tests/integration/test_command_table.py keep it honest; a few rows of newer
 * servers come from their documentation alone, CMD_DOCUMENTED), plus rows
 * derived from that server's own key specs (COMMAND INFO) for the commands the
 * table does not have: modules, newer servers.
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
    TE_CARRY,       /* goes to another database (MOVE, COPY ... DB n) or server (MIGRATE) with the
                       TTL it has, or the source's: one that has none arrives without */
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
#define CMD_DERIVED     (1u << 6)   /* derived from the server's key specs, not verified */
#define CMD_UNJUDGED    (1u << 7)   /* a derived row whose keys or effects cannot be known
                                       (key specs "unknown", INCOMPLETE, too many) */
#define CMD_PARTIAL     (1u << 8)   /* a container whose rows list only its writes: other
                                       subcommands are reads */
#define CMD_KEYS_UNKNOWN (1u << 9)  /* a derived row that may not find all its keys: the
                                       rules of any key may apply */
#define CMD_DOCUMENTED  (1u << 10)  /* taken from the server's documentation, not verified by
                                       experiment: only servers newer than the verified ones
                                       have such a row (their arguments are FT_NEWER's) */
#define CMD_WIDEINT     (1u << 11)  /* its reply holds integers that may pass 2^53 (INCR,
                                       BITFIELD): a Lua script would round them (Lua numbers
                                       are doubles), so it is never wrapped in one */

/* The server behind the proxy. */
enum server_kind { SRV_REDIS, SRV_VALKEY };
#define SRV_VERSION(major, minor, patch) ((unsigned)(major) * 10000u + (minor) * 100u + (patch))
#define SRV_NEVER 0xffffffffu

struct server_id {
    unsigned char kind;         /* enum server_kind */
    unsigned version;           /* SRV_VERSION */
};

/* Parse "redis:8.0.6", "valkey:9.1" (a missing minor or patch is 0). 0, or -1. */
int server_id_parse(const char *text, struct server_id *out);
/* "valkey 9.1.2" */
void server_id_format(const struct server_id *id, char *buf, size_t len);
/* The server assumed while the backend's identity is unknown: Redis 7.0.0. */
extern const struct server_id server_id_default;

/* What a server's parsers must accept beyond Redis 7.0 (struct cmd_info.feat). */
#define FT_SET_IFEQ         (1u << 0)   /* SET ... IFEQ value (Valkey 8.1) */
#define FT_HSETEX_KEYCOND   (1u << 1)   /* HSETEX key NX|XX ... and Valkey's parsing of it (9.0) */
#define FT_INLINE_JOIN      (1u << 3)   /* inline commands: 'it''s' is one argument (Valkey 9.0) */
#define FT_NEWER            (1u << 2)   /* a version newer than the newest verified one of
                                           its kind: arguments the parsers refuse may be
                                           options they do not know, so cannot be judged */
#define FT_BITOP_MORE       (1u << 4)   /* BITOP DIFF|DIFF1|ANDOR|ONE (Redis 8.2) */
#define FT_STREAM_REFS      (1u << 5)   /* XADD ... KEEPREF|DELREF|ACKED (Redis 8.2) */
#define FT_SET_IFCOND       (1u << 6)   /* SET ... IFEQ|IFNE|IFDEQ|IFDNE and Redis's parsing
                                           of them (8.4) */
#define FT_HSETEX_ANYWHERE  (1u << 7)   /* HSETEX options after FIELDS too (Redis 8.6; 8.4
                                           assumed) */
#define FT_XADD_IDMP        (1u << 8)   /* XADD ... IDMPAUTO pid|IDMP pid iid (Redis 8.6) */
#define FT_HSETEX_FIELDS_ONCE (1u << 9) /* HSETEX refuses a second FIELDS (Redis 8.6.2) */
#define FT_EMPTY_NO_RESET   (1u << 10)  /* an empty request (*0, *-1, a blank line) does not
                                           reset the client: a CLIENT REPLY SKIP before it still
                                           skips the command after it (Redis 8.0 to 8.4; the
                                           real server's version, not the table's) */

/* One key a command writes, as found in a concrete argv. */
struct key_ref {
    int argi;                   /* index of the key in argv */
    unsigned char effect;       /* enum ttl_effect, never TE_NONE in command_keys() output */
    unsigned char ttl_unit;     /* enum ttl_unit, for TE_SETS_TTL */
    int ttl_argi;               /* for TE_SETS_TTL: argv index of the TTL value; -1 otherwise */
    int db_argi;                /* for TE_CARRY: argv index of the destination database; -1:
                                   another server (MIGRATE) */
};

struct command;     /* opaque row of the table */

/* Commands the proxy itself must recognise, beyond the keys they write: the
 * session and the policy switch on these ids after one lookup per request,
 * never on argv[0]'s text. */
enum cmd_id {
    CID_OTHER = 0,
    CID_ACL, CID_AUTH, CID_CLIENT, CID_CLUSTER, CID_CONFIG, CID_DISCARD, CID_EVAL, CID_EVAL_RO,
    CID_EVALSHA, CID_EVALSHA_RO, CID_EXEC, CID_GETSET, CID_HELLO, CID_MONITOR, CID_MSET, CID_MULTI,
    CID_PSUBSCRIBE, CID_PSYNC, CID_PUNSUBSCRIBE, CID_RESET, CID_SCRIPT, CID_SELECT, CID_SET,
    CID_SETNX, CID_SSUBSCRIBE, CID_SUBSCRIBE, CID_SUNSUBSCRIBE, CID_SYNC, CID_UNSUBSCRIBE,
    CID_UNWATCH, CID_WATCH, CID_ZADD, CID_ZINCRBY, CID_QUIT, CID_PING, CID_ROLE, CID_INFO,
};

/* Session flags of a command. */
#define CS_PIN          (1u << 0)   /* gives the connection a state of its own or blocks it
                                       (every CMD_BLOCKING and CMD_SCRIPT row too): a session
                                       sending it leaves the shared connection */

/* One lookup's worth of what the proxy knows about a command name. */
struct cmd_info {
    const struct command *row;  /* the table's row; NULL for reads the table leaves out */
    unsigned short id;          /* enum cmd_id */
    unsigned char sflags;       /* CS_* */
    unsigned short feat;        /* FT_*: the server's, for command_keys() */
};

/* The commands of one server: the table's rows and names that server has,
 * and rows derived from its own key specs. */
struct command_set;

/* The table as the server id has it (no derived rows yet). */
struct command_set *command_set_new(const struct server_id *id);
void command_set_free(struct command_set *set);
const struct server_id *command_set_server(const struct command_set *set);
unsigned command_set_features(const struct command_set *set);     /* FT_* */
/* Which table the set holds, for messages: "verified up to redis 8.6 and
 * valkey 9.1", or "held back to redis 8.0.6 by TTLG_TABLE_VERIFIED". */
void command_set_table_note(const struct command_set *set, char *buf, size_t len);

/* One command as the server describes it in COMMAND INFO, for a row derived
 * from its key specs (command_set_derive()). */
struct derived_spec {
    unsigned flags;             /* DK_* */
    int begin;                  /* enum: 0 index, 1 keyword, 2 unknown */
    int index;                  /* begin_search index, or keyword's startfrom */
    const char *keyword;
    int find;                   /* enum: 0 range, 1 keynum, 2 unknown */
    int lastkey, keystep, limit;            /* range */
    int keynumidx, firstkey;                /* keynum (keystep too) */
};
#define DK_RO           (1u << 0)
#define DK_RW           (1u << 1)
#define DK_OW           (1u << 2)
#define DK_RM           (1u << 3)
#define DK_INSERT       (1u << 4)
#define DK_UPDATE       (1u << 5)
#define DK_DELETE       (1u << 6)
#define DK_INCOMPLETE   (1u << 7)
#define DK_NOT_KEY      (1u << 8)
#define DK_VARIABLE     (1u << 9)

struct derived_cmd {
    const char *name;           /* lowercase or not; "parent|sub" for a subcommand */
    int arity;
    int write, blocking, noscript, movablekeys;     /* the server's command flags */
    int nspecs;
    const struct derived_spec *specs;
};

/* Add a row for a command the set does not know, from the server's own
 * description; subcommands after their container (which must be added
 * first, with no specs). Returns 0, or -1 when the name is taken or too long. */
int command_set_derive(struct command_set *set, const struct derived_cmd *d);

/* Counts for events and /metrics: the table's rows the server has, and the
 * derived rows (of which `unjudged` cannot be judged). */
void command_set_counts(const struct command_set *set, int *table, int *derived, int *unjudged);

/* Look up argv[0] once per request (case-insensitive, binary safe): NULL
 * when the server does not know the name. */
const struct cmd_info *command_resolve(const struct command_set *set, const char *name,
                                       size_t len);

/* The words of a CLIENT or HELLO request the proxy acts on, given ids when
 * the request is resolved (command_words()): nothing compares them as text
 * afterwards. CLIENT: its subcommand, and the word after it. */
enum client_sub {
    CSUB_OTHER = 0, CSUB_REPLY, CSUB_TRACKING, CSUB_SETNAME, CSUB_PAUSE, CSUB_UNPAUSE,
    CSUB_SETINFO, CSUB_NO_EVICT,
};
enum client_arg { CARG_OTHER = 0, CARG_ON, CARG_OFF, CARG_SKIP, CARG_LIB_NAME, CARG_LIB_VER };
/* HELLO: an argument from argv[2] on is AUTH as the server's strcasecmp
 * reads it (up to a NUL): the request carries a login (login.h)... */
#define HELLO_AUTH_ANY      (1u << 0)
/* ...and one is the word AUTH with two more arguments after it (a user and
 * a password): the session counts itself logged in until the reply says */
#define HELLO_AUTH_ARGS     (1u << 1)

struct cmd_words {
    unsigned char sub;          /* enum client_sub: CLIENT's argv[1] */
    unsigned char arg;          /* enum client_arg: CLIENT's argv[2] */
    unsigned char hello;        /* HELLO_AUTH_*: HELLO's options */
};

/* The words of argv (id: its enum cmd_id); all 0 for other commands (the
 * per-request path: no call for them). */
struct cmd_words command_words_of(int id, int argc, const struct slice *argv);
static inline struct cmd_words command_words(int id, int argc, const struct slice *argv)
{
    if (id != CID_CLIENT && id != CID_HELLO)
        return (struct cmd_words){ 0, 0, 0 };
    return command_words_of(id, argc, argv);
}

const char *command_name(const struct command *c);     /* lowercase, e.g. "set" */
unsigned command_flags(const struct command *c);

/* 1 when argc fits the command's arity (N exact, -N at least N). */
int command_arity_ok(const struct command *c, int argc);

/* The keys argv writes, with their effects: only keys whose effect is not
 * TE_NONE. out must have room for argc entries. Returns the number of keys,
 * or -1 when the arguments are malformed in a way the server refuses
 * (wrong arity, bad option, bad numkeys): the proxy then forwards the command
 * unchanged and lets the server answer the error. Returns -2 when the proxy
 * cannot judge this argv: always for CMD_UNVERIFIED and CMD_UNJUDGED commands,
 * for COPY ... DB n (the destination is in another database), and on a
 * server newer than the table (FT_NEWER) for whatever the table would
 * refuse (arguments, their count, a subcommand): the proxy's rule option
 * `unknown` decides. For CMD_SCRIPT commands the keys are
 * the declared ones (numkeys), each with effect TE_OVERWRITE; EVAL_RO,
 * EVALSHA_RO and FCALL_RO return no keys (the server refuses writes inside
 * them). */
int command_keys(const struct cmd_info *ci, int argc, const struct slice *argv,
                 struct key_ref *out);

/* Every key argv names, whatever the command does to it, as far as its key
 * specs find them (options parsers not run): for rules about commands that
 * cannot be judged, whatever argc the table allows. Each key's effect is
 * TE_NONE when its role is one the command only reads (a source), else
 * TE_CREATE: it may be written. Returns
 * the count (0 when none can be found), or -1 when the keys cannot be known
 * (unknown names, CMD_KEYS_UNKNOWN rows). */
int command_key_args(const struct cmd_info *ci, int argc, const struct slice *argv,
                     struct key_ref *out);

/* The keys of a request of argc arguments of which only argv[0..known) are
 * at hand (a large one, streamed): every argument its key specs can name,
 * whatever the command does to it. Returns the count (0 for reads the table
 * leaves out), or -1 when a key may lie at or after `known` or only options,
 * a keyword or a key count would tell where (or the row's keys cannot be
 * judged at all). out must have room for known entries. */
int command_keys_before(const struct cmd_info *ci, int argc, int known,
                        const struct slice *argv, struct key_ref *out);

/* Print the set for `ttlguard commands`: one line per row, sorted by name
 * (derived rows after the table's),
 * fields separated by one space (tests/integration/test_command_table.py
 * parses it):
 *
 *   <name> <arity> <flags> [<role>@<where>:<effects> ...]
 *
 *   name     lowercase; a container's subcommands follow it ("xgroup|create")
 *   arity    as redis: N exactly, -N at least N arguments, the name included
 *   flags    comma-separated: write blocking script unverified expire noscript
 *            derived unjudged partial documented; "-" when none ("documented":
 *            the row comes from the server's documentation, not from an
 *            experiment, CMD_DOCUMENTED)
 *   role     key, source or destination
 *   where    N           argv[N]
 *            N..L        a range from argv[N] to argv[N+L] (L > 0) or to
 *                        argv[argc+L] (L < 0); "/S" after it: every S-th;
 *                        "%D": the range is the first 1/D of the arguments
 *                        from argv[N] on (L counts back from its end)
 *            N+numkeys   argv[N] is the number of keys, which follow it;
 *                        "/S" after it: every S-th
 *            after(W,F)  the key follows the word W, searched from argv[F]
 *                        (F < 0: from the end, backwards); a range may follow
 *            opt(W,...)  the key follows one of the option words W, the last
 *                        one given wins; absent without the option
 *   effects  "|"-separated ttl_effect_name()s the key can have; more than one:
 *            the arguments decide
 *
 * e.g. "set -3 write key@1:none|create|overwrite|sets-ttl",
 *      "zunionstore -4 write destination@1:overwrite source@2+numkeys:none" */
void commands_print(FILE *out, const struct command_set *set);

const char *ttl_effect_name(enum ttl_effect e);  /* "none", "create", "overwrite", "persist", "sets-ttl" */

#endif
