/*
 * route_merge: one client request that cluster = route sends as several
 * (route.c): a multi-key command whose keys lie in several slots, split into
 * one request per slot (an MSET under rules: each part then rewritten by
 * the rules, route.c), or a command that must cover every primary, sent to
 * each (SCAN: to one after the other, route_scan.h); and the one reply the
 * client gets from their replies.
 *
 *   MGET a b c   ─▶ part 1: MGET a c  (slot 7)  ─▶ *2 va vc ─┐ merge_replies:
 *                   part 2: MGET b    (slot 9)  ─▶ *1 vb    ─┴▶ *3 va vb vc
 *
 * Pure functions of bytes: no session, no connection (tests/unit cover them).
 */
#ifndef TTLG_ROUTE_MERGE_H
#define TTLG_ROUTE_MERGE_H

#include <stddef.h>

#include "util.h"

/* How the parts' replies make the client's. */
enum merge {
    MERGE_NONE,
    MERGE_SUM,          /* integers added (DEL, UNLINK, EXISTS, TOUCH, DBSIZE) */
    MERGE_SAME,         /* the first reply (+OK of MSET, FLUSHALL, CLIENT PAUSE; SCRIPT
                           LOAD's sha) */
    MERGE_ORDERED,      /* array elements put back in the client's key order (MGET) */
    MERGE_CONCAT,       /* arrays one after the other (KEYS, PUBSUB SHARDCHANNELS) */
    MERGE_FIRST,        /* the first reply that is not nil (RANDOMKEY: parts in random
                           order) */
    MERGE_SCAN,         /* one primary's page, its cursor rewritten (route_scan.h) */
    MERGE_ALL,          /* arrays of 1 and 0, 1 where every part has 1 (SCRIPT EXISTS:
                           EVALSHA runs on whichever node the keys name) */
    MERGE_KILL,         /* SCRIPT KILL, FUNCTION KILL: +OK where one primary killed its
                           script, else -UNKILLABLE where one could not, else the first
                           reply (-NOTBUSY) */
    MERGE_INFO,         /* INFO: the first part's text, its counts of keys, clients and
                           requests summed over the parts (route_merge.c info_sums) */
};

/* A command route.c splits by slot when its keys lie in several: its merge
 * (MERGE_NONE: it gets -CROSSSLOT). *width: arguments per key (MSET: 2). */
enum merge merge_split_kind(const struct slice *name, int *width);

/* A command without keys that covers every primary, or MERGE_NONE (SCAN:
 * one primary after the other, a request at a time). Scripts and functions
 * are loaded, flushed and asked for on every primary, as a cluster client
 * does: a script's keys may name any node. */
enum merge merge_fanout_kind(int argc, const struct slice *argv);

/* 1 for such a command that sets or keeps up the server (CONFIG SET, DEBUG
 * RELOAD, BGSAVE...): inside MULTI, the transaction's node's. */
int merge_fanout_server(int argc, const struct slice *argv);

/* One part of a split request. */
struct merge_part {
    int slot;
    struct sbuf req;            /* the part's request, RESP encoded (owned) */
    int *pos;                   /* the client's key index of each of its keys (owned) */
    int npos;
    int exec_first;             /* > 0: req is the proxy's MULTI form of the part (a rule's
                                   rewrite, policy.h): this many replies, then EXEC's */
};

/* Split argv (keys from argv[1], `width` arguments each) by the slot
 * slot_of() gives each key: *nparts parts, in the order their first key
 * comes. Returns the parts (malloc'ed; merge_parts_free()). */
struct merge_part *merge_split(int argc, const struct slice *argv, int width,
                               int (*slot_of)(struct slice key), int *nparts);
void merge_parts_free(struct merge_part *parts, int n);

/* s as a RESP bulk string at the end of b. */
void merge_add_bulk(struct sbuf *b, struct slice s);

/* One whole reply of each part, in part order. */
struct merge_reply {
    const char *p;
    size_t n;
    const int *pos;             /* MERGE_ORDERED: the part's key indexes */
    int npos;
};

/* A part sent as the proxy's MULTI form: r[0..n) its replies, EXEC's last.
 * What the client gets of it, as reply.c gives it for one request: EXEC's
 * first element (the command's own reply), else the error that refused the
 * command when it was queued, else EXEC's reply (EXECABORT, a redirect). */
struct slice merge_exec_reply(const struct slice *r, int n);

/* The client's reply (malloc'ed, *len bytes): the first error among the
 * parts' replies, else their merge. nkeys: MERGE_ORDERED's element count.
 * Not MERGE_SCAN's (scan_reply()). */
char *merge_replies(enum merge how, const struct merge_reply *r, int n, int nkeys,
                    size_t *len);

#endif
