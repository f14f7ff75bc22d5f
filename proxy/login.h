/*
 * login: what a client's request means while ttlguard authenticates clients
 * itself (client_password, [user] sections): the requirepass behaviour of
 * redis-server 7.0, decided from the request alone.
 *
 *   not logged in   AUTH, HELLO ... AUTH: checked here; QUIT, RESET: answered;
 *                   a command Redis does not know: its unknown-command error;
 *                   HELLO without AUTH, anything else: -NOAUTH
 *   logged in       AUTH and HELLO ... AUTH: checked here (a failed one leaves
 *                   the client logged in, as in Redis); anything else passes
 *
 * The session (session.c) does the rest: the reply in its place in the
 * queue, the backend connection of the user logged in as, the HELLO that
 * goes on to Redis without its AUTH.
 */
#ifndef TTLG_LOGIN_H
#define TTLG_LOGIN_H

#include "auth.h"
#include "commands.h"
#include "resp_request.h"

#define LOGIN_ARGV_MAX 4        /* HELLO protover SETNAME name */

enum login_verdict {
    LV_PASS,        /* not ours: the request goes on as usual */
    LV_REPLY,       /* answered with `reply` (and `who` logged in, when set) */
    LV_QUIT,        /* +OK, then the connection closes */
    LV_HELLO,       /* `who` (if set) logged in; HELLO `argv` goes on to Redis */
};

struct login {
    enum login_verdict verdict;
    const struct auth_user *who;    /* the user now logged in, or NULL */
    int failed;                     /* a password was checked and refused */
    char reply[512];                /* LV_REPLY, LV_QUIT: the whole reply line */
    size_t reply_len;
    int argc;                       /* LV_HELLO: HELLO [protover [SETNAME name]] */
    struct slice argv[LOGIN_ARGV_MAX];
};

/* Decide what req means. ci: its command (NULL: Redis does not know it);
 * logged_in: the client has logged in. */
void login_judge(const struct auth_users *users, const struct request *req,
                 const struct cmd_info *ci, int logged_in, struct login *out);

/* Does req carry a login (AUTH, or HELLO with an AUTH option)? */
int login_carries_auth(const struct request *req, enum cmd_id id);

#endif
