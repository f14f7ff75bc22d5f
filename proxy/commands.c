/*
 * commands: the command table (see commands.h).
 *
 *   argv[0] ── fold case + hash ──▶ name_slots[]: every name redis-server knows
 *                                       │
 *                                       ▼ row (NULL for reads the proxy ignores)
 *                                   struct command: arity, flags,
 *                                       key specs    where the keys are, what each does to a TTL
 *                                       options()    argument-dependent effects (SET ... EX)
 *                                       subs[]       container commands: argv[1] picks the row
 *
 *   command_keys(row, argv): options() decides each key spec's effect, then one
 *   generic evaluator walks the key specs and emits the keys.
 *
 * Key specs are redis's own "key specifications" (COMMAND INFO): a begin
 * search (a fixed index, or the argument after a keyword) and a find-keys
 * rule (a range, or a count in the arguments). Redis uses them to find keys
 * for ACLs and cluster routing; tests/integration/test_command_table.py checks
 * that each spec here matches the server's. Where redis's spec is "unknown"
 * (SORT ... STORE) or cannot be exact (GEORADIUS ... STORE and STOREDIST: the
 * last one wins), the row's options parser finds the key (KS_OPTION).
 *
 * What each key role does to a TTL was found by experiment against
 * redis-server 7.0.15, 8.0.6 and 8.6.3, valkey-server 8.1.1 and 9.1.2
 * (tests/integration/tools/probe_ttl_effects.py), and the same experiment
 * runs in the integration suite; the rows of later releases flagged DOC come
 * from their documentation. The surprises are commented where they are in
 * the table.
 *
 * Parsers follow redis's own parsing closely, for two reasons. A command the
 * server refuses must give -1, so that the proxy forwards it unchanged and
 * the client gets redis's own error rather than a rewritten script's. And an
 * argument redis obeys must never be missed: a parser stricter than redis
 * would let a write through unjudged. When in doubt the parsers here accept
 * (value errors such as a bad float are left to redis).
 */
#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "commands_int.h"

/* ------------------------------------------------------------------------ */
/* Argument helpers                                                          */
/* ------------------------------------------------------------------------ */

/* Redis compares option words with strcasecmp() on the NUL-terminated
 * argument, so "NX\0junk" is NX to it. Compare the same way, or a client could
 * hide an option from the proxy that redis still obeys. */
static int arg_is(struct slice a, const char *word)
{
    size_t i;

    for (i = 0; word[i] != '\0'; i++) {
        if (i >= a.len || tolower((unsigned char)a.p[i]) != tolower((unsigned char)word[i]))
            return 0;
    }
    return i == a.len || a.p[i] == '\0';
}

/* Redis adds the current time to a relative TTL in milliseconds and refuses
 * the command when the sum overflows. Only absurd TTLs come near that, so the
 * clock is read for those alone. */
static int relative_ms_ok(long long ms)
{
    return ms < LLONG_MAX / 2 || ms <= LLONG_MAX - (long long)now_ms_wall();
}

/* An expiry argument of SET, GETEX, SETEX and PSETEX, checked as redis's
 * getExpireMillisecondsOrReply() does before anything is written. */
static int expiry_ok(struct slice s, enum ttl_unit unit)
{
    long long v;

    if (slice_to_ll(s, &v) < 0 || v <= 0)
        return 0;
    if (unit == TTL_SEC || unit == TTL_UNIX_SEC) {
        if (v > LLONG_MAX / 1000)
            return 0;
        v *= 1000;
    }
    return unit == TTL_UNIX_SEC || unit == TTL_UNIX_MS || relative_ms_ok(v);
}

static int arg_nonneg(struct slice s)
{
    long long v;

    return slice_to_ll(s, &v) == 0 && v >= 0;
}

static void set_ttl(struct spec_use *u, int argi, enum ttl_unit unit)
{
    u->effect = TE_SETS_TTL;
    u->ttl_argi = argi;
    u->ttl_unit = (unsigned char)unit;
}

/* ------------------------------------------------------------------------ */
/* Options parsers: argument-dependent effects                               */
/* ------------------------------------------------------------------------ */

enum {
    SO_NX = 1, SO_XX = 2, SO_KEEPTTL = 4, SO_PERSIST = 8, SO_EXPIRY = 16, SO_IFEQ = 32,
    SO_IFNE = 64, SO_IFDEQ = 128, SO_IFDNE = 256,
    SO_IF = SO_IFEQ | SO_IFNE | SO_IFDEQ | SO_IFDNE,
};

/* SET's compare options: IFEQ|IFNE|IFDEQ|IFDNE (Redis 8.4), IFEQ alone
 * (Valkey 8.1). The SO_IF* flag of argument a, or 0. */
static int if_condition(struct slice a, unsigned feat)
{
    if ((feat & (FT_SET_IFEQ | FT_SET_IFCOND)) && arg_is(a, "ifeq"))
        return SO_IFEQ;
    if (!(feat & FT_SET_IFCOND))
        return 0;
    return arg_is(a, "ifne") ? SO_IFNE : arg_is(a, "ifdeq") ? SO_IFDEQ
                                        : arg_is(a, "ifdne") ? SO_IFDNE : 0;
}

/* What SET or GETEX does to the key, from its options (SO_*). IFEQ and IFDEQ
 * write only over a matching value, so never create; IFNE and IFDNE create a
 * missing key as a plain SET does. */
static enum ttl_effect string_effect(int f, int is_set)
{
    int must_exist = f & (SO_XX | SO_IFEQ | SO_IFDEQ);

    if (must_exist && (f & SO_NX))
        return TE_NONE;                     /* SET ... IFEQ v NX (Redis): never writes */
    if (f & SO_EXPIRY)
        return TE_SETS_TTL;
    if (f & SO_PERSIST)
        return TE_PERSIST;
    if (!is_set)
        return TE_NONE;                     /* GETEX without options: a read */
    if (f & SO_KEEPTTL)
        return must_exist ? TE_NONE : TE_CREATE;   /* keeps an existing key's TTL */
    return f & SO_NX ? TE_CREATE : TE_OVERWRITE;   /* also XX, IF*: drop the TTL */
}

/* SET and GETEX options, as redis's parseExtendedStringArgumentsOrReply():
 * any order; a repeated option is fine (the last expiry wins), conflicting
 * ones are a syntax error. Only the expiry that wins is checked. Redis takes
 * NX and XX after an IF* condition (and the same condition twice), Valkey
 * takes neither. */
static int string_options(int argc, const struct slice *argv, int from, int is_set,
                          unsigned feat, struct spec_use *u)
{
    static const struct { const char *word; enum ttl_unit unit; } expiries[] = {
        { "ex", TTL_SEC }, { "px", TTL_MS }, { "exat", TTL_UNIX_SEC }, { "pxat", TTL_UNIX_MS },
    };
    int valkey_if = feat & FT_SET_IFEQ ? SO_IF : 0;
    int f = 0, c;

    for (int j = from; j < argc; j++) {
        struct slice a = argv[j];
        size_t k;

        for (k = 0; k < 4 && !arg_is(a, expiries[k].word); k++)
            ;
        if (is_set && arg_is(a, "nx") && !(f & (SO_XX | valkey_if))) {
            f |= SO_NX;
        } else if (is_set && arg_is(a, "xx") && !(f & (SO_NX | valkey_if))) {
            f |= SO_XX;
        } else if (is_set && (c = if_condition(a, feat)) != 0 && j + 1 < argc &&
                   !(f & (SO_NX | SO_XX | (SO_IF & ~c) | (valkey_if & c)))) {
            f |= c;                         /* the value or digest to compare with */
            j++;
        } else if (is_set && arg_is(a, "get")) {
            continue;                       /* changes the reply, not the write */
        } else if (is_set && arg_is(a, "keepttl") && !(f & SO_EXPIRY)) {
            f |= SO_KEEPTTL;
        } else if (!is_set && arg_is(a, "persist") && !(f & SO_EXPIRY)) {
            f |= SO_PERSIST;
        } else if (k < 4 && !(f & (SO_KEEPTTL | SO_PERSIST)) && j + 1 < argc &&
                   (!(f & SO_EXPIRY) || u->ttl_unit == expiries[k].unit)) {
            f |= SO_EXPIRY;
            set_ttl(u, ++j, expiries[k].unit);
        } else {
            return -1;
        }
    }
    if ((f & SO_EXPIRY) && !expiry_ok(argv[u->ttl_argi], (enum ttl_unit)u->ttl_unit))
        return -1;
    u->effect = (unsigned char)string_effect(f, is_set);
    return 0;
}

/* SET key value [NX|XX|IFEQ v|IFNE v|IFDEQ d|IFDNE d] [GET] [EX s|PX ms|EXAT ts|PXAT
 * ms-ts|KEEPTTL]: IFEQ since Valkey 8.1, all four since Redis 8.4 */
static int opt_set(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return string_options(argc, argv, 3, 1, feat, &use[0]);
}

/* GETEX key [EX s|PX ms|EXAT ts|PXAT ms-ts|PERSIST] */
static int opt_getex(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return string_options(argc, argv, 2, 0, feat, &use[0]);
}

/* SETEX key seconds value */
static int opt_setex(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    if (!expiry_ok(argv[2], TTL_SEC))
        return -1;
    set_ttl(&use[0], 2, TTL_SEC);
    return 0;
}

/* PSETEX key milliseconds value */
static int opt_psetex(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    if (!expiry_ok(argv[2], TTL_MS))
        return -1;
    set_ttl(&use[0], 2, TTL_MS);
    return 0;
}

/* EXPIRE key ttl [NX|XX|GT|LT ...], as redis's expireGenericCommand(): a
 * negative or past TTL is valid (it deletes the key); the policy decides. */
static int expire_options(int argc, const struct slice *argv, struct spec_use *use,
                          enum ttl_unit unit)
{
    int nx = 0, xx = 0, gt = 0, lt = 0;
    long long when;

    for (int j = 3; j < argc; j++) {
        if (arg_is(argv[j], "nx"))
            nx = 1;
        else if (arg_is(argv[j], "xx"))
            xx = 1;
        else if (arg_is(argv[j], "gt"))
            gt = 1;
        else if (arg_is(argv[j], "lt"))
            lt = 1;
        else
            return -1;
    }
    if ((nx && (xx || gt || lt)) || (gt && lt))
        return -1;
    if (slice_to_ll(argv[2], &when) < 0)
        return -1;
    if (unit == TTL_SEC || unit == TTL_UNIX_SEC) {
        if (when > LLONG_MAX / 1000 || when < LLONG_MIN / 1000)
            return -1;
        when *= 1000;
    }
    if ((unit == TTL_SEC || unit == TTL_MS) && !relative_ms_ok(when))
        return -1;
    set_ttl(&use[0], 2, unit);
    return 0;
}

static int opt_expire(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return expire_options(argc, argv, use, TTL_SEC);
}

static int opt_pexpire(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return expire_options(argc, argv, use, TTL_MS);
}

static int opt_expireat(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return expire_options(argc, argv, use, TTL_UNIX_SEC);
}

static int opt_pexpireat(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return expire_options(argc, argv, use, TTL_UNIX_MS);
}

/* MSET/MSETNX key value [key value ...] */
static int opt_mset(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return argc % 2 == 1 ? 0 : -1;
}

/* HSET/HMSET key field value [field value ...] */
static int opt_hset(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return argc % 2 == 0 ? 0 : -1;
}

/* The fields' expiry of HSETEX: an integer >= 0 (0 and past times delete the
 * fields at once). Redis 8 caps the time at HFE_MAX_ABS_TIME_MSEC (2^46 - 1 ms
 * from the epoch), Valkey only refuses an overflow. */
static int field_expiry_ok(struct slice s, enum ttl_unit unit, int valkey)
{
    long long v, max = valkey ? LLONG_MAX : 0x3fffffffffffLL;

    if (slice_to_ll(s, &v) < 0 || v < 0)
        return 0;
    if (unit == TTL_SEC || unit == TTL_UNIX_SEC) {
        if (v > max / 1000)
            return 0;
        v *= 1000;
    }
    return unit == TTL_UNIX_SEC || unit == TTL_UNIX_MS ? v <= max
                                                        : v <= max - (long long)now_ms_wall();
}

/* HSETEX's FIELDS numfields field value [...] at argv[j]: the index of its
 * last argument, or -1 when redis refuses it. Before Redis 8.6 (and on
 * Valkey) the block ends the command; since, options may follow it
 * (FT_HSETEX_ANYWHERE: the 8.6 release notes, #14416; taken from 8.4 on, in
 * case 8.4's patch releases have it: a server refusing what the table takes
 * only answers its own error). */
static int hsetex_fields(int argc, const struct slice *argv, int j, unsigned feat)
{
    long long n;

    if (j + 1 >= argc || slice_to_ll(argv[j + 1], &n) < 0 || n < 1 || n > INT_MAX)
        return -1;
    if (feat & FT_HSETEX_ANYWHERE)
        return j + 2 + 2 * n <= argc ? j + 1 + 2 * (int)n : -1;
    return argc - j - 2 == 2 * n ? argc - 1 : -1;
}

/* HSETEX key [NX|XX (Valkey)] [FNX|FXX] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
 * FIELDS numfields field value [...]: the expiry is the fields', not the
 * key's. The hash is created without a TTL unless XX or FXX (every field must
 * exist) rule that out. Redis 8 refuses any option given twice (FIELDS too,
 * since 8.6.2); Valkey 9 parses them as SET does (the same option again is
 * fine, the last expiry wins and only it is checked; a conflicting one is
 * not). */
static int opt_hsetex(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    static const char *const expiries[] = { "ex", "px", "exat", "pxat", "keepttl" };
    int valkey = (feat & FT_HSETEX_KEYCOND) != 0;
    int keycond = 0, fieldcond = 0, expiry = 0, ttl_argi = -1, fields = 0;

    for (int j = 2; j < argc; j++) {
        struct slice a = argv[j];
        int k;

        for (k = 0; k < 5 && !arg_is(a, expiries[k]); k++)
            ;
        if (arg_is(a, "fields")) {
            if ((fields && (feat & FT_HSETEX_FIELDS_ONCE)) ||
                (j = hsetex_fields(argc, argv, j, feat)) < 0)
                return -1;
            fields = 1;
        } else if (valkey && (arg_is(a, "nx") || arg_is(a, "xx"))) {
            int c = arg_is(a, "nx") ? 1 : 2;
            if (keycond != 0 && keycond != c)
                return -1;
            keycond = c;
        } else if (arg_is(a, "fnx") || arg_is(a, "fxx")) {
            int c = arg_is(a, "fnx") ? 1 : 2;
            if (fieldcond != 0 && (fieldcond != c || !valkey))
                return -1;
            fieldcond = c;
        } else if (k < 5 && (expiry == 0 || (valkey && expiry == k + 1))) {
            expiry = k + 1;
            if (k < 4) {
                if (j + 1 >= argc)
                    return -1;
                ttl_argi = ++j;
            }
        } else {
            return -1;
        }
    }
    if (!fields || (ttl_argi >= 0 && !field_expiry_ok(argv[ttl_argi],
                                                      (enum ttl_unit)(expiry - 1), valkey)))
        return -1;                          /* no FIELDS, or an expiry redis refuses */
    use[0].effect = keycond == 2 || fieldcond == 2 ? TE_NONE : TE_CREATE;
    return 0;
}

/* MSETEX numkeys key value [key value ...] [NX|XX] [EX s|PX ms|EXAT ts|PXAT
 * ms-ts|KEEPTTL] (Redis 8.4, Valkey 9.1: both parse it alike): every key gets
 * the expiry; without one MSETEX drops their TTLs as MSET does, unless
 * KEEPTTL. NX: none of the keys exists, XX: all of them do. */
static int opt_msetex(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    static const struct { const char *word; enum ttl_unit unit; } expiries[] = {
        { "ex", TTL_SEC }, { "px", TTL_MS }, { "exat", TTL_UNIX_SEC }, { "pxat", TTL_UNIX_MS },
    };
    int nx = 0, xx = 0, keepttl = 0, expiry = 0;
    long long numkeys;

    if (slice_to_ll(argv[1], &numkeys) < 0 || numkeys < 1 || numkeys > INT_MAX ||
        2 + 2 * numkeys > argc)
        return -1;
    for (int j = 2 + 2 * (int)numkeys; j < argc; j++) {
        size_t k;

        for (k = 0; k < 4 && !arg_is(argv[j], expiries[k].word); k++)
            ;
        if (arg_is(argv[j], "nx") && !xx) {
            nx = 1;
        } else if (arg_is(argv[j], "xx") && !nx) {
            xx = 1;
        } else if (arg_is(argv[j], "keepttl") && !expiry) {
            keepttl = 1;
        } else if (k < 4 && !keepttl && j + 1 < argc &&
                   (!expiry || use[0].ttl_unit == expiries[k].unit)) {
            expiry = 1;
            set_ttl(&use[0], ++j, expiries[k].unit);
        } else {
            return -1;
        }
    }
    if (expiry && !expiry_ok(argv[use[0].ttl_argi], (enum ttl_unit)use[0].ttl_unit))
        return -1;
    if (expiry)
        use[0].effect = TE_SETS_TTL;
    else if (keepttl)
        use[0].effect = xx ? TE_NONE : TE_CREATE;
    else
        use[0].effect = nx ? TE_CREATE : TE_OVERWRITE;
    return 0;
}

/* COPY source destination [DB db] [REPLACE]. The destination gets the
 * source's TTL (or none); in another database it is carried there. */
static int opt_copy(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    int replace = 0, db_argi = -1;
    long long db;

    for (int j = 3; j < argc; j++) {
        if (arg_is(argv[j], "replace")) {
            replace = 1;
        } else if (arg_is(argv[j], "db") && j + 1 < argc) {
            if (slice_to_ll(argv[++j], &db) < 0 || db < INT_MIN || db > INT_MAX)
                return -1;
            db_argi = j;
        } else {
            return -1;
        }
    }
    if (db_argi >= 0) {
        /* The same name is fine in another database; whether the caller's
         * is another one, Redis decides. */
        use[1].effect = TE_CARRY;
        use[1].db_argi = db_argi;
        return 0;
    }
    if (argv[1].len == argv[2].len && memcmp(argv[1].p, argv[2].p, argv[1].len) == 0)
        return -1;                          /* "source and destination objects are the same" */
    use[1].effect = replace ? TE_OVERWRITE : TE_CREATE;
    return 0;
}

/* MOVE key db: the key is carried to database db. */
static int opt_move(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    (void)argc;
    (void)argv;
    (void)feat;
    use[0].db_argi = 2;
    return 0;
}

/* MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw]
 * [KEYS key...]: the keys leave for another server. With KEYS, the key
 * argument must be empty and is not a key. */
static int opt_migrate(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    (void)feat;
    for (int j = 6; j < argc; j++) {
        int more = argc - j - 1;

        if (arg_is(argv[j], "copy") || arg_is(argv[j], "replace")) {
            continue;
        } else if (arg_is(argv[j], "auth") && more >= 1) {
            j++;
        } else if (arg_is(argv[j], "auth2") && more >= 2) {
            j += 2;
        } else if (arg_is(argv[j], "keys")) {
            if (argv[3].len != 0)
                return -1;
            use[0].effect = TE_NONE;
            return 0;
        } else {
            return -1;
        }
    }
    use[1].effect = TE_NONE;
    return 0;
}

/* RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]: ttl 0
 * creates the key without a TTL; without REPLACE an existing key is refused
 * (BUSYKEY), so it cannot lose its TTL. */
static int opt_restore(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    int replace = 0, absttl = 0, idle = 0, freq = 0;
    long long ttl, v;

    for (int j = 4; j < argc; j++) {
        int more = argc - j - 1;

        if (arg_is(argv[j], "replace")) {
            replace = 1;
        } else if (arg_is(argv[j], "absttl")) {
            absttl = 1;
        } else if (arg_is(argv[j], "idletime") && more >= 1 && !freq) {
            if (slice_to_ll(argv[++j], &v) < 0 || v < 0)
                return -1;
            idle = 1;
        } else if (arg_is(argv[j], "freq") && more >= 1 && !idle) {
            if (slice_to_ll(argv[++j], &v) < 0 || v < 0 || v > 255)
                return -1;
            freq = 1;
        } else {
            return -1;
        }
    }
    if (slice_to_ll(argv[2], &ttl) < 0 || ttl < 0)
        return -1;
    if (ttl > 0)
        set_ttl(&use[0], 2, absttl ? TTL_UNIX_MS : TTL_MS);
    else
        use[0].effect = replace ? TE_OVERWRITE : TE_CREATE;
    return 0;
}

/* SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC]
 * [ALPHA] [STORE destination]: the last STORE wins. */
static int opt_sort(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    long long v;

    for (int j = 2; j < argc; j++) {
        int more = argc - j - 1;

        if (arg_is(argv[j], "asc") || arg_is(argv[j], "desc") || arg_is(argv[j], "alpha")) {
            continue;
        } else if (arg_is(argv[j], "limit") && more >= 2) {
            if (slice_to_ll(argv[j + 1], &v) < 0 || slice_to_ll(argv[j + 2], &v) < 0)
                return -1;
            j += 2;
        } else if (arg_is(argv[j], "store") && more >= 1) {
            use[1].argi = ++j;
        } else if ((arg_is(argv[j], "by") || arg_is(argv[j], "get")) && more >= 1) {
            j++;
        } else {
            return -1;
        }
    }
    return 0;
}

/* GEORADIUS's and GEORADIUSBYMEMBER's options from argv[from], as redis's
 * georadiusGeneric(): STORE and STOREDIST both name the destination, the
 * last one wins. */
static int georadius_options(int argc, const struct slice *argv, int from, struct spec_use *use)
{
    int with = 0, any = 0, count = 0;
    long long v;

    for (int j = from; j < argc; j++) {
        struct slice a = argv[j];
        int more = argc - j - 1;

        if (arg_is(a, "withdist") || arg_is(a, "withhash") || arg_is(a, "withcoord")) {
            with = 1;
        } else if (arg_is(a, "any")) {
            any = 1;
        } else if (arg_is(a, "asc") || arg_is(a, "desc")) {
            continue;
        } else if (arg_is(a, "count") && more >= 1) {
            if (slice_to_ll(argv[++j], &v) < 0 || v <= 0)
                return -1;
            count = 1;
        } else if ((arg_is(a, "store") || arg_is(a, "storedist")) && more >= 1) {
            use[1].argi = ++j;
        } else {
            return -1;
        }
    }
    if ((use[1].argi >= 0 && with) || (any && !count))
        return -1;
    return 0;
}

/* GEORADIUS key longitude latitude radius unit [options] */
static int opt_georadius(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return georadius_options(argc, argv, 6, use);
}

/* GEORADIUSBYMEMBER key member radius unit [options] */
static int opt_georadiusbymember(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    return georadius_options(argc, argv, 5, use);
}

/* ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]:
 * with XX it never creates the key. */
static int opt_zadd(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    int nx = 0, xx = 0, gt = 0, lt = 0, incr = 0, i;

    for (i = 2; i < argc; i++) {
        if (arg_is(argv[i], "nx"))
            nx = 1;
        else if (arg_is(argv[i], "xx"))
            xx = 1;
        else if (arg_is(argv[i], "gt"))
            gt = 1;
        else if (arg_is(argv[i], "lt"))
            lt = 1;
        else if (arg_is(argv[i], "incr"))
            incr = 1;
        else if (!arg_is(argv[i], "ch"))
            break;
    }
    int elements = argc - i;
    if (elements == 0 || elements % 2 != 0 || (incr && elements > 2))
        return -1;
    if ((nx && xx) || (nx && (gt || lt)) || (gt && lt))
        return -1;
    use[0].effect = xx ? TE_NONE : TE_CREATE;
    return 0;
}

/* GEOADD key [NX|XX] [CH] longitude latitude member [...]: XX never creates. */
static int opt_geoadd(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    int nx = 0, xx = 0, i;

    for (i = 2; i < argc; i++) {
        if (arg_is(argv[i], "nx"))
            nx = 1;
        else if (arg_is(argv[i], "xx"))
            xx = 1;
        else if (!arg_is(argv[i], "ch"))
            break;
    }
    if (argc == i || (argc - i) % 3 != 0 || (nx && xx))
        return -1;
    use[0].effect = xx ? TE_NONE : TE_CREATE;
    return 0;
}

/* XADD's MAXLEN|MINID [=|~] threshold at argv[i]: the index of its last
 * argument, or -1 when redis refuses it; *approx: given with "~". */
static int xadd_trim(int argc, const struct slice *argv, int i, int *approx)
{
    int more = argc - 1 - i, maxlen = arg_is(argv[i], "maxlen");

    *approx = 0;
    if (more >= 2 && (arg_is(argv[i + 1], "~") || arg_is(argv[i + 1], "="))) {
        *approx = arg_is(argv[i + 1], "~");
        i++;
    }
    if (maxlen && !arg_nonneg(argv[i + 1]))
        return -1;
    return i + 1;
}

/* XADD's IDMPAUTO pid and IDMP pid iid (Redis 8.6) at argv[i]: how many
 * arguments follow the word, or 0 when it is neither (without them redis
 * reads the word as the ID). */
static int xadd_idmp(int argc, const struct slice *argv, int i, unsigned feat)
{
    int more = argc - 1 - i;

    if (!(feat & FT_XADD_IDMP))
        return 0;
    if (arg_is(argv[i], "idmpauto") && more >= 1)
        return 1;
    return arg_is(argv[i], "idmp") && more >= 2 ? 2 : 0;
}

/* XADD key [NOMKSTREAM] [KEEPREF|DELREF|ACKED] [IDMPAUTO pid|IDMP pid iid]
 * [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [...], as
 * redis's streamParseAddOrTrimArgsOrReply(): the first word that is no option
 * is the ID (KEEPREF...: Redis 8.2, IDMP...: 8.6). NOMKSTREAM never creates the
 * stream; IDMP may write no entry, but creates the stream all the same. */
static int opt_xadd(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    int nomkstream = 0, trim = 0, approx = 0, limit = 0, refs = 0, idmp = 0, i, n;

    for (i = 2; i < argc; i++) {
        struct slice a = argv[i];
        int more = argc - 1 - i;

        if (arg_is(a, "*")) {
            break;
        } else if ((arg_is(a, "maxlen") || arg_is(a, "minid")) && more >= 1) {
            if (trim || (i = xadd_trim(argc, argv, i, &approx)) < 0)
                return -1;                  /* also MAXLEN and MINID at the same time */
            trim = 1;
        } else if (arg_is(a, "limit") && more >= 1) {
            if (!arg_nonneg(argv[++i]))
                return -1;
            limit = 1;
        } else if ((feat & FT_STREAM_REFS) && !refs &&
                   (arg_is(a, "keepref") || arg_is(a, "delref") || arg_is(a, "acked"))) {
            refs = 1;                       /* a second one is read as the ID */
        } else if (arg_is(a, "nomkstream")) {
            nomkstream = 1;
        } else if ((n = xadd_idmp(argc, argv, i, feat)) > 0) {
            if (idmp || argv[i + 1].len == 0 || argv[i + n].len == 0)
                return -1;                  /* twice, or an empty producer or idempotent ID */
            idmp = 1;
            i += n;
        } else {
            break;                          /* the ID (or a syntax error redis reports) */
        }
    }
    if ((limit && !approx) || (idmp && (i >= argc || argv[i].len == 0 || argv[i].p[0] != '*')))
        return -1;                          /* LIMIT needs "~"; IDMP an auto-generated ID */
    int fields = argc - (i + 1);
    if (fields < 2 || fields % 2 != 0)
        return -1;
    use[0].effect = nomkstream ? TE_NONE : TE_CREATE;
    return 0;
}

/* XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]: only MKSTREAM
 * creates the stream. Redis takes at most 8 arguments, repeats or not. */
static int opt_xgroup_create(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    long long v;
    int mkstream = 0;

    if (argc > 8)
        return -1;
    for (int j = 5; j < argc; j++) {
        if (arg_is(argv[j], "mkstream")) {
            mkstream = 1;
        } else if (arg_is(argv[j], "entriesread") && j + 1 < argc) {
            if (slice_to_ll(argv[++j], &v) < 0)
                return -1;
        } else {
            return -1;
        }
    }
    use[0].effect = mkstream ? TE_CREATE : TE_NONE;
    return 0;
}

/* BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset
 * increment] [OVERFLOW WRAP|SAT|FAIL] ...: only SET and INCRBY write (and then
 * create the key, even when the INCRBY fails on overflow). */
static int opt_bitfield(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    int writes = 0;

    for (int j = 2; j < argc; j++) {
        int more = argc - j - 1;

        if (arg_is(argv[j], "get") && more >= 2) {
            j += 2;
        } else if ((arg_is(argv[j], "set") || arg_is(argv[j], "incrby")) && more >= 3) {
            writes = 1;
            j += 3;
        } else if (arg_is(argv[j], "overflow") && more >= 1) {
            j++;
            if (!arg_is(argv[j], "wrap") && !arg_is(argv[j], "sat") && !arg_is(argv[j], "fail"))
                return -1;
        } else {
            return -1;
        }
    }
    use[0].effect = writes ? TE_CREATE : TE_NONE;
    return 0;
}

/* BITOP AND|OR|XOR|NOT|DIFF|DIFF1|ANDOR|ONE destkey key [key ...]: NOT takes
 * one source, DIFF, DIFF1 and ANDOR at least two (the last four: Redis 8.2). */
static int opt_bitop(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    if (arg_is(argv[1], "not"))
        return argc == 4 ? 0 : -1;
    if (arg_is(argv[1], "and") || arg_is(argv[1], "or") || arg_is(argv[1], "xor"))
        return 0;
    if (!(feat & FT_BITOP_MORE))
        return -1;
    if (arg_is(argv[1], "diff") || arg_is(argv[1], "diff1") || arg_is(argv[1], "andor"))
        return argc >= 5 ? 0 : -1;
    return arg_is(argv[1], "one") ? 0 : -1;
}

/* LMOVE/BLMOVE source destination LEFT|RIGHT LEFT|RIGHT [timeout] */
static int opt_lmove(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    for (int j = 3; j <= 4; j++) {
        if (!arg_is(argv[j], "left") && !arg_is(argv[j], "right"))
            return -1;
    }
    return 0;
}

/* INCREX key [NX|XX (Valkey)] [BYINT n|BYFLOAT f] [LBOUND l] [UBOUND u]
 * [SATURATE] [EX s|PX ms|EXAT ts|PXAT ms-ts|PERSIST] [ENX], a documented row
 * (Redis 8.8: redis.io/commands/increx; Valkey 9.2: valkey.io/commands/increx).
 * Without an expiry the key keeps its TTL, as INCR's does ("When no expiration
 * option is given, the key's existing TTL (if any) is preserved"); with ENX
 * the expiry applies only to a key without one, so the key ends with a TTL
 * either way. Not verified: what it does not know, or what the documentation
 * leaves open (two expiries), it leaves unjudged (-2) rather than claim the
 * server refuses it. */
static int opt_increx(int argc, const struct slice *argv, unsigned feat, struct spec_use *use)
{
    static const struct { const char *word; enum ttl_unit unit; } expiries[] = {
        { "ex", TTL_SEC }, { "px", TTL_MS }, { "exat", TTL_UNIX_SEC }, { "pxat", TTL_UNIX_MS },
    };
    static const char *const valued[] = { "byint", "byfloat", "lbound", "ubound" };
    int xx = 0, persist = 0, expiry = 0;
    long long v;

    for (int j = 2; j < argc; j++) {
        size_t k, m;

        for (k = 0; k < 4 && !arg_is(argv[j], expiries[k].word); k++)
            ;
        for (m = 0; m < 4 && !arg_is(argv[j], valued[m]); m++)
            ;
        if (k < 4 && j + 1 < argc && slice_to_ll(argv[j + 1], &v) == 0 && !expiry) {
            expiry = 1;
            set_ttl(&use[0], ++j, expiries[k].unit);
        } else if (m < 4 && j + 1 < argc) {
            j++;
        } else if (arg_is(argv[j], "persist") || arg_is(argv[j], "xx")) {
            persist |= arg_is(argv[j], "persist");
            xx |= arg_is(argv[j], "xx");
        } else if (!arg_is(argv[j], "nx") && !arg_is(argv[j], "enx") &&
                   !arg_is(argv[j], "saturate")) {
            return -2;
        }
    }
    if (expiry && persist)
        return -2;
    if (!expiry)
        use[0].effect = persist ? TE_PERSIST : xx ? TE_NONE : TE_CREATE;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

#define E(x) (1u << TE_##x)

/* Where a key spec finds its keys (redis's begin_search + find_keys). */
#define AT(i)               .begin = KS_INDEX, .index = (i), .find = KS_RANGE, .last = 0, .step = 1
#define RANGE(i, l, s)      .begin = KS_INDEX, .index = (i), .find = KS_RANGE, .last = (l), .step = (s)
#define NUMKEYS(i, min)     NUMKEYS_STEP(i, min, 1)
#define NUMKEYS_STEP(i, min, s) \
    .begin = KS_INDEX, .index = (i), .find = KS_NUMKEYS, .minkeys = (min), .keynumidx = 0, \
    .firstkey = 1, .step = (s)
#define AFTER(kw, from, l, s, lim) \
    .begin = KS_KEYWORD, .keyword = (kw), .index = (from), .find = KS_RANGE, .last = (l), \
    .step = (s), .limit = (lim)
#define OPTION(words)       .begin = KS_OPTION, .keyword = (words)

/* A key role with one effect, whatever the arguments. */
#define KEY(role_, where, eff) { .role = (role_), where, .effect = TE_##eff, .may = E(eff) }
/* A key role whose effect the row's options parser picks among `may`. */
#define KEY_BY_OPTIONS(role_, where, may_) { .role = (role_), where, .effect = TE_NONE, .may = (may_) }

#define KEYSPECS(...) \
    .specs = (const struct key_spec[]){ __VA_ARGS__ }, \
    .nspecs = (int)(sizeof((const struct key_spec[]){ __VA_ARGS__ }) / sizeof(struct key_spec))

#define ROW(name_, arity_, flags_, opts, ...) \
    { .name = (name_), .arity = (arity_), .flags = (flags_), .options = (opts), KEYSPECS(__VA_ARGS__) }
#define ROW_NOKEYS(name_, arity_, flags_) \
    { .name = (name_), .arity = (arity_), .flags = (flags_) }
#define CONTAINER(name_, arity_, flags_, subs_) CONTAINER_SINCE(0, 0, name_, arity_, flags_, subs_)

/* Rows a server has only from a version on: Redis since r, Valkey since v
 * (SRV_VERSION; 0: every version; SRV_NEVER: not at all). */
#define ROW_SINCE(r, v, name_, arity_, flags_, opts, ...) \
    { .name = (name_), .arity = (arity_), .flags = (flags_), .options = (opts), \
      .r_since = (r), .v_since = (v), KEYSPECS(__VA_ARGS__) }
#define ROW_NOKEYS_SINCE(r, v, name_, arity_, flags_) \
    { .name = (name_), .arity = (arity_), .flags = (flags_), .r_since = (r), .v_since = (v) }
/* Rows that changed: Redis from r to before ru, Valkey from v to before vu
 * (0: no end). */
#define ROW_SPAN(r, ru, v, vu, name_, arity_, flags_, opts, ...) \
    { .name = (name_), .arity = (arity_), .flags = (flags_), .options = (opts), \
      .r_since = (r), .r_until = (ru), .v_since = (v), .v_until = (vu), KEYSPECS(__VA_ARGS__) }
/* A blocking write that Redis 7.0 flags noscript and later servers do not. */
#define BLOCKING_NS_UNTIL_72(name_, arity_, opts, ...) \
    ROW_SPAN(0, R72, NEVER, 0, name_, arity_, W | BLK | NS, opts, __VA_ARGS__), \
    ROW_SPAN(R72, 0, 0, 0, name_, arity_, W | BLK, opts, __VA_ARGS__)
#define CONTAINER_SINCE(r, v, name_, arity_, flags_, subs_) \
    { .name = (name_), .arity = (arity_), .flags = (flags_), .subs = (subs_), \
      .nsubs = (int)(sizeof(subs_) / sizeof((subs_)[0])), .r_since = (r), .v_since = (v) }

#define R72     SRV_VERSION(7, 2, 0)
#define R74     SRV_VERSION(7, 4, 0)
#define R80     SRV_VERSION(8, 0, 0)
#define R82     SRV_VERSION(8, 2, 0)
#define R84     SRV_VERSION(8, 4, 0)
#define R86     SRV_VERSION(8, 6, 0)
#define R862    SRV_VERSION(8, 6, 2)
#define R88     SRV_VERSION(8, 8, 0)
#define R810    SRV_VERSION(8, 10, 0)
#define R812    SRV_VERSION(8, 12, 0)
#define V81     SRV_VERSION(8, 1, 0)
#define V90     SRV_VERSION(9, 0, 0)
#define V91     SRV_VERSION(9, 1, 0)
#define V92     SRV_VERSION(9, 2, 0)
#define NEVER   SRV_NEVER

#define W       CMD_WRITE
#define BLK     CMD_BLOCKING
#define NS      CMD_NOSCRIPT
#define DOC     CMD_DOCUMENTED
#define WI      CMD_WIDEINT

/* XGROUP subcommands: the key is argv[2]. Only CREATE ... MKSTREAM creates
 * the stream; the others change the groups of an existing one. */
static const struct command xgroup_subs[] = {
    ROW("xgroup|create", -5, W, opt_xgroup_create, KEY_BY_OPTIONS("key", AT(2), E(NONE) | E(CREATE))),
    ROW("xgroup|createconsumer", 5, W, NULL, KEY("key", AT(2), NONE)),
    ROW("xgroup|delconsumer", 5, W, NULL, KEY("key", AT(2), NONE)),
    ROW("xgroup|destroy", 4, W, NULL, KEY("key", AT(2), NONE)),
    ROW_NOKEYS("xgroup|help", 2, 0),
    ROW("xgroup|setid", -5, W, NULL, KEY("key", AT(2), NONE)),
};

/* FUNCTION subcommands write functions, never keys. */
static const struct command function_subs[] = {
    ROW_NOKEYS("function|delete", 3, W | NS),
    ROW_NOKEYS("function|dump", 2, NS),
    ROW_NOKEYS("function|flush", -2, W | NS),
    ROW_NOKEYS("function|help", 2, 0),
    ROW_NOKEYS("function|kill", 2, NS),
    ROW_NOKEYS("function|list", -2, NS),
    ROW_NOKEYS("function|load", -3, W | NS),
    ROW_NOKEYS("function|restore", -3, W | NS),
    ROW_NOKEYS("function|stats", 2, NS),
};

/* CLUSTER subcommands that write keys: only Valkey 9's FLUSHSLOT (it deletes
 * the keys of a slot). The others are reads as far as the table goes. */
static const struct command cluster_subs[] = {
    ROW_NOKEYS_SINCE(NEVER, V90, "cluster|flushslot", -3, W),
};

/*
 * Every command the servers flag `write`, plus the blocking ones, the
 * scripts and those the proxy cannot judge; sorted by name. CMD_WRITE,
 * CMD_BLOCKING and CMD_NOSCRIPT copy the server's flags (a container gets
 * the union of its subcommands'). Rows without a version are Redis 7.0's,
 * which every Valkey has too (Valkey 7.2 began as Redis 7.2.4).
 *
 * Field TTLs (HEXPIRE, HSETEX ... EX, HPERSIST, HGETEX ... PERSIST) are not
 * key TTLs: those commands leave the key's TTL alone, and a hash they create
 * has none.
 *
 * Effects (what happens to a key that has a TTL, and whether a missing key
 * is created), as observed:
 *   create     the key may be created without a TTL; an existing TTL is kept,
 *              also where the value is replaced in place (INCRBYFLOAT, PFMERGE)
 *   overwrite  the value is replaced and the TTL dropped: GETSET, MSET, RENAME's
 *              target, and every store destination (*STORE, BITOP, SORT ... STORE,
 *              GEORADIUS ... STORE), which an empty result deletes instead
 *   none       only an existing key changes, its TTL kept; or the key is read,
 *              popped or deleted
 *
 * Rows flagged DOC (CMD_DOCUMENTED) come from the documentation of a release
 * newer than any verified one (Redis 8.8 to 8.12, Valkey 9.2; the page is
 * named at each): only where it says precisely which keys a command writes
 * and what becomes of their TTLs, and erring towards create or overwrite. Such
 * a server is FT_NEWER, so what their parsers do not know is left unjudged;
 * their arities are the documented ones. A command documented less precisely
 * has no row: the proxy derives one from the server's own key specs. So has
 * Redis 8.10's HIMPORT, though its SET is documented precisely (it overwrites
 * the key: redis.io/commands/himport-set): it writes with a fieldset its
 * connection PREPAREd, which a script wrapping it would not have, and a
 * derived row is rewritten in MULTI form only.
 */
const struct command command_table[] = {
    ROW("append", 3, W, NULL, KEY("key", AT(1), CREATE)),
    /* Redis 8.8's arrays, documented (redis.io/commands/arinsert, armset,
     * arring, arset): they write elements of the array in place, creating it
     * when missing, as LPUSH or HSET do. */
    ROW_SINCE(R88, NEVER, "arinsert", -3, W | DOC, NULL, KEY("key", AT(1), CREATE)),
    ROW_SINCE(R88, NEVER, "armset", -4, W | DOC, NULL, KEY("key", AT(1), CREATE)),
    ROW_SINCE(R88, NEVER, "arring", -4, W | DOC, NULL, KEY("key", AT(1), CREATE)),
    ROW_SINCE(R88, NEVER, "arset", -4, W | DOC, NULL, KEY("key", AT(1), CREATE)),
    ROW("bitfield", -2, W | WI, opt_bitfield, KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(CREATE))),
    ROW("bitop", -4, W, opt_bitop,
        KEY("destination", AT(2), OVERWRITE), KEY("source", RANGE(3, -1, 1), NONE)),
    BLOCKING_NS_UNTIL_72("blmove", 6, opt_lmove,
                         KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    /* Documented (redis.io/commands/blmovem): LMOVEM's blocking form. */
    ROW_SINCE(R810, NEVER, "blmovem", -6, W | BLK | DOC, NULL,
              KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    ROW("blmpop", -5, W | BLK, NULL, KEY("key", NUMKEYS(2, 1), NONE)),
    BLOCKING_NS_UNTIL_72("blpop", -3, NULL, KEY("key", RANGE(1, -2, 1), NONE)),
    BLOCKING_NS_UNTIL_72("brpop", -3, NULL, KEY("key", RANGE(1, -2, 1), NONE)),
    BLOCKING_NS_UNTIL_72("brpoplpush", 4, NULL,
                         KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    /* Documented (redis.io/commands/bzmove): ZMOVE's blocking form; "Existing
     * expiration times are preserved; a newly created destination has no
     * expiration." */
    ROW_SINCE(R812, NEVER, "bzmove", -5, W | BLK | DOC, NULL,
              KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    ROW("bzmpop", -5, W | BLK, NULL, KEY("key", NUMKEYS(2, 1), NONE)),
    BLOCKING_NS_UNTIL_72("bzpopmax", -3, NULL, KEY("key", RANGE(1, -2, 1), NONE)),
    BLOCKING_NS_UNTIL_72("bzpopmin", -3, NULL, KEY("key", RANGE(1, -2, 1), NONE)),
    CONTAINER_SINCE(NEVER, V90, "cluster", -2, W | CMD_PARTIAL, cluster_subs),
    /* The destination gets the source's TTL, or none: without REPLACE an
     * existing destination is left alone. */
    ROW("copy", -3, W, opt_copy,
        KEY("source", AT(1), NONE),
        KEY_BY_OPTIONS("destination", AT(2), E(CREATE) | E(OVERWRITE) | E(CARRY))),
    /* DEBUG POPULATE, RELOAD, ... create or reload keys behind the table's back. */
    ROW_NOKEYS("debug", -2, CMD_UNVERIFIED | NS),
    ROW("decr", 2, W | WI, NULL, KEY("key", AT(1), CREATE)),
    ROW("decrby", 3, W | WI, NULL, KEY("key", AT(1), CREATE)),
    ROW("del", -2, W, NULL, KEY("key", RANGE(1, -1, 1), NONE)),
    /* Deletes the key, or with IFEQ|IFNE|IFDEQ|IFDNE when its value (or digest)
     * compares so; Redis checks the condition's word only on an existing key.
     * Valkey 9.2's (IFEQ|IFNE) is documented: valkey.io/commands/delex. */
    ROW_SPAN(R84, 0, NEVER, 0, "delex", -2, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(NEVER, V92, "delex", -2, W | DOC, NULL, KEY("key", AT(1), NONE)),
    /* Deletes the key when its value is the given one. */
    ROW_SINCE(NEVER, V90, "delifeq", 3, W, NULL, KEY("key", AT(1), NONE)),
    ROW("eval", -3, CMD_SCRIPT | NS, NULL, KEY("key", NUMKEYS(2, 0), OVERWRITE)),
    /* The read-only variants cannot write: redis refuses writes inside them. */
    ROW("eval_ro", -3, CMD_SCRIPT | NS, NULL, KEY("key", NUMKEYS(2, 0), NONE)),
    ROW("evalsha", -3, CMD_SCRIPT | NS, NULL, KEY("key", NUMKEYS(2, 0), OVERWRITE)),
    ROW("evalsha_ro", -3, CMD_SCRIPT | NS, NULL, KEY("key", NUMKEYS(2, 0), NONE)),
    ROW("expire", -3, W | CMD_EXPIRE, opt_expire, KEY("key", AT(1), SETS_TTL)),
    ROW("expireat", -3, W | CMD_EXPIRE, opt_expireat, KEY("key", AT(1), SETS_TTL)),
    ROW("fcall", -3, CMD_SCRIPT | NS, NULL, KEY("key", NUMKEYS(2, 0), OVERWRITE)),
    ROW("fcall_ro", -3, CMD_SCRIPT | NS, NULL, KEY("key", NUMKEYS(2, 0), NONE)),
    ROW_NOKEYS("flushall", -1, W),
    ROW_NOKEYS("flushdb", -1, W),
    CONTAINER("function", -2, W | NS, function_subs),
    ROW("geoadd", -5, W, opt_geoadd, KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(CREATE))),
    /* Without STORE or STOREDIST a read. */
    ROW("georadius", -6, W, opt_georadius,
        KEY("key", AT(1), NONE), KEY("destination", OPTION("STORE,STOREDIST"), OVERWRITE)),
    ROW("georadiusbymember", -5, W, opt_georadiusbymember,
        KEY("key", AT(1), NONE), KEY("destination", OPTION("STORE,STOREDIST"), OVERWRITE)),
    ROW("geosearchstore", -8, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", AT(2), NONE)),
    ROW("getdel", 2, W, NULL, KEY("key", AT(1), NONE)),
    ROW("getex", -2, W, opt_getex,
        KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(PERSIST) | E(SETS_TTL))),
    ROW("getset", 3, W, NULL, KEY("key", AT(1), OVERWRITE)),
    ROW("hdel", -3, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R74, V90, "hexpire", -6, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R74, V90, "hexpireat", -6, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R80, V91, "hgetdel", -5, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R80, V90, "hgetex", -5, W, NULL, KEY("key", AT(1), NONE)),
    ROW("hincrby", 4, W | WI, NULL, KEY("key", AT(1), CREATE)),
    ROW("hincrbyfloat", 4, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("hmset", -4, W, opt_hset, KEY("key", AT(1), CREATE)),
    ROW_SINCE(R74, V90, "hpersist", -5, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R74, V90, "hpexpire", -6, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R74, V90, "hpexpireat", -6, W, NULL, KEY("key", AT(1), NONE)),
    ROW("hset", -4, W, opt_hset, KEY("key", AT(1), CREATE)),
    ROW_SINCE(R80, V90, "hsetex", -6, W, opt_hsetex,
              KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(CREATE))),
    ROW("hsetnx", 4, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("incr", 2, W | WI, NULL, KEY("key", AT(1), CREATE)),
    ROW("incrby", 3, W | WI, NULL, KEY("key", AT(1), CREATE)),
    ROW("incrbyfloat", 3, W, NULL, KEY("key", AT(1), CREATE)),
    ROW_SINCE(R88, V92, "increx", -2, W | DOC, opt_increx,
              KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(CREATE) | E(PERSIST) | E(SETS_TTL))),
    ROW("linsert", 5, W, NULL, KEY("key", AT(1), NONE)),
    ROW("lmove", 5, W, opt_lmove,
        KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    /* Documented (redis.io/commands/lmovem): LMOVE of several elements. */
    ROW_SINCE(R810, NEVER, "lmovem", -5, W | DOC, NULL,
              KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    ROW("lmpop", -4, W, NULL, KEY("key", NUMKEYS(1, 1), NONE)),
    ROW("lpop", -2, W, NULL, KEY("key", AT(1), NONE)),
    ROW("lpush", -3, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("lpushx", -3, W, NULL, KEY("key", AT(1), NONE)),
    ROW("lrem", 4, W, NULL, KEY("key", AT(1), NONE)),
    ROW("lset", 4, W, NULL, KEY("key", AT(1), NONE)),
    ROW("ltrim", 4, W, NULL, KEY("key", AT(1), NONE)),
    /* Writes another server. */
    ROW("migrate", -6, W, opt_migrate,
        KEY("key", AT(3), CARRY), KEY("key", AFTER("KEYS", -2, -1, 1, 0), CARRY)),
    /* The key leaves this database with its TTL; an existing key in the other
     * one makes MOVE fail. */
    ROW("move", 3, W, opt_move, KEY("key", AT(1), CARRY)),
    ROW("mset", -3, W, opt_mset, KEY("key", RANGE(1, -1, 2), OVERWRITE)),
    /* All or nothing: when one key exists none is written. */
    ROW_SINCE(R84, V91, "msetex", -4, W, opt_msetex,
              KEY_BY_OPTIONS("key", NUMKEYS_STEP(1, 1, 2),
                             E(NONE) | E(CREATE) | E(OVERWRITE) | E(SETS_TTL))),
    ROW("msetnx", -3, W, opt_mset, KEY("key", RANGE(1, -1, 2), CREATE)),
    ROW("persist", 2, W, NULL, KEY("key", AT(1), PERSIST)),
    ROW("pexpire", -3, W | CMD_EXPIRE, opt_pexpire, KEY("key", AT(1), SETS_TTL)),
    ROW("pexpireat", -3, W | CMD_EXPIRE, opt_pexpireat, KEY("key", AT(1), SETS_TTL)),
    ROW("pfadd", -2, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("pfdebug", 3, W, NULL, KEY("key", AT(2), NONE)),
    /* Unlike the *STORE commands, PFMERGE merges into the destination in
     * place: an existing destination keeps its TTL. */
    ROW("pfmerge", -2, W, NULL,
        KEY("destination", AT(1), CREATE), KEY("source", RANGE(2, -1, 1), NONE)),
    ROW("psetex", 4, W, opt_psetex, KEY("key", AT(1), SETS_TTL)),
    /* The target gets the source's TTL, or none. */
    ROW("rename", 3, W, NULL, KEY("source", AT(1), NONE), KEY("destination", AT(2), OVERWRITE)),
    ROW("renamenx", 3, W, NULL, KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    ROW("restore", -4, W, opt_restore,
        KEY_BY_OPTIONS("key", AT(1), E(CREATE) | E(OVERWRITE) | E(SETS_TTL))),
    ROW("restore-asking", -4, W, opt_restore,
        KEY_BY_OPTIONS("key", AT(1), E(CREATE) | E(OVERWRITE) | E(SETS_TTL))),
    ROW("rpop", -2, W, NULL, KEY("key", AT(1), NONE)),
    ROW("rpoplpush", 3, W, NULL, KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    ROW("rpush", -3, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("rpushx", -3, W, NULL, KEY("key", AT(1), NONE)),
    ROW("sadd", -3, W, NULL, KEY("key", AT(1), CREATE)),
    /* Documented (redis.io/commands/saddex): SADD with members' TTLs; "If the
     * key doesn't exist, Redis creates a new set" (MXX creates none). */
    ROW_SINCE(R812, NEVER, "saddex", -5, W | DOC, NULL, KEY("key", AT(1), CREATE)),
    ROW("sdiffstore", -3, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", RANGE(2, -1, 1), NONE)),
    ROW("set", -3, W, opt_set,
        KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(CREATE) | E(OVERWRITE) | E(SETS_TTL))),
    ROW("setbit", 4, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("setex", 4, W, opt_setex, KEY("key", AT(1), SETS_TTL)),
    ROW("setnx", 3, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("setrange", 4, W, NULL, KEY("key", AT(1), CREATE)),
    /* Members' TTLs, documented (redis.io/commands/sexpire, sexpireat,
     * spexpire, spexpireat, spersist): not the key's, and a missing key stays
     * missing ("-2 if no such member exists in the set, or the key does not
     * exist"). */
    ROW_SINCE(R812, NEVER, "sexpire", -6, W | DOC, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R812, NEVER, "sexpireat", -6, W | DOC, NULL, KEY("key", AT(1), NONE)),
    ROW("sinterstore", -3, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", RANGE(2, -1, 1), NONE)),
    ROW("smove", 4, W, NULL, KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    /* Without STORE a read. */
    ROW("sort", -2, W, opt_sort,
        KEY("key", AT(1), NONE), KEY("destination", OPTION("STORE"), OVERWRITE)),
    ROW_SINCE(R812, NEVER, "spersist", -5, W | DOC, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R812, NEVER, "spexpire", -6, W | DOC, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R812, NEVER, "spexpireat", -6, W | DOC, NULL, KEY("key", AT(1), NONE)),
    ROW("spop", -2, W, NULL, KEY("key", AT(1), NONE)),
    ROW("srem", -3, W, NULL, KEY("key", AT(1), NONE)),
    ROW("sunionstore", -3, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", RANGE(2, -1, 1), NONE)),
    /* Swaps whole databases. */
    ROW_NOKEYS("swapdb", 3, W | CMD_UNVERIFIED),
    /* Deletes the keys of slot ranges (cluster mode only). */
    ROW_NOKEYS_SINCE(R84, NEVER, "trimslots", -5, W),
    ROW("unlink", -2, W, NULL, KEY("key", RANGE(1, -1, 1), NONE)),
    /* Redis 8's vector sets (a module built into the server): 8.0 gives them
     * arity -1, 8.6 their own, from COMMAND INFO the module sets since #14192
     * (July 2025, in 8.4's VRANGE already); 8.2 may have either: -1, which
     * refuses nothing, until 8.4. */
    ROW_SPAN(R80, R84, NEVER, 0, "vadd", -1, W, NULL, KEY("key", AT(1), CREATE)),
    ROW_SPAN(R84, 0, NEVER, 0, "vadd", -5, W, NULL, KEY("key", AT(1), CREATE)),
    ROW_SPAN(R80, R84, NEVER, 0, "vrem", -1, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SPAN(R84, 0, NEVER, 0, "vrem", 3, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SPAN(R80, R84, NEVER, 0, "vsetattr", -1, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SPAN(R84, 0, NEVER, 0, "vsetattr", 4, W, NULL, KEY("key", AT(1), NONE)),
    /* Blocking since 7.2 (noscript before, and no row needed). */
    ROW_NOKEYS_SINCE(R72, 0, "wait", 3, BLK),
    ROW_NOKEYS_SINCE(R72, 0, "waitaof", 4, BLK),
    ROW("xack", -4, W, NULL, KEY("key", AT(1), NONE)),
    /* Acknowledge or delete entries, set a stream's IDMP settings or record
     * one: only in an existing stream. */
    ROW_SINCE(R82, NEVER, "xackdel", -6, W, NULL, KEY("key", AT(1), NONE)),
    ROW("xadd", -5, W, opt_xadd, KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(CREATE))),
    ROW("xautoclaim", -6, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R86, NEVER, "xcfgset", -2, W, NULL, KEY("key", AT(1), NONE)),
    ROW("xclaim", -6, W, NULL, KEY("key", AT(1), NONE)),
    ROW("xdel", -3, W, NULL, KEY("key", AT(1), NONE)),
    ROW_SINCE(R82, NEVER, "xdelex", -5, W, NULL, KEY("key", AT(1), NONE)),
    CONTAINER("xgroup", -2, W, xgroup_subs),
    ROW_SINCE(R862, NEVER, "xidmprecord", 5, W, NULL, KEY("key", AT(1), NONE)),
    /* Blocks with BLOCK; a read. */
    ROW("xread", -4, BLK, NULL, KEY("key", AFTER("STREAMS", 1, -1, 1, 2), NONE)),
    ROW("xreadgroup", -7, W | BLK, NULL, KEY("key", AFTER("STREAMS", 4, -1, 1, 2), NONE)),
    ROW("xsetid", -3, W, NULL, KEY("key", AT(1), NONE)),
    ROW("xtrim", -4, W, NULL, KEY("key", AT(1), NONE)),
    ROW("zadd", -4, W, opt_zadd, KEY_BY_OPTIONS("key", AT(1), E(NONE) | E(CREATE))),
    ROW("zdiffstore", -4, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", NUMKEYS(2, 1), NONE)),
    ROW("zincrby", 4, W, NULL, KEY("key", AT(1), CREATE)),
    ROW("zinterstore", -4, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", NUMKEYS(2, 1), NONE)),
    /* Documented (redis.io/commands/zmove, zmovemember): "Existing key
     * expiration times are preserved; a newly created destination has no
     * expiration." */
    ROW_SINCE(R812, NEVER, "zmove", -4, W | DOC, NULL,
              KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    ROW_SINCE(R812, NEVER, "zmovemember", -6, W | DOC, NULL,
              KEY("source", AT(1), NONE), KEY("destination", AT(2), CREATE)),
    ROW("zmpop", -4, W, NULL, KEY("key", NUMKEYS(1, 1), NONE)),
    ROW("zpopmax", -2, W, NULL, KEY("key", AT(1), NONE)),
    ROW("zpopmin", -2, W, NULL, KEY("key", AT(1), NONE)),
    ROW("zrangestore", -5, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", AT(2), NONE)),
    ROW("zrem", -3, W, NULL, KEY("key", AT(1), NONE)),
    ROW("zremrangebylex", 4, W, NULL, KEY("key", AT(1), NONE)),
    ROW("zremrangebyrank", 4, W, NULL, KEY("key", AT(1), NONE)),
    ROW("zremrangebyscore", 4, W, NULL, KEY("key", AT(1), NONE)),
    ROW("zunionstore", -4, W, NULL,
        KEY("destination", AT(1), OVERWRITE), KEY("source", NUMKEYS(2, 1), NONE)),
};

const int command_table_rows = (int)(sizeof(command_table) / sizeof(command_table[0]));

/*
 * Every top-level command name the servers know, reads included: Redis
 * 7.0.15's (generated by tests/integration/tools/gen_command_names.py), then
 * the later ones with the versions that brought them. The integration suite
 * checks them against each server's COMMAND LIST.
 */
#define N(name) { (name), 0, 0 }
const struct known_name known_names[] = {
    N("acl"), N("append"), N("asking"), N("auth"), N("bgrewriteaof"), N("bgsave"), N("bitcount"),
    N("bitfield"), N("bitfield_ro"), N("bitop"), N("bitpos"), N("blmove"), N("blmpop"), N("blpop"),
    N("brpop"), N("brpoplpush"), N("bzmpop"), N("bzpopmax"), N("bzpopmin"), N("client"),
    N("cluster"), N("command"), N("config"), N("copy"), N("dbsize"), N("debug"), N("decr"),
    N("decrby"), N("del"), N("discard"), N("dump"), N("echo"), N("eval"), N("eval_ro"),
    N("evalsha"), N("evalsha_ro"), N("exec"), N("exists"), N("expire"), N("expireat"),
    N("expiretime"), N("failover"), N("fcall"), N("fcall_ro"), N("flushall"), N("flushdb"),
    N("function"), N("geoadd"), N("geodist"), N("geohash"), N("geopos"), N("georadius"),
    N("georadius_ro"), N("georadiusbymember"), N("georadiusbymember_ro"), N("geosearch"),
    N("geosearchstore"), N("get"), N("getbit"), N("getdel"), N("getex"), N("getrange"), N("getset"),
    N("hdel"), N("hello"), N("hexists"), N("hget"), N("hgetall"), N("hincrby"), N("hincrbyfloat"),
    N("hkeys"), N("hlen"), N("hmget"), N("hmset"), N("hrandfield"), N("hscan"), N("hset"),
    N("hsetnx"), N("hstrlen"), N("hvals"), N("incr"), N("incrby"), N("incrbyfloat"), N("info"),
    N("keys"), N("lastsave"), N("latency"), N("lcs"), N("lindex"), N("linsert"), N("llen"),
    N("lmove"), N("lmpop"), N("lolwut"), N("lpop"), N("lpos"), N("lpush"), N("lpushx"), N("lrange"),
    N("lrem"), N("lset"), N("ltrim"), N("memory"), N("mget"), N("migrate"), N("module"),
    N("monitor"), N("move"), N("mset"), N("msetnx"), N("multi"), N("object"), N("persist"),
    N("pexpire"), N("pexpireat"), N("pexpiretime"), N("pfadd"), N("pfcount"), N("pfdebug"),
    N("pfmerge"), N("pfselftest"), N("ping"), N("psetex"), N("psubscribe"), N("psync"), N("pttl"),
    N("publish"), N("pubsub"), N("punsubscribe"), N("quit"), N("randomkey"), N("readonly"),
    N("readwrite"), N("rename"), N("renamenx"), N("replconf"), N("replicaof"), N("reset"),
    N("restore"), N("restore-asking"), N("role"), N("rpop"), N("rpoplpush"), N("rpush"),
    N("rpushx"), N("sadd"), N("save"), N("scan"), N("scard"), N("script"), N("sdiff"),
    N("sdiffstore"), N("select"), N("set"), N("setbit"), N("setex"), N("setnx"), N("setrange"),
    N("shutdown"), N("sinter"), N("sintercard"), N("sinterstore"), N("sismember"), N("slaveof"),
    N("slowlog"), N("smembers"), N("smismember"), N("smove"), N("sort"), N("sort_ro"), N("spop"),
    N("spublish"), N("srandmember"), N("srem"), N("sscan"), N("ssubscribe"), N("strlen"),
    N("subscribe"), N("substr"), N("sunion"), N("sunionstore"), N("sunsubscribe"), N("swapdb"),
    N("sync"), N("time"), N("touch"), N("ttl"), N("type"), N("unlink"), N("unsubscribe"),
    N("unwatch"), N("wait"), N("watch"), N("xack"), N("xadd"), N("xautoclaim"), N("xclaim"),
    N("xdel"), N("xgroup"), N("xinfo"), N("xlen"), N("xpending"), N("xrange"), N("xread"),
    N("xreadgroup"), N("xrevrange"), N("xsetid"), N("xtrim"), N("zadd"), N("zcard"), N("zcount"),
    N("zdiff"), N("zdiffstore"), N("zincrby"), N("zinter"), N("zintercard"), N("zinterstore"),
    N("zlexcount"), N("zmpop"), N("zmscore"), N("zpopmax"), N("zpopmin"), N("zrandmember"),
    N("zrange"), N("zrangebylex"), N("zrangebyscore"), N("zrangestore"), N("zrank"), N("zrem"),
    N("zremrangebylex"), N("zremrangebyrank"), N("zremrangebyscore"), N("zrevrange"),
    N("zrevrangebylex"), N("zrevrangebyscore"), N("zrevrank"), N("zscan"), N("zscore"), N("zunion"),
    N("zunionstore"),
    /* since Redis 7.2 and in every Valkey */
    { "waitaof", R72, 0 },
    /* hash field expiration: Redis 7.4, Valkey 9.0 */
    { "hexpire", R74, V90 }, { "hexpireat", R74, V90 }, { "hexpiretime", R74, V90 },
    { "hpersist", R74, V90 }, { "hpexpire", R74, V90 }, { "hpexpireat", R74, V90 },
    { "hpexpiretime", R74, V90 }, { "hpttl", R74, V90 }, { "httl", R74, V90 },
    { "hgetex", R80, V90 }, { "hsetex", R80, V90 }, { "hgetdel", R80, V91 },
    /* Redis 8's vector sets */
    { "vadd", R80, NEVER }, { "vcard", R80, NEVER }, { "vdim", R80, NEVER },
    { "vemb", R80, NEVER }, { "vgetattr", R80, NEVER }, { "vinfo", R80, NEVER },
    { "vismember", R80, NEVER }, { "vlinks", R80, NEVER }, { "vrandmember", R80, NEVER },
    { "vrem", R80, NEVER }, { "vsetattr", R80, NEVER }, { "vsim", R80, NEVER },
    /* Redis 8.2 to 8.6 (COMMAND DOCS of 8.6.3: "since"; XIDMPRECORD came in 8.6.2) */
    { "xackdel", R82, NEVER }, { "xdelex", R82, NEVER },
    { "delex", R84, V92 }, { "digest", R84, NEVER }, { "msetex", R84, V91 },
    { "trimslots", R84, NEVER }, { "vrange", R84, NEVER },
    { "hotkeys", R86, NEVER }, { "xcfgset", R86, NEVER }, { "xidmprecord", R862, NEVER },
    /* Valkey only */
    { "commandlog", NEVER, V81 }, { "delifeq", NEVER, V90 }, { "clusterscan", NEVER, V91 },
    /* Documented rows' names (CMD_DOCUMENTED): only those, as a name the table
     * knows without a row is a read to the proxy, never derived. */
    { "arinsert", R88, NEVER }, { "armset", R88, NEVER }, { "arring", R88, NEVER },
    { "arset", R88, NEVER }, { "increx", R88, V92 },
    { "blmovem", R810, NEVER }, { "lmovem", R810, NEVER },
    { "bzmove", R812, NEVER }, { "saddex", R812, NEVER }, { "sexpire", R812, NEVER },
    { "sexpireat", R812, NEVER }, { "spersist", R812, NEVER }, { "spexpire", R812, NEVER },
    { "spexpireat", R812, NEVER }, { "zmove", R812, NEVER }, { "zmovemember", R812, NEVER },
};

const int known_names_n = (int)(sizeof(known_names) / sizeof(known_names[0]));

/* ------------------------------------------------------------------------ */
/* Rows                                                                      */
/* ------------------------------------------------------------------------ */

int row_available(const struct command *c, const struct server_id *id)
{
    unsigned since = id->kind == SRV_VALKEY ? c->v_since : c->r_since;
    unsigned until = id->kind == SRV_VALKEY ? c->v_until : c->r_until;

    return since != SRV_NEVER && id->version >= since && (until == 0 || id->version < until);
}

const char *command_name(const struct command *c)
{
    return c->name;
}

unsigned command_flags(const struct command *c)
{
    return c->flags;
}

int command_arity_ok(const struct command *c, int argc)
{
    return c->arity >= 0 ? argc == c->arity : argc >= -c->arity;
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                      */
/* ------------------------------------------------------------------------ */

/* A container's row for argv[1]: redis finds subcommands by exact length,
 * case-insensitive. */
static const struct command *sub_lookup(const struct command *c, struct slice sub)
{
    size_t prefix = strlen(c->name) + 1;       /* "xgroup|" */

    for (int i = 0; i < c->nsubs; i++) {
        const char *name = c->subs[i].name + prefix;

        if (slice_eq_nocase(sub, name))
            return &c->subs[i];
    }
    return NULL;
}

/* Redis's keyword search: from argv[index] towards the end, or when index is
 * negative from argv[argc + index] backwards; the search stops before the
 * last argument (forwards) or before argv[1] (backwards). Returns the index
 * after the keyword, or -1 when it is absent. */
static int keyword_search(const struct key_spec *ks, int argc, const struct slice *argv)
{
    int start = ks->index > 0 ? ks->index : argc + ks->index;
    int end = ks->index > 0 ? argc - 1 : 1;

    for (int i = start; i != end; i = start <= end ? i + 1 : i - 1) {
        if (i >= argc || i < 1)
            break;
        if (arg_is(argv[i], ks->keyword))
            return i + 1;
    }
    return -1;
}

/* Appends the keys of one spec with an effect to out[n...]. Returns the new
 * count, or -1 when the keys do not fit in argv (redis refuses it). */
static int spec_keys(const struct key_spec *ks, const struct spec_use *u, int argc,
                     const struct slice *argv, struct key_ref *out, int n)
{
    int first, last, step = 1;

    switch (ks->begin) {
    case KS_INDEX:
        first = ks->index;
        break;
    case KS_KEYWORD:
        first = keyword_search(ks, argc, argv);
        if (first < 0)
            return n;
        break;
    default:    /* KS_OPTION */
        if (u->argi < 0)
            return n;
        first = u->argi;
        break;
    }

    if (ks->begin == KS_OPTION) {
        last = first;
    } else if (ks->find == KS_NUMKEYS) {
        long long numkeys;
        int at = first + ks->keynumidx;

        if (at >= argc || slice_to_ll(argv[at], &numkeys) < 0 || numkeys < ks->minkeys ||
            numkeys > argc)
            return -1;
        first += ks->firstkey;
        last = first + ((int)numkeys - 1) * ks->step;
        step = ks->step;
    } else {
        if (ks->last >= 0)
            last = first + ks->last;
        else if (ks->limit == 0)
            last = argc + ks->last;
        else
            last = first + (argc - first) / ks->limit + ks->last;
        step = ks->step;
    }
    if (last >= argc)
        return -1;
    if (u->effect == TE_NONE)
        return n;
    for (int i = first; i <= last && n < argc; i += step) {    /* out holds argc keys */
        out[n].argi = i;
        out[n].effect = u->effect;
        out[n].ttl_unit = u->effect == TE_SETS_TTL ? u->ttl_unit : 0;
        out[n].ttl_argi = u->effect == TE_SETS_TTL ? u->ttl_argi : -1;
        out[n].db_argi = u->effect == TE_CARRY ? u->db_argi : -1;
        n++;
    }
    return n;
}

int command_keys(const struct cmd_info *ci, int argc, const struct slice *argv,
                 struct key_ref *out)
{
    const struct command *c = ci->row;
    struct spec_use use[MAX_SPECS];
    unsigned feat = ci->feat;
    int n = 0;

    /* On a server newer than the table, what the table refuses may be
     * arguments it does not know: not judged (-2) rather than refused. */
    int refused = feat & FT_NEWER ? -2 : -1;

    if (!command_arity_ok(c, argc))
        return refused;
    if (c->subs != NULL) {
        const struct command *sub = sub_lookup(c, argv[1]);

        if (sub == NULL && (c->flags & CMD_PARTIAL))
            return 0;                   /* a read */
        if (sub == NULL)
            return refused;
        c = sub;
        if (!command_arity_ok(c, argc))
            return refused;
    }
    if (c->flags & (CMD_UNVERIFIED | CMD_UNJUDGED))
        return -2;
    for (int i = 0; i < c->nspecs; i++) {
        use[i].effect = c->specs[i].effect;
        use[i].ttl_unit = TTL_SEC;
        use[i].ttl_argi = -1;
        use[i].db_argi = -1;
        use[i].argi = -1;
    }
    if (c->options != NULL) {
        int rc = c->options(argc, argv, feat, use);

        if (rc != 0)
            return rc == -1 ? refused : rc;
    }
    for (int i = 0; i < c->nspecs && n >= 0; i++)
        n = spec_keys(&c->specs[i], &use[i], argc, argv, out, n);
    return n < 0 ? refused : n;
}

/* ------------------------------------------------------------------------ */
/* Printing                                                                  */
/* ------------------------------------------------------------------------ */

const char *ttl_effect_name(enum ttl_effect e)
{
    switch (e) {
    case TE_NONE:       return "none";
    case TE_CREATE:     return "create";
    case TE_OVERWRITE:  return "overwrite";
    case TE_PERSIST:    return "persist";
    case TE_SETS_TTL:   return "sets-ttl";
    case TE_CARRY:      return "carry";
    }
    return "?";
}

static void print_flags(FILE *out, unsigned flags)
{
    static const struct { unsigned flag; const char *name; } names[] = {
        { CMD_WRITE, "write" }, { CMD_BLOCKING, "blocking" }, { CMD_SCRIPT, "script" },
        { CMD_UNVERIFIED, "unverified" }, { CMD_EXPIRE, "expire" }, { CMD_NOSCRIPT, "noscript" },
        { CMD_DERIVED, "derived" }, { CMD_UNJUDGED, "unjudged" }, { CMD_PARTIAL, "partial" },
        { CMD_DOCUMENTED, "documented" }, { CMD_WIDEINT, "wideint" },
    };
    const char *sep = "";

    if (flags == 0) {
        fputs(" -", out);
        return;
    }
    fputc(' ', out);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (flags & names[i].flag) {
            fprintf(out, "%s%s", sep, names[i].name);
            sep = ",";
        }
    }
}

static void print_range(FILE *out, const struct key_spec *ks)
{
    if (ks->last != 0)
        fprintf(out, "..%d", ks->last);
    if (ks->step != 1)
        fprintf(out, "/%d", ks->step);
    if (ks->limit != 0)
        fprintf(out, "%%%d", ks->limit);
}

static void print_spec(FILE *out, const struct key_spec *ks)
{
    const char *sep = "";

    fprintf(out, " %s@", ks->role);
    switch (ks->begin) {
    case KS_INDEX:
        fprintf(out, "%d", ks->index);
        break;
    case KS_KEYWORD:
        fprintf(out, "after(%s,%d)", ks->keyword, ks->index);
        break;
    default:
        fprintf(out, "opt(%s)", ks->keyword);
        break;
    }
    if (ks->begin != KS_OPTION) {
        if (ks->find == KS_NUMKEYS && (ks->keynumidx != 0 || ks->firstkey != 1))
            fprintf(out, "+numkeys(%d,%d)", ks->keynumidx, ks->firstkey);
        else if (ks->find == KS_NUMKEYS)
            fputs("+numkeys", out);
        if (ks->find == KS_NUMKEYS && ks->step != 1)
            fprintf(out, "/%d", ks->step);
        if (ks->find == KS_RANGE)
            print_range(out, ks);
    }
    fputc(':', out);
    for (int e = TE_NONE; e <= TE_CARRY; e++) {
        if (ks->may & (1u << e)) {
            fprintf(out, "%s%s", sep, ttl_effect_name((enum ttl_effect)e));
            sep = "|";
        }
    }
}

void print_row(FILE *out, const struct command *c)
{
    fprintf(out, "%s %d", c->name, c->arity);
    print_flags(out, c->flags);
    for (int i = 0; i < c->nspecs; i++)
        print_spec(out, &c->specs[i]);
    fputc('\n', out);
}

/* Where a KS_INDEX key spec's last key is for argc arguments; -1 when it
 * depends on more than the count (a keyword, numkeys, an option). */
static int spec_last(const struct key_spec *ks, int argc)
{
    if (ks->begin != KS_INDEX || ks->find != KS_RANGE || ks->limit != 0)
        return -1;
    return ks->last >= 0 ? ks->index + ks->last : argc + ks->last;
}

int command_keys_before(const struct cmd_info *ci, int argc, int known,
                        const struct slice *argv, struct key_ref *out)
{
    const struct command *c = ci->row;
    int n = 0;

    if (c == NULL)
        return 0;
    if (c->subs != NULL || (c->flags & (CMD_SCRIPT | CMD_UNVERIFIED | CMD_UNJUDGED |
                                        CMD_KEYS_UNKNOWN)))
        return -1;
    for (int i = 0; i < c->nspecs; i++) {
        const struct key_spec *ks = &c->specs[i];
        int last = spec_last(ks, argc);
        if (last < 0 || last >= known)
            return -1;
        for (int k = ks->index; k <= last; k += ks->step > 0 ? ks->step : 1)
            out[n++] = (struct key_ref){ .argi = k, .effect = TE_CREATE, .ttl_argi = -1,
                                         .db_argi = -1 };
    }
    return n;
}

int command_key_args(const struct cmd_info *ci, int argc, const struct slice *argv,
                     struct key_ref *out)
{
    const struct command *c = ci->row;
    int n = 0;

    /* No arity check: a server newer than the table may take more arguments,
     * and the keys at their positions are what the rules need. */
    if (c == NULL)
        return 0;
    if (c->subs != NULL && (argc < 2 || (c = sub_lookup(c, argv[1])) == NULL))
        return 0;
    if (c->flags & CMD_KEYS_UNKNOWN)
        return -1;
    for (int i = 0; i < c->nspecs; i++) {
        struct spec_use u = { .effect = TE_CREATE, .ttl_argi = -1, .db_argi = -1, .argi = -1 };
        int m;

        if (c->specs[i].begin == KS_OPTION)
            continue;
        m = spec_keys(&c->specs[i], &u, argc, argv, out, n);
        if (m < 0)
            break;
        /* A role the command only reads (a source): TE_NONE. */
        for (int j = n; j < m && c->specs[i].may == (1u << TE_NONE); j++)
            out[j].effect = TE_NONE;
        n = m;
    }
    return n;
}
