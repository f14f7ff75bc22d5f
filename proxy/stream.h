/*
 * stream: the socket of one connection and its plain write, under both
 * transport.c (which routes an owner's bytes, plain or TLS) and tls.c
 * (which writes its ciphertext here). Neither of those includes the other's
 * code for it.
 *
 * Writes: what the kernel does not take at once is copied into one chunk on
 * libuv's write queue, freed in its callback, which then calls `done` (when
 * given). Errors: 0 or a negative libuv code.
 */
#ifndef TTLG_STREAM_H
#define TTLG_STREAM_H

#include <stddef.h>
#include <uv.h>

struct tls;

/* Any of the stream handles the proxy uses, so one struct holds either. */
union stream {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
};

/* One connection's socket, plain or TLS (transport.h). */
struct xport {
    union stream h;         /* first: tls.c goes from the handle to the xport */
    struct tls *tls;        /* NULL: plain */
};

/* A queued write finished (status as libuv's). */
typedef void (*stream_done_fn)(void *ctx, int status);

/* Write the n buffers (total bytes in all) to dst, the plain way. */
int stream_writev(uv_stream_t *dst, const uv_buf_t *iov, int n, size_t total,
                  stream_done_fn done, void *ctx);

#endif
