/*
 * wbatch: bytes gathered for one stream during one callback, written with
 * one writev.
 *
 * Spans point into read buffers that stay untouched until the batch is
 * flushed (zero copy); the proxy's own bytes (local replies, rewritten
 * requests) are copied into the batch's arena and resolved at flush time.
 * What the kernel does not take at once is copied into one chunk queued on
 * libuv's write queue, freed in its callback: that is the only copy of
 * forwarded bytes (twemproxy's msg_send_chain does the same gathering).
 *
 * Ownership: a batch owns its arena; spans are borrowed. A wchunk belongs to
 * libuv until its callback, which frees it and then calls the owner's
 * `done`.
 */
#ifndef TTLG_WBATCH_H
#define TTLG_WBATCH_H

#include <stddef.h>
#include <uv.h>

#define IOV_MAX_BATCH 128

/* Any of the stream handles the proxy uses, so one struct holds either. */
union stream {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
};

struct wbatch {
    uv_buf_t iov[IOV_MAX_BATCH];
    size_t arena_off[IOV_MAX_BATCH];    /* (size_t)-1: iov is a span */
    int n;
    size_t bytes;
    char *arena;
    size_t arena_len, arena_cap;
};

/* Called when a queued write of flush() finished; status as libuv's. */
typedef void (*wbatch_done_fn)(void *ctx, uv_stream_t *dst, int status);

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
int wbatch_flush(struct wbatch *b, uv_stream_t *dst, wbatch_done_fn done, void *ctx);

/* Write n bytes from p to dst the same way: what the kernel does not take is
 * copied and queued. Returns 0 or a negative libuv error. */
int stream_write(uv_stream_t *dst, const char *p, size_t n, wbatch_done_fn done, void *ctx);

#endif
