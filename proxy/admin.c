/*
 * admin: /metrics, /healthz and /rules over HTTP on the proxy's loop.
 *
 *   accept ──▶ conn ──read──▶ http_parser ──on_message_complete──▶ route
 *                ▲                                                   │
 *                │      /metrics, /rules, 404, 405: answered at once ┤
 *                │                                                   ▼
 *                └── resume parsing ◀── health result ◀── /healthz: parser paused,
 *                                                        one check for all waiters
 *
 * One request at a time per connection: a pipelined request waits in the
 * connection's `held` bytes (reading stops meanwhile) until the answer before
 * it is queued. That keeps the answers in order and the memory bounded.
 *
 * admin_token: /metrics and /rules answer only requests that carry
 * "Authorization: Bearer TOKEN" (compared as SHA-256 digests, in constant
 * time); others get 401 with WWW-Authenticate: Bearer. /healthz stays open:
 * the kubelet's probes and load balancers cannot hold a secret, and it says
 * no more than up or down.
 *
 * /healthz opens its own short connection to the backend (AUTH when the
 * config has credentials, then PING), so it says whether a new session would
 * work, not whether old ones still do. The answer is cached for a second:
 * a scraper hitting /healthz in a loop costs the backend one connection a
 * second at most.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <http_parser.h>
#include <hiredis/hiredis.h>

#include "admin.h"
#include "backend.h"
#include "cluster.h"
#include "commands.h"
#include "control.h"
#include "events.h"
#include "loop.h"
#include "sentinel.h"
#include "session.h"
#include "stats.h"
#include "watch.h"
#include "audit_bg.h"

#define ADMIN_MAX_CONNS     64
#define ADMIN_REQ_MAX       8192            /* bytes of URL + headers + body of one request */
#define ADMIN_URL_MAX       1024
#define ADMIN_AUTH_MAX      512             /* bytes of an Authorization header kept */
#define ADMIN_IDLE_MS       30000           /* an idle keep-alive connection is closed */
#define ADMIN_CRON_MS       1000
#define ADMIN_WQ_MAX        (1u << 20)      /* unsent answer bytes before reading stops */
#define ADMIN_READ_CHUNK    (64 * 1024)
#define HEALTH_CACHE_MS     1000
#define HEALTH_TIMEOUT_MS   1000

/* Why a connection does not parse its held bytes now. */
#define WAIT_HEALTH 1u      /* a /healthz answer is pending */
#define WAIT_WRITE  2u      /* too much unsent: the peer is not reading */

struct admin_conn {
    uv_tcp_t tcp;
    http_parser parser;
    struct admin_conn *prev, *next;
    char url[ADMIN_URL_MAX + 1];
    size_t urllen;
    char field[16];             /* the header name being read (enough for "authorization") */
    size_t fieldlen;
    int in_value;               /* reading a header's value */
    int in_auth;                /* ...the Authorization header's */
    char auth[ADMIN_AUTH_MAX];  /* the Authorization header, cut at ADMIN_AUTH_MAX */
    size_t authlen;
    size_t req_bytes;           /* of the request being parsed */
    int too_large;
    unsigned wait;              /* WAIT_* */
    int head;                   /* the request waiting for /healthz is a HEAD */
    int keep_alive;             /* of that request */
    int close_after;            /* close once the queued answers are sent */
    int closing;
    int reading;
    int feeding;                /* inside http_parser_execute(): no re-entry */
    uint64_t last_active;       /* uv_now() */
    struct sbuf held;          /* read but not parsed yet */
};

/* One backend check in flight: a backend connection of its own (backend.c:
 * the proxy's AUTH and TLS as every connection has them), PING, the answer.
 * Freed when the connection has closed. */
struct hcheck {
    struct bconn be;
    char text[256];             /* the reply to PING as it arrives */
    size_t tlen;
};

/* A queued answer: freed in its write callback. */
struct answer {
    uv_write_t req;
    struct admin_conn *c;
    size_t len;
    char data[];
};

static struct {
    struct loop_ctx *ctx;
    const struct clients *clients;
    uv_tcp_t *listener;         /* NULL when off; freed in its close callback */
    char *addr;                 /* the address it listens on */
    struct admin_conn *conns;
    int nconns;
    uv_timer_t cron;
    int cron_on;

    struct hcheck *check;       /* in flight, or NULL */
    uv_timer_t check_timer;
    int health_known;
    uint64_t health_at;         /* uv_now() of the last result */
    int health_ok;
    char health_reason[400];
} adm;

static http_parser_settings settings;
static char read_chunk[ADMIN_READ_CHUNK];

static void conn_feed(struct admin_conn *c, const char *p, size_t n);
static void conn_close(struct admin_conn *c);

/* ---- answers ------------------------------------------------------------ */

static const char *status_text(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    }
    return "Error";
}

static void conn_resume(struct admin_conn *c);

static void on_answer_written(uv_write_t *req, int status)
{
    struct answer *a = (struct answer *)req;
    struct admin_conn *c = a->c;
    free(a);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    if (c->close_after && queued == 0) {
        conn_close(c);
        return;
    }
    if ((c->wait & WAIT_WRITE) && queued <= ADMIN_WQ_MAX / 2) {
        c->wait &= ~WAIT_WRITE;
        conn_resume(c);
    }
}

/* Queue one whole answer. head: leave the body out (HEAD) but say its length. */
static void conn_answer(struct admin_conn *c, int status, const char *ctype,
                        const char *body, size_t blen, int head, int keep_alive,
                        const char *extra_header)
{
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr,
                      "HTTP/1.1 %d %s\r\n"
                      "Content-Type: %s\r\n"
                      "Content-Length: %zu\r\n"
                      "Cache-Control: no-store\r\n"
                      "%s%s"
                      "Connection: %s\r\n\r\n",
                      status, status_text(status), ctype, blen,
                      extra_header ? extra_header : "", extra_header ? "\r\n" : "",
                      keep_alive ? "keep-alive" : "close");
    size_t send_body = head ? 0 : blen;
    struct answer *a = xmalloc(sizeof *a + (size_t)hl + send_body);
    a->c = c;
    a->len = (size_t)hl + send_body;
    memcpy(a->data, hdr, (size_t)hl);
    if (send_body)
        memcpy(a->data + hl, body, send_body);
    uv_buf_t buf = uv_buf_init(a->data, (unsigned)a->len);
    if (!keep_alive)
        c->close_after = 1;
    int r = uv_write(&a->req, (uv_stream_t *)&c->tcp, &buf, 1, on_answer_written);
    if (r < 0) {
        free(a);
        conn_close(c);
        return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > ADMIN_WQ_MAX)
        c->wait |= WAIT_WRITE;
}

static void answer_text(struct admin_conn *c, int status, const char *text, int head,
                        int keep_alive, const char *extra_header)
{
    conn_answer(c, status, "text/plain; charset=utf-8", text, strlen(text), head, keep_alive,
                extra_header);
}

/* ---- /metrics -------------------------------------------------------------- */

static void m_family(struct sbuf *b, const char *name, const char *type, const char *help)
{
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void m_sample(struct sbuf *b, const char *name, const char *labels, uint64_t v)
{
    evbuf_adds(b, name);
    if (labels != NULL && *labels)
        sbuf_printf(b, "{%s}", labels);
    sbuf_add(b, " ", 1);
    evbuf_u64(b, v);
    sbuf_add(b, "\n", 1);
}

static void m_single(struct sbuf *b, const char *name, const char *type, const char *help,
                     uint64_t v)
{
    m_family(b, name, type, help);
    m_sample(b, name, NULL, v);
}

/* The watcher's numbers (watch = on). */
static void render_watch(struct sbuf *b)
{
    const struct watch_stats *w = watch_stats();
    m_single(b, "ttlguard_watch_subscribed", "gauge",
             "1 while the watcher receives keyspace notifications.", (uint64_t)w->subscribed);
    m_single(b, "ttlguard_watch_flags_ok", "gauge",
             "1 when notify-keyspace-events has the flags the watcher needs.",
             (uint64_t)w->flags_ok);
    m_single(b, "ttlguard_watch_notifications_total", "counter",
             "Keyspace notifications the watcher read.", w->notifications);
    m_single(b, "ttlguard_watch_checks_total", "counter",
             "Keys under a ttl rule the watcher checked after a write.", w->checks);
    m_single(b, "ttlguard_watch_found_total", "counter",
             "Keys the watcher found without a TTL.", w->found);
    m_single(b, "ttlguard_watch_fixed_total", "counter",
             "Keys the watcher gave their rule's TTL (rewrite rules).", w->fixed);
    m_single(b, "ttlguard_watch_missed_total", "counter",
             "Checks the watcher could not send (its connection down, or too many in flight).",
             w->missed);
    m_single(b, "ttlguard_watch_resubscribed_total", "counter",
             "Times the watcher subscribed again after losing its subscription.",
             w->resubscribed);
    m_single(b, "ttlguard_watch_gap_seconds_total", "counter",
             "Seconds without a subscription after it was lost: writes then went unseen.",
             w->gap_ms / 1000);
}

static void rule_label(struct sbuf *lab, const struct rule *r)
{
    lab->len = 0;
    evbuf_adds(lab, "rule=\"");
    evbuf_prom_label(lab, r->label);
    sbuf_add(lab, "\"", 1);
}

static void m_histogram(struct sbuf *b, const char *name, const char *path,
                        const struct stats_hist *h)
{
    uint64_t cum = 0;
    for (unsigned i = 0; i < STATS_NBOUNDS; i++) {
        cum += h->bucket[i];
        sbuf_printf(b, "%s_bucket{path=\"%s\",le=\"%s\"} ", name, path, stats_bounds_text[i]);
        evbuf_u64(b, cum);
        sbuf_add(b, "\n", 1);
    }
    sbuf_printf(b, "%s_bucket{path=\"%s\",le=\"+Inf\"} ", name, path);
    evbuf_u64(b, h->count);
    sbuf_printf(b, "\n%s_sum{path=\"%s\"} %.9f\n%s_count{path=\"%s\"} ", name, path,
                 (double)h->sum_ns / 1e9, name, path);
    evbuf_u64(b, h->count);
    sbuf_add(b, "\n", 1);
}

struct node_metrics {
    struct sbuf *b;
    int requests;           /* which family this pass writes */
};

static void node_sample(void *ctx, const struct cluster_node_info *n)
{
    struct node_metrics *m = ctx;
    struct sbuf lab = { 0 };
    evbuf_adds(&lab, "node=\"");
    evbuf_prom_label(&lab, n->name);
    if (m->requests) {
        sbuf_add(&lab, "\"", 2);
        m_sample(m->b, "ttlguard_cluster_node_requests_total", lab.p, n->requests);
    } else {
        sbuf_printf(&lab, "\",port=\"%d\",role=\"%s\",id=\"%s\"", n->port,
                     n->primary ? "primary" : "replica", n->id);
        sbuf_add(&lab, "", 1);
        m_sample(m->b, "ttlguard_cluster_node_info", lab.p, (uint64_t)n->present);
    }
    free(lab.p);
}

/* cluster = on: every node, its port here and the requests sent to it. */
static void render_cluster(struct sbuf *b)
{
    struct node_metrics m = { b, 0 };
    m_family(b, "ttlguard_cluster_node_info", "gauge",
             "Cluster nodes: the port clients reach each at; 1 while the last topology read "
             "showed it, 0 after it left.");
    cluster_each(node_sample, &m);
    m.requests = 1;
    m_family(b, "ttlguard_cluster_node_requests_total", "counter",
             "Client requests sent to each cluster node.");
    cluster_each(node_sample, &m);
}

/* cluster = route: the redirects ttlguard followed for its clients. */
static void render_route(struct sbuf *b)
{
    static const char *const kinds[] = { "kind=\"moved\"", "kind=\"ask\"",
                                         "kind=\"tryagain\"" };
    const uint64_t *n = adm.ctx->stats.route_redirects;
    m_family(b, "ttlguard_route_redirects_total", "counter",
             "cluster = route: -MOVED, -ASK and -TRYAGAIN replies ttlguard followed for its "
             "clients (they never see them).");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        m_sample(b, "ttlguard_route_redirects_total", kinds[i], n[i]);
}

/* Connections, requests, bytes and what became of them. */
static void render_counters(struct sbuf *b)
{
    const struct stats *st = &adm.ctx->stats;
    int nclients = adm.clients->nclients;
    const struct stats_hist *lat = stats_proxy.latency;

    m_family(b, "ttlguard_build_info", "gauge", "ttlguard version.");
    sbuf_printf(b, "ttlguard_build_info{version=\"%s\"} 1\n", TTLG_VERSION);
    m_single(b, "ttlguard_client_connections", "gauge", "Client connections open now.",
             (uint64_t)(nclients > 0 ? nclients : 0));
    m_single(b, "ttlguard_backend_connections", "gauge", "Backend connections open now.",
             (uint64_t)(stats_proxy.backend_connections > 0 ? stats_proxy.backend_connections : 0));
    m_single(b, "ttlguard_clients_accepted_total", "counter", "Client connections accepted.",
             st->clients_accepted);
    m_single(b, "ttlguard_clients_rejected_total", "counter",
             "Client connections refused because max_clients were connected.", st->clients_rejected);
    m_single(b, "ttlguard_clients_denied_total", "counter",
             "Client connections refused by protected mode (not from loopback, no password).",
             st->clients_denied);
    m_single(b, "ttlguard_auth_errors_total", "counter",
             "Client logins refused (wrong password or unknown user).", st->auth_errors);
    m_single(b, "ttlguard_backend_connects_total", "counter", "Backend connections established.",
             st->backend_connects);
    m_single(b, "ttlguard_backend_errors_total", "counter",
             "Backend connections that failed (connect errors and timeouts).",
             st->backend_connect_errors);
    m_single(b, "ttlguard_requests_total", "counter", "Requests read from clients.", st->requests);
    m_single(b, "ttlguard_commands_forwarded_total", "counter",
             "Commands forwarded to the backend and answered, rewritten ones included.",
             lat[STATS_PASS].count + lat[STATS_REWRITTEN].count);
    m_single(b, "ttlguard_commands_rewritten_total", "counter",
             "Commands rewritten so that their keys keep or get a TTL.", st->rewritten);
    m_single(b, "ttlguard_commands_rejected_total", "counter",
             "Commands refused with a -TTLGUARD error.", st->rejected);
    m_single(b, "ttlguard_protocol_errors_total", "counter",
             "Client connections closed for a RESP protocol error.", st->protocol_errors);
    m_single(b, "ttlguard_rewrite_errors_total", "counter",
             "Rewrites whose own commands (MULTI, EXPIRE, a follow-up script) Redis refused.",
             st->rewrite_errors);
    m_single(b, "ttlguard_tls_handshake_errors_total", "counter",
             "TLS client connections whose handshake failed or timed out.",
             st->tls_handshake_errors);

    m_family(b, "ttlguard_bytes_total", "counter", "Bytes moved, by direction.");
    m_sample(b, "ttlguard_bytes_total", "direction=\"client_to_proxy\"", st->bytes_from_clients);
    m_sample(b, "ttlguard_bytes_total", "direction=\"proxy_to_backend\"", st->bytes_to_backends);
    m_sample(b, "ttlguard_bytes_total", "direction=\"backend_to_proxy\"", st->bytes_from_backends);
    m_sample(b, "ttlguard_bytes_total", "direction=\"proxy_to_client\"", st->bytes_to_clients);
}

/* A counter family with a sample per durable rule: count(rule index). */
static void render_durable_family(struct sbuf *b, struct sbuf *lab, const char *name,
                                  const char *help, uint64_t (*count)(size_t))
{
    const struct ruleset *rs = &adm.ctx->cfg->rules;
    m_family(b, name, "counter", help);
    for (size_t i = 0; i < rs->n; i++) {
        if (rs->v[i].kind != RULE_DURABLE)
            continue;
        rule_label(lab, &rs->v[i]);
        sbuf_add(lab, "", 1);
        m_sample(b, name, lab->p, count(i));
    }
}

/* What the rules found: violations by rule, effect and action, writes to
 * durable keys; then the event log's own counters and the reloads. */
static void render_rule_counters(struct sbuf *b, struct sbuf *lab)
{
    const struct ruleset *rs = &adm.ctx->cfg->rules;
    const struct events_counters *ec = events_counters();

    /* Every possible (effect, action) of every rule that can have violations,
     * zeros included, so that rate() sees a series from its first increment. */
    m_family(b, "ttlguard_violations_total", "counter",
             "Writes that would leave a key without a TTL (or break a TTL bound), by rule, "
             "effect and action taken. Since the last reload.");
    for (size_t i = 0; i <= rs->n; i++) {
        const struct rule *r = i < rs->n ? &rs->v[i] : &rs->dflt;
        if (r->kind == RULE_DURABLE || r->action == ACTION_ALLOW)
            continue;
        for (int e = 0; e < EFF__COUNT; e++) {
            for (int a = 0; a < EACT__COUNT; a++) {
                if (!ev_pair_possible(e, a))
                    continue;
                rule_label(lab, r);
                sbuf_printf(lab, ",effect=\"%s\",action=\"%s\"", ev_effect_name(e),
                             ev_action_name(a));
                sbuf_add(lab, "", 1);
                m_sample(b, "ttlguard_violations_total", lab->p,
                         events_rule_violations(i, e, a));
            }
        }
    }
    render_durable_family(b, lab, "ttlguard_durable_writes_total",
                          "Writes to keys under a durable rule, by rule. Since the last reload.",
                          events_rule_durable_writes);
    render_durable_family(b, lab, "ttlguard_ttl_on_durable_total",
                          "Writes that put a TTL on a key under a durable rule, by rule. "
                          "Since the last reload.", events_rule_ttl_on_durable);
    m_single(b, "ttlguard_unverified_total", "counter",
             "Commands the proxy could not judge (scripts, SWAPDB, MIGRATE, unknown commands).",
             ec->unverified);
    m_single(b, "ttlguard_events_written_total", "counter", "Lines written to the event log.",
             ec->events_written);
    m_single(b, "ttlguard_events_dropped_total", "counter",
             "Events lost: buffer full, write failed or too many different events at once.",
             ec->events_dropped);
    m_family(b, "ttlguard_config_reloads_total", "counter", "SIGHUP reloads, by result.");
    m_sample(b, "ttlguard_config_reloads_total", "result=\"ok\"", ec->config_reloads);
    m_sample(b, "ttlguard_config_reloads_total", "result=\"rejected\"", ec->config_rejected);
}

/* What the proxy knows of its backend: eviction policy, server, commands. */
static void render_backend(struct sbuf *b, struct sbuf *lab)
{
    const struct backend_facts *bf = control_facts();

    if (bf->policy_known) {
        m_family(b, "ttlguard_backend_maxmemory_policy_info", "gauge",
                 "The backend's maxmemory-policy when last read.");
        lab->len = 0;
        evbuf_adds(lab, "policy=\"");
        evbuf_prom_label(lab, bf->policy);
        sbuf_add(lab, "\"", 2);       /* with the NUL */
        m_sample(b, "ttlguard_backend_maxmemory_policy_info", lab->p, 1);
    }
    if (bf->commands_ready) {
        const struct server_id *id = command_set_server(bf->commands);
        char name[48];
        int table, derived, unjudged;

        server_id_format(id, name, sizeof name);
        *strchr(name, ' ') = '\0';
        command_set_counts(bf->commands, &table, &derived, &unjudged);
        m_family(b, "ttlguard_backend_server_info", "gauge",
                 "The backend's server and version, whose command table judges commands "
                 "(source=assumed: they could not be read).");
        lab->len = 0;
        sbuf_printf(lab, "server=\"%s\",version=\"%s\",source=\"%s\"", name,
                     name + strlen(name) + 1, bf->backend_known ? "backend" : "assumed");
        sbuf_add(lab, "", 1);
        m_sample(b, "ttlguard_backend_server_info", lab->p, 1);
        m_family(b, "ttlguard_backend_commands", "gauge",
                 "The backend's write commands the proxy knows: from=table (verified), "
                 "derived (from its key specs), unjudged (derived, cannot be judged).");
        m_sample(b, "ttlguard_backend_commands", "from=\"table\"", (uint64_t)table);
        m_sample(b, "ttlguard_backend_commands", "from=\"derived\"", (uint64_t)derived);
        m_sample(b, "ttlguard_backend_commands", "from=\"unjudged\"", (uint64_t)unjudged);
    }

}

static void render_metrics(struct sbuf *b)
{
    const struct stats_hist *lat = stats_proxy.latency;
    struct sbuf lab = { 0 };

    render_counters(b);
    if (adm.ctx->cfg->watch)
        render_watch(b);
    audit_bg_metrics(b);
    sentinel_metrics(b);
    render_rule_counters(b, &lab);
    render_backend(b, &lab);
    if (adm.ctx->cfg->cluster)
        render_cluster(b);
    if (adm.ctx->cfg->cluster == CLUSTER_ROUTE)
        render_route(b);
    m_family(b, "ttlguard_request_duration_seconds", "histogram",
             "From a request read to its reply complete, for forwarded commands: "
             "path=pass unchanged, path=rewritten by a TTL rule.");
    m_histogram(b, "ttlguard_request_duration_seconds", "pass", &lat[STATS_PASS]);
    m_histogram(b, "ttlguard_request_duration_seconds", "rewritten", &lat[STATS_REWRITTEN]);
    free(lab.p);
}

/* ---- /rules ------------------------------------------------------------------ */

static void render_rules(struct sbuf *b)
{
    const struct config *cfg = adm.ctx->cfg;
    const struct ruleset *rs = &cfg->rules;
    evbuf_adds(b, "{\"config\":");
    if (cfg->path)
        evbuf_json_str(b, cfg->path, strlen(cfg->path));
    else
        evbuf_adds(b, "null");
    evbuf_adds(b, ",\"default\":{");
    events_rule_json(b, &rs->dflt);
    evbuf_adds(b, "},\"rules\":[");
    for (size_t i = 0; i < rs->n; i++) {
        evbuf_adds(b, i ? ",{" : "{");
        events_rule_json(b, &rs->v[i]);
        sbuf_add(b, "}", 1);
    }
    evbuf_adds(b, "]}\n");
}

/* ---- /healthz ------------------------------------------------------------------ */

/* The watcher's and the background audit's trouble, if any, after the
 * first line of /healthz (they do not make it unhealthy). */
static void health_text(char *text, size_t len, const char *first)
{
    const char *w = watch_problem(), *au = audit_bg_problem(), *se = sentinel_problem();
    snprintf(text, len, "%s%s%s%s%s%s%s", first, w, w[0] ? "\n" : "", au, au[0] ? "\n" : "",
             se, se[0] ? "\n" : "");
}

static void health_answer(struct admin_conn *c, int head, int keep_alive)
{
    char text[2000], first[800];
    if (adm.health_ok) {
        health_text(text, sizeof text, "ok\n");
        answer_text(c, 200, text, head, keep_alive, NULL);
        return;
    }
    snprintf(first, sizeof first, "backend %s: %s\n", adm.ctx->backend->name, adm.health_reason);
    health_text(text, sizeof text, first);
    answer_text(c, 503, text, head, keep_alive, NULL);
}

/* The check is over: remember, answer everyone waiting, let go of the
 * connection. */
static void health_done(struct hcheck *hc, int ok, const char *reason)
{
    if (hc != adm.check)
        return;
    adm.check = NULL;
    uv_timer_stop(&adm.check_timer);
    bconn_close(&hc->be);

    adm.health_known = 1;
    adm.health_at = uv_now(adm.ctx->loop);
    adm.health_ok = ok;
    snprintf(adm.health_reason, sizeof adm.health_reason, "%s", reason);

    struct admin_conn *c = adm.conns, *next;
    for (; c != NULL; c = next) {
        next = c->next;         /* c may close while answering */
        if (!(c->wait & WAIT_HEALTH))
            continue;
        c->wait &= ~WAIT_HEALTH;
        health_answer(c, c->head, c->keep_alive);
        if (!c->closing)
            conn_resume(c);
    }
}

static void on_check_timeout(uv_timer_t *t)
{
    if (adm.check != NULL)
        health_done(adm.check, 0, "no answer to PING within 1 s");
}

static void check_ready(struct bconn *b)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    bconn_write_bytes(b, ping, sizeof ping - 1);
}

static void check_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    struct hcheck *hc = b->owner;
    char msg[300];
    size_t k = n < sizeof hc->text - 1 - hc->tlen ? n : sizeof hc->text - 1 - hc->tlen;
    memcpy(hc->text + hc->tlen, p, k);
    hc->tlen += k;
    if (!done)
        return;
    hc->text[hc->tlen] = '\0';
    if (strcmp(hc->text, "+PONG\r\n") == 0) {
        health_done(hc, 1, "ok");
        return;
    }
    hc->text[strcspn(hc->text, "\r\n")] = '\0';
    snprintf(msg, sizeof msg, "PING answered %.200s", hc->text + (type == '-' || type == '+'));
    health_done(hc, 0, msg);
}

static void check_read_end(struct bconn *b)
{
}

static void check_failed(struct bconn *b, const char *why, int was_ready)
{
    char msg[300];
    if (was_ready)
        snprintf(msg, sizeof msg, "connection lost before the PING answer: %s", why);
    else if (strncmp(why, "AUTH refused", 12) == 0)
        snprintf(msg, sizeof msg, "%s", why);
    else
        snprintf(msg, sizeof msg, "cannot connect: %s", why);
    health_done(b->owner, 0, msg);
}

static void check_closed(struct bconn *b)
{
    free(b->owner);
}

static void check_written(struct bconn *b, int status)
{
}

static const struct bconn_ops check_ops = {
    check_ready, check_reply, check_read_end, check_failed, check_closed, check_written,
};

static void health_start(void)
{
    struct hcheck *hc = xcalloc(1, sizeof *hc);
    bconn_init(&hc->be, adm.ctx, &check_ops, hc);
    hc->be.counts = 0;          /* not a client's connection */
    adm.check = hc;
    uv_timer_start(&adm.check_timer, on_check_timeout, HEALTH_TIMEOUT_MS, 0);
    bconn_connect(&hc->be, 1);
}

/* Answer now from a fresh result, or wait for a check (one for all). */
static int health_request(struct admin_conn *c, int head, int keep_alive)
{
    uint64_t now = uv_now(adm.ctx->loop);
    if (adm.health_known && now - adm.health_at < HEALTH_CACHE_MS) {
        health_answer(c, head, keep_alive);
        return 0;
    }
    c->wait |= WAIT_HEALTH;
    c->head = head;
    c->keep_alive = keep_alive;
    if (adm.check == NULL)
        health_start();
    return 1;
}

/* ---- HTTP ------------------------------------------------------------------------ */

static int count_bytes(http_parser *p, size_t n)
{
    struct admin_conn *c = p->data;
    c->req_bytes += n;
    if (c->req_bytes > ADMIN_REQ_MAX) {
        c->too_large = 1;
        return -1;
    }
    return 0;
}

static int on_message_begin(http_parser *p)
{
    struct admin_conn *c = p->data;
    c->urllen = 0;
    c->fieldlen = 0;
    c->authlen = 0;
    c->in_value = 0;
    c->in_auth = 0;
    c->req_bytes = 0;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    struct admin_conn *c = p->data;
    if (count_bytes(p, n) != 0)
        return -1;
    if (c->urllen + n > ADMIN_URL_MAX) {
        c->too_large = 1;
        return -1;
    }
    memcpy(c->url + c->urllen, at, n);
    c->urllen += n;
    return 0;
}

static int on_data(http_parser *p, const char *at, size_t n)
{
    return count_bytes(p, n);
}

/* A header name, in pieces (a read may end inside it); a value ends it. */
static int on_header_field(http_parser *p, const char *at, size_t n)
{
    struct admin_conn *c = p->data;
    if (c->in_value) {
        c->in_value = 0;
        c->fieldlen = 0;
    }
    size_t k = n < sizeof c->field - c->fieldlen ? n : sizeof c->field - c->fieldlen;
    memcpy(c->field + c->fieldlen, at, k);
    c->fieldlen += k;                       /* a longer name is not Authorization anyway */
    return count_bytes(p, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    struct admin_conn *c = p->data;
    if (!c->in_value) {
        c->in_value = 1;
        c->in_auth = c->fieldlen == 13 && strncasecmp(c->field, "authorization", 13) == 0;
        if (c->in_auth)
            c->authlen = 0;
    }
    if (c->in_auth) {
        size_t k = n < sizeof c->auth - c->authlen ? n : sizeof c->auth - c->authlen;
        memcpy(c->auth + c->authlen, at, k);
        c->authlen += k;
    }
    return count_bytes(p, n);
}

/* With admin_token set: does the request carry "Authorization: Bearer TOKEN"? */
static int authorized(const struct admin_conn *c)
{
    const struct secret *token = &adm.ctx->cfg->admin_token;
    if (!token->set)
        return 1;
    if (c->authlen < 7 || strncasecmp(c->auth, "bearer ", 7) != 0)
        return 0;
    size_t off = 7;
    while (off < c->authlen && c->auth[off] == ' ')
        off++;
    return auth_secret_matches(token, c->auth + off, c->authlen - off);
}

/* Route a complete request. Pausing the parser stops conn_feed() after this
 * message: for /healthz until the check answers, or when the peer lets too
 * many answers pile up. */
static int on_message_complete(http_parser *p)
{
    struct admin_conn *c = p->data;
    int keep_alive = http_should_keep_alive(p);
    int head = p->method == HTTP_HEAD;
    c->url[c->urllen] = '\0';
    size_t plen = strcspn(c->url, "?#");
    c->url[plen] = '\0';

    if (p->method != HTTP_GET && p->method != HTTP_HEAD) {
        answer_text(c, 405, "only GET and HEAD\n", 0, keep_alive, "Allow: GET, HEAD");
    } else if (strcmp(c->url, "/healthz") != 0 && !authorized(c)) {
        answer_text(c, 401, "admin_token is set: send Authorization: Bearer TOKEN\n", head,
                    keep_alive, "WWW-Authenticate: Bearer realm=\"ttlguard\"");
    } else if (strcmp(c->url, "/metrics") == 0) {
        struct sbuf b = { 0 };
        render_metrics(&b);
        conn_answer(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len, head,
                    keep_alive, NULL);
        free(b.p);
    } else if (strcmp(c->url, "/rules") == 0) {
        struct sbuf b = { 0 };
        render_rules(&b);
        conn_answer(c, 200, "application/json", b.p, b.len, head, keep_alive, NULL);
        free(b.p);
    } else if (strcmp(c->url, "/healthz") == 0) {
        health_request(c, head, keep_alive);
    } else {
        answer_text(c, 404, "not found: try /metrics, /healthz or /rules\n", head, keep_alive,
                    NULL);
    }
    if (c->wait || c->close_after || c->closing)
        http_parser_pause(p, 1);
    return 0;
}

static void conn_read_stop(struct admin_conn *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    struct admin_conn *c = h->data;
    free(c->held.p);
    free(c);
}

static void conn_close(struct admin_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    if (c->prev)
        c->prev->next = c->next;
    else
        adm.conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    adm.nconns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* Parse what arrived; what is left when the parser pauses waits in held. */
static void conn_feed(struct admin_conn *c, const char *p, size_t n)
{
    c->feeding = 1;
    while (n > 0 && !c->closing && !c->wait && !c->close_after) {
        size_t used = http_parser_execute(&c->parser, &settings, p, n);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
        } else if (e != HPE_OK || c->parser.upgrade || used == 0) {
            /* Upgrade and CONNECT hand the stream to another protocol: not here. */
            if (c->too_large)
                answer_text(c, 431, "request too large (8 KB at most)\n", 0, 0, NULL);
            else
                answer_text(c, 400, "bad request\n", 0, 0, NULL);
            conn_read_stop(c);
            c->feeding = 0;
            return;
        }
        p += used;
        n -= used;
    }
    c->feeding = 0;
    if (n > 0 && !c->closing && !c->close_after)
        sbuf_add(&c->held, p, n);
    if (c->wait || c->close_after)
        conn_read_stop(c);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    /* Parsed (or copied into held) before the next read: one buffer for all. */
    *buf = uv_buf_init(read_chunk, sizeof read_chunk);
}

static void on_conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct admin_conn *c = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    c->last_active = uv_now(adm.ctx->loop);
    conn_feed(c, buf->base, (size_t)nread);
}

static void conn_read_start(struct admin_conn *c)
{
    if (c->reading || c->closing || c->wait || c->close_after)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, on_conn_read) == 0)
        c->reading = 1;
}

/* The reason to wait is gone: parse what is held, then read again. */
static void conn_resume(struct admin_conn *c)
{
    if (c->wait || c->closing || c->feeding)
        return;
    struct sbuf held = c->held;
    memset(&c->held, 0, sizeof c->held);
    conn_feed(c, held.p, held.len);
    free(held.p);
    conn_read_start(c);
}

static void on_admin_connection(uv_stream_t *listener, int status)
{
    if (status < 0)
        return;
    struct admin_conn *c = xcalloc(1, sizeof *c);
    uv_tcp_init(adm.ctx->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 || adm.nconns >= ADMIN_MAX_CONNS) {
        /* Over the limit: a scraper retries; a flood gets nothing. */
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    c->last_active = uv_now(adm.ctx->loop);
    c->next = adm.conns;
    if (adm.conns)
        adm.conns->prev = c;
    adm.conns = c;
    adm.nconns++;
    conn_read_start(c);
}

static void on_cron(uv_timer_t *t)
{
    uint64_t now = uv_now(adm.ctx->loop);
    struct admin_conn *c = adm.conns, *next;
    for (; c != NULL; c = next) {
        next = c->next;
        if (!(c->wait & WAIT_HEALTH) && now - c->last_active > ADMIN_IDLE_MS)
            conn_close(c);
    }
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void on_listener_closed(uv_handle_t *h)
{
    free(h);
}

static int listen_on(const char *text, uv_tcp_t **out, char *err, size_t errlen)
{
    struct addr a;
    struct sockaddr_storage ss;
    char why[320];
    if (addr_parse(text, &a, why, sizeof why) != 0) {
        snprintf(err, errlen, "admin = %s", why);
        return -1;
    }
    if (a.is_unix || (uv_ip4_addr(a.host, a.port, (struct sockaddr_in *)&ss) != 0 &&
                      uv_ip6_addr(a.host, a.port, (struct sockaddr_in6 *)&ss) != 0)) {
        snprintf(err, errlen, "admin = %s: expected a numeric IP address and a port", text);
        return -1;
    }
    uv_tcp_t *l = xmalloc(sizeof *l);
    uv_tcp_init(adm.ctx->loop, l);
    int r = uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)l, 64, on_admin_connection);
    if (r != 0) {
        snprintf(err, errlen, "admin: cannot listen on %s: %s", text, uv_strerror(r));
        uv_close((uv_handle_t *)l, on_listener_closed);
        return -1;
    }
    *out = l;
    return 0;
}

/* The idle sweep and the check timeout, from the first listener on. */
static void timers_init(void)
{
    if (adm.cron_on)
        return;
    uv_timer_init(adm.ctx->loop, &adm.cron);
    uv_timer_start(&adm.cron, on_cron, ADMIN_CRON_MS, ADMIN_CRON_MS);
    uv_unref((uv_handle_t *)&adm.cron);
    uv_timer_init(adm.ctx->loop, &adm.check_timer);
    uv_unref((uv_handle_t *)&adm.check_timer);
    adm.cron_on = 1;
}

static void stop_listening(void)
{
    if (adm.listener == NULL)
        return;
    uv_close((uv_handle_t *)adm.listener, on_listener_closed);
    adm.listener = NULL;
    free(adm.addr);
    adm.addr = NULL;
}

int admin_start(struct loop_ctx *ctx, const struct clients *clients, char *err, size_t errlen)
{
    adm.ctx = ctx;
    adm.clients = clients;
    settings.on_message_begin = on_message_begin;
    settings.on_url = on_url;
    settings.on_header_field = on_header_field;
    settings.on_header_value = on_header_value;
    settings.on_body = on_data;
    settings.on_message_complete = on_message_complete;

    if (ctx->cfg->admin == NULL)
        return 0;
    if (listen_on(ctx->cfg->admin, &adm.listener, err, errlen) != 0)
        return -1;
    timers_init();
    adm.addr = xstrdup(ctx->cfg->admin);
    log_info("admin endpoint on http://%s/ (/metrics, /healthz, /rules)", adm.addr);
    return 0;
}

void admin_reconfigure(struct loop_ctx *ctx)
{
    const char *want = ctx->cfg->admin;
    char err[400];
    uv_tcp_t *l;

    adm.ctx = ctx;
    if ((want == NULL && adm.addr == NULL) ||
        (want != NULL && adm.addr != NULL && strcmp(want, adm.addr) == 0))
        return;
    if (want == NULL) {
        log_info("admin endpoint on %s closed (admin is empty now)", adm.addr);
        stop_listening();
        return;
    }
    /* Bind the new address first: on failure the old one stays. */
    if (listen_on(want, &l, err, sizeof err) != 0) {
        log_warn("%s; %s", err, adm.addr ? "the admin endpoint stays where it was" :
                 "no admin endpoint");
        return;
    }
    stop_listening();
    timers_init();
    adm.listener = l;
    adm.addr = xstrdup(want);
    log_info("admin endpoint on http://%s/", adm.addr);
}

void admin_stop(void)
{
    stop_listening();
    while (adm.conns != NULL)
        conn_close(adm.conns);
    if (adm.check != NULL)
        health_done(adm.check, 0, "shutting down");
    if (adm.cron_on) {
        uv_close((uv_handle_t *)&adm.cron, NULL);
        uv_close((uv_handle_t *)&adm.check_timer, NULL);
        adm.cron_on = 0;
    }
}
