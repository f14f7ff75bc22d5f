/*
 * wbatch: gathered writes (see wbatch.h).
 */
#include <stdlib.h>
#include <string.h>

#include "wbatch.h"
#include "util.h"

/* A write libuv did not finish at once: one allocation, freed in its callback. */
struct wchunk {
    uv_write_t req;
    wbatch_done_fn done;
    void *ctx;
    char data[];
};

static void on_chunk_written(uv_write_t *req, int status)
{
    struct wchunk *c = (struct wchunk *)req;
    wbatch_done_fn done = c->done;
    void *ctx = c->ctx;
    uv_stream_t *dst = req->handle;
    free(c);
    done(ctx, dst, status);
}

/* Queue the iov bytes past the first `skip` in one chunk. */
static int queue_rest(uv_stream_t *dst, const uv_buf_t *iov, int n, size_t total, size_t skip,
                      wbatch_done_fn done, void *ctx)
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

static int write_iov(uv_stream_t *dst, const uv_buf_t *iov, int n, size_t total,
                     wbatch_done_fn done, void *ctx)
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

void wbatch_reset(struct wbatch *b)
{
    b->n = 0;
    b->bytes = 0;
    b->arena_len = 0;
}

void wbatch_add(struct wbatch *b, const char *p, size_t n)
{
    if (n == 0)
        return;
    if (b->n > 0 && b->arena_off[b->n - 1] == (size_t)-1 &&
        b->iov[b->n - 1].base + b->iov[b->n - 1].len == p) {
        b->iov[b->n - 1].len += n;      /* adjacent span: extend */
    } else {
        ASSERT(b->n < IOV_MAX_BATCH);
        b->iov[b->n] = uv_buf_init((char *)p, (unsigned)n);
        b->arena_off[b->n] = (size_t)-1;
        b->n++;
    }
    b->bytes += n;
}

void wbatch_add_copy(struct wbatch *b, const char *p, size_t n)
{
    if (b->arena_len + n > b->arena_cap) {
        b->arena_cap = (b->arena_len + n) * 2;
        b->arena = xrealloc(b->arena, b->arena_cap);
    }
    memcpy(b->arena + b->arena_len, p, n);
    ASSERT(b->n < IOV_MAX_BATCH);
    b->iov[b->n] = uv_buf_init(NULL, (unsigned)n);
    b->arena_off[b->n] = b->arena_len;
    b->n++;
    b->arena_len += n;
    b->bytes += n;
}

int wbatch_flush(struct wbatch *b, uv_stream_t *dst, wbatch_done_fn done, void *ctx)
{
    if (b->n == 0)
        return 0;
    for (int i = 0; i < b->n; i++)
        if (b->arena_off[i] != (size_t)-1)
            b->iov[i].base = b->arena + b->arena_off[i];
    int r = write_iov(dst, b->iov, b->n, b->bytes, done, ctx);
    wbatch_reset(b);
    return r;
}

int stream_write(uv_stream_t *dst, const char *p, size_t n, wbatch_done_fn done, void *ctx)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    return n == 0 ? 0 : write_iov(dst, &b, 1, n, done, ctx);
}
