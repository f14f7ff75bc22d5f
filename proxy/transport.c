/*
 * transport: plain or TLS bytes of one connection (see transport.h).
 */
#include <stdio.h>

#include "transport.h"

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
