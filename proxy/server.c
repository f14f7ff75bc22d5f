/*
 * server: the loop-wide state, signals, reload and cron around the sessions
 * (see server.h).
 */
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "admin.h"
#include "audit_bg.h"
#include "backend.h"
#include "cluster.h"
#include "control.h"
#include "events.h"
#include "listener.h"
#include "loop.h"
#include "mux.h"
#include "sentinel.h"
#include "server.h"
#include "session.h"
#include "tls.h"
#include "watch.h"

#define CRON_MS             100
#define TRIM_MS             10000   /* free memory handed back to the system */
#define SHUTDOWN_GRACE_MS   5000
#define RBUF_SIZE           (256 * 1024)

struct server {
    struct loop_ctx ctx;             /* what the layers below are given */
    struct listener plain, secure;   /* listen, tls_listen */
    struct target backend;           /* [proxy] backend (a cluster's seed: its entry port) */
    struct clients clients;          /* the sessions */

    int listen_override;             /* --listen / --backend given: a reload keeps them */
    int backend_override;
    int held_accepts;                /* a Sentinel switch is confirmed: clients wait */
    struct listener *held[2];        /* plain, secure: a connection waits to be accepted */

    uv_timer_t cron;
    uv_signal_t sig_term, sig_int, sig_hup, sig_usr1;

    int shutting_down;
    uint64_t shutdown_deadline;      /* monotonic ms */
};

static struct server the_server;

static void on_close_noop(uv_handle_t *h)
{
}

/* Everything is closed once the last session is gone during shutdown. */
static void finish_shutdown(struct server *srv)
{
    if (!srv->shutting_down || srv->clients.nsessions > 0)
        return;
    mux_shutdown();
    clients_shutdown(&srv->clients);
    control_stop();
    watch_stop();
    audit_bg_stop();
    sentinel_stop();
    cluster_stop();
    tls_shutdown_module();
    if (!uv_is_closing((uv_handle_t *)&srv->cron)) {
        uv_close((uv_handle_t *)&srv->cron, on_close_noop);
        uv_close((uv_handle_t *)&srv->sig_term, on_close_noop);
        uv_close((uv_handle_t *)&srv->sig_int, on_close_noop);
        uv_close((uv_handle_t *)&srv->sig_hup, on_close_noop);
        uv_close((uv_handle_t *)&srv->sig_usr1, on_close_noop);
        target_cancel(&srv->backend);
        admin_stop();
        events_shutdown();
    }
}

static void on_session_gone(struct clients *cl)
{
    finish_shutdown(&the_server);
}

/* The control connection has the backend's commands: the sessions that
 * waited for them are served. */
static void on_commands_ready(void)
{
    for (struct session *s = the_server.clients.all, *next; s != NULL; s = next) {
        next = session_next(s);
        session_commands_ready(s);
    }
}

/* The backend is somewhere else now (a reload, a Sentinel switch): every
 * connection to the old one is dropped, as when it goes away. */
static void backend_moved(struct server *srv, const struct addr *a, int sessions_too)
{
    /* Sessions first: an idle one leaves its shared connection quietly
     * before that connection ends the others. */
    for (struct session *s = srv->clients.all, *next; s != NULL && sessions_too; s = next) {
        next = session_next(s);
        session_backend_moved(s, &srv->backend);
    }
    mux_backend_changed(sessions_too);
    target_set(&srv->backend, &srv->ctx, a, 1);
    control_backend_changed();
    watch_backend_changed();
    audit_bg_backend_changed();
}

/* A client connects to one of the proxy's own listeners or a cluster node's.
 * While a Sentinel switch is confirmed it waits: libuv stops watching a
 * listener whose connection was not accepted, so the next ones wait in the
 * kernel's backlog until on_sentinel_confirmed() accepts it. */
static void on_accept(struct listener *l)
{
    struct server *srv = &the_server;
    if (srv->held_accepts) {
        srv->held[l == &srv->secure] = l;
        return;
    }
    session_accept(&srv->clients, l->h, l->tls ? srv->ctx.cfg->client_tls_ctx : NULL,
                   l->target);
}

static void on_sentinel_moving(const struct addr *to)
{
    the_server.held_accepts = 1;
    backend_moved(&the_server, to, 1);
}

static void on_sentinel_confirmed(void)
{
    struct server *srv = &the_server;
    srv->held_accepts = 0;
    for (int i = 0; i < 2; i++) {
        struct listener *l = srv->held[i];
        srv->held[i] = NULL;
        if (l != NULL && l->h != NULL)
            on_accept(l);
    }
}

static const struct sentinel_hooks sentinel_hooks = {
    on_sentinel_moving, on_sentinel_confirmed,
};

static void on_cron(uv_timer_t *t)
{
    struct server *srv = t->data;
    uint64_t now = now_ms_monotonic();
    struct session *s = srv->clients.all;
    while (s != NULL) {
        struct session *next = session_next(s);    /* s may close itself */
        session_cron(s, now);
        s = next;
    }
    control_cron(now, mux_in_use());
    watch_cron(now);
    audit_bg_cron(now);
    /* After a burst (thousands of clients gone, big replies passed) glibc
     * keeps the freed pages; give them back, so RSS returns to its level. */
    static uint64_t trimmed;
    if (now - trimmed >= TRIM_MS) {
        trimmed = now;
        malloc_trim(0);
    }
    if (srv->ctx.cfg->cluster)
        cluster_cron(now);
    if (srv->shutting_down && now >= srv->shutdown_deadline) {
        if (srv->clients.nsessions > 0)
            log_warn("shutdown: closing %d sessions still owed replies", srv->clients.nsessions);
        for (s = srv->clients.all; s != NULL; s = session_next(s))
            session_close(s);
    }
    finish_shutdown(srv);
}

static void begin_shutdown(struct server *srv, const char *why)
{
    if (srv->shutting_down)
        return;
    log_info("%s: shutting down, draining %d sessions", why, srv->clients.nsessions);
    srv->shutting_down = 1;
    srv->shutdown_deadline = now_ms_monotonic() + SHUTDOWN_GRACE_MS;
    listener_close(&srv->plain);
    listener_close(&srv->secure);
    for (struct session *s = srv->clients.all; s != NULL; s = session_next(s))
        session_drain(s);
    finish_shutdown(srv);
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_shutdown(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* [proxy] backend, or the primary its Sentinels name (ROLE checked). */
static int backend_address(const struct config *cfg, struct addr *a, char *err, size_t errlen)
{
    if (cfg->sentinel != NULL)
        return sentinel_resolve(cfg, a, err, errlen);
    return addr_parse(cfg->backend, a, err, errlen);
}

/* A backend at the proxy's own listen address would have every session
 * connect to the proxy itself, each one opening the next, until the file
 * descriptors run out. Refused (as written: a host name for the same
 * address is not caught). */
static int backend_is_self(const struct addr *listen, const struct addr *backend, char *err,
                           size_t errlen)
{
    char a[300];

    if (listen->is_unix != backend->is_unix || listen->port != backend->port ||
        strcmp(listen->host, backend->host) != 0)
        return 0;
    addr_format(backend, a, sizeof a);
    snprintf(err, errlen, "backend %s is ttlguard's own listen address", a);
    return 1;
}

/* The node listeners are made at start from these. */
static int cluster_changed(const struct config *old, const struct config *cfg)
{
    if (!old->cluster && !cfg->cluster)
        return 0;
    return old->cluster != cfg->cluster || old->cluster_port_min != cfg->cluster_port_min ||
           old->cluster_port_max != cfg->cluster_port_max ||
           !text_eq(old->cluster_announce, cfg->cluster_announce) ||
           !text_eq(old->backend, cfg->backend) ||
           !text_eq(old->backend_seeds, cfg->backend_seeds) ||
           old->backend_tls != cfg->backend_tls ||
           (old->tls_listen == NULL) != (cfg->tls_listen == NULL);
}

/* The backend is reached another way: TLS turned on or off, or another name
 * verified. (New certificates alone apply to new connections.) */
static int backend_tls_changed(const struct config *old, const struct config *cfg)
{
    return old->backend_tls != cfg->backend_tls ||
           old->backend_tls_verify != cfg->backend_tls_verify ||
           !text_eq(old->backend_tls_server_name, cfg->backend_tls_server_name);
}

/* A listener to where a reloaded config wants it: moved, opened or closed.
 * A new address that cannot be bound is logged and the old one kept. */
static void relisten(struct server *srv, struct listener *l, const struct addr *to)
{
    char a[300], b[300], err[400];
    const char *kind = l->tls ? "tls_listen" : "listen";

    if (to == NULL) {
        if (l->h != NULL) {
            addr_format(&l->addr, b, sizeof b);
            listener_close(l);
            log_info("SIGHUP: %s %s closed", kind, b);
        }
        return;
    }
    addr_format(to, a, sizeof a);
    addr_format(&l->addr, b, sizeof b);
    if (l->h != NULL && strcmp(a, b) == 0)
        return;
    int was_open = l->h != NULL;
    if (listener_move(l, srv->ctx.loop, to, err, sizeof err) != 0) {
        if (was_open)
            log_error("SIGHUP: %s; %s stays on %s", err, kind, b);
        else
            log_error("SIGHUP: %s", err);
        return;
    }
    if (was_open)
        log_info("SIGHUP: %s now on %s (was %s)", kind, a, b);
    else
        log_info("SIGHUP: %s now on %s", kind, a);
}

/* SIGHUP: read the config again. A config with errors is refused and the old
 * one stays; a good one applies to the next request of every session. The
 * listen and backend addresses and the TLS certificates apply to new
 * sessions. */
static void reload(struct server *srv)
{
    char err[1024];
    struct config *cfg = xcalloc(1, sizeof *cfg);
    const char *path = srv->ctx.cfg->path;

    if (path == NULL) {
        log_warn("SIGHUP: no config file to reload (started without --config)");
        free(cfg);
        return;
    }
    if (config_load(path, cfg, err, sizeof err) != 0) {
        log_error("SIGHUP: config refused, keeping the running one: %s", err);
        events_config_rejected(path, err);
        free(cfg);
        return;
    }

    struct addr plain = srv->plain.addr, secure = { 0 };
    struct addr backend_addr = srv->backend.addr;
    if (cluster_changed(srv->ctx.cfg, cfg) || sentinel_config_changed(srv->ctx.cfg, cfg)) {
        snprintf(err, sizeof err, "cluster, cluster_ports, cluster_announce, the seeds in "
                 "backend, backend_tls, which of listen and tls_listen is the entry port, "
                 "sentinel and sentinel_master apply at start only: restart ttlguard to "
                 "change them");
        log_error("SIGHUP: config refused, keeping the running one: %s", err);
        events_config_rejected(path, err);
        config_free(cfg);
        free(cfg);
        return;
    }
    const char *listen_text = srv->listen_override ? NULL : cfg->listen;
    char plain_text[300];
    addr_format(&plain, plain_text, sizeof plain_text);
    int want_plain = srv->listen_override || cfg->listen != NULL;
    if ((listen_text != NULL && addr_parse(listen_text, &plain, err, sizeof err) != 0) ||
        (cfg->tls_listen != NULL && addr_parse(cfg->tls_listen, &secure, err, sizeof err) != 0) ||
        (!srv->backend_override && backend_address(cfg, &backend_addr, err, sizeof err) != 0) ||
        (want_plain && backend_is_self(&plain, &backend_addr, err, sizeof err)) ||
        (cfg->tls_listen != NULL && backend_is_self(&secure, &backend_addr, err, sizeof err)) ||
        (cfg->backend_tls && backend_addr.is_unix &&
         snprintf(err, sizeof err, "backend_tls = on needs a host:port backend") > 0) ||
        (srv->listen_override && config_exposure_problem(cfg, plain_text) != NULL &&
         snprintf(err, sizeof err, "--listen %s %s", plain_text,
                  config_exposure_problem(cfg, plain_text)) > 0)) {
        log_error("SIGHUP: config refused, keeping the running one: %s", err);
        events_config_rejected(path, err);
        config_free(cfg);
        free(cfg);
        return;
    }
    if (!srv->shutting_down) {
        relisten(srv, &srv->plain, want_plain ? &plain : NULL);
        relisten(srv, &srv->secure, cfg->tls_listen != NULL ? &secure : NULL);
    }
    char a[300];
    addr_format(&backend_addr, a, sizeof a);
    if (strcmp(a, srv->backend.name) != 0 || backend_tls_changed(srv->ctx.cfg, cfg))
        backend_moved(srv, &backend_addr, cfg->sentinel != NULL);   /* Sentinel: a switch */

    struct config *old = srv->ctx.cfg;
    srv->ctx.cfg = cfg;
    log_json = cfg->log_format;
    events_reconfigure(cfg);
    admin_reconfigure(&srv->ctx);
    config_free(old);
    free(old);
    log_info("SIGHUP: config %s reloaded (%zu rules)", cfg->path, cfg->rules.n);
    sentinel_apply(&backend_addr);
    control_probe_policy();
    watch_apply(&srv->ctx);
    audit_bg_apply(&srv->ctx);
}

static void on_hup(uv_signal_t *h, int signum)
{
    reload(h->data);
}

static void on_usr1(uv_signal_t *h, int signum)
{
    events_reopen();
}

/* A client on a backend connection of its own takes two descriptors, so
 * 10,000 of them need 20,000: take the hard limit when allowed. With shared
 * connections (multiplex = on) clients need one each, and only those that
 * need a connection of their own (MULTI, blocking commands, pub/sub) two:
 * warn only when even one each does not fit. */
static void raise_nofile(int max_clients, int multiplex)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)max_clients * 2 + 64;
    rlim_t need = multiplex ? (rlim_t)max_clients + 64 : want;
    if (rl.rlim_cur >= want)
        return;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        rl.rlim_cur = old;
    if (rl.rlim_cur >= need)
        return;
    log_warn("open files limit is %llu (hard limit %llu): a client takes %s, so fewer than "
             "max_clients=%d clients can be served; raise it with ulimit -n",
             (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
             multiplex ? "one (two on a backend connection of its own)"
                       : "two (its connection and its backend's)", max_clients);
}

/* The listen, TLS listen and backend addresses, each parsed and checked
 * against the others: 0, or -1 with the reason logged. */
static int server_addresses(struct server *srv, const char *listen_text,
                            const char *backend_text, const char *listen_override,
                            struct addr *backend_addr)
{
    const struct config *cfg = srv->ctx.cfg;
    char err[512];
    if ((listen_text != NULL && addr_parse(listen_text, &srv->plain.addr, err, sizeof err) != 0) ||
        (cfg->tls_listen != NULL &&
         addr_parse(cfg->tls_listen, &srv->secure.addr, err, sizeof err) != 0) ||
        (backend_text != NULL ? addr_parse(backend_text, backend_addr, err, sizeof err)
                              : backend_address(cfg, backend_addr, err, sizeof err)) != 0 ||
        (listen_text != NULL && backend_is_self(&srv->plain.addr, backend_addr, err,
                                                sizeof err)) ||
        (cfg->tls_listen != NULL && backend_is_self(&srv->secure.addr, backend_addr, err,
                                                    sizeof err))) {
        log_error("%s", err);
        return -1;
    }
    if (cfg->backend_tls && backend_addr->is_unix) {
        log_error("backend_tls = on needs a host:port backend, not %s", backend_text);
        return -1;
    }
    if (listen_override != NULL && config_exposure_problem(cfg, listen_override) != NULL) {
        log_error("--listen %s %s", listen_override, config_exposure_problem(cfg, listen_override));
        return -1;
    }
    return 0;
}

/* The event log, TLS, the listeners and the admin endpoint: 0, or -1 with
 * the reason logged and what was opened closed again. */
static int server_open(struct server *srv, int plain)
{
    char err[512];
    if (events_init(srv->ctx.loop, srv->ctx.cfg, err, sizeof err) != 0) {
        log_error("%s", err);
        return -1;
    }
    tls_init(srv->ctx.loop);
    if ((plain && listener_open(&srv->plain, srv->ctx.loop, err, sizeof err) != 0) ||
        (srv->ctx.cfg->tls_listen != NULL &&
         listener_open(&srv->secure, srv->ctx.loop, err, sizeof err) != 0) ||
        admin_start(&srv->ctx, &srv->clients, err, sizeof err) != 0) {
        log_error("%s", err);
        listener_close(&srv->plain);
        listener_close(&srv->secure);
        tls_shutdown_module();
        events_shutdown();
        uv_run(srv->ctx.loop, UV_RUN_NOWAIT);
        return -1;
    }
    return 0;
}

static void server_timers_and_signals(struct server *srv)
{
    uv_timer_init(srv->ctx.loop, &srv->cron);
    srv->cron.data = srv;
    uv_timer_start(&srv->cron, on_cron, CRON_MS, CRON_MS);
    uv_signal_init(srv->ctx.loop, &srv->sig_term);
    uv_signal_init(srv->ctx.loop, &srv->sig_int);
    uv_signal_init(srv->ctx.loop, &srv->sig_hup);
    uv_signal_init(srv->ctx.loop, &srv->sig_usr1);
    srv->sig_term.data = srv->sig_int.data = srv->sig_hup.data = srv->sig_usr1.data = srv;
    uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
    uv_signal_start(&srv->sig_int, on_signal, SIGINT);
    uv_signal_start(&srv->sig_hup, on_hup, SIGHUP);
    uv_signal_start(&srv->sig_usr1, on_usr1, SIGUSR1);
}

static void log_listening(const struct server *srv)
{
    char lname[300] = "", tname[300] = "";
    if (srv->plain.h != NULL)
        addr_format(&srv->plain.addr, lname, sizeof lname);
    if (srv->secure.h != NULL) {
        size_t n = (size_t)snprintf(tname, sizeof tname, "%s", lname[0] ? ", TLS on " : "TLS on ");
        addr_format(&srv->secure.addr, tname + n, sizeof tname - n);
    }
    log_info("ttlguard %s listening on %s%s, backend %s%s", TTLG_VERSION, lname, tname,
             srv->backend.name, srv->ctx.cfg->backend_tls ? " (TLS)" : "");
    if (srv->ctx.cfg->backend_tls && !srv->ctx.cfg->backend_tls_verify)
        log_warn("backend_tls_verify = off: the backend's certificate is not verified, so "
                 "anyone on the path can pose as it; for tests only");
}

/* The loop-wide context, the client side and the listeners, wired. */
static void server_init(struct server *srv, struct config *cfg, int listen_override,
                        int backend_override)
{
    memset(srv, 0, sizeof *srv);
    srv->ctx.loop = uv_default_loop();
    srv->ctx.cfg = cfg;
    srv->ctx.backend = &srv->backend;
    srv->clients.ctx = &srv->ctx;
    srv->clients.gone = on_session_gone;
    srv->listen_override = listen_override;
    srv->backend_override = backend_override;
    srv->plain.on_accept = srv->secure.on_accept = on_accept;
    srv->plain.target = srv->secure.target = &srv->backend;
    srv->secure.tls = 1;
}

int server_run(struct config *cfg, const char *listen_override, const char *backend_override)
{
    struct server *srv = &the_server;

    server_init(srv, cfg, listen_override != NULL, backend_override != NULL);
    log_json = cfg->log_format;
    const char *listen_text = listen_override ? listen_override : cfg->listen;
    struct addr backend_addr;
    const char *backend_text = backend_override ? backend_override
                               : cfg->sentinel ? NULL : cfg->backend;
    if (server_addresses(srv, listen_text, backend_text, listen_override, &backend_addr) != 0)
        return 1;
    target_set(&srv->backend, &srv->ctx, &backend_addr, 1);
    srv->ctx.rbuf_size = RBUF_SIZE;
    srv->ctx.rbuf = xmalloc(srv->ctx.rbuf_size);

    signal(SIGPIPE, SIG_IGN);
    raise_nofile(cfg->max_clients, cfg->multiplex);
    if (server_open(srv, listen_text != NULL) != 0)
        return 1;
    control_start(&srv->ctx, on_commands_ready);
    watch_apply(&srv->ctx);
    audit_bg_apply(&srv->ctx);
    if (cfg->cluster)
        cluster_start(&srv->ctx, cfg->tls_listen != NULL ? &srv->secure : &srv->plain,
                      on_accept);
    if (backend_text == NULL)
        sentinel_start(&srv->ctx, &backend_addr, &sentinel_hooks);
    server_timers_and_signals(srv);
    log_listening(srv);

    uv_run(srv->ctx.loop, UV_RUN_DEFAULT);
    cluster_free();
    control_free();
    sentinel_free();

    uv_loop_close(srv->ctx.loop);
    free(srv->ctx.rbuf);
    config_free(srv->ctx.cfg);
    free(srv->ctx.cfg);
    log_info("bye");
    return 0;
}
