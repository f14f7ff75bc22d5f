/*
 * cluster: node listeners and the rewriting of addresses (see cluster.h).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"
#include "cluster.h"
#include "commands.h"
#include "config.h"
#include "listener.h"
#include "loop.h"
#include "resp_value.h"
#include "util.h"

#define REFRESH_MS      5000    /* the topology is read again this often */
#define REFRESH_SOON_MS 200     /* ...and this soon after a reply named a new node */
#define TOPOLOGY_MAX    (16 * 1024 * 1024)
#define WAIT_MAX_MS     1000    /* a session waits this long at most for a topology read */

/* One node of the cluster, as clients reach it through ttlguard. */
struct cnode {
    struct target t;            /* the node's real address */
    struct listener l;          /* its port on cluster_ports; l.h NULL when none was free */
    char id[41];                /* node id, once the topology said it */
    char hostname[256];         /* the hostname it announces, if any (redirects may use it) */
    int primary;
    int owns_slots;             /* a primary that serves slots (not a failed one replaced) */
    int seen;                   /* in the last topology read */
    int missed;                 /* topology reads in a row that did not show it */
    int healthy;                /* ...and not failed there */
    struct cnode *of;           /* a replica: the primary of its shard in the last read */
    struct cnode *next;
};

static struct {
    struct loop_ctx *ctx;
    struct listener *entry;     /* the entry port (listen): its sessions' target follows */
    listener_cb accept;         /* what the node listeners hand their clients to */
    struct cnode *nodes;
    int next_port;              /* the next port of cluster_ports to try */
    struct bconn be;            /* reads the topology from a seed */
    int seed;                   /* which seed be talks to */
    struct sbuf reply;          /* the topology reply as it arrives */
    int asked;                  /* a CLUSTER SHARDS is in flight */
    int use_slots;              /* the seed refused CLUSTER SHARDS: CLUSTER SLOTS */
    uint64_t next_refresh;      /* monotonic ms */
    uint64_t reads;             /* topology reads that ended with a topology */
    int stopping;
} cl;

/* cluster = route: the primary that serves each slot, from the last
 * topology read (and -MOVED since); NULL where none does. */
static struct cnode *slot_owner[CLUSTER_SLOTS];

/* ...and the primaries in the order of their lowest slot (cluster_slot_order()),
 * made again on first use after slot_owner changed. */
static struct {
    struct target **t;
    unsigned *lowest;
    int n, cap;
    int valid;
} slot_order;

static const char *announce_host(void)
{
    const struct config *cfg = cl.ctx->cfg;
    return cfg->cluster_announce != NULL ? cfg->cluster_announce : cl.entry->addr.host;
}

void cluster_refresh_soon(void)
{
    uint64_t soon = now_ms_monotonic() + REFRESH_SOON_MS;
    if (cl.next_refresh > soon)
        cl.next_refresh = soon;
}

/* ---- nodes ---------------------------------------------------------------------- */

/* Open the node's listener on the next free port of cluster_ports. */
static void node_listen(struct cnode *c)
{
    const struct config *cfg = cl.ctx->cfg;
    char err[400];
    if (cfg->cluster == CLUSTER_ROUTE)
        return;                         /* one address: no node listeners */
    c->l.on_accept = cl.accept;
    c->l.target = &c->t;
    c->l.tls = cl.entry->tls;           /* TLS like the entry port (tls_listen) */
    snprintf(c->l.addr.host, sizeof c->l.addr.host, "%s",
             cl.entry->h != NULL ? cl.entry->addr.host : "127.0.0.1");
    while (cl.next_port <= cfg->cluster_port_max) {
        c->l.addr.port = cl.next_port++;
        if (listener_open(&c->l, cl.ctx->loop, err, sizeof err) == 0) {
            log_info("cluster: node %s on port %d", c->t.name, c->l.addr.port);
            return;
        }
        log_warn("cluster: %s; trying the next port for node %s", err, c->t.name);
    }
    log_error("cluster: no port of cluster_ports %d-%d is left for node %s: clients "
              "redirected to it are given port 0", cfg->cluster_port_min, cfg->cluster_port_max,
              c->t.name);
}

/* How a reply names a node: its id where the reply has one, an address
 * (the ip, else the endpoint) and port, the hostname it announces. */
struct node_ref {
    struct slice id, host, hostname;
    int port;                   /* 0: not given */
};

static int same(const char *a, struct slice b)
{
    return b.len > 0 && strlen(a) == b.len && memcmp(a, b.p, b.len) == 0;
}

/* The known node r names: by id, else by address (its ip or hostname). */
static struct cnode *node_find(const struct node_ref *r)
{
    struct cnode *c;
    for (c = cl.nodes; c != NULL && r->id.len > 0; c = c->next)
        if (same(c->id, r->id))
            return c;
    for (c = cl.nodes; c != NULL && r->port > 0; c = c->next)
        if (c->t.addr.port == r->port && (same(c->t.addr.host, r->host) ||
                                          same(c->hostname, r->host)))
            return c;
    return NULL;
}

/* node_find(), or a new node with its listener. Only for what names
 * cluster nodes with authority: a topology reply of a node, the proxy's own
 * topology read, the seeds. Never for a redirect: any script can return an
 * error that looks like one, and a listener for its address would be a relay
 * to anywhere. */
static struct cnode *node_learn(const struct node_ref *r)
{
    struct cnode *c = node_find(r);
    if (c == NULL) {
        struct addr a = { .port = r->port };
        if (r->host.len == 0 || r->host.len >= sizeof a.host || r->port <= 0 ||
            (r->host.len == 1 && r->host.p[0] == '?'))
            return NULL;
        memcpy(a.host, r->host.p, r->host.len);
        c = xcalloc(1, sizeof *c);
        target_set(&c->t, cl.ctx, &a, 0);
        c->next = cl.nodes;
        cl.nodes = c;
        node_listen(c);
        cluster_refresh_soon();
    } else if (c->l.h == NULL && c->missed > 0) {
        c->missed = 0;          /* it left and is back: a port again */
        node_listen(c);
    }
    if (r->id.len > 0 && r->id.len < sizeof c->id && c->id[0] == '\0')
        snprintf(c->id, sizeof c->id, "%.*s", (int)r->id.len, r->id.p);
    if (r->hostname.len > 0 && r->hostname.len < sizeof c->hostname) {
        snprintf(c->hostname, sizeof c->hostname, "%.*s", (int)r->hostname.len, r->hostname.p);
        /* Managed TLS clusters issue certificates to the node host names. */
        snprintf(c->t.tls_name, sizeof c->t.tls_name, "%s", c->hostname);
    }
    return c;
}

/* The port clients are given for the node (0 when it has no listener). */
static int node_port(const struct cnode *c)
{
    return c != NULL && c->l.h != NULL ? c->l.addr.port : 0;
}

/* ---- rewriting ------------------------------------------------------------------ */

static void set_port(struct rv_tree *t, struct rv *v, int port)
{
    char num[16];
    int n = snprintf(num, sizeof num, "%d", port);
    if (v != NULL && v->type == ':')
        rv_set_str(t, v, num, (size_t)n);
}

static struct slice text_of(const struct rv *v)
{
    if (v == NULL || v->s == NULL || (v->type != '$' && v->type != '+' && v->type != '='))
        return (struct slice){ "", 0 };
    return (struct slice){ v->s, v->len };
}

static int port_of(const struct rv *v)
{
    long long p;
    if (v == NULL || v->type != ':' || slice_to_ll((struct slice){ v->s, v->len }, &p) != 0 ||
        p <= 0 || p > 65535)
        return 0;
    return (int)p;
}

/* CLUSTER SHARDS names a node's plain port "port" and its TLS port
 * "tls-port" (either may be missing): the one the proxy's backend
 * connections use, and the one its own listeners are. */
static const char *shard_port_key(int tls)
{
    return tls ? "tls-port" : "port";
}

/* A node entry of CLUSTER SHARDS (a map, or a flat array in RESP2). */
static struct node_ref shard_node_ref(struct rv *node)
{
    int tls = cl.ctx->cfg->backend_tls;
    struct rv *port = rv_get(node, shard_port_key(tls));
    struct node_ref r = {
        .id = text_of(rv_get(node, "id")), .host = text_of(rv_get(node, "ip")),
        .hostname = text_of(rv_get(node, "hostname")),
        .port = port_of(port != NULL ? port : rv_get(node, shard_port_key(!tls))),
    };
    if (r.host.len == 0)
        r.host = text_of(rv_get(node, "endpoint"));
    return r;
}

/* A node entry of CLUSTER SLOTS: [endpoint, port, id, {ip, hostname}]. The
 * endpoint may be the ip, a hostname, "?" or null (unknown-endpoint). */
static struct node_ref slots_node_ref(struct rv *node)
{
    struct rv *meta = node->n >= 4 ? &node->el[3] : NULL;
    struct node_ref r = {
        .id = node->n >= 3 ? text_of(&node->el[2]) : (struct slice){ "", 0 },
        .host = meta != NULL ? text_of(rv_get(meta, "ip")) : (struct slice){ "", 0 },
        .hostname = meta != NULL ? text_of(rv_get(meta, "hostname")) : (struct slice){ "", 0 },
        .port = port_of(&node->el[1]),
    };
    if (r.host.len == 0)
        r.host = text_of(&node->el[0]);
    return r;
}

/* An address text is shown rewritten unless it says nothing (null, "", "?"). */
static void set_host(struct rv_tree *t, struct rv *v)
{
    if (v != NULL && v->s != NULL && v->len > 0 && !(v->len == 1 && v->s[0] == '?'))
        rv_set_str(t, v, announce_host(), strlen(announce_host()));
}

/* Drop key (and its value) from a map or a flat key-value array. */
static void drop_key(struct rv *m, const char *key)
{
    for (size_t i = 0; i + 1 < m->n; i += 2) {
        if (rv_is(&m->el[i], key)) {
            memmove(&m->el[i], &m->el[i + 2], (m->n - i - 2) * sizeof *m->el);
            m->n -= 2;
            return;
        }
    }
}

/* CLUSTER SLOTS: [start, end, [endpoint, port, id, {ip, hostname}], ...]. */
static void rewrite_slots(struct rv_tree *t, struct rv *root)
{
    for (size_t i = 0; root->type == '*' && i < root->n; i++) {
        struct rv *range = &root->el[i];
        for (size_t j = 2; range->type == '*' && j < range->n; j++) {
            struct rv *node = &range->el[j];
            if (node->type != '*' || node->n < 2)
                continue;
            struct node_ref r = slots_node_ref(node);
            struct cnode *c = node_learn(&r);
            set_host(t, &node->el[0]);
            set_port(t, &node->el[1], node_port(c));
            if (node->n >= 4) {
                set_host(t, rv_get(&node->el[3], "ip"));
                set_host(t, rv_get(&node->el[3], "hostname"));
            }
        }
    }
}

/* A CLUSTER SHARDS node's port as the node listeners are: plain ("port")
 * or TLS ("tls-port"), the other key dropped (a key of that kind renamed
 * when the node has only the other). */
static void shard_set_port(struct rv_tree *t, struct rv *node, int port)
{
    const char *want = shard_port_key(cl.entry->tls), *other = shard_port_key(!cl.entry->tls);
    if (rv_get(node, want) != NULL) {
        drop_key(node, other);
    } else {
        for (size_t i = 0; i + 1 < node->n; i += 2)
            if (rv_is(&node->el[i], other))
                rv_set_str(t, &node->el[i], want, strlen(want));
    }
    set_port(t, rv_get(node, want), port);
}

/* CLUSTER SHARDS: per shard {slots, nodes: [{id, port, tls-port, ip, endpoint,
 * hostname, role, ...}]}, maps in RESP3 and flat arrays in RESP2. */
static void rewrite_shards(struct rv_tree *t, struct rv *root)
{
    for (size_t i = 0; root->type == '*' && i < root->n; i++) {
        struct rv *nodes = rv_get(&root->el[i], "nodes");
        for (size_t j = 0; nodes != NULL && nodes->type == '*' && j < nodes->n; j++) {
            struct rv *node = &nodes->el[j];
            struct node_ref r = shard_node_ref(node);
            struct cnode *c = node_learn(&r);
            set_host(t, rv_get(node, "ip"));
            set_host(t, rv_get(node, "endpoint"));
            set_host(t, rv_get(node, "hostname"));
            shard_set_port(t, node, node_port(c));
        }
    }
}

/* One CLUSTER NODES line: "<id> <ip>:<port>@<cport>[,<hostname>] <flags> ...". */
static void rewrite_nodes_line(struct sbuf *out, const char *p, size_t n, void *ctx)
{
    const char *sp = memchr(p, ' ', n);
    const char *addr = sp != NULL ? sp + 1 : NULL;
    const char *end = addr != NULL ? memchr(addr, ' ', (size_t)(p + n - addr)) : NULL;
    const char *at = end != NULL ? memchr(addr, '@', (size_t)(end - addr)) : NULL;
    const char *colon = NULL;
    for (const char *q = addr; at != NULL && q < at; q++)
        if (*q == ':')
            colon = q;
    long long port;
    if (colon == NULL ||
        slice_to_ll((struct slice){ colon + 1, (size_t)(at - colon - 1) }, &port) != 0 ||
        port <= 0 || port > 65535) {
        sbuf_add(out, p, n);        /* no address (":0@0", a node in handshake): as it is */
        return;
    }
    struct node_ref r = {
        .id = { p, (size_t)(sp - p) }, .host = { addr, (size_t)(colon - addr) },
        .port = (int)port,
    };
    const char *comma = memchr(at, ',', (size_t)(end - at));
    if (comma != NULL && comma + 1 < end)
        r.hostname = (struct slice){ comma + 1, (size_t)(end - comma - 1) };
    struct cnode *c = node_learn(&r);
    char mid[400];
    /* The bus port is the node's port + 10000 by default: it would give the
     * real port away, and clients never use it. */
    int k = snprintf(mid, sizeof mid, "%s:%d@0%s%s", announce_host(), node_port(c),
                     comma != NULL && comma + 1 < end ? "," : "",
                     comma != NULL && comma + 1 < end ? announce_host() : "");
    sbuf_add(out, p, (size_t)(addr - p));
    sbuf_add(out, mid, (size_t)k);
    sbuf_add(out, end, (size_t)(p + n - end));
}

/* A text value (CLUSTER NODES, INFO), every line through line(), which gets
 * it without its "\r\n" or "\n", into a new string value of v. */
static void rewrite_lines(struct rv_tree *t, struct rv *v,
                          void (*line)(struct sbuf *out, const char *p, size_t n, void *ctx),
                          void *ctx)
{
    struct sbuf out = { 0 };
    const char *p = v->s, *end = v->s + v->len;
    if (v->type == '=' && v->len >= 4) {       /* RESP3 verbatim: "txt:" first */
        sbuf_add(&out, p, 4);
        p += 4;
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        size_t cr = len > 0 && p[len - 1] == '\r';
        line(&out, p, len - cr, ctx);
        if (cr)
            sbuf_add(&out, "\r", 1);
        if (nl != NULL)
            sbuf_add(&out, "\n", 1);
        p += len + (nl != NULL);
    }
    rv_set_str(t, v, out.p != NULL ? out.p : "", out.len);
    free(out.p);
}

/* The node at host:port, as a node's own reply names it (ROLE, INFO
 * replication: its replicas, or its primary). */
static struct cnode *node_at(struct slice host, int port)
{
    struct node_ref r = { .host = host, .port = port };
    return port > 0 ? node_learn(&r) : NULL;
}

/* A port given as a string (ROLE's replica entries) or an integer. */
static void set_port_any(struct rv_tree *t, struct rv *v, int port)
{
    char num[16];
    int n = snprintf(num, sizeof num, "%d", port);
    if (v != NULL && (v->type == ':' || v->type == '$' || v->type == '+'))
        rv_set_str(t, v, num, (size_t)n);
}

static int port_any(const struct rv *v)
{
    long long p;
    if (v == NULL || v->s == NULL || slice_to_ll((struct slice){ v->s, v->len }, &p) != 0 ||
        p <= 0 || p > 65535)
        return 0;
    return (int)p;
}

/* ROLE: ["master", offset, [[ip, port, offset], ...]] or ["slave", ip,
 * port, state, offset] (Valkey says "replica" too): the addresses become
 * the ones clients reach the nodes at through the proxy. */
static void rewrite_role(struct rv_tree *t, struct rv *v)
{
    if (v->type != '*' || v->n < 3)
        return;
    if (rv_is(&v->el[0], "master") && v->el[2].type == '*') {
        for (size_t i = 0; i < v->el[2].n; i++) {
            struct rv *r = &v->el[2].el[i];
            if (r->type != '*' || r->n < 2)
                continue;
            struct cnode *c = node_at(text_of(&r->el[0]), port_any(&r->el[1]));
            set_host(t, &r->el[0]);
            set_port_any(t, &r->el[1], node_port(c));
        }
    } else if (rv_is(&v->el[0], "slave") || rv_is(&v->el[0], "replica")) {
        struct cnode *c = node_at(text_of(&v->el[1]), port_any(&v->el[2]));
        set_host(t, &v->el[1]);
        set_port_any(t, &v->el[2], node_port(c));
    }
}

/* One "key:value" line of INFO's replication section, into out: a
 * replica's master_host/master_port, a primary's "slaveN:ip=..,port=..,..". */
static void rewrite_info_line(struct sbuf *out, const char *p, size_t n, void *ctx)
{
    struct slice *mhost = ctx;      /* master_host, for master_port on a later line */
    static const char hostk[] = "master_host:", portk[] = "master_port:";
    char line[160];
    if (n > sizeof hostk - 1 && memcmp(p, hostk, sizeof hostk - 1) == 0) {
        *mhost = (struct slice){ p + sizeof hostk - 1, n - (sizeof hostk - 1) };
        int k = snprintf(line, sizeof line, "%s%s", hostk, announce_host());
        sbuf_add(out, line, (size_t)k);
        return;
    }
    long long port;
    if (n > sizeof portk - 1 && memcmp(p, portk, sizeof portk - 1) == 0 &&
        slice_to_ll((struct slice){ p + sizeof portk - 1, n - (sizeof portk - 1) }, &port) == 0) {
        int k = snprintf(line, sizeof line, "%s%d", portk,
                         node_port(node_at(*mhost, (int)port)));
        sbuf_add(out, line, (size_t)k);
        return;
    }
    const char *ip = n > 5 && memcmp(p, "slave", 5) == 0 ? memmem(p, n, ":ip=", 4) : NULL;
    const char *pk = ip != NULL ? memmem(ip, (size_t)(p + n - ip), ",port=", 6) : NULL;
    const char *pe = pk != NULL ? memchr(pk + 6, ',', (size_t)(p + n - pk - 6)) : NULL;
    if (pk == NULL || slice_to_ll((struct slice){ pk + 6, (size_t)((pe ? pe : p + n) - pk - 6) },
                                  &port) != 0) {
        sbuf_add(out, p, n);
        return;
    }
    struct slice host = { ip + 4, (size_t)(pk - ip - 4) };
    int k = snprintf(line, sizeof line, "ip=%s,port=%d", announce_host(),
                     node_port(node_at(host, (int)port)));
    sbuf_add(out, p, (size_t)(ip + 1 - p));
    sbuf_add(out, line, (size_t)k);
    if (pe != NULL)
        sbuf_add(out, pe, (size_t)(p + n - pe));
}


/* A redirect: -MOVED <slot> <host>:<port>, or -ASK. */
struct redirect {
    const char *word;           /* "MOVED" or "ASK" */
    struct slice slot;
    struct node_ref node;       /* host and port */
};

static int parse_redirect(const char *p, size_t n, const struct target *from,
                          struct redirect *rd)
{
    rd->word = n > 7 && memcmp(p, "-MOVED ", 7) == 0 ? "MOVED"
             : n > 5 && memcmp(p, "-ASK ", 5) == 0 ? "ASK" : NULL;
    if (rd->word == NULL || n < 2 || p[n - 2] != '\r')
        return -1;
    const char *slot = p + 1 + strlen(rd->word) + 1, *end = p + n - 2;
    const char *sp = memchr(slot, ' ', (size_t)(end - slot));
    if (sp == NULL)
        return -1;
    const char *host = sp + 1, *colon = NULL;
    for (const char *q = host; q < end; q++)
        if (*q == ':')
            colon = q;
    long long port;
    if (colon == NULL || slice_to_ll((struct slice){ colon + 1, (size_t)(end - colon - 1) },
                                     &port) != 0 || port <= 0 || port > 65535)
        return -1;
    memset(&rd->node, 0, sizeof rd->node);
    rd->slot = (struct slice){ slot, (size_t)(sp - slot) };
    rd->node.host = (struct slice){ host, (size_t)(colon - host) };
    rd->node.port = (int)port;
    if (rd->node.host.len == 0)     /* ":port": the host of the node that answered */
        rd->node.host = (struct slice){ from->addr.host, strlen(from->addr.host) };
    return 0;
}

/* The redirect with the node's port here: 0 when the node is not one the
 * topology lists (never a listener for an address an error names). */
static char *rewrite_redirect(const struct redirect *rd, size_t *outlen)
{
    struct cnode *c = node_find(&rd->node);
    char *out = xmalloc(64 + strlen(announce_host()) + rd->slot.len);
    *outlen = (size_t)sprintf(out, "-%s %.*s %s:%d\r\n", rd->word, (int)rd->slot.len,
                              rd->slot.p, announce_host(), node_port(c));
    return out;
}

int cluster_redirect_known(const char *p, size_t n, const struct target *from)
{
    struct redirect rd;
    if (parse_redirect(p, n, from, &rd) < 0 || node_find(&rd.node) != NULL)
        return 1;
    log_info("cluster: a redirect names %.*s:%d, a node the topology does not list (yet): "
             "reading it again", (int)rd.node.host.len, rd.node.host.p, rd.node.port);
    cl.next_refresh = 0;
    return 0;
}

/* One topology reply of kind, wherever it stands in the tree. */
static void rewrite_value(struct rv_tree *t, struct rv *v, enum topo_kind kind)
{
    switch (kind) {
    case TOPO_SLOTS:
        rewrite_slots(t, v);
        break;
    case TOPO_SHARDS:
        rewrite_shards(t, v);
        break;
    case TOPO_NODES:
        if (v->type == '$' || v->type == '=')
            rewrite_lines(t, v, rewrite_nodes_line, NULL);
        break;
    case TOPO_REPLICAS:
        for (size_t i = 0; v->type == '*' && i < v->n; i++)
            if (v->el[i].type == '$' || v->el[i].type == '=')
                rewrite_lines(t, &v->el[i], rewrite_nodes_line, NULL);
        break;
    case TOPO_ROLE:
        rewrite_role(t, v);
        break;
    case TOPO_INFO:
        if (v->type == '$' || v->type == '=') {
            /* master_host comes before master_port in Redis's and Valkey's
             * replication section. */
            struct slice mhost = { "", 0 };
            rewrite_lines(t, v, rewrite_info_line, &mhost);
        }
        break;
    case TOPO_NONE:
    case TOPO_EXEC:
        break;
    }
}

char *cluster_rewrite_exec(const char *kinds, size_t nkinds, const char *p, size_t n,
                           size_t *outlen)
{
    struct rv_tree t;
    char *out;
    if (rv_parse(&t, p, n) < 0)
        return NULL;
    for (size_t i = 0; t.root->type == '*' && i < t.root->n && i < nkinds; i++)
        rewrite_value(&t, &t.root->el[i], (enum topo_kind)kinds[i]);
    rv_encode(&t, &out, outlen);
    rv_free(&t);
    return out;
}

char *cluster_rewrite(enum topo_kind kind, const char *p, size_t n, const struct target *from,
                      size_t *outlen)
{
    struct rv_tree t;
    char *out;
    if (n > 0 && p[0] == '-') {
        struct redirect rd;
        return parse_redirect(p, n, from, &rd) == 0 ? rewrite_redirect(&rd, outlen) : NULL;
    }
    if (kind == TOPO_NONE || rv_parse(&t, p, n) < 0)
        return NULL;
    rewrite_value(&t, t.root, kind);
    rv_encode(&t, &out, outlen);
    rv_free(&t);
    return out;
}

/* INFO [section ...]: whether the reply has the replication section (no
 * section is "default"). */
static int info_has_replication(int argc, const struct slice *argv)
{
    static const char *const with[] = { "replication", "all", "everything", "default" };
    if (argc == 1)
        return 1;
    for (int i = 1; i < argc; i++)
        for (size_t k = 0; k < sizeof with / sizeof with[0]; k++)
            if (slice_eq_nocase(argv[i], with[k]))
                return 1;
    return 0;
}

enum topo_kind cluster_topology_kind(int id, int argc, const struct slice *argv)
{
    if (id == CID_ROLE)
        return argc == 1 ? TOPO_ROLE : TOPO_NONE;
    if (id == CID_INFO)
        return info_has_replication(argc, argv) ? TOPO_INFO : TOPO_NONE;
    if (id != CID_CLUSTER)
        return TOPO_NONE;
    if (argc != 2 && !(argc == 3 && (slice_eq_nocase(argv[1], "replicas") ||
                                     slice_eq_nocase(argv[1], "slaves"))))
        return TOPO_NONE;
    if (slice_eq_nocase(argv[1], "slots"))
        return TOPO_SLOTS;
    if (slice_eq_nocase(argv[1], "shards"))
        return TOPO_SHARDS;
    if (slice_eq_nocase(argv[1], "nodes"))
        return TOPO_NODES;
    if (slice_eq_nocase(argv[1], "replicas") || slice_eq_nocase(argv[1], "slaves"))
        return TOPO_REPLICAS;
    return TOPO_NONE;
}

/* A node the topology has not shown for two reads in a row has left the
 * cluster: its listener closes once no session of it is left (a client
 * still talking to it gets what the node says, as without the proxy). */
static void close_departed(void)
{
    for (struct cnode *c = cl.nodes; c != NULL; c = c->next) {
        if (c->missed < 2 || c->l.h == NULL || c->t.sessions > 0 || &c->t == cl.entry->target)
            continue;
        log_info("cluster: node %s left the cluster: its port %d is closed", c->t.name,
                 c->l.addr.port);
        listener_close(&c->l);
    }
}

/* ---- the entry port ------------------------------------------------------------- */

/* The entry port's sessions go to the seed's node while the topology shows it
 * healthy, else to a healthy primary (a failover took the seed's role away,
 * or it is down). Sessions already open stay where they are. */
static void entry_follow(void)
{
    struct target *now = cl.entry->target;
    struct cnode *pick = NULL;
    for (struct cnode *c = cl.nodes; c != NULL; c = c->next) {
        if (&c->t == now && c->seen && c->healthy)
            return;
        if (pick == NULL && c->seen && c->healthy && c->primary)
            pick = c;
    }
    if (pick == NULL || &pick->t == now)
        return;
    log_info("cluster: the entry port now forwards to %s (was %s)", pick->t.name, now->name);
    cl.entry->target = &pick->t;
}

/* ---- sessions waiting for a topology read --------------------------------------- */

static struct cluster_wait *waiters;
static uint64_t waiting_since;      /* monotonic ms the first of them began to wait */

void cluster_wait(struct cluster_wait *w)
{
    if (w->waiting)
        return;
    if (waiters == NULL)
        waiting_since = now_ms_monotonic();
    w->waiting = 1;
    w->next = waiters;
    waiters = w;
}

void cluster_unwait(struct cluster_wait *w)
{
    for (struct cluster_wait **pp = &waiters; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    w->waiting = 0;
}

/* A topology read ended (or failed, or took too long): everyone waiting
 * goes on with what is known now. */
static void wake_waiters(void)
{
    struct cluster_wait *list = waiters;
    waiters = NULL;
    while (list != NULL) {
        struct cluster_wait *w = list;
        list = w->next;
        w->waiting = 0;
        w->done(w);
    }
}

/* ---- reading the topology ------------------------------------------------------- */

/* One node of a CLUSTER SHARDS reply (a flat key-value array in RESP2).
 * served: the shard's slots have an online primary, so a failed node still
 * called master there (Redis 8.0 keeps the flag of a primary replaced by a
 * failover) does not own them. */
static struct cnode *learn_shard_node(struct rv *node, int shard_has_slots, int served)
{
    struct rv *role = rv_get(node, "role"), *health = rv_get(node, "health");
    struct node_ref r = shard_node_ref(node);
    struct cnode *c = node_learn(&r);
    if (c == NULL)
        return NULL;
    c->seen = 1;
    c->healthy = health == NULL || rv_is(health, "online");
    c->primary = role != NULL && rv_is(role, "master");
    c->owns_slots = c->primary && shard_has_slots && (c->healthy || !served);
    return c;
}

/* Has a shard's node list an online primary? */
static int shard_served(struct rv *nodes)
{
    for (size_t j = 0; nodes != NULL && nodes->type == '*' && j < nodes->n; j++) {
        struct rv *role = rv_get(&nodes->el[j], "role");
        struct rv *health = rv_get(&nodes->el[j], "health");
        if (role != NULL && rv_is(role, "master") && (health == NULL || rv_is(health, "online")))
            return 1;
    }
    return 0;
}

static int int_of(const struct rv *v)
{
    long long x;
    if (v == NULL || v->type != ':' || slice_to_ll((struct slice){ v->s, v->len }, &x) != 0 ||
        x < 0 || x >= CLUSTER_SLOTS)
        return -1;
    return (int)x;
}

static void own_slots(int lo, int hi, struct cnode *c)
{
    for (int i = lo; c != NULL && lo >= 0 && i <= hi && i < CLUSTER_SLOTS; i++)
        slot_owner[i] = c;
}

/* A CLUSTER SHARDS shard's slots ([start, end, ...]) go to its primary
 * while it is online (none serves them otherwise). */
static void learn_shard_slots(struct rv *slots, struct cnode *owner)
{
    if (owner != NULL && !owner->healthy)
        owner = NULL;
    for (size_t k = 0; slots != NULL && slots->type == '*' && k + 1 < slots->n; k += 2)
        own_slots(int_of(&slots->el[k]), int_of(&slots->el[k + 1]), owner);
}

/* One shard of CLUSTER SHARDS: its nodes, and its replicas' primary (the
 * node that serves its slots), which the background audit reads instead
 * with audit_from = replica. */
static void learn_shard(struct rv *shard)
{
    struct rv *nodes = rv_get(shard, "nodes"), *slots = rv_get(shard, "slots");
    int has_slots = slots != NULL && slots->type == '*' && slots->n > 0;
    int served = shard_served(nodes);
    size_t n = nodes != NULL && nodes->type == '*' ? nodes->n : 0;
    struct cnode *owner = NULL;
    for (size_t j = 0; j < n; j++) {
        struct cnode *c = learn_shard_node(&nodes->el[j], has_slots, served);
        if (c != NULL && c->owns_slots)
            owner = c;
    }
    for (size_t j = 0; j < n; j++) {
        struct node_ref r = shard_node_ref(&nodes->el[j]);
        struct cnode *c = node_find(&r);
        if (c != NULL && !c->primary)
            c->of = owner;
    }
    learn_shard_slots(slots, owner);
}

/* CLUSTER SLOTS (servers without SHARDS): the nodes that serve slots, and
 * the replicas listed after each range's primary (failed ones are not). */
static void learn_slots(struct rv *root)
{
    for (size_t i = 0; root->type == '*' && i < root->n; i++) {
        struct rv *range = &root->el[i];
        struct cnode *primary = NULL;
        for (size_t j = 2; range->type == '*' && j < range->n; j++) {
            struct rv *node = &range->el[j];
            if (node->type != '*' || node->n < 3)
                continue;
            struct node_ref r = slots_node_ref(node);
            struct cnode *c = node_learn(&r);
            if (c == NULL)
                continue;
            c->seen = c->healthy = 1;
            c->primary = c->owns_slots = j == 2;
            if (j == 2) {
                primary = c;
                own_slots(int_of(&range->el[0]), int_of(&range->el[1]), c);
            } else {
                c->of = primary;
            }
        }
    }
}

static void learn_topology(const char *p, size_t n)
{
    struct rv_tree t;
    if (rv_parse(&t, p, n) < 0) {
        log_warn("cluster: unreadable topology reply from %s", cl.be.t->name);
        return;
    }
    if (t.root->type == '-') {
        if (!cl.use_slots) {
            cl.use_slots = 1;       /* before CLUSTER SHARDS (Redis 7.0) */
            cl.next_refresh = 0;
        } else {
            log_warn("cluster: %s answered the topology request with %.*s", cl.be.t->name,
                     (int)t.root->len, t.root->s);
        }
        rv_free(&t);
        return;
    }
    for (struct cnode *c = cl.nodes; c != NULL; c = c->next) {
        c->seen = 0;
        c->of = NULL;
    }
    memset(slot_owner, 0, sizeof slot_owner);
    slot_order.valid = 0;
    if (cl.use_slots) {
        learn_slots(t.root);
    } else {
        for (size_t i = 0; t.root->type == '*' && i < t.root->n; i++)
            learn_shard(&t.root->el[i]);
    }
    rv_free(&t);
    cl.reads++;
    for (struct cnode *c = cl.nodes; c != NULL; c = c->next)
        c->missed = c->seen ? 0 : c->missed + 1;
    entry_follow();
    close_departed();
    wake_waiters();
}

static void topo_ask(void)
{
    static const char shards[] = "*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n";
    static const char slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    cl.asked = 1;
    cl.reply.len = 0;
    if (cl.use_slots)
        bconn_write_bytes(&cl.be, slots, sizeof slots - 1);
    else
        bconn_write_bytes(&cl.be, shards, sizeof shards - 1);
}

static void topo_ready(struct bconn *b)
{
    topo_ask();
}

static void topo_reply(struct bconn *b, const char *p, size_t n, int done, char type, int start)
{
    if (cl.reply.len + n > TOPOLOGY_MAX) {
        log_warn("cluster: the topology reply from %s is over %d bytes", b->t->name,
                 TOPOLOGY_MAX);
        bconn_close(b);
        return;
    }
    sbuf_add(&cl.reply, p, n);
    if (!done)
        return;
    cl.asked = 0;
    learn_topology(cl.reply.p, cl.reply.len);
    cl.reply.len = 0;
}

static void topo_read_end(struct bconn *b)
{
}

static void topo_failed(struct bconn *b, const char *why, int was_ready)
{
    const char *seeds = cl.ctx->cfg->backend_seeds;
    log_warn("cluster: topology from %s: %s", b->t->name, why);
    cl.asked = 0;
    if (seeds != NULL) {
        cl.seed++;              /* the next seed, at once */
        cluster_refresh_soon();
    }
    wake_waiters();
}

static void topo_closed(struct bconn *b)
{
}

static void topo_written(struct bconn *b, int status)
{
}

static const struct bconn_ops topo_ops = {
    topo_ready, topo_reply, topo_read_end, topo_failed, topo_closed, topo_written,
};

/* The seed to read the topology from: [proxy] backend's list, in turn after
 * failures, and the nodes learned so far after that. */
static struct target *topo_target(void)
{
    const char *seeds = cl.ctx->cfg->backend_seeds;
    int count = 0;
    for (const char *p = seeds; p != NULL && *p != '\0'; count++) {
        p += strcspn(p, " \t");
        p += strspn(p, " \t");
    }
    if (count <= 1 || cl.seed % count == 0)
        return cl.ctx->backend;
    static struct target seed;
    const char *p = seeds;
    for (int i = 0; i < cl.seed % count; i++) {
        p += strcspn(p, " \t");
        p += strspn(p, " \t");
    }
    char text[300], err[320];
    struct addr a;
    snprintf(text, sizeof text, "%.*s", (int)strcspn(p, " \t"), p);
    if (addr_parse(text, &a, err, sizeof err) != 0)
        return cl.ctx->backend;
    target_set(&seed, cl.ctx, &a, 0);
    return &seed;
}

static void topo_refresh(void)
{
    if (cl.stopping)
        return;
    cl.next_refresh = now_ms_monotonic() + REFRESH_MS;
    if (cl.be.state == BC_READY) {
        if (!cl.asked)
            topo_ask();
        return;
    }
    if (cl.be.state != BC_IDLE)
        return;
    bconn_init(&cl.be, cl.ctx, &topo_ops, &cl);
    cl.be.counts = 0;
    cl.be.t = topo_target();
    bconn_connect(&cl.be, 1);
}

void cluster_start(struct loop_ctx *ctx, struct listener *entry, listener_cb accept)
{
    struct addr *seed = &ctx->backend->addr;
    cl.ctx = ctx;
    cl.entry = entry;
    cl.accept = accept;
    cl.next_port = ctx->cfg->cluster_port_min;
    /* The entry port forwards to the first seed, as a node like the others
     * (its requests count there; it can move, see entry_follow()). */
    struct node_ref r = { .host = { seed->host, strlen(seed->host) }, .port = seed->port };
    struct cnode *c = node_learn(&r);
    if (c != NULL) {
        c->seen = c->healthy = c->primary = 1;
        entry->target = &c->t;
    }
    topo_refresh();
}

void cluster_cron(uint64_t now)
{
    if (cl.ctx == NULL)
        return;
    if (now >= cl.next_refresh)
        topo_refresh();
    if (waiters != NULL && now - waiting_since >= WAIT_MAX_MS)
        wake_waiters();
    close_departed();
}

void cluster_stop(void)
{
    if (cl.ctx == NULL)
        return;
    cl.stopping = 1;
    bconn_close(&cl.be);
    for (struct cnode *c = cl.nodes; c != NULL; c = c->next) {
        listener_close(&c->l);
        target_cancel(&c->t);
    }
}

void cluster_each(void (*fn)(void *ctx, const struct cluster_node_info *n), void *ctx)
{
    for (const struct cnode *c = cl.nodes; c != NULL; c = c->next) {
        struct cluster_node_info info = {
            .name = c->t.name, .port = node_port(c), .id = c->id, .primary = c->primary,
            .present = c->seen, .requests = c->t.requests,
        };
        fn(ctx, &info);
    }
}

int cluster_primaries(struct target **out, int max, const char **down)
{
    int n = 0;
    *down = NULL;
    if (cl.reads == 0)
        return -1;
    for (struct cnode *c = cl.nodes; c != NULL && n < max; c = c->next) {
        if (!c->seen || !c->owns_slots)
            continue;
        if (!c->healthy) {
            *down = c->t.name;  /* its slots have no online primary until a failover */
            return -1;
        }
        out[n++] = &c->t;
    }
    return n;
}

int cluster_is_primary(const struct target *t)
{
    for (const struct cnode *c = cl.nodes; c != NULL; c = c->next)
        if (&c->t == t)
            return c->seen && c->healthy && c->primary;
    return 0;
}

struct target *cluster_replica_of(const struct target *p)
{
    for (const struct cnode *c = cl.nodes; c != NULL; c = c->next)
        if (c->seen && c->healthy && !c->primary && c->of != NULL && &c->of->t == p)
            return (struct target *)&c->t;
    return NULL;
}

int cluster_is_replica_of(const struct target *t, const struct target *p)
{
    for (const struct cnode *c = cl.nodes; c != NULL; c = c->next)
        if (&c->t == t)
            return c->seen && c->healthy && !c->primary && c->of != NULL && &c->of->t == p;
    return 0;
}

void cluster_free(void)
{
    struct cnode *c = cl.nodes, *next;
    for (; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    cl.nodes = NULL;
    free(cl.reply.p);
    cl.reply.p = NULL;
    free(slot_order.t);
    free(slot_order.lowest);
    memset(&slot_order, 0, sizeof slot_order);
}

/* ---- cluster = route ------------------------------------------------------------ */

struct target *cluster_slot_target(int slot)
{
    struct cnode *c = slot >= 0 && slot < CLUSTER_SLOTS ? slot_owner[slot] : NULL;
    if (c == NULL)
        cluster_refresh_soon();         /* its primary failed: a replica may take over */
    return c != NULL ? &c->t : NULL;
}

int cluster_slots_read(void)
{
    return cl.reads > 0;
}

/* Is t in slot_order already? A primary's slots need not be one range. */
static int slot_order_has(const struct target *t)
{
    for (int i = slot_order.n - 1; i >= 0; i--)
        if (slot_order.t[i] == t)
            return 1;
    return 0;
}

int cluster_slot_order(struct target *const **t, const unsigned **lowest)
{
    const struct cnode *last = NULL;
    if (!slot_order.valid)
        slot_order.n = 0;
    for (int i = 0; !slot_order.valid && i < CLUSTER_SLOTS; i++) {
        struct cnode *c = slot_owner[i];
        if (c == NULL || c == last)
            continue;
        last = c;
        if (slot_order_has(&c->t))
            continue;
        if (slot_order.n == slot_order.cap) {
            slot_order.cap = slot_order.cap > 0 ? slot_order.cap * 2 : 8;
            slot_order.t = xrealloc(slot_order.t, (size_t)slot_order.cap * sizeof *slot_order.t);
            slot_order.lowest = xrealloc(slot_order.lowest,
                                         (size_t)slot_order.cap * sizeof *slot_order.lowest);
        }
        slot_order.t[slot_order.n] = &c->t;
        slot_order.lowest[slot_order.n++] = (unsigned)i;
    }
    slot_order.valid = 1;
    *t = slot_order.t;
    *lowest = slot_order.lowest;
    return slot_order.n;
}

struct target *cluster_any_primary(unsigned hint)
{
    return cluster_slot_target((int)(hint % CLUSTER_SLOTS));
}

int cluster_redirect(const char *p, size_t n, const struct target *from, struct target **to)
{
    struct redirect rd;
    long long slot;
    *to = NULL;
    if (n > 10 && memcmp(p, "-TRYAGAIN ", 10) == 0) {
        cluster_refresh_soon();     /* the request is sent again after that read */
        return REDIR_TRYAGAIN;
    }
    if (n > 13 && memcmp(p, "-CLUSTERDOWN ", 13) == 0) {
        cluster_refresh_soon();     /* ...as after a primary's failure, while its
                                       replica is promoted */
        return REDIR_CLUSTERDOWN;
    }
    if (parse_redirect(p, n, from, &rd) < 0 || slice_to_ll(rd.slot, &slot) != 0 ||
        slot < 0 || slot >= CLUSTER_SLOTS)
        return REDIR_NONE;
    struct cnode *c = node_find(&rd.node);
    int moved = rd.word[0] == 'M';
    if (moved && c != NULL) {
        slot_owner[slot] = c;       /* as cluster clients do, until the read says more */
        slot_order.valid = 0;
    }
    if (moved || c == NULL)
        cluster_refresh_soon();
    if (c == NULL)
        cl.next_refresh = 0;
    *to = c != NULL ? &c->t : NULL;
    return moved ? REDIR_MOVED : REDIR_ASK;
}
