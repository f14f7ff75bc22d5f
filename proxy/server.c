/*
 * server: listener, signals and cron around the sessions (see server.h).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "server.h"
#include "session.h"

#define CRON_MS             100
#define SHUTDOWN_GRACE_MS   5000
#define RBUF_SIZE           (256 * 1024)

static struct server the_server;

static void on_close_noop(uv_handle_t *h)
{
}

static void stop_listening(struct server *srv)
{
    if (!srv->listening)
        return;
    srv->listening = 0;
    uv_close((uv_handle_t *)&srv->listener, on_close_noop);
    if (srv->listen_addr.is_unix)
        unlink(srv->listen_addr.host);
}

/* Everything is closed once the last session is gone during shutdown. */
static void finish_shutdown(struct server *srv)
{
    if (!srv->shutting_down || srv->nsessions > 0)
        return;
    if (!uv_is_closing((uv_handle_t *)&srv->cron)) {
        uv_close((uv_handle_t *)&srv->cron, on_close_noop);
        uv_close((uv_handle_t *)&srv->sig_term, on_close_noop);
        uv_close((uv_handle_t *)&srv->sig_int, on_close_noop);
    }
}

void server_session_gone(struct server *srv)
{
    finish_shutdown(srv);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct server *srv = listener->data;
    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    session_accept(srv, listener);
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
    stop_listening(srv);
    for (struct session *s = srv->sessions; s != NULL; s = session_next(s))
        session_drain(s);
    finish_shutdown(srv);
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_shutdown(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* 10,000 clients need 20,000 descriptors: take the hard limit when allowed. */
static void raise_nofile(int max_clients)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)max_clients * 2 + 64;
    if (rl.rlim_cur >= want)
        return;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
        log_warn("open files limit is %llu (hard limit %llu): fewer than max_clients=%d "
                 "clients can be served; raise it with ulimit -n",
                 (unsigned long long)(rl.rlim_cur > old ? rl.rlim_cur : old),
                 (unsigned long long)rl.rlim_max, max_clients);
}

static int start_listening(struct server *srv, char *err, size_t errlen)
{
    int r;
    const struct addr *a = &srv->listen_addr;
    if (a->is_unix) {
        uv_pipe_init(srv->loop, &srv->listener.pipe, 0);
        unlink(a->host);    /* a stale socket from a previous run, as redis does */
        r = uv_pipe_bind(&srv->listener.pipe, a->host);
    } else {
        struct sockaddr_storage ss;
        uv_tcp_init(srv->loop, &srv->listener.tcp);
        if (uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)&ss) != 0 &&
            uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)&ss) != 0) {
            snprintf(err, errlen, "listen address '%s' is not a numeric IP address", a->host);
            uv_close((uv_handle_t *)&srv->listener, NULL);
            return -1;
        }
        r = uv_tcp_bind(&srv->listener.tcp, (struct sockaddr *)&ss, 0);
    }
    srv->listener.tcp.data = srv;
    if (r == 0)
        r = uv_listen((uv_stream_t *)&srv->listener, 511, on_connection);
    if (r != 0) {
        char name[300];
        addr_format(a, name, sizeof name);
        snprintf(err, errlen, "cannot listen on %s: %s", name, uv_strerror(r));
        uv_close((uv_handle_t *)&srv->listener, NULL);
        return -1;
    }
    srv->listening = 1;
    return 0;
}

int server_run(struct config *cfg, const char *listen_override, const char *backend_override)
{
    struct server *srv = &the_server;
    char err[512];

    memset(srv, 0, sizeof *srv);
    srv->loop = uv_default_loop();
    srv->cfg = cfg;
    if (addr_parse(listen_override ? listen_override : cfg->listen, &srv->listen_addr,
                   err, sizeof err) != 0 ||
        addr_parse(backend_override ? backend_override : cfg->backend, &srv->backend_addr,
                   err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    addr_format(&srv->backend_addr, srv->backend_name, sizeof srv->backend_name);
    srv->rbuf_size = RBUF_SIZE;
    srv->rbuf = xmalloc(srv->rbuf_size);

    signal(SIGPIPE, SIG_IGN);
    raise_nofile(cfg->max_clients);

    if (start_listening(srv, err, sizeof err) != 0) {
        log_error("%s", err);
        uv_run(srv->loop, UV_RUN_NOWAIT);
        return 1;
    }

    uv_timer_init(srv->loop, &srv->cron);
    srv->cron.data = srv;
    uv_timer_start(&srv->cron, on_cron, CRON_MS, CRON_MS);
    uv_signal_init(srv->loop, &srv->sig_term);
    uv_signal_init(srv->loop, &srv->sig_int);
    srv->sig_term.data = srv->sig_int.data = srv;
    uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
    uv_signal_start(&srv->sig_int, on_signal, SIGINT);

    char lname[300];
    addr_format(&srv->listen_addr, lname, sizeof lname);
    log_info("ttlguard %s listening on %s, backend %s", TTLG_VERSION, lname, srv->backend_name);

    uv_run(srv->loop, UV_RUN_DEFAULT);

    uv_loop_close(srv->loop);
    free(srv->rbuf);
    log_info("bye");
    return 0;
}
