/*
 * cluster: ttlguard in front of a Redis Cluster (cluster = on).
 *
 * Every node of the cluster gets a listener of its own on cluster_ports,
 * and each listener's sessions forward to that node exactly as the
 * single-server proxy forwards to its backend (rules, events, shared
 * connections: the same code, with the node as the sessions' target). The
 * entry port (listen) forwards to the first seed.
 *
 *   app ─▶ listen (entry) ──────────────▶ seed node
 *   app ─▶ 7401 ─▶ sessions of node A ──▶ node A       CLUSTER SLOTS/SHARDS/NODES/
 *   app ─▶ 7402 ─▶ sessions of node B ──▶ node B       REPLICAS and -MOVED/-ASK are
 *                                                       rewritten on the way back
 *
 * So that no client ever learns a real node address, the replies that carry
 * addresses are held whole and rewritten to cluster_announce and the node's
 * port (reply.c holds them, cluster_rewrite() rewrites them). A reply that
 * names a node ttlguard does not know yet opens its listener there and then,
 * before the reply goes out: the reply itself says where the node is. The
 * topology (CLUSTER SHARDS from a seed, on a backend connection of its own)
 * is read at start, every few seconds, and soon after a reply named a new
 * node, to keep ids and roles current.
 */
#ifndef TTLG_CLUSTER_H
#define TTLG_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct server;
struct target;

/* Which topology reply a request asks for. */
enum topo_kind {
    TOPO_NONE,
    TOPO_SLOTS,         /* CLUSTER SLOTS */
    TOPO_SHARDS,        /* CLUSTER SHARDS */
    TOPO_NODES,         /* CLUSTER NODES */
    TOPO_REPLICAS,      /* CLUSTER REPLICAS / SLAVES */
};

/* Start reading the topology (cfg->cluster is on). */
void cluster_start(struct server *srv);
void cluster_stop(void);

/* What /metrics shows of a node. */
struct cluster_node_info {
    const char *name;           /* its real address */
    int port;                   /* its port here (0: none was free) */
    const char *id;             /* "" until the topology said */
    int primary;
    int present;                /* in the last topology read */
    uint64_t requests;
};

/* Call fn for every node known. */
void cluster_each(void (*fn)(void *ctx, const struct cluster_node_info *n), void *ctx);

/* Free what is left once the loop has ended. */
void cluster_free(void);

/* Periodic topology refresh; now in monotonic ms. */
void cluster_cron(uint64_t now);

/* CLUSTER <sub> ...: the topology reply it asks for, or TOPO_NONE. */
enum topo_kind cluster_topology_kind(int argc, const struct slice *argv);

/* The reply (n complete bytes) rewritten for clients: the topology reply of
 * kind, or any error reply (a redirect is rewritten, other errors are not).
 * from: the node it came from (a redirect to ":port" means its host).
 * Returns a malloc'ed reply (*outlen bytes) or NULL to send it unchanged. */
char *cluster_rewrite(enum topo_kind kind, const char *p, size_t n, const struct target *from,
                      size_t *outlen);

#endif
