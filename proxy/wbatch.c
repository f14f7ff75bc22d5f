/*
 * wbatch: gathered writes (see wbatch.h).
 */
#include <stdlib.h>
#include <string.h>

#include "wbatch.h"
#include "util.h"

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

int wbatch_flush(struct wbatch *b, struct xport *dst, xport_done_fn done, void *ctx)
{
    if (b->n == 0)
        return 0;
    for (int i = 0; i < b->n; i++)
        if (b->arena_off[i] != (size_t)-1)
            b->iov[i].base = b->arena + b->arena_off[i];
    int r = xport_writev(dst, b->iov, b->n, b->bytes, done, ctx);
    wbatch_reset(b);
    return r;
}
