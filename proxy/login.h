/*
 * login: what a client's request means while ttlguard authenticates clients
 * itself (client_password, [user] sections): the requirepass behaviour of
 * the server it fronts, decided from the request alone, in that server's
 * words (one table in login.c, a row per server ttlguard is tested with,
 * chosen once per backend identity).
 *
 *   not logged in   what the server answers before a command runs, in its
 *                   order (processCommand): POST and Host: close the
 *                   connection; an unknown command or subcommand, a wrong
 *                   number of arguments, then -NOAUTH (Valkey 9: -NOAUTH
 *                   first, for all but AUTH, HELLO, QUIT and RESET);
 *                   AUTH, HELLO ... AUTH: checked here; QUIT, RESET: answered;
 *                   HELLO without AUTH: its own -NOAUTH
 *   logged in       AUTH and HELLO ... AUTH: checked here (a failed one leaves
 *                   the client logged in, as in Redis); anything else passes
 *
 * The session (session.c) does the rest: the reply in its place in the
 * queue, the backend connection of the user logged in as, the HELLO that
 * goes on to Redis without its AUTH. The protected mode's -DENIED line is
 * the server's too (login_denied()).
 */
#ifndef TTLG_LOGIN_H
#define TTLG_LOGIN_H

#include "auth.h"
#include "commands.h"
#include "identify.h"
#include "resp_request.h"

#define LOGIN_ARGV_MAX 4        /* HELLO protover SETNAME name */

/* One server's words and ways (login.c). */
struct login_words;

/* The row of the table for a server: its kind's newest row not newer than
 * it (a release older than every row of its kind: that kind's oldest). */
const struct login_words *login_words_for(const struct server_id *id);

/* "redis 8.0": the release a row was read from, for logs and tests. */
const char *login_words_name(const struct login_words *w);

/* What the replies ttlguard gives itself need to know of the backend. The
 * control connection keeps it (control_login()): it learns both. */
struct login_backend {
    const struct login_words *words;    /* NULL: Redis 7.0's, as for an unknown backend */
    struct cmd_arities cmds;            /* from COMMAND; empty while unknown: then the
                                           command set says which names exist, and only
                                           AUTH, HELLO, QUIT and RESET have an arity */
};

/* Does the backend read the multibulk requests it has received while the
 * client is logged in all at once, under the pre-AUTH limits as they were
 * for the first (a RESET among them logs out only for what it reads next),
 * rather than each in the state the request before it left? */
int login_parses_ahead(const struct login_backend *lb);

/* The -DENIED line the backend's protected mode sends, CRLF included. */
const char *login_denied(const struct login_backend *lb, size_t *len);

struct login_ctx {
    const struct auth_users *users;
    const struct login_backend *backend;    /* NULL: as for an unknown backend */
    int logged_in;                  /* the client has logged in */
    int replies_pending;            /* a reply to an earlier request of the client's
                                       current read exists or is not written yet: Redis
                                       7.2+ and Valkey 8 then send nothing for a failed
                                       login (acl.c addAuthErrReply, redis#15640) */
    int cluster;                    /* the backend is a cluster (AUTH "internal connection") */
};

enum login_verdict {
    LV_PASS,        /* not ours: the request goes on as usual */
    LV_REPLY,       /* answered with `reply` (and `who` logged in, when set) */
    LV_SILENT,      /* answered with no reply at all (replies_pending) */
    LV_QUIT,        /* +OK, then the connection closes */
    LV_CLOSE,       /* closed at once, what was owed to the client unsent (POST, Host:) */
    LV_HELLO,       /* `who` (if set) logged in; HELLO `argv` goes on to Redis */
};

struct login {
    enum login_verdict verdict;
    const struct auth_user *who;    /* the user now logged in, or NULL */
    int failed;                     /* a password was checked and refused */
    struct sbuf reply;              /* LV_REPLY, LV_QUIT: the whole reply (reused; the
                                       owner frees reply.p) */
    int argc;                       /* LV_HELLO: HELLO [protover [SETNAME name]] */
    struct slice argv[LOGIN_ARGV_MAX];
};

/* Decide what req means. ci: its command (NULL: the server does not know
 * it); w: its words (command_words()). */
void login_judge(const struct login_ctx *cx, const struct request *req,
                 const struct cmd_info *ci, const struct cmd_words *w, struct login *out);

/* Is a reply (its first n bytes) the server's -NOAUTH: the connection must
 * log in first? */
int login_is_noauth(const char *reply, size_t n);
/* Does req carry a login (AUTH, or HELLO with an AUTH option)? */
int login_carries_auth(enum cmd_id id, const struct cmd_words *w);
/* Is name a client name the server accepts (printable ASCII without
 * spaces)? Else the server's error is login_err_client_name. */
int login_client_name_ok(struct slice name);
extern const char login_err_client_name[];

#endif
