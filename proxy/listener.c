/*
 * listener: listening sockets that hand accepts back (see listener.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "listener.h"

static void on_close_free(uv_handle_t *h)
{
    free(h);
}

static void on_connection(uv_stream_t *h, int status)
{
    struct listener *l = h->data;
    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    l->on_accept(l);
}

/* Listen on a; the new handle is returned in *out (freed when closed). */
static int start_listening(struct listener *l, uv_loop_t *loop, const struct addr *a,
                           uv_stream_t **out, char *err, size_t errlen)
{
    int r;
    union { uv_tcp_t tcp; uv_pipe_t pipe; } *h = xmalloc(sizeof *h);
    if (a->is_unix) {
        uv_pipe_init(loop, &h->pipe, 0);
        unlink(a->host);    /* a stale socket from a previous run, as redis does */
        r = uv_pipe_bind(&h->pipe, a->host);
    } else {
        struct sockaddr_storage ss;
        uv_tcp_init(loop, &h->tcp);
        if (addr_resolve(a, &ss, err, errlen) != 0) {
            uv_close((uv_handle_t *)h, on_close_free);
            return -1;
        }
        r = uv_tcp_bind(&h->tcp, (struct sockaddr *)&ss, 0);
    }
    h->tcp.data = l;
    if (r == 0)
        r = uv_listen((uv_stream_t *)h, 511, on_connection);
    if (r != 0) {
        char name[300];
        addr_format(a, name, sizeof name);
        snprintf(err, errlen, "cannot listen on %s: %s", name, uv_strerror(r));
        uv_close((uv_handle_t *)h, on_close_free);
        return -1;
    }
    *out = (uv_stream_t *)h;
    return 0;
}

int listener_open(struct listener *l, uv_loop_t *loop, char *err, size_t errlen)
{
    return start_listening(l, loop, &l->addr, &l->h, err, errlen);
}

int listener_move(struct listener *l, uv_loop_t *loop, const struct addr *to, char *err,
                  size_t errlen)
{
    uv_stream_t *h;
    if (start_listening(l, loop, to, &h, err, errlen) != 0)
        return -1;
    listener_close(l);
    l->h = h;
    l->addr = *to;
    return 0;
}

void listener_close(struct listener *l)
{
    if (l->h == NULL)
        return;
    uv_close((uv_handle_t *)l->h, on_close_free);
    l->h = NULL;
    if (l->addr.is_unix)
        unlink(l->addr.host);
}
