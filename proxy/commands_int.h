/*
 * commands_int: the rows of the command table, shared by the table itself
 * (commands.c: rows, options parsers, key evaluation) and the per-server
 * command sets (cmdset.c: which rows and names a server has, rows derived
 * from the server's own key specs, lookup). Not for other modules: they use
 * commands.h.
 */
#ifndef TTLG_COMMANDS_INT_H
#define TTLG_COMMANDS_INT_H

#include <stdio.h>

#include "commands.h"

/* Where a key spec's first key is. */
enum ks_begin {
    KS_INDEX,       /* at argv[index] */
    KS_KEYWORD,     /* after `keyword`, searched from argv[index] on (index < 0: from
                       argv[argc + index] backwards) */
    KS_OPTION,      /* found by the row's options parser; `keyword` names the options */
};

/* Which keys follow the first one. */
enum ks_find {
    KS_RANGE,       /* up to `last` (>= 0: counted from the first key; < 0: from the end of
                       argv, or with `limit`, 1/limit of the remaining arguments), every `step` */
    KS_NUMKEYS,     /* argv[first + keynumidx] is the number of keys; they start at
                       argv[first + firstkey], every `step` */
};

struct key_spec {
    const char *role;           /* "key", "source", "destination": for commands_print() */
    unsigned char effect;       /* enum ttl_effect when the options do not change it */
    unsigned char may;          /* every effect the role can have, bit (1 << effect) */
    unsigned char begin;        /* enum ks_begin */
    unsigned char find;         /* enum ks_find */
    int index;                  /* see enum ks_begin */
    const char *keyword;        /* see enum ks_begin */
    int last;                   /* KS_RANGE */
    int step;                   /* KS_RANGE, KS_NUMKEYS */
    int limit;                  /* KS_RANGE: 0, or the divisor of the remaining arguments */
    int minkeys;                /* KS_NUMKEYS: smallest count the command accepts */
    int keynumidx, firstkey;    /* KS_NUMKEYS */
};

/* What a row's options parser decided for one key spec of a concrete argv. */
struct spec_use {
    unsigned char effect;       /* enum ttl_effect */
    unsigned char ttl_unit;     /* enum ttl_unit, for TE_SETS_TTL */
    int ttl_argi;               /* for TE_SETS_TTL: where the TTL is */
    int db_argi;                /* for TE_CARRY: where the destination database is; -1: none */
    int argi;                   /* KS_OPTION: where the key is; -1 when the option is absent */
};

/* Reads argv's options and fills use[] (one per key spec, preset to the
 * specs' defaults); feat: the server's FT_* features. Returns 0; -1 when the
 * server refuses the arguments; -2 when the proxy cannot judge them. */
typedef int (*options_fn)(int argc, const struct slice *argv, unsigned feat, struct spec_use *use);

struct command {
    const char *name;               /* lowercase; "xgroup|create" for a subcommand */
    int arity;                      /* as redis: N exactly, -N at least N (argv[0] included) */
    unsigned flags;                 /* CMD_* */
    const struct key_spec *specs;
    int nspecs;
    options_fn options;             /* NULL when the arguments change nothing */
    const struct command *subs;     /* container (XGROUP, FUNCTION): one row per subcommand */
    int nsubs;
    unsigned r_since, v_since;      /* the first Redis / Valkey version with this row
                                       (SRV_VERSION; 0: every version; SRV_NEVER: none) */
    unsigned r_until, v_until;      /* the first version without it; 0: none */
};

#define MAX_SPECS 8                 /* the most key specs of any row, derived ones included */
#define NAME_MAX_LEN 64             /* longer than any command name */

/* A name the server knows, and since when. */
struct known_name {
    const char *name;
    unsigned r_since, v_since;
};

/* commands.c */
extern const struct command command_table[];
extern const int command_table_rows;
extern const struct known_name known_names[];
extern const int known_names_n;

int row_available(const struct command *c, const struct server_id *id);
void print_row(FILE *out, const struct command *c);

#endif
