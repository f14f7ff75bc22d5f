/*
 * session_login: the client side of ttlguard's own login (client_password,
 * [user] sections; see login.h).
 *
 * login.c decides what a request means before and after a login, in the
 * words of the server ttlguard fronts; this file does what follows for the
 * session:
 *
 *   client_login   the request judged: answered in its place in the queue,
 *                  closed (POST, Host:, QUIT), or passed on (a HELLO without
 *                  its AUTH, resolved again)
 *   login_as       the user logged in: the backend login it brings (its own
 *                  connection opened, kept, or logged in again; a shared
 *                  session whose user has another one leaves the shared
 *                  connection)
 *   relogin        the proxy's AUTH on the session's own connection, after
 *                  RESET or a login as a user with another backend login
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "control.h"
#include "login.h"
#include "session_int.h"
#include "util.h"

/* Is u's backend login the one s's connection has? */
static int same_backend_login(const struct session *s, const struct auth_user *u)
{
    const char *user = u->backend_password != NULL ? u->backend_username : NULL;
    return text_eq(user, s->be_user) && text_eq(u->backend_password, s->be_pass);
}

static void set_backend_login(struct session *s, const struct auth_user *u)
{
    free_secret(s->be_user);
    free_secret(s->be_pass);
    int own = u->backend_password != NULL;
    s->be_user = own && u->backend_username != NULL ? xstrdup(u->backend_username) : NULL;
    s->be_pass = own ? xstrdup(u->backend_password) : NULL;
    s->be.user = s->be_user;
    s->be.pass = s->be_pass;
}

/* Log s's own connection in to Redis again as its backend login: after
 * RESET (which logs a Redis connection out) and after a login as a user
 * with another backend login. The reply is the proxy's. */
void relogin(struct session *s)
{
    const struct config *cfg = s->ctx->cfg;
    const char *pass = s->be_pass != NULL ? s->be_pass : cfg->backend_password;
    const char *user = s->be_pass != NULL ? s->be_user : cfg->backend_username;
    size_t n;
    if (pass == NULL)
        return;
    char *req = auth_request(user, pass, &n);
    tob_add(s, req, n, 1);
    OPENSSL_cleanse(req, n);
    free(req);
    if (s->reply_off)
        return;
    struct pending *e = q_push(s);
    e->kind = PK_INTERNAL;
    e->what = PW_RELOGIN;
    owe(s, 1);
}

/* Log s in as u. HR_DONE when it is; else what the request waits for: its
 * first connection (SM_AUTH; an AUTH is answered at once, a HELLO goes on
 * once it is open), its own one (a shared session whose user has a backend
 * login of its own), the replies owed before its connection logs in again.
 * *refusal: the error when it cannot be. */
static enum handled login_as(struct session *s, const struct auth_user *u, int hello,
                             const char **refusal)
{
    int same = same_backend_login(s, u);
    switch (s->mode) {
    case SM_AUTH:
        set_backend_login(s, u);
        s->authed = 1;
        open_own_connection(s);
        return hello ? HR_CONNECT : HR_DONE;
    case SM_SHARED:
        if (!same)
            return HR_PIN;
        break;
    case SM_OWN:
        if (same)
            break;
        if (s->q.len > 0)
            return HR_WAIT;
        if (u->backend_password == NULL && s->ctx->cfg->backend_password == NULL) {
            *refusal = "-ERR ttlguard: this connection is logged in to Redis as another "
                       "user's backend_user, and this user has no backend login to replace "
                       "it: connect again to log in as this user\r\n";
            return HR_DONE;
        }
        set_backend_login(s, u);
        relogin(s);
        break;
    default:
        set_backend_login(s, u);
        break;
    }
    s->authed = 1;
    return HR_DONE;
}

/* HELLO without its AUTH, as it goes on to Redis: encoded into buf. */
static void hello_request(const struct login *lg, struct sbuf *buf, struct request *out)
{
    char hdr[32];
    buf->len = 0;
    sbuf_add(buf, hdr, (size_t)snprintf(hdr, sizeof hdr, "*%d\r\n", lg->argc));
    for (int i = 0; i < lg->argc; i++) {
        sbuf_add(buf, hdr, (size_t)snprintf(hdr, sizeof hdr, "$%zu\r\n", lg->argv[i].len));
        sbuf_add(buf, lg->argv[i].p, lg->argv[i].len);
        sbuf_add(buf, "\r\n", 2);
    }
    out->argc = lg->argc;
    out->argv = (struct slice *)lg->argv;
    out->raw = (struct slice){ buf->p, buf->len };
    out->inline_cmd = 0;
}

/* POST or Host: before the login: closed at once, what it was owed unsent,
 * as the server's securityWarningCommand() does (and says, once a minute). */
static void http_refused(struct session *s)
{
    static uint64_t last;
    uint64_t now = now_ms_monotonic();
    if (last == 0 || now - last >= 60000) {
        log_warn("possible security attack: client %s sent POST or Host: as a command "
                 "(an HTTP request?); connection closed", client_name(s));
        last = now;
    }
    s->close_after_flush = 1;       /* the rest of its input is not read */
    session_close(s);
}

/* ttlguard logs s in itself: AUTH and HELLO ... AUTH are answered here and
 * nothing else passes before them (login.c). Returns 1 when req was handled
 * (*h: how), 0 when it goes on as *fwd (req, or HELLO without its AUTH). */
int client_login(struct session *s, const struct request *req, struct req_plan *pl,
                 struct request *fwd, enum handled *h)
{
    static struct login lg;
    static struct sbuf hello;
    const char *refusal = NULL;
    struct login_ctx cx = {
        .users = &s->ctx->cfg->users, .backend = control_login(), .logged_in = s->authed,
        .replies_pending = s->replied_in_read || xport_backlog(&s->client) > 0 ||
                           s->out.len > 0,
        .cluster = s->ctx->cfg->cluster,
    };
    login_judge(&cx, req, pl->ci, &pl->words, &lg);
    if (lg.verdict == LV_PASS)
        return 0;
    *h = HR_DONE;
    if (lg.verdict == LV_CLOSE) {
        http_refused(s);
        return 1;
    }
    if (s->in_multi) {
        refusal = "-ERR ttlguard answers AUTH itself and cannot queue it in MULTI: "
                  "send it before MULTI\r\n";
        s->multi_dirty = 1;
    } else if (lg.who != NULL) {
        *h = login_as(s, lg.who, lg.verdict == LV_HELLO, &refusal);
        if (*h != HR_DONE)
            return 1;
    }
    if (lg.verdict == LV_HELLO && refusal == NULL) {
        hello_request(&lg, &hello, fwd);
        pl->words = command_words(pl->id, fwd->argc, fwd->argv);
        pl->raw_copy = 1;
        return 0;
    }
    *h = HR_DONE;
    s->ctx->stats.requests++;
    plan_replies(s, req, pl);
    s->ctx->stats.auth_errors += lg.failed;
    if (pl->replies && (refusal != NULL || lg.verdict != LV_SILENT))
        queue_local(s, refusal != NULL ? refusal : lg.reply.p,
                    refusal != NULL ? strlen(refusal) : lg.reply.len, 0);
    if (lg.verdict == LV_QUIT) {
        s->close_after_flush = 1;
        client_read_stop(s);
    }
    return 1;
}
