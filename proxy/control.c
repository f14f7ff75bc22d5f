/*
 * control: the proxy's own connection to the backend (see control.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "commands.h"
#include "control.h"
#include "events.h"
#include "identify.h"
#include "login.h"
#include "loop.h"
#include "policy.h"
#include "util.h"

#define RETRY_MS    1000
#define ACL_MS      1000
#define OWED_MAX    64
#define REPLY_KEEP  (1024 * 1024)   /* a COMMAND LIST or COMMAND INFO reply, at most */
#define INFO_BATCH  16              /* names per COMMAND INFO */

enum probe { PR_PING, PR_AUTH, PR_NAME, PR_DATABASES, PR_POLICY, PR_ACL, PR_INFO, PR_CMDLIST,
             PR_CMDINFO, PR_COMMAND };

static struct control {
    struct loop_ctx *ctx;
    void (*commands_ready)(void);
    struct backend_facts facts;
    struct bconn be;
    unsigned char owed[OWED_MAX];   /* the replies owed, in order (enum probe) */
    int head, n;
    char *buf;                      /* the reply being read, up to REPLY_KEEP bytes */
    size_t len;
    int started, stopping;
    int want_policy, want_auth;     /* asked while not connected, or asked again */
    uint64_t retry_at, acl_at;      /* monotonic ms */
    struct command_set *pending;    /* the backend's commands being read (PR_INFO on) */
    int info_owed;                  /* COMMAND INFO replies still owed */
    char why[160];                  /* what could not be read from the backend, for the event */
    struct login_backend login;     /* its words and commands, for what ttlguard answers
                                       itself before a login (login.c) */
} ctl;

static void send_probe(enum probe what)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    static const char policy[] = "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$16\r\nmaxmemory-policy\r\n";
    static const char dbs[] = "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$9\r\ndatabases\r\n";
    static const char acl[] = "*3\r\n$3\r\nACL\r\n$7\r\nGETUSER\r\n$7\r\ndefault\r\n";
    static const char info[] = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
    static const char cmdlist[] = "*2\r\n$7\r\nCOMMAND\r\n$4\r\nLIST\r\n";
    static const char command[] = "*1\r\n$7\r\nCOMMAND\r\n";
    static const char name[] = "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$" CONTROL_NAME_LEN "\r\n"
                               CONTROL_NAME "\r\n";
    if (ctl.be.state != BC_READY || ctl.n == OWED_MAX)
        return;
    const struct config *cfg = ctl.ctx->cfg;
    char *auth = NULL;
    const char *p;
    size_t n;
    switch (what) {
    case PR_PING:   p = ping; n = sizeof ping - 1; break;
    case PR_POLICY: p = policy; n = sizeof policy - 1; break;
    case PR_ACL:    p = acl; n = sizeof acl - 1; break;
    case PR_NAME:   p = name; n = sizeof name - 1; break;
    case PR_DATABASES: p = dbs; n = sizeof dbs - 1; break;
    case PR_INFO:   p = info; n = sizeof info - 1; break;
    case PR_CMDLIST: p = cmdlist; n = sizeof cmdlist - 1; break;
    case PR_COMMAND: p = command; n = sizeof command - 1; break;
    case PR_AUTH:
    default:
        p = auth = auth_request(cfg->backend_username, cfg->backend_password, &n);
        break;
    }
    ctl.owed[(ctl.head + ctl.n) % OWED_MAX] = (unsigned char)what;
    ctl.n++;
    bconn_write_bytes(&ctl.be, p, n);
    free(auth);
}

static void flush_wants(void)
{
    if (ctl.want_policy && !policy_inactive(ctl.ctx->cfg))
        send_probe(PR_POLICY);
    if (ctl.want_auth)
        send_probe(PR_ACL);
    ctl.want_policy = ctl.want_auth = 0;
}

/* The value in the reply to CONFIG GET <one name> (*2 $N name $M value),
 * into out (NUL-terminated); "" when it is not that. */
static void config_value(const char *name, char *out, size_t outlen)
{
    char hdr[64];
    int hl = snprintf(hdr, sizeof hdr, "*2\r\n$%zu\r\n%s\r\n$", strlen(name), name);
    out[0] = '\0';
    if (ctl.len <= (size_t)hl || memcmp(ctl.buf, hdr, (size_t)hl) != 0)
        return;
    const char *nl = memchr(ctl.buf + hl, '\n', ctl.len - (size_t)hl);
    if (nl == NULL)
        return;
    const char *cr = memchr(nl + 1, '\r', (size_t)(ctl.buf + ctl.len - (nl + 1)));
    if (cr != NULL && (size_t)(cr - (nl + 1)) < outlen) {
        memcpy(out, nl + 1, (size_t)(cr - (nl + 1)));
        out[cr - (nl + 1)] = '\0';
    }
}

/* CONFIG GET databases: how many a SELECT of a shared session may pick
 * (0: unknown, every SELECT then gets a connection of its own). */
static void databases_seen(char type)
{
    char v[16];
    config_value("databases", v, sizeof v);
    ctl.facts.databases = type == '*' ? atoi(v) : 0;
}

/* The reply to CONFIG GET maxmemory-policy, reported when it changed. */
static void policy_seen(char type)
{
    struct backend_facts *bf = &ctl.facts;
    char policy[32] = "";
    const char *why = NULL;

    if (type == '*')
        config_value("maxmemory-policy", policy, sizeof policy);
    if (policy[0] == '\0')
        why = type == '-' ? "CONFIG GET refused by the backend" : "unexpected reply to CONFIG GET";
    if (strcmp(policy, bf->policy) == 0 && (why == NULL) == bf->policy_known)
        return;
    snprintf(bf->policy, sizeof bf->policy, "%s", policy);
    bf->policy_known = why == NULL;
    events_backend_policy(ctl.ctx->cfg, why ? NULL : policy, why);
}

/* ACL GETUSER default: a password set since the last look means clients
 * must authenticate (an error, e.g. no permission for ACL, teaches nothing). */
static void acl_seen(char type)
{
    if (type != '*')
        return;
    int open = memmem(ctl.buf, ctl.len, "$6\r\nnopass\r\n", 12) != NULL &&
               memmem(ctl.buf, ctl.len, "$2\r\non\r\n", 8) != NULL;
    if (!open && !ctl.facts.clients_must_auth)
        log_warn("the default user of %s now needs a password: clients must authenticate "
                 "and nothing is shared", ctl.ctx->backend->name);
    ctl.facts.clients_must_auth = !open;
}

/* ------------------------------------------------------------------------ */
/* The backend's commands: INFO server, COMMAND LIST, COMMAND INFO            */

/* The backend's command set (the old one is freed: nothing keeps a row past
 * the request that looked it up); sessions that waited for it are served. */
static void commands_set(struct command_set *set, int from_backend)
{
    command_set_free(ctl.facts.commands);
    ctl.facts.commands = set;
    ctl.facts.backend_known = from_backend;
    ctl.facts.commands_ready = 1;
    ctl.commands_ready();
}

static void commands_done(void)
{
    struct command_set *set = ctl.pending;
    int from_backend = set != NULL;

    ctl.pending = NULL;
    ctl.info_owed = 0;
    if (set == NULL) {
        /* Keep what an earlier connection read; assume Redis 7.0 otherwise. */
        if (ctl.facts.commands_ready)
            return;
        set = command_set_new(&server_id_default);
    }
    commands_set(set, from_backend);
    events_backend_server(ctl.ctx->cfg, set, from_backend, ctl.why[0] ? ctl.why : NULL);
    ctl.why[0] = '\0';
}

static void info_seen(char type)
{
    struct server_id id;

    if (type != '$' || identify_info(ctl.buf, ctl.len, &id) != 0) {
        snprintf(ctl.why, sizeof ctl.why, "INFO server %s", type == '-' ? "refused" :
                 "answered without redis_version or valkey_version");
        commands_done();
        return;
    }
    command_set_free(ctl.pending);
    ctl.pending = command_set_new(&id);
    ctl.login.words = login_words_for(&id);
    send_probe(PR_CMDLIST);
}

/* COMMAND: every name, container and arity (a refusal, e.g. by the ACL of
 * backend_user, leaves clients before their login with what the command set
 * knows: login.h). */
static void command_seen(char type)
{
    if (type == '*' && identify_arities(ctl.buf, ctl.len, &ctl.login.cmds) == 0)
        return;
    arities_free(&ctl.login.cmds);
    if (ctl.ctx->cfg->users.n > 0)
        log_warn("COMMAND %s by %s: before their login, clients get -NOAUTH where it would "
                 "say wrong number of arguments or unknown subcommand",
                 type == '-' ? "refused" : "unreadable", ctl.ctx->backend->name);
}

static void cmdlist_seen(char type)
{
    char *reqs = NULL;
    size_t len = 0;
    int n = type == '*' ? identify_unknown(ctl.buf, ctl.len, ctl.pending, OWED_MAX - ctl.n,
                                           &reqs, &len) : -1;
    if (n < 0)
        snprintf(ctl.why, sizeof ctl.why, "COMMAND LIST %s: commands outside the table "
                 "cannot be judged", type == '-' ? "refused" : "unreadable");
    if (n <= 0 || ctl.be.state != BC_READY) {
        free(reqs);
        commands_done();
        return;
    }
    for (int i = 0; i < n; i++)
        ctl.owed[(ctl.head + ctl.n++) % OWED_MAX] = PR_CMDINFO;
    ctl.info_owed = n;
    bconn_write_bytes(&ctl.be, reqs, len);
    free(reqs);
}

static void cmdinfo_seen(char type)
{
    if (ctl.pending == NULL)
        return;
    if (type != '*' || identify_derive(ctl.buf, ctl.len, ctl.pending) < 0)
        snprintf(ctl.why, sizeof ctl.why, "COMMAND INFO %s: some commands outside the table "
                 "cannot be judged", type == '-' ? "refused" : "unreadable");
    if (--ctl.info_owed == 0)
        commands_done();
}

static void ctl_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    if (start)
        ctl.len = 0;
    if (ctl.len + n <= REPLY_KEEP) {
        ctl.buf = xrealloc(ctl.buf, ctl.len + n);
        memcpy(ctl.buf + ctl.len, p, n);
        ctl.len += n;
    }
    if (!done || ctl.n == 0)
        return;
    enum probe what = ctl.owed[ctl.head];
    ctl.head = (ctl.head + 1) % OWED_MAX;
    ctl.n--;
    switch (what) {
    case PR_PING:
        ctl.facts.clients_must_auth = login_is_noauth(ctl.buf, ctl.len);
        ctl.facts.auth_known = 1;
        break;
    case PR_AUTH:
    case PR_NAME:
        break;              /* a refusal shows in the probes after it, and to clients */
    case PR_DATABASES:
        databases_seen(type);
        break;
    case PR_POLICY:
        policy_seen(type);
        break;
    case PR_ACL:
        acl_seen(type);
        break;
    case PR_INFO:
        info_seen(type);
        break;
    case PR_CMDLIST:
        cmdlist_seen(type);
        break;
    case PR_CMDINFO:
        cmdinfo_seen(type);
        break;
    case PR_COMMAND:
        command_seen(type);
        break;
    }
    if (ctl.len > 4096) {
        free(ctl.buf);
        ctl.buf = NULL;
    }
    ctl.len = 0;
}

static void ctl_ready(struct bconn *b)
{
    ctl.head = ctl.n = 0;
    send_probe(PR_PING);
    if (ctl.ctx->cfg->backend_password != NULL)
        send_probe(PR_AUTH);
    send_probe(PR_NAME);
    send_probe(PR_DATABASES);
    command_set_free(ctl.pending);
    ctl.pending = NULL;
    send_probe(PR_COMMAND);         /* answered before INFO: identified means both known */
    send_probe(PR_INFO);
    ctl.want_policy = 1;
    flush_wants();
}

static void ctl_read_end(struct bconn *b)
{
}

static void ctl_failed(struct bconn *b, const char *why, int was_ready)
{
    if (was_ready)
        log_debug("control connection lost: %s", why);
    if (!ctl.facts.commands_ready || ctl.pending != NULL) {
        command_set_free(ctl.pending);
        ctl.pending = NULL;
        snprintf(ctl.why, sizeof ctl.why, "no control connection to the backend (%s)", why);
        commands_done();
    }
    ctl.retry_at = now_ms_monotonic() + RETRY_MS;
}

static void ctl_closed(struct bconn *b)
{
    ctl.n = 0;
    if (!ctl.stopping && ctl.retry_at == 0)
        bconn_connect(&ctl.be, 0);      /* closed on purpose: the backend changed */
}

static void ctl_written(struct bconn *b, int status)
{
}

static const struct bconn_ops ctl_ops = {
    ctl_ready, ctl_reply, ctl_read_end, ctl_failed, ctl_closed, ctl_written,
};

void control_start(struct loop_ctx *ctx, void (*commands_ready)(void))
{
    ctl.ctx = ctx;
    ctl.commands_ready = commands_ready;
    ctl.facts.commands = command_set_new(&server_id_default);
    ctl.started = 1;
    ctl.login.words = login_words_for(&server_id_default);
    bconn_init(&ctl.be, ctx, &ctl_ops, &ctl);
    ctl.be.counts = 0;
    bconn_connect(&ctl.be, 0);
}

void control_stop(void)
{
    if (!ctl.started)
        return;
    ctl.stopping = 1;
    bconn_close(&ctl.be);
    command_set_free(ctl.pending);
    ctl.pending = NULL;
    free(ctl.buf);
    ctl.buf = NULL;
    arities_free(&ctl.login.cmds);
}

void control_free(void)
{
    command_set_free(ctl.facts.commands);
    ctl.facts.commands = NULL;
}

const struct backend_facts *control_facts(void)
{
    return &ctl.facts;
}

const struct login_backend *control_login(void)
{
    return &ctl.login;
}

void control_probe_policy(void)
{
    ctl.want_policy = 1;
    flush_wants();
}

static void control_probe_auth(void)
{
    ctl.want_auth = 1;
    flush_wants();
}

void control_cron(uint64_t now, int sharing)
{
    if (!ctl.started || ctl.stopping)
        return;
    bconn_cron(&ctl.be, now);
    if (ctl.be.state == BC_IDLE && now >= ctl.retry_at) {
        ctl.retry_at = 0;
        bconn_connect(&ctl.be, 0);
        return;
    }
    if (sharing && ctl.be.state == BC_READY && now - ctl.acl_at >= ACL_MS) {
        ctl.acl_at = now;
        control_probe_auth();
    }
}

void control_backend_changed(void)
{
    ctl.facts.auth_known = 0;
    ctl.retry_at = 0;
    if (ctl.be.state == BC_IDLE)
        bconn_connect(&ctl.be, 0);
    else
        bconn_close(&ctl.be);           /* ctl_closed connects to the new address */
}
