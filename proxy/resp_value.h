/*
 * resp_value: one whole reply as a tree, and back to bytes.
 *
 * The proxy forwards replies as bytes it never parses (resp_reply.c finds
 * their ends). The few it must change, the cluster's topology replies whose
 * addresses it rewrites (cluster.c), are held until complete, parsed here,
 * edited and encoded again. RESP2 and RESP3 alike; an encoded tree is
 * byte-identical to its input when nothing was changed.
 *
 * Ownership: every node and string of a tree lives in the tree's arena and
 * goes with rv_free(). Strings parsed from the input point into it: the
 * input must outlive the tree. rv_set_str() copies into the arena.
 */
#ifndef TTLG_RESP_VALUE_H
#define TTLG_RESP_VALUE_H

#include <stddef.h>

struct rv {
    char type;              /* the RESP type byte: + - : $ * % ~ > _ , # ( = ! | */
    const char *s;          /* the line (+ - : _ , # () or the bulk ($ = !); NULL: $-1 / *-1 */
    size_t len;
    struct rv *el;          /* aggregates: elements (a map's keys and values alternate) */
    size_t n;               /* elements (a map of k pairs has n = 2k) */
    struct rv *attr;        /* an attribute (|) before this value, or NULL */
};

struct rv_tree {
    struct rv *root;
    struct rv_arena *arena;
};

/* Parse exactly one complete reply of len bytes. 0, or -1 when it is not one. */
int rv_parse(struct rv_tree *t, const char *p, size_t len);
void rv_free(struct rv_tree *t);

/* Encode the tree; *out is malloc'ed (the caller frees), *outlen its length. */
void rv_encode(const struct rv_tree *t, char **out, size_t *outlen);

/* Replace v's text (a string or number line) by a copy of s. */
void rv_set_str(struct rv_tree *t, struct rv *v, const char *s, size_t len);

/* A map's (%) or a flat key-value array's value for key, or NULL. */
struct rv *rv_get(struct rv *v, const char *key);

/* Is v a string (simple, bulk or verbatim) equal to text? */
int rv_is(const struct rv *v, const char *text);

#endif
