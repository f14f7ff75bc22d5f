/*
 * identify: who the backend is and which commands it has, from its own
 * replies on the control connection (control.c sends the requests).
 *
 *   INFO server    -> redis_version / valkey_version -> server_id
 *   COMMAND LIST   -> the names the table lacks (modules, a newer server)
 *   COMMAND INFO n -> their key specs -> rows derived into the command set
 *   COMMAND        -> every name, container and arity: what the server checks
 *                     before it runs a command, for the refusals ttlguard
 *                     answers itself before a login (login.c)
 *
 * The replies are whole RESP2 replies in a buffer; parsed with hiredis's reader.
 */
#ifndef TTLG_IDENTIFY_H
#define TTLG_IDENTIFY_H

#include <stddef.h>

#include "commands.h"

/* The server's kind and version from an INFO reply (a bulk string of
 * "field:value" lines). 0, or -1 when neither version field is there. */
int identify_info(const char *reply, size_t len, struct server_id *out);

/* The names of a COMMAND LIST reply that set does not know, as at most
 * max_requests COMMAND INFO requests (16 names each, more when needed),
 * appended to *reqs (a buffer of RESP, *reqs_len bytes, malloc'ed). Returns
 * the number of requests, or -1 when the reply is not a list of names. */
int identify_unknown(const char *reply, size_t len, const struct command_set *set,
                     int max_requests, char **reqs, size_t *reqs_len);

/* Rows derived from a COMMAND INFO reply's entries (and their subcommands).
 * Returns the rows added, or -1 when the reply is not a COMMAND INFO reply. */
int identify_derive(const char *reply, size_t len, struct command_set *set);

/* One command (or subcommand) as COMMAND lists it. */
struct cmd_arity {
    char *name;                 /* as the server names it in its errors: "get", "config|get" */
    size_t len;
    int arity;                  /* N exactly, -N at least N arguments, the name included */
    int container;              /* it has subcommands ("config") */
    int sub;                    /* it is one ("config|get") */
    int first, last, step;      /* its keys as COMMAND's legacy range gives them: argv[first],
                                   every step-th up to argv[last] (< 0: from the end); first
                                   0: none (cluster = route finds a request's slot with it) */
    int movable;                /* "movablekeys": the range may miss some (numkeys, STREAMS) */
};

/* Every command of a server, sorted by name (case-insensitive). */
struct cmd_arities {
    struct cmd_arity *v;
    size_t n;                   /* 0: not read (unknown) */
};

/* The reply to COMMAND into out (replacing what it held). 0, or -1 when
 * it is not a COMMAND reply (out is then empty). */
int identify_arities(const char *reply, size_t len, struct cmd_arities *out);

/* Look a name up as the server's command table does (case-insensitive,
 * every byte counts): NULL when the server has no such command. */
const struct cmd_arity *arities_find(const struct cmd_arities *t, const char *name, size_t len);

/* Subcommand sub of container c ("config" "get" -> "config|get"), or NULL. */
const struct cmd_arity *arities_find_sub(const struct cmd_arities *t, const struct cmd_arity *c,
                                         const char *sub, size_t len);

void arities_free(struct cmd_arities *t);

#endif
