/*
 * cmdset: the commands of one server (see commands.h).
 *
 *   server_id (redis 8.0.6, valkey 9.1.2, ...)
 *       │ command_set_new()
 *       ▼
 *   name slots: every name that server has ──▶ cmd_info: row (NULL for reads),
 *       ▲                                      session id and flags, features
 *       │ command_set_derive()
 *   the server's own COMMAND INFO for names the table lacks (modules, newer
 *   servers): rows derived from their key specs, CMD_DERIVED
 *
 * command_resolve() runs for every request: one probe into an open-addressing
 * hash table, the name folded to lowercase while it is hashed, in a stack
 * buffer, no allocation.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands_int.h"

const struct server_id server_id_default = { SRV_REDIS, SRV_VERSION(7, 0, 0) };

/* The newest version of each kind whose table was verified by experiment
 * (tests/integration/test_command_table.py): beyond it, FT_NEWER. */
#define REDIS_VERIFIED  SRV_VERSION(8, 6, 99)
#define VALKEY_VERIFIED SRV_VERSION(9, 1, 99)

#define NAME_SLOTS 1024             /* power of two, over 3x the names of any server */
#define MAX_DERIVED 512             /* rows derived from one server's key specs, at most */

struct name_slot {
    const char *name;               /* NULL: empty; points into the table or `owned` */
    size_t len;
    struct cmd_info info;           /* info.row NULL for names the table does not need */
};

struct command_set {
    struct server_id id;            /* the server */
    struct server_id table;         /* whose table: id, unless held back (table_server()) */
    unsigned feat;
    int table_rows, derived, unjudged;
    struct name_slot slots[NAME_SLOTS];
    struct command *rows;           /* derived rows, MAX_DERIVED of them */
    struct key_spec *specs;         /* their key specs, MAX_SPECS per row */
    int nrows;
    char **owned;                   /* strings allocated for derived rows */
    int nowned, owned_cap;
};

/* The ids and session flags of the commands the proxy must recognise. */
static const struct {
    const char *name;
    unsigned short id, sflags;
} session_commands[] = {
    { "acl", CID_ACL, 0 },          { "asking", CID_OTHER, CS_PIN },
    { "auth", CID_AUTH, CS_PIN },               { "client", CID_CLIENT, 0 },
    { "cluster", CID_CLUSTER, 0 },
    { "config", CID_CONFIG, 0 },    { "discard", CID_DISCARD, CS_PIN },
    { "eval", CID_EVAL, 0 },                    { "eval_ro", CID_EVAL_RO, 0 },
    { "evalsha", CID_EVALSHA, 0 },              { "evalsha_ro", CID_EVALSHA_RO, 0 },
    { "exec", CID_EXEC, CS_PIN },               { "getset", CID_GETSET, 0 },
    { "hello", CID_HELLO, 0 },             { "info", CID_INFO, 0 },             { "monitor", CID_MONITOR, CS_PIN },
    { "mset", CID_MSET, 0 },
    { "multi", CID_MULTI, CS_PIN },             { "psubscribe", CID_PSUBSCRIBE, CS_PIN },
    { "ping", CID_PING, 0 },
    { "psync", CID_PSYNC, CS_PIN },             { "punsubscribe", CID_PUNSUBSCRIBE, CS_PIN },
    { "quit", CID_QUIT, CS_PIN },               { "readonly", CID_OTHER, CS_PIN },
    { "readwrite", CID_OTHER, CS_PIN },         { "replconf", CID_OTHER, CS_PIN },
    { "reset", CID_RESET, CS_PIN },             { "role", CID_ROLE, 0 },
    { "script", CID_SCRIPT, 0 },
    { "select", CID_SELECT, 0 },           { "set", CID_SET, 0 },
    { "setnx", CID_SETNX, 0 },                  { "ssubscribe", CID_SSUBSCRIBE, CS_PIN },
    { "subscribe", CID_SUBSCRIBE, CS_PIN },     { "sunsubscribe", CID_SUNSUBSCRIBE, CS_PIN },
    { "sync", CID_SYNC, CS_PIN },               { "unsubscribe", CID_UNSUBSCRIBE, CS_PIN },
    { "unwatch", CID_UNWATCH, CS_PIN },         { "wait", CID_OTHER, CS_PIN },
    { "watch", CID_WATCH, CS_PIN },             { "zadd", CID_ZADD, 0 },
    { "zincrby", CID_ZINCRBY, 0 },
};

/* ------------------------------------------------------------------------ */
/* Server identity                                                           */

int server_id_parse(const char *text, struct server_id *out)
{
    unsigned v[3] = { 0, 0, 0 };
    const char *p;
    int n = 0;

    if (strncmp(text, "redis:", 6) == 0) {
        out->kind = SRV_REDIS;
        p = text + 6;
    } else if (strncmp(text, "valkey:", 7) == 0) {
        out->kind = SRV_VALKEY;
        p = text + 7;
    } else {
        return -1;
    }
    while (n < 3 && *p >= '0' && *p <= '9') {
        char *end;
        unsigned long x = strtoul(p, &end, 10);

        if (x > 99 || end == p)
            return -1;
        v[n++] = (unsigned)x;
        p = end;
        if (*p != '.' || n == 3)
            break;
        if (p[1] < '0' || p[1] > '9')
            return -1;              /* "8.0." */
        p++;
    }
    if (n == 0 || *p != '\0')
        return -1;
    out->version = SRV_VERSION(v[0], v[1], v[2]);
    return 0;
}

void server_id_format(const struct server_id *id, char *buf, size_t len)
{
    snprintf(buf, len, "%s %u.%u.%u", id->kind == SRV_VALKEY ? "valkey" : "redis",
             id->version / 10000, id->version / 100 % 100, id->version % 100);
}

/* The server whose table a set holds: the one behind the proxy, or an older
 * one of the same kind that TTLG_TABLE_VERIFIED names (e.g. "redis:8.0.6"):
 * the table held back, so that a test can put a real server that is newer
 * than the table behind the proxy. */
static struct server_id table_server(const struct server_id *id)
{
    const char *held = getenv("TTLG_TABLE_VERIFIED");
    struct server_id back;

    if (held != NULL && server_id_parse(held, &back) == 0 && back.kind == id->kind &&
        back.version < id->version)
        return back;
    return *id;
}

/* The features of the table's server; FT_NEWER when the real one is newer
 * than it or than the newest verified version of its kind. */
static unsigned features(const struct server_id *table, const struct server_id *real)
{
    unsigned f = 0;

    if (table->kind == SRV_VALKEY) {
        if (table->version >= SRV_VERSION(8, 1, 0))
            f |= FT_SET_IFEQ;
        if (table->version >= SRV_VERSION(9, 0, 0))
            f |= FT_HSETEX_KEYCOND | FT_INLINE_JOIN;
    } else {
        if (table->version >= SRV_VERSION(8, 2, 0))
            f |= FT_BITOP_MORE | FT_STREAM_REFS;
        if (table->version >= SRV_VERSION(8, 4, 0))
            f |= FT_SET_IFCOND | FT_HSETEX_ANYWHERE;
        if (table->version >= SRV_VERSION(8, 6, 0))
            f |= FT_XADD_IDMP;
        if (table->version >= SRV_VERSION(8, 6, 2))
            f |= FT_HSETEX_FIELDS_ONCE;
    }
    if (real->kind != SRV_VALKEY && real->version >= SRV_VERSION(8, 0, 0) &&
        real->version < SRV_VERSION(8, 6, 0))
        f |= FT_EMPTY_NO_RESET;
    unsigned verified = real->kind == SRV_VALKEY ? VALKEY_VERIFIED : REDIS_VERIFIED;
    if (real->version > table->version || real->version > verified)
        f |= FT_NEWER;
    return f;
}

/* ------------------------------------------------------------------------ */
/* Name slots                                                                */

/* FNV-1a over the lowercased name, which it leaves in folded[]. */
static uint32_t name_hash(const char *name, size_t len, char *folded)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];

        if (ch >= 'A' && ch <= 'Z')
            ch = (unsigned char)(ch + ('a' - 'A'));
        folded[i] = (char)ch;
        h = (h ^ ch) * 16777619u;
    }
    return h;
}

static const struct name_slot *slot_find(const struct command_set *set, const char *name,
                                         size_t len)
{
    char folded[NAME_MAX_LEN];

    if (len == 0 || len > NAME_MAX_LEN)
        return NULL;
    uint32_t i = name_hash(name, len, folded) & (NAME_SLOTS - 1);
    for (; set->slots[i].name != NULL; i = (i + 1) & (NAME_SLOTS - 1)) {
        if (set->slots[i].len == len && memcmp(set->slots[i].name, folded, len) == 0)
            return &set->slots[i];
    }
    return NULL;
}

/* The slot for a lowercase name, added when missing; NULL when the table is
 * full or the name too long. */
static struct name_slot *slot_add(struct command_set *set, const char *name)
{
    char folded[NAME_MAX_LEN];
    size_t len = strlen(name);

    struct name_slot *found = (struct name_slot *)slot_find(set, name, len);

    if (found != NULL)
        return found;
    if (len == 0 || len > NAME_MAX_LEN || set->nowned + known_names_n >= NAME_SLOTS / 2)
        return NULL;
    uint32_t i = name_hash(name, len, folded) & (NAME_SLOTS - 1);
    while (set->slots[i].name != NULL)
        i = (i + 1) & (NAME_SLOTS - 1);
    set->slots[i].name = name;
    set->slots[i].len = len;
    set->slots[i].info.feat = (unsigned short)set->feat;
    return &set->slots[i];
}

static int name_available(const struct known_name *k, const struct server_id *id)
{
    unsigned since = id->kind == SRV_VALKEY ? k->v_since : k->r_since;

    return since != SRV_NEVER && id->version >= since;
}

/* A blocked client, or a script that runs past busy-reply-threshold (other
 * connections get -BUSY and may SCRIPT KILL it), would hold up everyone
 * behind it on a shared connection. */
static void set_row(struct name_slot *s, const struct command *c)
{
    s->info.row = c;
    if (c->flags & (CMD_BLOCKING | CMD_SCRIPT))
        s->info.sflags |= CS_PIN;
}

struct command_set *command_set_new(const struct server_id *id)
{
    struct command_set *set = xcalloc(1, sizeof *set);

    set->id = *id;
    set->table = table_server(id);
    set->feat = features(&set->table, id);
    for (int k = 0; k < known_names_n; k++) {
        if (name_available(&known_names[k], &set->table) &&
            slot_add(set, known_names[k].name) == NULL)
            ttlg_assert_fail("known command names fit the name slots", __FILE__, __LINE__);
    }
    for (int r = 0; r < command_table_rows; r++) {
        const struct command *c = &command_table[r];
        struct name_slot *s = (struct name_slot *)slot_find(set, c->name, strlen(c->name));

        if (!row_available(c, &set->table))
            continue;
        /* Mistakes in the table itself: caught by the first run of any test. */
        if (s == NULL)
            ttlg_assert_fail("every table row is a known command", __FILE__, __LINE__);
        if (c->nspecs > MAX_SPECS)
            ttlg_assert_fail("key specs <= MAX_SPECS", __FILE__, __LINE__);
        for (int i = 0; i < c->nsubs; i++) {
            if (c->subs[i].nspecs > MAX_SPECS)
                ttlg_assert_fail("subcommand key specs <= MAX_SPECS", __FILE__, __LINE__);
        }
        set_row(s, c);
        set->table_rows += 1 + c->nsubs;
    }
    for (size_t k = 0; k < sizeof session_commands / sizeof session_commands[0]; k++) {
        struct name_slot *s = (struct name_slot *)slot_find(set, session_commands[k].name,
                                                            strlen(session_commands[k].name));
        if (s == NULL)
            ttlg_assert_fail("every session command is a known command", __FILE__, __LINE__);
        s->info.id = session_commands[k].id;
        s->info.sflags |= (unsigned char)session_commands[k].sflags;
    }
    return set;
}

void command_set_free(struct command_set *set)
{
    if (set == NULL)
        return;
    for (int i = 0; i < set->nowned; i++)
        free(set->owned[i]);
    free(set->owned);
    free(set->rows);
    free(set->specs);
    free(set);
}

const struct server_id *command_set_server(const struct command_set *set)
{
    return &set->id;
}

unsigned command_set_features(const struct command_set *set)
{
    return set->feat;
}

void command_set_table_note(const struct command_set *set, char *buf, size_t len)
{
    char held[32];

    if (set->table.version != set->id.version) {
        server_id_format(&set->table, held, sizeof held);
        snprintf(buf, len, "held back to %s by TTLG_TABLE_VERIFIED", held);
        return;
    }
    snprintf(buf, len, "verified up to redis %u.%u and valkey %u.%u",
             REDIS_VERIFIED / 10000, REDIS_VERIFIED / 100 % 100,
             VALKEY_VERIFIED / 10000, VALKEY_VERIFIED / 100 % 100);
}

void command_set_counts(const struct command_set *set, int *table, int *derived, int *unjudged)
{
    *table = set->table_rows;
    *derived = set->derived;
    *unjudged = set->unjudged;
}

const struct cmd_info *command_resolve(const struct command_set *set, const char *name,
                                       size_t len)
{
    const struct name_slot *s = slot_find(set, name, len);

    return s != NULL ? &s->info : NULL;
}

/* ------------------------------------------------------------------------ */
/* CLIENT's and HELLO's words                                               */

struct word { const char *text; unsigned char id; };

static const struct word client_subs[] = {
    { "reply", CSUB_REPLY },        { "tracking", CSUB_TRACKING },  { "setname", CSUB_SETNAME },
    { "pause", CSUB_PAUSE },        { "unpause", CSUB_UNPAUSE },    { "setinfo", CSUB_SETINFO },
    { "no-evict", CSUB_NO_EVICT },
};

static const struct word client_args[] = {
    { "on", CARG_ON },  { "off", CARG_OFF },    { "skip", CARG_SKIP },
    { "lib-name", CARG_LIB_NAME },  { "lib-ver", CARG_LIB_VER },
};

static unsigned char word_id(const struct word *w, size_t n, struct slice s)
{
    for (size_t i = 0; i < n; i++)
        if (slice_eq_nocase(s, w[i].text))
            return w[i].id;
    return 0;
}

static unsigned char hello_words(int argc, const struct slice *argv)
{
    unsigned char f = 0;
    for (int i = 2; i < argc; i++) {
        const char *nul = memchr(argv[i].p, '\0', argv[i].len);
        struct slice upto_nul = { argv[i].p, nul ? (size_t)(nul - argv[i].p) : argv[i].len };
        if (slice_eq_nocase(upto_nul, "auth"))
            f |= HELLO_AUTH_ANY;
        if (i + 2 < argc && slice_eq_nocase(argv[i], "auth"))
            f |= HELLO_AUTH_ARGS;
    }
    return f;
}

struct cmd_words command_words_of(int id, int argc, const struct slice *argv)
{
    struct cmd_words w = { 0 };
    if (id == CID_HELLO)
        w.hello = hello_words(argc, argv);
    if (id != CID_CLIENT)
        return w;
    if (argc >= 2)
        w.sub = word_id(client_subs, sizeof client_subs / sizeof *client_subs, argv[1]);
    if (argc >= 3)
        w.arg = word_id(client_args, sizeof client_args / sizeof *client_args, argv[2]);
    return w;
}

/* ------------------------------------------------------------------------ */
/* Rows derived from the server's key specs                                 */

static char *own(struct command_set *set, const char *text, size_t len)
{
    if (set->nowned == set->owned_cap) {
        set->owned_cap = set->owned_cap ? set->owned_cap * 2 : 64;
        set->owned = xrealloc(set->owned, sizeof *set->owned * (size_t)set->owned_cap);
    }
    char *p = xmalloc(len + 1);
    for (size_t i = 0; i < len; i++)
        p[i] = (char)(text[i] >= 'A' && text[i] <= 'Z' ? text[i] + ('a' - 'A') : text[i]);
    p[len] = '\0';
    set->owned[set->nowned++] = p;
    return p;
}

/*
 * What a write does to one key, from the spec's flags, erring towards the
 * rewrite: OW overwrites (the TTL may be dropped); a key that is only read
 * or removed (RO, RM without INSERT/UPDATE) keeps what it has; anything else
 * a write touches may be created without a TTL (INSERT, but also UPDATE:
 * Redis 8's HSETEX and VADD say UPDATE and create the key).
 */
static enum ttl_effect derived_effect(unsigned f, int write)
{
    if (!write || (f & (DK_RO | DK_NOT_KEY)))
        return TE_NONE;
    if (f & DK_OW)
        return TE_OVERWRITE;
    if ((f & (DK_RM | DK_DELETE)) && !(f & (DK_INSERT | DK_UPDATE)))
        return TE_NONE;
    return TE_CREATE;
}

static int follow_spec(struct command_set *set, const struct derived_spec *d, struct key_spec *ks);

/* One key spec; 0, or -1 when the spec cannot be followed (it is then left
 * finding no key) or may not find every key (INCOMPLETE: it finds what it can). */
static int derive_spec(struct command_set *set, const struct derived_spec *d, int write,
                       struct key_spec *ks)
{
    memset(ks, 0, sizeof *ks);
    ks->role = "key";
    ks->effect = (unsigned char)derived_effect(d->flags, write);
    ks->may = (unsigned char)(1u << ks->effect);
    if (follow_spec(set, d, ks) < 0) {
        ks->begin = KS_OPTION;          /* no options parser: finds no key */
        ks->keyword = "?";
        return -1;
    }
    return d->flags & DK_INCOMPLETE ? -1 : 0;
}

static int follow_spec(struct command_set *set, const struct derived_spec *d, struct key_spec *ks)
{
    if (d->begin == 0 && d->index > 0) {
        ks->begin = KS_INDEX;
        ks->index = d->index;
    } else if (d->begin == 1 && d->keyword != NULL) {
        ks->begin = KS_KEYWORD;
        ks->index = d->index;
        ks->keyword = own(set, d->keyword, strlen(d->keyword));
    } else {
        return -1;
    }
    if (d->find == 0 && d->keystep > 0) {
        ks->find = KS_RANGE;
        ks->last = d->lastkey;
        ks->step = d->keystep;
        ks->limit = d->limit;
        return 0;
    }
    if (d->find == 1 && d->keystep > 0 && d->firstkey > d->keynumidx) {
        ks->find = KS_NUMKEYS;
        ks->keynumidx = d->keynumidx;
        ks->firstkey = d->firstkey;
        ks->step = d->keystep;
        return 0;
    }
    return -1;
}

int command_set_derive(struct command_set *set, const struct derived_cmd *d)
{
    size_t len = strlen(d->name);
    const char *bar = memchr(d->name, '|', len);
    struct command *parent = NULL;

    if (set->nrows == MAX_DERIVED || len > NAME_MAX_LEN)
        return -1;
    if (bar != NULL) {
        /* A subcommand: its container is the last derived row. */
        size_t plen = (size_t)(bar - d->name);

        for (int r = set->nrows - 1; r >= 0 && parent == NULL; r--) {
            if (strchr(set->rows[r].name, '|') == NULL)
                parent = &set->rows[r];
        }
        if (parent == NULL || strlen(parent->name) != plen ||
            strncasecmp(parent->name, d->name, plen) != 0)
            return -1;
    } else if (slot_find(set, d->name, len) != NULL && slot_find(set, d->name, len)->info.row) {
        return -1;
    }
    if (set->rows == NULL) {
        set->rows = xcalloc(MAX_DERIVED, sizeof *set->rows);
        set->specs = xcalloc((size_t)MAX_DERIVED * MAX_SPECS, sizeof *set->specs);
    }

    struct command *c;
    if (parent != NULL) {
        /* Subcommands follow their container in rows[]: move it up by one. */
        if (parent->subs == NULL)
            parent->subs = parent + 1;
        c = (struct command *)parent->subs + parent->nsubs;
        if (c != &set->rows[set->nrows])
            return -1;
        parent->nsubs++;
    } else {
        c = &set->rows[set->nrows];
    }
    struct key_spec *specs = &set->specs[(size_t)set->nrows * MAX_SPECS];
    memset(c, 0, sizeof *c);
    c->name = own(set, d->name, len);
    c->arity = d->arity;
    c->flags = CMD_DERIVED | (d->write ? CMD_WRITE : 0) | (d->blocking ? CMD_BLOCKING : 0) |
               (d->noscript ? CMD_NOSCRIPT : 0);
    c->specs = specs;
    int lost = d->nspecs > MAX_SPECS || (d->movablekeys && d->nspecs == 0);
    for (int i = 0; i < d->nspecs && i < MAX_SPECS; i++) {
        lost |= derive_spec(set, &d->specs[i], d->write, &specs[i]) < 0;
        c->nspecs++;
    }
    if (lost && d->write)
        c->flags |= CMD_UNJUDGED | CMD_KEYS_UNKNOWN;
    set->nrows++;
    set->derived++;
    if (c->flags & CMD_UNJUDGED)
        set->unjudged++;
    if (parent != NULL) {
        parent->flags |= c->flags & (CMD_WRITE | CMD_BLOCKING | CMD_NOSCRIPT);
        return 0;
    }
    struct name_slot *s = slot_add(set, c->name);
    if (s == NULL) {
        set->nrows--;
        set->derived--;
        return -1;
    }
    set_row(s, c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Printing                                                                  */

/* The format is documented in commands.h. */
void commands_print(FILE *out, const struct command_set *set)
{
    for (int r = 0; r < command_table_rows; r++) {
        const struct command *c = &command_table[r];

        if (!row_available(c, &set->table))
            continue;
        print_row(out, c);
        for (int s = 0; s < c->nsubs; s++)
            print_row(out, &c->subs[s]);
    }
    for (int r = 0; r < set->nrows; r++)
        print_row(out, &set->rows[r]);
}
