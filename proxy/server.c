/*
 * server: listener, signals and cron around the sessions (see server.h).
 */
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <netdb.h>

#include "admin.h"
#include "audit_bg.h"
#include "cluster.h"
#include "commands.h"
#include "control.h"
#include "events.h"
#include "mux.h"
#include "server.h"
#include "session.h"
#include "tls.h"
#include "watch.h"

#define CRON_MS             100
#define TRIM_MS             10000   /* free memory handed back to the system */
#define SHUTDOWN_GRACE_MS   5000
#define RBUF_SIZE           (256 * 1024)

static struct server the_server;
uint64_t loop_now_ns;

static void on_close_noop(uv_handle_t *h)
{
}

static void on_close_free(uv_handle_t *h)
{
    free(h);
}

void server_unlisten(struct listener *l)
{
    if (l->h == NULL)
        return;
    uv_close((uv_handle_t *)l->h, on_close_free);
    l->h = NULL;
    if (l->addr.is_unix)
        unlink(l->addr.host);
}

/* Everything is closed once the last session is gone during shutdown. */
static void finish_shutdown(struct server *srv)
{
    if (!srv->shutting_down || srv->nsessions > 0)
        return;
    mux_shutdown();
    control_stop();
    watch_stop();
    audit_bg_stop();
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

void server_set_commands(struct server *srv, struct command_set *set, int from_backend)
{
    /* Nothing keeps a row past the request that looked it up. */
    command_set_free(srv->commands);
    srv->commands = set;
    srv->backend_known = from_backend;
    srv->commands_ready = 1;
    for (struct session *s = srv->sessions, *next; s != NULL; s = next) {
        next = session_next(s);
        session_commands_ready(s);
    }
}

void server_session_gone(struct server *srv)
{
    finish_shutdown(srv);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct listener *l = listener->data;
    struct server *srv = l->srv;
    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    session_accept(srv, listener, l->tls ? srv->cfg->client_tls_ctx : NULL, l->target);
}

static void on_cron(uv_timer_t *t)
{
    struct server *srv = t->data;
    uint64_t now = now_ms_monotonic();
    struct session *s = srv->sessions;
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
    if (srv->cfg->cluster)
        cluster_cron(now);
    if (srv->shutting_down && now >= srv->shutdown_deadline) {
        if (srv->nsessions > 0)
            log_warn("shutdown: closing %d sessions still owed replies", srv->nsessions);
        for (s = srv->sessions; s != NULL; s = session_next(s))
            session_close(s);
    }
    finish_shutdown(srv);
}

static void begin_shutdown(struct server *srv, const char *why)
{
    if (srv->shutting_down)
        return;
    log_info("%s: shutting down, draining %d sessions", why, srv->nsessions);
    srv->shutting_down = 1;
    srv->shutdown_deadline = now_ms_monotonic() + SHUTDOWN_GRACE_MS;
    server_unlisten(&srv->plain);
    server_unlisten(&srv->secure);
    for (struct session *s = srv->sessions; s != NULL; s = session_next(s))
        session_drain(s);
    finish_shutdown(srv);
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_shutdown(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* Listen on a; the new handle is returned in *out (freed when closed). */
static int start_listening(struct listener *l, const struct addr *a, uv_stream_t **out,
                           char *err, size_t errlen)
{
    struct server *srv = l->srv;
    int r;
    union { uv_tcp_t tcp; uv_pipe_t pipe; } *h = xmalloc(sizeof *h);
    if (a->is_unix) {
        uv_pipe_init(srv->loop, &h->pipe, 0);
        unlink(a->host);    /* a stale socket from a previous run, as redis does */
        r = uv_pipe_bind(&h->pipe, a->host);
    } else {
        struct sockaddr_storage ss;
        uv_tcp_init(srv->loop, &h->tcp);
        if (addr_resolve(a, &ss, err, errlen) != 0) {
            uv_close((uv_handle_t *)h, on_close_free);
            return -1;
        }
        r = uv_tcp_bind(&h->tcp, (struct sockaddr *)&ss, 0);
    }
    h->tcp.data = l;
    if (r == 0)
        r = uv_listen((uv_stream_t *)h, 511, on_connection);
    if (r != 0) {
        char name[300];
        addr_format(a, name, sizeof name);
        snprintf(err, errlen, "cannot listen on %s: %s", name, uv_strerror(r));
        uv_close((uv_handle_t *)h, on_close_free);
        return -1;
    }
    *out = (uv_stream_t *)h;
    return 0;
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

static int same_text(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The node listeners are made at start from these. */
static int cluster_changed(const struct config *old, const struct config *cfg)
{
    if (!old->cluster && !cfg->cluster)
        return 0;
    return old->cluster != cfg->cluster || old->cluster_port_min != cfg->cluster_port_min ||
           old->cluster_port_max != cfg->cluster_port_max ||
           !same_text(old->cluster_announce, cfg->cluster_announce) ||
           !same_text(old->backend, cfg->backend) ||
           !same_text(old->backend_seeds, cfg->backend_seeds);
}

/* The backend is reached another way: TLS turned on or off, or another name
 * verified. (New certificates alone apply to new connections.) */
static int backend_tls_changed(const struct config *old, const struct config *cfg)
{
    return old->backend_tls != cfg->backend_tls ||
           old->backend_tls_verify != cfg->backend_tls_verify ||
           !same_text(old->backend_tls_server_name, cfg->backend_tls_server_name);
}

int server_listen(struct listener *l, char *err, size_t errlen)
{
    return start_listening(l, &l->addr, &l->h, err, errlen);
}

/* A listener to where a reloaded config wants it: moved, opened or closed.
 * A new address that cannot be bound is logged and the old one kept. */
static void relisten(struct server *srv, struct listener *l, const struct addr *to)
{
    char a[300], b[300], err[400];
    const char *kind = l->tls ? "tls_listen" : "listen";
    uv_stream_t *h;

    if (to == NULL) {
        if (l->h != NULL) {
            addr_format(&l->addr, b, sizeof b);
            server_unlisten(l);
            log_info("SIGHUP: %s %s closed", kind, b);
        }
        return;
    }
    addr_format(to, a, sizeof a);
    addr_format(&l->addr, b, sizeof b);
    if (l->h != NULL && strcmp(a, b) == 0)
        return;
    if (start_listening(l, to, &h, err, sizeof err) != 0) {
        if (l->h != NULL)
            log_error("SIGHUP: %s; %s stays on %s", err, kind, b);
        else
            log_error("SIGHUP: %s", err);
        return;
    }
    if (l->h != NULL)
        log_info("SIGHUP: %s now on %s (was %s)", kind, a, b);
    else
        log_info("SIGHUP: %s now on %s", kind, a);
    server_unlisten(l);
    l->h = h;
    l->addr = *to;
}

/* SIGHUP: read the config again. A config with errors is refused and the old
 * one stays; a good one applies to the next request of every session. The
 * listen and backend addresses and the TLS certificates apply to new
 * sessions. */
static void reload(struct server *srv)
{
    char err[1024];
    struct config *cfg = xcalloc(1, sizeof *cfg);
    const char *path = srv->cfg->path;

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
    if (cluster_changed(srv->cfg, cfg)) {
        snprintf(err, sizeof err, "cluster, cluster_ports, cluster_announce and the seeds in "
                 "backend apply at start only: restart ttlguard to change them");
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
        (!srv->backend_override && addr_parse(cfg->backend, &backend_addr, err, sizeof err) != 0) ||
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
    if (strcmp(a, srv->backend.name) != 0 || backend_tls_changed(srv->cfg, cfg)) {
        target_set(&srv->backend, srv, &backend_addr, 1);
        mux_backend_changed();
        control_backend_changed();
        watch_backend_changed();
        audit_bg_backend_changed();
    }

    struct config *old = srv->cfg;
    srv->cfg = cfg;
    log_json = cfg->log_format;
    events_reconfigure(cfg);
    admin_reconfigure(srv);
    config_free(old);
    free(old);
    log_info("SIGHUP: config %s reloaded (%zu rules)", cfg->path, cfg->rules.n);
    control_probe_policy();
    watch_apply(srv);
    audit_bg_apply(srv);
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
    const struct config *cfg = srv->cfg;
    char err[512];
    if ((listen_text != NULL && addr_parse(listen_text, &srv->plain.addr, err, sizeof err) != 0) ||
        (cfg->tls_listen != NULL &&
         addr_parse(cfg->tls_listen, &srv->secure.addr, err, sizeof err) != 0) ||
        addr_parse(backend_text, backend_addr, err, sizeof err) != 0 ||
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
    if (events_init(srv->loop, srv->cfg, err, sizeof err) != 0) {
        log_error("%s", err);
        return -1;
    }
    tls_init(srv->loop);
    if ((plain && server_listen(&srv->plain, err, sizeof err) != 0) ||
        (srv->cfg->tls_listen != NULL && server_listen(&srv->secure, err, sizeof err) != 0) ||
        admin_start(srv, err, sizeof err) != 0) {
        log_error("%s", err);
        server_unlisten(&srv->plain);
        server_unlisten(&srv->secure);
        tls_shutdown_module();
        events_shutdown();
        uv_run(srv->loop, UV_RUN_NOWAIT);
        return -1;
    }
    return 0;
}

static void server_timers_and_signals(struct server *srv)
{
    uv_timer_init(srv->loop, &srv->cron);
    srv->cron.data = srv;
    uv_timer_start(&srv->cron, on_cron, CRON_MS, CRON_MS);
    uv_signal_init(srv->loop, &srv->sig_term);
    uv_signal_init(srv->loop, &srv->sig_int);
    uv_signal_init(srv->loop, &srv->sig_hup);
    uv_signal_init(srv->loop, &srv->sig_usr1);
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
             srv->backend.name, srv->cfg->backend_tls ? " (TLS)" : "");
    if (srv->cfg->backend_tls && !srv->cfg->backend_tls_verify)
        log_warn("backend_tls_verify = off: the backend's certificate is not verified, so "
                 "anyone on the path can pose as it; for tests only");
}

int server_run(struct config *cfg, const char *listen_override, const char *backend_override)
{
    struct server *srv = &the_server;

    memset(srv, 0, sizeof *srv);
    srv->loop = uv_default_loop();
    srv->cfg = cfg;
    log_json = cfg->log_format;
    srv->listen_override = listen_override != NULL;
    srv->backend_override = backend_override != NULL;
    srv->plain.srv = srv->secure.srv = srv;
    srv->plain.target = srv->secure.target = &srv->backend;
    srv->secure.tls = 1;
    const char *listen_text = listen_override ? listen_override : cfg->listen;
    struct addr backend_addr;
    if (server_addresses(srv, listen_text, backend_override ? backend_override : cfg->backend,
                         listen_override, &backend_addr) != 0)
        return 1;
    target_set(&srv->backend, srv, &backend_addr, 1);
    srv->commands = command_set_new(&server_id_default);
    srv->rbuf_size = RBUF_SIZE;
    srv->rbuf = xmalloc(srv->rbuf_size);

    signal(SIGPIPE, SIG_IGN);
    raise_nofile(cfg->max_clients, cfg->multiplex);
    if (server_open(srv, listen_text != NULL) != 0)
        return 1;
    control_start(srv);
    watch_apply(srv);
    audit_bg_apply(srv);
    if (cfg->cluster)
        cluster_start(srv);
    server_timers_and_signals(srv);
    log_listening(srv);

    uv_run(srv->loop, UV_RUN_DEFAULT);
    cluster_free();

    uv_loop_close(srv->loop);
    free(srv->rbuf);
    command_set_free(srv->commands);
    config_free(srv->cfg);
    free(srv->cfg);
    log_info("bye");
    return 0;
}
