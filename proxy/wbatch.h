/*
 * wbatch: bytes gathered for one stream during one callback, written with
 * one writev.
 *
 * Spans point into read buffers that stay untouched until the batch is
 * flushed (zero copy); the proxy's own bytes (local replies, rewritten
 * requests) are copied into the batch's arena and resolved at flush time.
 * The flush goes through the connection's transport (transport.h): on a
 * plain connection what the kernel does not take at once is copied into one
 * queued chunk, the only copy of forwarded bytes (twemproxy's msg_send_chain
 * does the same gathering).
 *
 * Ownership: a batch owns its arena; spans are borrowed.
 */
#ifndef TTLG_WBATCH_H
#define TTLG_WBATCH_H

#include <stddef.h>
#include <uv.h>

#include "transport.h"

#define IOV_MAX_BATCH 128

struct wbatch {
    uv_buf_t iov[IOV_MAX_BATCH];
    size_t arena_off[IOV_MAX_BATCH];    /* (size_t)-1: iov is a span */
    int n;
    size_t bytes;
    char *arena;
    size_t arena_len, arena_cap;
};

void wbatch_reset(struct wbatch *b);

/* 1 when `slots` more entries do not fit: flush first. */
static inline int wbatch_full(const struct wbatch *b, int slots)
{
    return b->n + slots > IOV_MAX_BATCH;
}

/* A span valid until the flush; adjacent spans are merged. */
void wbatch_add(struct wbatch *b, const char *p, size_t n);

/* A copy into the arena. */
void wbatch_add_copy(struct wbatch *b, const char *p, size_t n);

/* Write everything gathered to dst (see the top of the file) and reset b.
 * Returns 0, or a negative libuv error when the stream failed (nothing is
 * queued then; the caller closes). */
int wbatch_flush(struct wbatch *b, struct xport *dst, xport_done_fn done, void *ctx);

#endif
