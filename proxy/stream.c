/*
 * stream: the plain queued write under transport.c and tls.c (see stream.h).
 */
#include <stdlib.h>
#include <string.h>

#include "stream.h"
#include "util.h"

/* A write libuv did not finish at once: one allocation, freed in its callback. */
struct wchunk {
    uv_write_t req;
    stream_done_fn done;
    void *ctx;
    char data[];
};

static void on_chunk_written(uv_write_t *req, int status)
{
    struct wchunk *c = (struct wchunk *)req;
    stream_done_fn done = c->done;
    void *ctx = c->ctx;
    free(c);
    if (done != NULL)
        done(ctx, status);
}

/* Queue the iov bytes past the first `skip` in one chunk. */
static int queue_rest(uv_stream_t *dst, const uv_buf_t *iov, int n, size_t total, size_t skip,
                      stream_done_fn done, void *ctx)
{
    struct wchunk *c = xmalloc(sizeof *c + (total - skip));
    c->done = done;
    c->ctx = ctx;
    char *out = c->data;
    for (int i = 0; i < n; i++) {
        size_t len = iov[i].len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        memcpy(out, iov[i].base + skip, len - skip);
        out += len - skip;
        skip = 0;
    }
    uv_buf_t buf = uv_buf_init(c->data, (unsigned)(out - c->data));
    int r = uv_write(&c->req, dst, &buf, 1, on_chunk_written);
    if (r < 0)
        free(c);
    return r;
}

int stream_writev(uv_stream_t *dst, const uv_buf_t *iov, int n, size_t total,
                  stream_done_fn done, void *ctx)
{
    size_t sent = 0;
    /* libuv refuses (UV_EAGAIN) while earlier writes are queued: order is kept. */
    int r = uv_try_write(dst, iov, (unsigned)n);
    if (r >= 0)
        sent = (size_t)r;
    else if (r != UV_EAGAIN)
        return r;
    if (sent == total)
        return 0;
    return queue_rest(dst, iov, n, total, sent, done, ctx);
}
