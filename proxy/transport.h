/*
 * transport: the bytes of one connection, plain or TLS.
 *
 * Sessions (the client side) and backend connections read and write through
 * an xport instead of the libuv stream itself. TLS is a property of the
 * transport, not of the session: the owner sees plaintext either way. On a
 * plain connection every call here is the libuv call it wraps, so the plain
 * path keeps its zero-copy writes and its cost.
 *
 *   owner ─xport_writev─▶ plain: uv_try_write, the rest copied and queued
 *                         TLS:   tls_writev (tls.c) ─▶ the same, for ciphertext
 *   owner ◀─read_cb────── plain: libuv's read callback as it is
 *                         TLS:   tls.c decrypts into the owner's own buffers
 *
 * The handle's `data` belongs to the owner; tls.c finds its session from the
 * handle, which is the first member of struct xport (stream.h).
 *
 * Writes: the plain ones and TLS's ciphertext go through stream_writev
 * (stream.h): what the kernel does not take at once is queued. Errors: 0
 * or a negative libuv code; xport_strerror() gives the words for one, TLS's
 * own reason where TLS failed.
 */
#ifndef TTLG_TRANSPORT_H
#define TTLG_TRANSPORT_H

#include <stddef.h>
#include <uv.h>

#include "stream.h"
#include "tls.h"

/* A queued write finished (status as libuv's). */
typedef stream_done_fn xport_done_fn;

/* Write the n buffers (total bytes in all). */
int xport_writev(struct xport *x, const uv_buf_t *iov, int n, size_t total,
                 xport_done_fn done, void *ctx);

static inline int xport_write(struct xport *x, const char *p, size_t n, xport_done_fn done,
                              void *ctx)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    return n == 0 ? 0 : xport_writev(x, &b, 1, n, done, ctx);
}

static inline int xport_read_start(struct xport *x, uv_alloc_cb alloc_cb, uv_read_cb read_cb)
{
    if (x->tls != NULL)
        return tls_read_start(x, alloc_cb, read_cb);
    return uv_read_start(&x->h.stream, alloc_cb, read_cb);
}

static inline void xport_read_stop(struct xport *x)
{
    if (x->tls != NULL)
        tls_read_stop(x);
    else
        uv_read_stop(&x->h.stream);
}

/* Bytes written by the owner and not yet taken by the kernel. */
static inline size_t xport_backlog(const struct xport *x)
{
    size_t n = uv_stream_get_write_queue_size(&x->h.stream);
    return x->tls != NULL ? n + tls_pending(x->tls) : n;
}

/* Half-close once what was written is out (TLS: close_notify first). */
static inline int xport_shutdown(struct xport *x, uv_shutdown_t *req, uv_shutdown_cb cb)
{
    if (x->tls != NULL)
        return tls_shutdown(x, req, cb);
    return uv_shutdown(req, &x->h.stream, cb);
}

/* Close the handle and free its TLS session; cb as uv_close's. */
void xport_close(struct xport *x, uv_close_cb cb);

/* Words for a negative code that came from x. */
const char *xport_strerror(const struct xport *x, int code);

#endif
