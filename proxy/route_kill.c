/*
 * route_kill: a kill's connections of its own (see route_kill.h).
 */
#include <stdlib.h>

#include "backend.h"
#include "route.h"
#include "route_kill.h"
#include "session_int.h"
#include "util.h"

/* One kill part's connection; freed once its handle is closed. */
struct kill_conn {
    struct bconn be;
    struct session *s;          /* whose unit it answers; NULL once the session is gone */
    uint32_t unit;
    struct sbuf req;            /* the request, written once the connection is ready */
    int answered;               /* its reply is in, or its failure told */
    int failed;
    struct kill_conn *next;     /* the open ones, of every session */
};

static struct kill_conn *open_kills;

static void kill_unlink(struct kill_conn *k)
{
    for (struct kill_conn **pp = &open_kills; *pp != NULL; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            return;
        }
}

static void kill_ready(struct bconn *b)
{
    struct kill_conn *k = b->owner;
    bconn_write_bytes(b, k->req.p, k->req.len);     /* a failure: kill_failed() */
}

static void kill_reply(struct bconn *b, const char *p, size_t n, int done, char type,
                       int start)
{
    struct kill_conn *k = b->owner;
    if (k->s == NULL || k->answered)
        return;
    k->answered = done;
    route_reply(k->s, k->unit, b->t, p, n, done, type, start);
    if (done)
        bconn_close(b);
}

static void kill_read_end(struct bconn *b)
{
}

static void kill_failed(struct bconn *b, const char *why, int was_ready)
{
    struct kill_conn *k = b->owner;
    k->failed = 1;
    if (k->s != NULL && !k->answered)
        route_lost(k->s, k->unit, b->t, was_ready);
    k->answered = 1;
}

static void kill_closed(struct bconn *b)
{
    struct kill_conn *k = b->owner;
    kill_unlink(k);
    free(k->req.p);
    free(k);
}

static void kill_written(struct bconn *b, int status)
{
}

static const struct bconn_ops kill_ops = {
    kill_ready, kill_reply, kill_read_end, kill_failed, kill_closed, kill_written,
};

int route_kill_send(struct session *s, struct target *t, const char *p, size_t n, uint32_t unit)
{
    if (!t->addr.is_unix && !t->sa_ok)
        return -1;
    struct kill_conn *k = xcalloc(1, sizeof *k);
    k->unit = unit;
    sbuf_add(&k->req, p, n);
    k->next = open_kills;
    open_kills = k;
    bconn_init(&k->be, s->ctx, &kill_ops, k);
    k->be.t = t;
    bconn_connect(&k->be, 1);
    if (k->failed)
        return -1;                      /* at once: closing, the caller says why */
    k->s = s;
    return 0;
}

void route_kill_forget(struct session *s)
{
    for (struct kill_conn *k = open_kills; k != NULL; k = k->next)
        if (k->s == s) {
            k->s = NULL;
            bconn_close(&k->be);        /* freed in kill_closed(), from the loop */
        }
}
