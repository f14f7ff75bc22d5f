/*
 * Unit tests for the command table: lookup, flags, and command_keys() for
 * every argument-dependent case. What each case expects was checked against
 * redis-server 7.0.15 (tests/integration/tools/probe_ttl_effects.py runs the
 * same kinds of argv against the server).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#define MAX_WORDS 64

/* The table as Redis 7.0 has it, unless a test asks for another server. */
static struct command_set *test_set(void)
{
    static struct command_set *set;

    if (set == NULL)
        set = command_set_new(&server_id_default);
    return set;
}

static const struct command *command_lookup(const char *name, size_t len)
{
    const struct cmd_info *ci = command_resolve(test_set(), name, len);

    return ci != NULL ? ci->row : NULL;
}

static int command_is_known(const char *name, size_t len)
{
    return command_resolve(test_set(), name, len) != NULL;
}

/* A space-separated command line split into slices (no binary args). */
struct line {
    char buf[1024];
    struct slice argv[MAX_WORDS];
    int argc;
};

static void split(struct line *l, const char *text)
{
    cr_assert_lt(strlen(text), sizeof l->buf);
    strcpy(l->buf, text);
    l->argc = 0;
    for (char *save = NULL, *w = strtok_r(l->buf, " ", &save); w != NULL;
         w = strtok_r(NULL, " ", &save)) {
        cr_assert_lt(l->argc, MAX_WORDS);
        l->argv[l->argc].p = w;
        l->argv[l->argc].len = strlen(w);
        l->argc++;
    }
}

/* command_keys() of a slice argv; out gets room for argc keys plus a canary. */
static int keys_argv(int argc, const struct slice *argv, struct key_ref *out)
{
    const struct cmd_info *ci = command_resolve(test_set(), argv[0].p, argv[0].len);

    cr_assert(ci != NULL && ci->row != NULL, "no row for %.*s", (int)argv[0].len, argv[0].p);
    return command_keys(ci, argc, argv, out);
}

static int keys_of(const char *text, struct key_ref *out)
{
    struct line l;

    split(&l, text);
    int n = keys_argv(l.argc, l.argv, out);
    cr_assert_leq(n, l.argc, "%s: more keys than arguments", text);
    return n;
}

/* Asserts that text writes exactly one key, at argi, with effect. */
static void expect_one(const char *text, int argi, enum ttl_effect effect)
{
    struct key_ref k[MAX_WORDS];
    int n = keys_of(text, k);

    cr_assert_eq(n, 1, "%s: %d keys, want 1", text, n);
    cr_assert_eq(k[0].argi, argi, "%s: key at %d, want %d", text, k[0].argi, argi);
    cr_assert_eq(k[0].effect, effect, "%s: effect %s, want %s", text,
                 ttl_effect_name(k[0].effect), ttl_effect_name(effect));
    if (effect != TE_SETS_TTL)
        cr_assert_eq(k[0].ttl_argi, -1, "%s: ttl_argi %d without sets-ttl", text, k[0].ttl_argi);
}

static void expect_ttl(const char *text, int argi, int ttl_argi, enum ttl_unit unit)
{
    struct key_ref k[MAX_WORDS];

    expect_one(text, argi, TE_SETS_TTL);
    keys_of(text, k);
    cr_assert_eq(k[0].ttl_argi, ttl_argi, "%s: ttl_argi %d, want %d", text, k[0].ttl_argi, ttl_argi);
    cr_assert_eq(k[0].ttl_unit, unit, "%s: unit %d, want %d", text, k[0].ttl_unit, unit);
}

static void expect_rc(const char *text, int rc)
{
    struct key_ref k[MAX_WORDS];
    int n = keys_of(text, k);

    cr_assert_eq(n, rc, "%s: command_keys() = %d, want %d", text, n, rc);
}

/* Asserts that text carries exactly one key, at argi, to the database at
 * db_argi (-1: another server). */
static void expect_carry(const char *text, int argi, int db_argi)
{
    struct key_ref k[MAX_WORDS];

    expect_one(text, argi, TE_CARRY);
    keys_of(text, k);
    cr_assert_eq(k[0].db_argi, db_argi, "%s: db_argi %d, want %d", text, k[0].db_argi, db_argi);
}

#define expect_malformed(text) expect_rc(text, -1)
#define expect_nokeys(text) expect_rc(text, 0)

/* ---- lookup ------------------------------------------------------------ */

Test(lookup, case_insensitive)
{
    const struct command *c = command_lookup("set", 3);

    cr_assert_not_null(c);
    cr_assert_eq(command_lookup("SET", 3), c);
    cr_assert_eq(command_lookup("sEt", 3), c);
    cr_assert_str_eq(command_name(c), "set");
    cr_assert_str_eq(command_name(command_lookup("RESTORE-ASKING", 14)), "restore-asking");
    cr_assert_str_eq(command_name(command_lookup("GeoRadiusByMember", 17)), "georadiusbymember");
}

Test(lookup, length_is_exact)
{
    /* Redis looks commands up by their full, binary length. */
    cr_assert_null(command_lookup("set\0", 4));
    cr_assert_eq(command_is_known("set\0", 4), 0);
    cr_assert_null(command_lookup("setx", 3 + 1));
    cr_assert_not_null(command_lookup("setex", 5));
    cr_assert_null(command_lookup("se", 2));
    cr_assert_null(command_lookup("", 0));
    cr_assert_eq(command_is_known("", 0), 0);
    char longname[300];
    memset(longname, 'a', sizeof longname);
    cr_assert_null(command_lookup(longname, sizeof longname));
    cr_assert_eq(command_is_known(longname, sizeof longname), 0);
}

/* One lookup gives the row, the id and the session flags the proxy switches on. */
Test(lookup, resolve_gives_id_and_flags)
{
    const struct cmd_info *get = command_resolve(test_set(), "GET", 3);
    cr_assert_not_null(get);
    cr_assert_null(get->row);                   /* a read: not in the key table */
    cr_assert_eq(get->id, CID_OTHER);
    cr_assert_eq(get->sflags & CS_PIN, 0);

    const struct cmd_info *set = command_resolve(test_set(), "sEt", 3);
    cr_assert_eq(set->row, command_lookup("set", 3));
    cr_assert_eq(set->id, CID_SET);
    cr_assert_eq(set->sflags & CS_PIN, 0);

    /* Blocking rows and scripts pin from the table's own flags. */
    const char *pins[] = { "blpop", "brpoplpush", "xreadgroup", "xread", "eval", "evalsha",
                           "fcall_ro", "auth", "multi", "watch", "subscribe", "monitor",
                           "sync", "psync", "wait", "quit", "reset", "readonly", "asking" };
    for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
        const struct cmd_info *ci = command_resolve(test_set(), pins[i], strlen(pins[i]));
        cr_assert_not_null(ci, "%s", pins[i]);
        cr_assert(ci->sflags & CS_PIN, "%s pins", pins[i]);
    }
    /* State the proxy can carry for a shared session: decided by the
     * session from the arguments, not by a flag. */
    const char *carried[] = { "select", "hello", "client" };
    for (size_t i = 0; i < sizeof carried / sizeof carried[0]; i++)
        cr_assert_eq(command_resolve(test_set(), carried[i], strlen(carried[i]))->sflags & CS_PIN, 0,
                     "%s", carried[i]);
    cr_assert_eq(command_resolve(test_set(), "select", 6)->id, CID_SELECT);
    cr_assert_eq(command_resolve(test_set(), "HELLO", 5)->id, CID_HELLO);
    cr_assert_null(command_resolve(test_set(), "nosuch", 6));
    cr_assert_null(command_resolve(test_set(), "get\0", 4));
}

/* command_words() of a command line, whose argv[0] has enum cmd_id id. */
static struct cmd_words words_of(int id, const char *text)
{
    static struct line l;
    split(&l, text);
    return command_words(id, l.argc, l.argv);
}

Test(words, client_subcommands_and_their_word)
{
    static const struct { int id; const char *text; int sub, arg; } cases[] = {
        { CID_CLIENT, "client REPLY off", CSUB_REPLY, CARG_OFF },
        { CID_CLIENT, "CLIENT setinfo LIB-VER 1.0", CSUB_SETINFO, CARG_LIB_VER },
        { CID_CLIENT, "client No-Evict on", CSUB_NO_EVICT, CARG_ON },
        { CID_CLIENT, "client list", CSUB_OTHER, CARG_OTHER },
        { CID_OTHER, "get reply", CSUB_OTHER, CARG_OTHER },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cmd_words w = words_of(cases[i].id, cases[i].text);
        cr_assert_eq(w.sub, cases[i].sub, "%s", cases[i].text);
        cr_assert_eq(w.arg, cases[i].arg, "%s", cases[i].text);
    }
}

Test(words, hello_auth)
{
    cr_assert_eq(words_of(CID_HELLO, "hello 3 AUTH u p").hello, HELLO_AUTH_ANY | HELLO_AUTH_ARGS);
    cr_assert_eq(words_of(CID_HELLO, "hello 3 setname auth").hello, HELLO_AUTH_ANY);
    cr_assert_eq(words_of(CID_HELLO, "hello auth u p").hello, 0);    /* argv[1] is protover */
    struct slice nul[5] = { { "HELLO", 5 }, { "3", 1 }, { "auth\0x", 6 }, { "u", 1 }, { "p", 1 } };
    cr_assert_eq(command_words(CID_HELLO, 5, nul).hello, HELLO_AUTH_ANY);
}

Test(lookup, reads_are_known_but_not_in_the_table)
{
    static const char *reads[] = {
        "get", "GET", "mget", "config", "client", "hello", "multi", "exec", "select", "ping",
        "georadius_ro", "sort_ro", "bitfield_ro", "sintercard", "zunion", "pfcount", "object",
        "substr", "lcs", "expiretime", "ttl", "command",
    };
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        cr_assert(command_is_known(reads[i], strlen(reads[i])), "%s", reads[i]);
        cr_assert_null(command_lookup(reads[i], strlen(reads[i])), "%s", reads[i]);
    }
}

Test(lookup, unknown_commands)
{
    static const char *unknown[] = {
        "nosuch", "json.set", "ft.create", "setx", "getdelx", "xgroup|create", "config|get", "hsetex",
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        cr_assert_eq(command_is_known(unknown[i], strlen(unknown[i])), 0, "%s", unknown[i]);
        cr_assert_null(command_lookup(unknown[i], strlen(unknown[i])), "%s", unknown[i]);
    }
}

Test(lookup, rows_are_known)
{
    static const char *rows[] = {
        "set", "append", "xgroup", "function", "eval", "eval_ro", "fcall_ro", "swapdb",
        "migrate", "debug", "xread", "blmpop", "restore-asking", "pfdebug", "move", "flushall",
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cr_assert_not_null(command_lookup(rows[i], strlen(rows[i])), "%s", rows[i]);
        cr_assert(command_is_known(rows[i], strlen(rows[i])), "%s", rows[i]);
    }
}

/* ---- flags and arity --------------------------------------------------- */

static unsigned flags_of(const char *name)
{
    const struct command *c = command_lookup(name, strlen(name));

    cr_assert_not_null(c, "%s", name);
    return command_flags(c);
}

Test(flags, match_the_server)
{
    cr_assert_eq(flags_of("set"), CMD_WRITE);
    cr_assert_eq(flags_of("blpop"), CMD_WRITE | CMD_BLOCKING | CMD_NOSCRIPT);
    cr_assert_eq(flags_of("blmove"), CMD_WRITE | CMD_BLOCKING | CMD_NOSCRIPT);
    /* BLMPOP and BZMPOP run non-blocking inside scripts: no noscript. */
    cr_assert_eq(flags_of("blmpop"), CMD_WRITE | CMD_BLOCKING);
    cr_assert_eq(flags_of("bzmpop"), CMD_WRITE | CMD_BLOCKING);
    cr_assert_eq(flags_of("xread"), CMD_BLOCKING);
    cr_assert_eq(flags_of("xreadgroup"), CMD_WRITE | CMD_BLOCKING);
    cr_assert_eq(flags_of("expire"), CMD_WRITE | CMD_EXPIRE);
    cr_assert_eq(flags_of("pexpireat"), CMD_WRITE | CMD_EXPIRE);
    cr_assert_eq(flags_of("setex") & CMD_EXPIRE, 0);
}

Test(flags, scripts)
{
    static const char *scripts[] = { "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro" };
    for (size_t i = 0; i < 6; i++) {
        unsigned f = flags_of(scripts[i]);
        cr_assert(f & CMD_SCRIPT, "%s", scripts[i]);
        cr_assert(f & CMD_NOSCRIPT, "%s", scripts[i]);
        cr_assert_eq(f & CMD_WRITE, 0, "%s: the server does not flag scripts write", scripts[i]);
    }
}

Test(flags, unverified)
{
    cr_assert(flags_of("swapdb") & CMD_UNVERIFIED);
    cr_assert_eq(flags_of("migrate") & CMD_UNVERIFIED, 0);
    cr_assert(flags_of("debug") & CMD_UNVERIFIED);
    cr_assert_eq(flags_of("move") & CMD_UNVERIFIED, 0);
    cr_assert_eq(flags_of("copy") & CMD_UNVERIFIED, 0);
}

Test(arity, exact_and_minimum)
{
    const struct command *set = command_lookup("set", 3);
    const struct command *getset = command_lookup("getset", 6);

    cr_assert(command_arity_ok(set, 3));
    cr_assert(command_arity_ok(set, 9));
    cr_assert_not(command_arity_ok(set, 2));
    cr_assert(command_arity_ok(getset, 3));
    cr_assert_not(command_arity_ok(getset, 4));
    cr_assert_not(command_arity_ok(getset, 2));
    expect_malformed("SET k");
    expect_malformed("GETSET k v w");
    expect_malformed("APPEND k");
    expect_malformed("BITOP AND d");
    expect_malformed("RESTORE k 0");
}

/* ---- SET and GETEX ----------------------------------------------------- */

Test(set, overwrite_create_none)
{
    expect_one("SET k v", 1, TE_OVERWRITE);
    expect_one("set k v get", 1, TE_OVERWRITE);
    expect_one("SET k v XX", 1, TE_OVERWRITE);
    expect_one("SET k v XX GET", 1, TE_OVERWRITE);
    expect_one("SET k v NX", 1, TE_CREATE);
    expect_one("SET k v NX GET", 1, TE_CREATE);
    expect_one("SET k v GET nx", 1, TE_CREATE);
    expect_one("SET k v KEEPTTL", 1, TE_CREATE);
    expect_one("SET k v NX KEEPTTL", 1, TE_CREATE);
    /* XX with KEEPTTL never creates and keeps the TTL. */
    expect_nokeys("SET k v XX KEEPTTL");
    expect_nokeys("SET k v keepttl GET xx");
}

Test(set, expiry)
{
    expect_ttl("SET k v EX 10", 1, 4, TTL_SEC);
    expect_ttl("SET k v px 10", 1, 4, TTL_MS);
    expect_ttl("SET k v EXAT 2000000000", 1, 4, TTL_UNIX_SEC);
    expect_ttl("SET k v PXAT 2000000000000", 1, 4, TTL_UNIX_MS);
    expect_ttl("SET k v NX GET EX 10", 1, 6, TTL_SEC);
    expect_ttl("SET k v XX PX 10", 1, 5, TTL_MS);
    /* Repeating the same expiry is accepted; the last one wins. */
    expect_ttl("SET k v EX 10 EX 20", 1, 6, TTL_SEC);
    expect_ttl("SET k v EX junk EX 20", 1, 6, TTL_SEC);
    /* Huge, but "now + ttl" still fits in a long long; absolute ones are
     * not added to the clock at all. */
    expect_ttl("SET k v PX 9223372036854776", 1, 4, TTL_MS);
    expect_ttl("SET k v EXAT 9223372036854775", 1, 4, TTL_UNIX_SEC);
    expect_ttl("SET k v PXAT 9223372036854775807", 1, 4, TTL_UNIX_MS);
}

Test(set, malformed)
{
    expect_malformed("SET k v NX XX");
    expect_malformed("SET k v XX NX");
    expect_malformed("SET k v EX");
    expect_malformed("SET k v EX 0");
    expect_malformed("SET k v EX -1");
    expect_malformed("SET k v EX 1.5");
    expect_malformed("SET k v EX ten");
    expect_malformed("SET k v EX 10 PX 10");
    expect_malformed("SET k v EXAT 10 EX 10");
    expect_malformed("SET k v EX 10 EX 0");
    expect_malformed("SET k v KEEPTTL EX 10");
    expect_malformed("SET k v EX 10 KEEPTTL");
    expect_malformed("SET k v PERSIST");
    expect_malformed("SET k v FOO");
    expect_malformed("SET k v NX v2");
    /* Milliseconds overflow; or adding the clock does. */
    expect_malformed("SET k v EX 9223372036854776");
    expect_malformed("SET k v EX 9223372036854775");
    expect_malformed("SET k v PX 9223372036854775807");
    expect_malformed("GETEX k PX 9223372036854775807");
    expect_malformed("PSETEX k 9223372036854775807 v");
}

Test(set, options_compare_like_strcasecmp)
{
    /* Redis sees "nx\0junk" as NX (it compares NUL-terminated strings): the
     * table must too, or the option would be hidden from the proxy. */
    struct slice argv[4] = { { "SET", 3 }, { "k", 1 }, { "v", 1 }, { "nx\0junk", 7 } };
    struct key_ref k[4];

    cr_assert_eq(keys_argv(4, argv, k), 1);
    cr_assert_eq(k[0].effect, TE_CREATE);

    struct slice bad[4] = { { "SET", 3 }, { "k", 1 }, { "v", 1 }, { "n\0x", 3 } };
    cr_assert_eq(keys_argv(4, bad, k), -1);

    struct slice ex[5] = { { "SET", 3 }, { "k", 1 }, { "v", 1 }, { "EX\0", 3 }, { "10", 2 } };
    cr_assert_eq(keys_argv(5, ex, k), 1);
    cr_assert_eq(k[0].effect, TE_SETS_TTL);
    cr_assert_eq(k[0].ttl_argi, 4);

    /* But an integer is the whole argument. */
    struct slice nul[5] = { { "SET", 3 }, { "k", 1 }, { "v", 1 }, { "EX", 2 }, { "10\0", 3 } };
    cr_assert_eq(keys_argv(5, nul, k), -1);
}

Test(getex, effects)
{
    expect_nokeys("GETEX k");
    expect_one("GETEX k PERSIST", 1, TE_PERSIST);
    expect_one("getex k persist persist", 1, TE_PERSIST);
    expect_ttl("GETEX k EX 10", 1, 3, TTL_SEC);
    expect_ttl("GETEX k PX 10", 1, 3, TTL_MS);
    expect_ttl("GETEX k EXAT 2000000000", 1, 3, TTL_UNIX_SEC);
    expect_ttl("GETEX k PXAT 2000000000000", 1, 3, TTL_UNIX_MS);
}

Test(getex, malformed)
{
    expect_malformed("GETEX k PERSIST EX 10");
    expect_malformed("GETEX k EX 10 PERSIST");
    expect_malformed("GETEX k EX 10 PX 10");
    expect_malformed("GETEX k EX 0");
    expect_malformed("GETEX k EX");
    expect_malformed("GETEX k NX");
    expect_malformed("GETEX k XX");
    expect_malformed("GETEX k GET");
    expect_malformed("GETEX k KEEPTTL");
}

Test(setex, psetex)
{
    expect_ttl("SETEX k 10 v", 1, 2, TTL_SEC);
    expect_ttl("PSETEX k 10 v", 1, 2, TTL_MS);
    expect_malformed("SETEX k 0 v");
    expect_malformed("SETEX k -1 v");
    expect_malformed("SETEX k ten v");
    expect_malformed("PSETEX k 0 v");
    expect_malformed("SETEX k 10");
}

Test(strings, create_and_overwrite)
{
    expect_one("SETNX k v", 1, TE_CREATE);
    expect_one("GETSET k v", 1, TE_OVERWRITE);
    expect_one("APPEND k v", 1, TE_CREATE);
    expect_one("SETRANGE k 0 v", 1, TE_CREATE);
    expect_one("SETBIT k 7 1", 1, TE_CREATE);
    expect_one("INCR k", 1, TE_CREATE);
    expect_one("DECRBY k 2", 1, TE_CREATE);
    expect_one("INCRBYFLOAT k 1.5", 1, TE_CREATE);
    expect_nokeys("GETDEL k");
}

Test(mset, keys_and_pairs)
{
    struct key_ref k[8];

    cr_assert_eq(keys_of("MSET a 1 b 2 c 3", k), 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(k[i].argi, 1 + 2 * i);
        cr_assert_eq(k[i].effect, TE_OVERWRITE);
    }
    cr_assert_eq(keys_of("MSETNX a 1 b 2", k), 2);
    cr_assert_eq(k[1].argi, 3);
    cr_assert_eq(k[1].effect, TE_CREATE);
    expect_malformed("MSET a 1 b");
    expect_malformed("MSETNX a 1 b");
}

/* ---- expiry commands --------------------------------------------------- */

Test(expire, units_and_flags)
{
    expect_ttl("EXPIRE k 10", 1, 2, TTL_SEC);
    expect_ttl("PEXPIRE k 10", 1, 2, TTL_MS);
    expect_ttl("EXPIREAT k 2000000000", 1, 2, TTL_UNIX_SEC);
    expect_ttl("PEXPIREAT k 2000000000000", 1, 2, TTL_UNIX_MS);
    /* A negative or past TTL deletes the key; still reported, the policy decides. */
    expect_ttl("EXPIRE k -10", 1, 2, TTL_SEC);
    expect_ttl("EXPIREAT k 0", 1, 2, TTL_UNIX_SEC);
    expect_ttl("EXPIRE k 10 NX", 1, 2, TTL_SEC);
    expect_ttl("EXPIRE k 10 xx gt", 1, 2, TTL_SEC);
    expect_ttl("PEXPIREAT k 9223372036854775807", 1, 2, TTL_UNIX_MS);
    expect_ttl("EXPIREAT k 9223372036854775", 1, 2, TTL_UNIX_SEC);
    expect_ttl("PEXPIRE k -9223372036854775808", 1, 2, TTL_MS);
}

Test(expire, malformed)
{
    expect_malformed("EXPIRE k 10 NX XX");
    expect_malformed("EXPIRE k 10 NX GT");
    expect_malformed("EXPIRE k 10 GT LT");
    expect_malformed("EXPIRE k 10 FOO");
    expect_malformed("EXPIRE k ten");
    expect_malformed("EXPIRE k 1.5");
    expect_malformed("EXPIRE k 9223372036854776");
    expect_malformed("EXPIREAT k -9223372036854776");
    /* now + ttl overflows */
    expect_malformed("EXPIRE k 9223372036854775");
    expect_malformed("PEXPIRE k 9223372036854775807");
    expect_malformed("EXPIRE k");
}

Test(persist, persist)
{
    expect_one("PERSIST k", 1, TE_PERSIST);
    expect_malformed("PERSIST k j");
}

/* ---- keyspace ---------------------------------------------------------- */

Test(copy, replace_and_db)
{
    expect_one("COPY a b", 2, TE_CREATE);
    expect_one("COPY a b REPLACE", 2, TE_OVERWRITE);
    expect_one("copy a b replace replace", 2, TE_OVERWRITE);
    /* Another database: the destination is carried there, whatever REPLACE
     * says, and may have the source's name. */
    expect_carry("COPY a b DB 1", 2, 4);
    expect_carry("COPY a b REPLACE DB 0", 2, 5);
    expect_carry("copy a a db 1 replace", 2, 4);
    expect_malformed("COPY a b DB");
    expect_malformed("COPY a b DB one");
    expect_malformed("COPY a b DB 99999999999");
    expect_malformed("COPY a b FOO");
    expect_malformed("COPY a a");
}

Test(rename, targets)
{
    expect_one("RENAME a b", 2, TE_OVERWRITE);
    expect_one("RENAMENX a b", 2, TE_CREATE);
}

Test(restore, ttl_and_replace)
{
    expect_one("RESTORE k 0 payload", 1, TE_CREATE);
    expect_one("RESTORE k 0 payload REPLACE", 1, TE_OVERWRITE);
    expect_one("RESTORE k 0 payload ABSTTL", 1, TE_CREATE);
    expect_ttl("RESTORE k 100 payload", 1, 2, TTL_MS);
    expect_ttl("RESTORE k 100 payload REPLACE IDLETIME 5", 1, 2, TTL_MS);
    expect_ttl("RESTORE k 2000000000000 payload ABSTTL", 1, 2, TTL_UNIX_MS);
    expect_ttl("restore k 2000000000000 payload replace absttl freq 5", 1, 2, TTL_UNIX_MS);
    expect_one("RESTORE-ASKING k 0 payload REPLACE", 1, TE_OVERWRITE);
    expect_ttl("RESTORE-ASKING k 100 payload", 1, 2, TTL_MS);
}

Test(restore, malformed)
{
    expect_malformed("RESTORE k -1 payload");
    expect_malformed("RESTORE k ten payload");
    expect_malformed("RESTORE k 0 payload FOO");
    expect_malformed("RESTORE k 0 payload IDLETIME");
    expect_malformed("RESTORE k 0 payload IDLETIME -1");
    expect_malformed("RESTORE k 0 payload FREQ 256");
    expect_malformed("RESTORE k 0 payload IDLETIME 1 FREQ 1");
    expect_malformed("RESTORE k 0 payload FREQ 1 IDLETIME 1");
}

Test(sort, store)
{
    expect_nokeys("SORT k");
    expect_nokeys("SORT k BY w_* GET # LIMIT 0 10 DESC ALPHA");
    expect_one("SORT k STORE d", 3, TE_OVERWRITE);
    expect_one("sort k by nosort store d", 5, TE_OVERWRITE);
    /* The last STORE wins. */
    expect_one("SORT k STORE a ALPHA STORE b", 6, TE_OVERWRITE);
    /* GET's pattern is not an option. */
    expect_nokeys("SORT k GET store");
    expect_malformed("SORT k STORE");
    expect_malformed("SORT k LIMIT 0");
    expect_malformed("SORT k LIMIT a 1");
    expect_malformed("SORT k FOO");
}

/* ---- lists, sets, hashes ----------------------------------------------- */

Test(moves, destinations_create)
{
    expect_one("LMOVE s d LEFT RIGHT", 2, TE_CREATE);
    expect_one("BLMOVE s d right left 0", 2, TE_CREATE);
    expect_one("RPOPLPUSH s d", 2, TE_CREATE);
    expect_one("BRPOPLPUSH s d 0", 2, TE_CREATE);
    expect_one("SMOVE s d m", 2, TE_CREATE);
    expect_malformed("LMOVE s d UP DOWN");
    expect_malformed("BLMOVE s d LEFT UP 0");
}

Test(collections, create_or_none)
{
    expect_one("LPUSH k a b", 1, TE_CREATE);
    expect_one("RPUSH k a", 1, TE_CREATE);
    expect_one("SADD k a", 1, TE_CREATE);
    expect_one("HSET k f v g w", 1, TE_CREATE);
    expect_one("HMSET k f v", 1, TE_CREATE);
    expect_one("HSETNX k f v", 1, TE_CREATE);
    expect_one("HINCRBY k f 1", 1, TE_CREATE);
    expect_one("PFADD k a", 1, TE_CREATE);
    expect_one("ZINCRBY k 1 m", 1, TE_CREATE);
    /* These change an existing key only. */
    expect_nokeys("LPUSHX k a");
    expect_nokeys("RPUSHX k a");
    expect_nokeys("LINSERT k BEFORE p a");
    expect_nokeys("LSET k 0 a");
    expect_nokeys("LPOP k");
    expect_nokeys("SREM k a");
    expect_nokeys("HDEL k f");
    expect_nokeys("DEL a b c");
    expect_nokeys("UNLINK a");
    expect_malformed("HSET k f v g");
    expect_malformed("HMSET k f v g");
}

Test(stores, destinations_overwrite)
{
    expect_one("SUNIONSTORE d a b", 1, TE_OVERWRITE);
    expect_one("SINTERSTORE d a", 1, TE_OVERWRITE);
    expect_one("SDIFFSTORE d a b c", 1, TE_OVERWRITE);
    expect_one("ZRANGESTORE d s 0 -1", 1, TE_OVERWRITE);
    expect_one("GEOSEARCHSTORE d s FROMLONLAT 1 2 BYRADIUS 3 km", 1, TE_OVERWRITE);
    expect_one("BITOP AND d a b", 2, TE_OVERWRITE);
    expect_one("bitop not d a", 2, TE_OVERWRITE);
    expect_malformed("BITOP NOT d a b");
    expect_malformed("BITOP NAND d a b");
    /* PFMERGE merges in place: an existing destination keeps its TTL. */
    expect_one("PFMERGE d a b", 1, TE_CREATE);
    expect_one("PFMERGE d", 1, TE_CREATE);
}

/* ---- numkeys ----------------------------------------------------------- */

Test(numkeys, zstores)
{
    expect_one("ZUNIONSTORE d 2 a b WEIGHTS 1 2", 1, TE_OVERWRITE);
    expect_one("ZINTERSTORE d 1 a AGGREGATE MAX", 1, TE_OVERWRITE);
    expect_one("ZDIFFSTORE d 2 a b", 1, TE_OVERWRITE);
    expect_malformed("ZUNIONSTORE d 0 a");
    expect_malformed("ZUNIONSTORE d 3 a b");
    expect_malformed("ZUNIONSTORE d -1 a");
    expect_malformed("ZINTERSTORE d x a");
    expect_malformed("ZDIFFSTORE d 2 a");
}

Test(numkeys, scripts)
{
    struct key_ref k[8];

    cr_assert_eq(keys_of("EVAL s 2 a b arg", k), 2);
    cr_assert_eq(k[0].argi, 3);
    cr_assert_eq(k[1].argi, 4);
    cr_assert_eq(k[0].effect, TE_OVERWRITE);
    cr_assert_eq(k[1].effect, TE_OVERWRITE);
    expect_one("EVALSHA sha 1 a", 3, TE_OVERWRITE);
    expect_one("FCALL f 1 a x y", 3, TE_OVERWRITE);
    expect_nokeys("EVAL s 0");
    expect_nokeys("EVAL s 0 arg");
    /* Redis refuses writes in the read-only variants. */
    expect_nokeys("EVAL_RO s 1 a");
    expect_nokeys("EVALSHA_RO sha 1 a");
    expect_nokeys("FCALL_RO f 1 a");
    expect_malformed("EVAL s -1");
    expect_malformed("EVAL s 2 a");
    expect_malformed("EVAL s x a");
    expect_malformed("FCALL f 1");
    expect_malformed("EVAL_RO s 2 a");
}

Test(numkeys, pops)
{
    expect_nokeys("LMPOP 2 a b LEFT");
    expect_nokeys("BLMPOP 0 2 a b LEFT COUNT 2");
    expect_nokeys("BZMPOP 0 1 a MIN");
    expect_nokeys("ZMPOP 1 a MAX");
    expect_malformed("LMPOP 0 a LEFT");
    expect_malformed("BZMPOP 0 x a MIN");
}

/* ---- sorted sets and geo ----------------------------------------------- */

Test(zadd, options)
{
    expect_one("ZADD k 1 a", 1, TE_CREATE);
    expect_one("ZADD k 1 a 2 b", 1, TE_CREATE);
    expect_one("ZADD k NX CH 1 a", 1, TE_CREATE);
    expect_one("ZADD k GT CH INCR 1 a", 1, TE_CREATE);
    /* XX never creates. */
    expect_nokeys("ZADD k XX 1 a");
    expect_nokeys("zadd k xx gt ch 1 a");
    expect_malformed("ZADD k NX XX 1 a");
    expect_malformed("ZADD k GT LT 1 a");
    expect_malformed("ZADD k NX GT 1 a");
    expect_malformed("ZADD k 1 a 2");
    expect_malformed("ZADD k CH 1");
    expect_malformed("ZADD k INCR 1 a 2 b");
}

Test(geoadd, options)
{
    expect_one("GEOADD k 1 2 m", 1, TE_CREATE);
    expect_one("GEOADD k NX CH 1 2 m 3 4 n", 1, TE_CREATE);
    expect_nokeys("GEOADD k XX 1 2 m");
    expect_malformed("GEOADD k XX 1 2");
    expect_malformed("GEOADD k NX XX 1 2 m");
    expect_malformed("GEOADD k 1 2 m 3");
    expect_malformed("GEOADD k CH CH CH");
}

Test(georadius, store)
{
    expect_nokeys("GEORADIUS k 1 2 3 km");
    expect_nokeys("GEORADIUS k 1 2 3 km WITHDIST WITHCOORD COUNT 5 ANY ASC");
    expect_one("GEORADIUS k 1 2 3 km STORE d", 7, TE_OVERWRITE);
    expect_one("GEORADIUS k 1 2 3 km COUNT 5 DESC STOREDIST d", 10, TE_OVERWRITE);
    /* STORE and STOREDIST name the same destination: the last one wins. */
    expect_one("GEORADIUS k 1 2 3 km STORE a STOREDIST b", 9, TE_OVERWRITE);
    expect_one("GEORADIUSBYMEMBER k m 3 km STORE d", 6, TE_OVERWRITE);
    expect_nokeys("GEORADIUSBYMEMBER k m 3 km WITHHASH");
    expect_malformed("GEORADIUS k 1 2 3 km STORE d WITHDIST");
    expect_malformed("GEORADIUS k 1 2 3 km ANY");
    expect_malformed("GEORADIUS k 1 2 3 km COUNT 0");
    expect_malformed("GEORADIUS k 1 2 3 km COUNT x");
    expect_malformed("GEORADIUS k 1 2 3 km STORE");
    expect_malformed("GEORADIUS k 1 2 3 km FOO");
    expect_malformed("GEORADIUSBYMEMBER k m 3 km STORE");
}

/* ---- bitfield ---------------------------------------------------------- */

Test(bitfield, writes_only_with_set_or_incrby)
{
    expect_one("BITFIELD k SET u8 0 255", 1, TE_CREATE);
    expect_one("BITFIELD k INCRBY u8 0 1", 1, TE_CREATE);
    expect_one("BITFIELD k GET u8 0 OVERFLOW SAT INCRBY u8 0 1", 1, TE_CREATE);
    expect_nokeys("BITFIELD k");
    expect_nokeys("BITFIELD k GET u8 0 GET i4 4");
    expect_nokeys("BITFIELD k OVERFLOW WRAP GET u8 0");
    expect_malformed("BITFIELD k SET u8 0");
    expect_malformed("BITFIELD k GET u8");
    expect_malformed("BITFIELD k OVERFLOW FOO");
    expect_malformed("BITFIELD k FOO");
}

/* ---- streams ----------------------------------------------------------- */

Test(xadd, nomkstream)
{
    expect_one("XADD k * f v", 1, TE_CREATE);
    expect_one("XADD k 1-1 f v g w", 1, TE_CREATE);
    expect_one("XADD k MAXLEN ~ 10 LIMIT 5 * f v", 1, TE_CREATE);
    expect_one("XADD k MINID = 0 * f v", 1, TE_CREATE);
    expect_nokeys("XADD k NOMKSTREAM * f v");
    expect_nokeys("XADD k MAXLEN 10 NOMKSTREAM 1-1 f v");
    /* After the ID everything is a field or a value. */
    expect_one("XADD k * nomkstream v", 1, TE_CREATE);
    expect_malformed("XADD k * f");
    expect_malformed("XADD k * f v g");
    expect_malformed("XADD k MAXLEN 10 LIMIT 5 * f v");
    expect_malformed("XADD k MAXLEN -1 * f v");
    expect_malformed("XADD k MAXLEN 1 MINID 0 * f v");
    expect_malformed("XADD k NOMKSTREAM MAXLEN");
}

Test(xgroup, create_mkstream)
{
    expect_nokeys("XGROUP CREATE k g $");
    expect_one("XGROUP CREATE k g $ MKSTREAM", 2, TE_CREATE);
    expect_one("xgroup create k g 0 entriesread 3 mkstream", 2, TE_CREATE);
    expect_nokeys("XGROUP CREATECONSUMER k g c");
    expect_nokeys("XGROUP DELCONSUMER k g c");
    expect_nokeys("XGROUP DESTROY k g");
    expect_nokeys("XGROUP SETID k g 0");
    expect_nokeys("XGROUP HELP");
    expect_one("XGROUP CREATE k g $ MKSTREAM MKSTREAM MKSTREAM", 2, TE_CREATE);
    expect_malformed("XGROUP CREATE k g $ MKSTREAM MKSTREAM MKSTREAM MKSTREAM");
    expect_malformed("XGROUP CREATE k g $ FOO");
    expect_malformed("XGROUP CREATE k g $ ENTRIESREAD x");
    expect_malformed("XGROUP CREATE k g");
    expect_malformed("XGROUP DESTROY k");
    expect_malformed("XGROUP FOO k g");
    expect_malformed("XGROUP");
}

Test(streams, no_creation)
{
    expect_nokeys("XREAD BLOCK 0 STREAMS a b 0 0");
    expect_nokeys("XREADGROUP GROUP g c BLOCK 0 STREAMS a >");
    expect_nokeys("XACK k g 1-1");
    expect_nokeys("XTRIM k MAXLEN 0");
    expect_nokeys("XSETID k 1-1");
}

/* ---- containers and commands the proxy cannot judge -------------------- */

Test(function, no_keys)
{
    expect_nokeys("FUNCTION LOAD code");
    expect_nokeys("function flush async");
    expect_nokeys("FUNCTION LIST");
    expect_malformed("FUNCTION FOO");
    expect_malformed("FUNCTION DELETE");
}

Test(carry, move_and_migrate)
{
    struct key_ref k[MAX_WORDS];

    expect_carry("MOVE k 1", 1, 2);
    expect_carry("MIGRATE host 6379 k 0 1000", 3, -1);
    expect_carry("MIGRATE host 6379 k 0 1000 COPY REPLACE AUTH pw", 3, -1);
    expect_carry("MIGRATE host 6379 k 0 1000 AUTH2 user pw", 3, -1);
    /* KEYS: the key argument is empty and not a key. */
    struct line l;
    split(&l, "MIGRATE host 6379 - 0 1000 REPLACE KEYS a b");
    l.argv[3].len = 0;
    cr_assert_eq(keys_argv(l.argc, l.argv, k), 2);
    cr_assert(k[0].argi == 8 && k[1].argi == 9);
    cr_assert(k[0].effect == TE_CARRY && k[1].effect == TE_CARRY);
    cr_assert(k[0].db_argi == -1 && k[1].db_argi == -1);
    expect_malformed("MIGRATE host 6379 k 0 1000 KEYS a b");
    expect_malformed("MIGRATE host 6379 k 0 1000 AUTH");
    expect_malformed("MIGRATE host 6379 k 0 1000 AUTH2 user");
    expect_malformed("MIGRATE host 6379 k 0 1000 FOO");
    expect_malformed("MOVE k");
}

Test(unverified, minus_two)
{
    expect_rc("SWAPDB 0 1", -2);
    expect_rc("DEBUG SLEEP 0", -2);
    /* Arity comes first. */
    expect_malformed("SWAPDB 0");
}

Test(no_write, flush)
{
    expect_nokeys("FLUSHALL");
    expect_nokeys("FLUSHDB ASYNC");
    expect_nokeys("PFDEBUG TODENSE k");
}

/* ---- printing ---------------------------------------------------------- */

static char *printed(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_not_null(f);
    commands_print(f, test_set());
    fclose(f);
    return text;
}

Test(print, format)
{
    char *text = printed();

    cr_assert_not_null(strstr(text, "\nset -3 write key@1:none|create|overwrite|sets-ttl\n"));
    cr_assert_not_null(strstr(text, "\nlmove 5 write source@1:none destination@2:create\n"));
    cr_assert_not_null(strstr(text, "\nmset -3 write key@1..-1/2:overwrite\n"));
    cr_assert_not_null(strstr(text, "\nzunionstore -4 write destination@1:overwrite "
                                    "source@2+numkeys:none\n"));
    cr_assert_not_null(strstr(text, "\nxread -4 blocking key@after(STREAMS,1)..-1%2:none\n"));
    cr_assert_not_null(strstr(text, "\nsort -2 write key@1:none destination@opt(STORE):overwrite\n"));
    cr_assert_not_null(strstr(text, "\nxgroup|create -5 write key@2:none|create\n"));
    cr_assert_not_null(strstr(text, "\nswapdb 3 write,unverified\n"));
    cr_assert_not_null(strstr(text, "\nexpire -3 write,expire key@1:sets-ttl\n"));
    free(text);
}

Test(print, one_sorted_line_per_row)
{
    char *text = printed();
    char prev[64] = "";
    int lines = 0;

    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save), lines++) {
        char name[64];
        int arity;

        cr_assert_eq(sscanf(line, "%63s %d", name, &arity), 2, "line '%s'", line);
        cr_assert_gt(strcmp(name, prev), 0, "'%s' after '%s'", name, prev);
        strcpy(prev, name);

        /* Every row is reachable by its argv[0] (subcommands: by the container). */
        size_t base = strcspn(name, "|");
        const struct command *c = command_lookup(name, base);
        cr_assert_not_null(c, "%s", name);
        if (name[base] == '\0')
            cr_assert(command_arity_ok(c, arity < 0 ? -arity : arity), "%s", name);
    }
    cr_assert_gt(lines, 100);
    free(text);
}

Test(print, effect_names)
{
    cr_assert_str_eq(ttl_effect_name(TE_NONE), "none");
    cr_assert_str_eq(ttl_effect_name(TE_CREATE), "create");
    cr_assert_str_eq(ttl_effect_name(TE_OVERWRITE), "overwrite");
    cr_assert_str_eq(ttl_effect_name(TE_PERSIST), "persist");
    cr_assert_str_eq(ttl_effect_name(TE_SETS_TTL), "sets-ttl");
}
