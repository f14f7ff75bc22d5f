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
 * port (reply.c holds them, cluster_rewrite() rewrites them). A topology
 * reply that names a node ttlguard does not know yet opens its listener
 * there and then, before the reply goes out. A redirect may name only a
 * known node (any script can return an error that looks like one): one that
 * names another makes its session's replies wait (reply.c) for a topology
 * read started at once, and is then rewritten with what that read says. The
 * topology (CLUSTER SHARDS from a seed, on a backend connection of its own)
 * is read at start, every few seconds, and soon after a reply named a new
 * node, to keep ids and roles current.
 *
 * With cluster = route there are no node listeners: the topology's slot map
 * (which primary serves each slot, updated by -MOVED at once) tells route.c
 * where each request goes.
 */
#ifndef TTLG_CLUSTER_H
#define TTLG_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct listener;
struct loop_ctx;
struct target;

/* Which topology reply a request asks for. */
enum topo_kind {
    TOPO_NONE,
    TOPO_SLOTS,         /* CLUSTER SLOTS */
    TOPO_SHARDS,        /* CLUSTER SHARDS */
    TOPO_NODES,         /* CLUSTER NODES */
    TOPO_REPLICAS,      /* CLUSTER REPLICAS / SLAVES */
    TOPO_ROLE,          /* ROLE: the primary's replicas, a replica's primary */
    TOPO_INFO,          /* INFO with its replication section: master_host, slaveN:ip= */
    TOPO_EXEC,          /* EXEC of a MULTI that queued some of the above */
};

/* Start reading the topology (cfg->cluster is on). entry: the entry port,
 * whose sessions' target follows the seed's node; accept: what each node
 * listener hands its connections to (as listener.h's on_accept). */
void cluster_start(struct loop_ctx *ctx, struct listener *entry,
                   void (*accept)(struct listener *l));
void cluster_stop(void);

/* EXEC's reply: element i is rewritten as the topology reply of kinds[i]
 * (the commands the client queued, in order); the others are not touched.
 * Returns a malloc'ed reply or NULL to send it unchanged. */
char *cluster_rewrite_exec(const char *kinds, size_t nkinds, const char *p, size_t n,
                           size_t *outlen);

/* A redirect (a whole error reply) names a node the topology lists, or is
 * not a redirect: 1. 0: it names a node not known (yet): a topology read is
 * started, and the caller may wait for it (cluster_wait) before rewriting. */
int cluster_redirect_known(const char *p, size_t n, const struct target *from);

/* Waiting for the next topology read (at most a second): done() is called
 * once it ended, failed or took too long. The owner embeds the struct and
 * calls cluster_unwait() if it goes away first. */
struct cluster_wait {
    struct cluster_wait *next;
    void (*done)(struct cluster_wait *w);
    int waiting;
};

void cluster_wait(struct cluster_wait *w);
void cluster_unwait(struct cluster_wait *w);

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

/* The primaries that serve slots, for the background audit (audit_bg.c:
 * at most AREP_MAX_NODES, more than Redis Cluster's 1000 nodes) and what
 * cluster = route sends to every primary (max CLUSTER_SLOTS: all of them):
 * their targets into out (at most max; a target lives until
 * cluster_free()). Returns how many; -1 while no topology read has ended,
 * or while one of them is not online (*down: its name): until a failover
 * gives its slots a primary, no list covers every shard. */
int cluster_primaries(struct target **out, int max, const char **down);

/* 1 while the last topology read showed t as an online primary. */
int cluster_is_primary(const struct target *t);

/* audit_from = replica: a replica of primary p's shard that the last
 * topology read showed online (the first it listed), or NULL. Lives like
 * the primaries' targets. */
struct target *cluster_replica_of(const struct target *p);

/* 1 while the last topology read showed t as an online replica of p. */
int cluster_is_replica_of(const struct target *t, const struct target *p);

/* ---- cluster = route (route.c) ---- */

#define CLUSTER_SLOTS 16384

/* The primary serving slot as far as the topology (and -MOVED since) says;
 * NULL when none does (yet: the topology is read again soon). */
struct target *cluster_slot_target(int slot);
/* 1 once a topology read has ended (the slot map is filled). */
int cluster_slots_read(void);
/* The primaries that serve slots in the order of their lowest slot: *t
 * and *lowest (that slot) point at arrays of the returned count, valid
 * until the slot map changes (a topology read, -MOVED). SCAN's order
 * (route_scan.h). */
int cluster_slot_order(struct target *const **t, const unsigned **lowest);
/* A primary for a command without keys: the owner of slot hint % 16384. */
struct target *cluster_any_primary(unsigned hint);

/* What an error reply (n complete bytes, from node `from`) asks of the one
 * who sent the request. */
enum redirect_kind { REDIR_NONE, REDIR_MOVED, REDIR_ASK, REDIR_TRYAGAIN, REDIR_CLUSTERDOWN };
/* -MOVED and -ASK: *to is the node it names when the topology lists it
 * (NULL otherwise: a topology read is started; never a connection to an
 * address only an error names). -MOVED also makes that node the slot's
 * owner at once; it, -TRYAGAIN and -CLUSTERDOWN (a node that refuses every
 * request while the cluster has a slot without a primary: not a redirect,
 * but nothing ran and a promotion may end it) read the topology again
 * soon. */
int cluster_redirect(const char *p, size_t n, const struct target *from, struct target **to);

/* Read the topology again soon (0.2 s, not sooner for a second call): what
 * a reply or a node that cannot be reached says may have changed (a replica
 * promoted in place of a primary that died). */
void cluster_refresh_soon(void);

/* Free what is left once the loop has ended. */
void cluster_free(void);

/* Periodic topology refresh; now in monotonic ms. */
void cluster_cron(uint64_t now);

/* The reply naming node addresses that a request asks for (CLUSTER SLOTS,
 * SHARDS, NODES, REPLICAS, ROLE, INFO [replication|all|everything|default]),
 * or TOPO_NONE. id: the command's enum cmd_id. */
enum topo_kind cluster_topology_kind(int id, int argc, const struct slice *argv);

/* The reply (n complete bytes) rewritten for clients: the topology reply of
 * kind, or any error reply (a redirect is rewritten, other errors are not;
 * a redirect to a node the topology does not list gets port 0).
 * from: the node it came from (a redirect to ":port" means its host).
 * Returns a malloc'ed reply (*outlen bytes) or NULL to send it unchanged. */
char *cluster_rewrite(enum topo_kind kind, const char *p, size_t n, const struct target *from,
                      size_t *outlen);

#endif
