/*
 * transport: plain or TLS bytes of one connection (see transport.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"
#include "util.h"

/* A write libuv did not finish at once: one allocation, freed in its callback. */
struct wchunk {
    uv_write_t req;
    xport_done_fn done;
    void *ctx;
    char data[];
};

static void on_chunk_written(uv_write_t *req, int status)
{
    struct wchunk *c = (struct wchunk *)req;
    xport_done_fn done = c->done;
    void *ctx = c->ctx;
    free(c);
    if (done != NULL)
        done(ctx, status);
}

/* Queue the iov bytes past the first `skip` in one chunk. */
static int queue_rest(uv_stream_t *dst, const uv_buf_t *iov, int n, size_t total, size_t skip,
                      xport_done_fn done, void *ctx)
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
                  xport_done_fn done, void *ctx)
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

int xport_writev(struct xport *x, const uv_buf_t *iov, int n, size_t total,
                 xport_done_fn done, void *ctx)
{
    if (x->tls != NULL)
        return tls_writev(x, iov, n, done, ctx);
    return stream_writev(&x->h.stream, iov, n, total, done, ctx);
}

void xport_close(struct xport *x, uv_close_cb cb)
{
    if (x->tls != NULL) {
        tls_free(x->tls);
        x->tls = NULL;
    }
    uv_close(&x->h.handle, cb);
}

const char *xport_strerror(const struct xport *x, int code)
{
    static char text[240];      /* callbacks do not nest: one is enough */
    if (code != UV_EPROTO || x->tls == NULL || tls_error(x->tls)[0] == '\0')
        return uv_strerror(code);
    snprintf(text, sizeof text, "TLS: %s", tls_error(x->tls));
    return text;
}
