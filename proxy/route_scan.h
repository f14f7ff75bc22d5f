/*
 * route_scan: SCAN over every primary of a cluster with one cursor
 * (cluster = route, route.c): the client's cursor, the request each node
 * gets and the reply the client gets from the node's.
 *
 * The client's cursor is an unsigned 64-bit decimal, as Redis's (redis-cli
 * --scan and most clients read it as one):
 *
 *   63                        20 19      14 13             0
 *   ┌───────────────────────────┬──────────┬───────────────┐
 *   │ the node's own cursor (44)│ check (6)│ position (14) │
 *   └───────────────────────────┴──────────┴───────────────┘
 *
 * The primaries are scanned one after the other, in the order of their
 * lowest slot (route.c asks cluster_slot_order()): a failover keeps that
 * order, the promoted replica serves the same slots. The position is a
 * slot: the primary scanned is the first whose lowest slot is at or after
 * it. Cursor 0 is the first primary from its start. When a node answers
 * cursor 0, the client gets the next position's start (that node's lowest
 * slot + 1) with its page, or 0 after the last primary: one node's scan
 * after the other, each with SCAN's own guarantee.
 *
 * check: 6 bits of a hash of the address of the node that gave the node
 * cursor. When another node holds the position now (a failover), its scan
 * starts over at 0, since a cursor of one server means nothing to another
 * (each hashes with its own seed): keys may come twice, none present
 * throughout is missed (unless, once in 64, the hashes agree). What a
 * reshard during a scan costs: docs/architecture.md, "SCAN".
 *
 * A node cursor that needs more than 44 bits cannot be carried: the client
 * gets an error that says so. Redis's cursor is its hash table's size at
 * most (times 2^14 with a table per slot): 2^44 is far beyond any node.
 *
 * Pure functions of bytes and numbers (tests/unit/test_route_scan.c).
 */
#ifndef TTLG_ROUTE_SCAN_H
#define TTLG_ROUTE_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define SCAN_POS_BITS   14              /* a slot: 0..16383 */
#define SCAN_CHECK_BITS 6
#define SCAN_NODE_BITS  (64 - SCAN_POS_BITS - SCAN_CHECK_BITS)

/* A client's cursor, unpacked. */
struct scan_cursor {
    unsigned pos;
    unsigned check;
    uint64_t node;                      /* 0: the node's scan starts */
};

/* The cursor argument: decimal digits only (leading zeros too) that fit in
 * 64 bits, else -1 (Redis's "invalid cursor"). Signs and spaces, which some
 * servers read and others refuse, are refused. */
int scan_cursor_parse(struct slice s, struct scan_cursor *c);

/* c as the client's cursor in *out; -1 when c->node needs more than
 * SCAN_NODE_BITS. */
int scan_cursor_pack(const struct scan_cursor *c, uint64_t *out);

/* The check bits of a node's address. */
unsigned scan_check(const char *name);

/* One step of a scan: the node scanned, as its cursors show it. */
struct scan_step {
    unsigned pos;                       /* the node's lowest slot */
    unsigned check;                     /* scan_check() of its address */
    unsigned next;                      /* the next primary's start; 0: this is the last */
};

/* Which of n primaries (their lowest slots, ascending) a cursor at pos
 * scans: its index, or -1 when none is at or after pos (the scan is over). */
int scan_pick(const unsigned *lowest, int n, unsigned pos);

/* The cursor the node st scans is sent: the client's node cursor when it
 * came from this very node, else 0 (start its scan over). */
uint64_t scan_resume(const struct scan_cursor *c, const struct scan_step *st);

/* The request for the node: argv (SCAN cursor [options]) with its cursor
 * replaced by node, RESP encoded at the end of b. */
void scan_request(struct sbuf *b, int argc, const struct slice *argv, uint64_t node);

/* The client's reply from the node's (n whole bytes; malloc'ed, *len
 * bytes): its cursor packed with st, the page of keys as it is. An error
 * (or what is not a SCAN reply) is returned as it is. */
char *scan_reply(const struct scan_step *st, const char *p, size_t n, size_t *len);

#endif
