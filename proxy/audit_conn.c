/*
 * audit_conn: blocking RESP2 connection for `ttlguard audit`. See audit_conn.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/read.h>

#include "audit_conn.h"
#include "tls.h"
#include "util.h"

/* One recv() takes up to this much. Large, so a pipelined batch of a few
 * thousand replies arrives in a handful of system calls. */
#define ACONN_RECV_BUF (256 * 1024)

/* ...but the reader is fed in slices of this size. hiredis 0.14.1 moves the
 * unread rest of its buffer to the front each time it has consumed 1 KiB
 * (sdsrange in redisReaderGetReply); feeding a whole 256 KiB read at once
 * would make that quadratic. */
#define ACONN_FEED_SLICE (8 * 1024)

struct aconn {
    int fd;
    struct tls_blocking *tls;   /* NULL: plain */
    redisReader *reader;
    redisReplyObjectFunctions *default_fn; /* hiredis's own, saved at creation */
    char *rbuf;                 /* bytes received, ACONN_RECV_BUF */
    size_t rpos;                /* next byte of rbuf to feed to the reader */
    size_t rlen;                /* bytes in rbuf */
    struct abuf out;            /* scratch for aconn_call() */
    int eintr;                  /* the last read failed with EINTR */
};

static void abuf_reserve(struct abuf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

void abuf_free(struct abuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void put_bulk(struct abuf *b, const char *s, size_t len)
{
    char *p = b->p + b->len;
    *p++ = '$';
    p += u64_to_dec(p, len);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    b->len = (size_t)(p - b->p);
}

void abuf_command(struct abuf *b, int argc, const char **argv, const size_t *lens)
{
    size_t need = 24;
    for (int i = 0; i < argc; i++)
        need += lens[i] + 26;
    abuf_reserve(b, need);
    char *p = b->p + b->len;
    *p++ = '*';
    p += u64_to_dec(p, (uint64_t)argc);
    *p++ = '\r';
    *p++ = '\n';
    b->len = (size_t)(p - b->p);
    for (int i = 0; i < argc; i++)
        put_bulk(b, argv[i], lens[i]);
}

void abuf_command_key(struct abuf *b, const char *name_resp, size_t name_len,
                      const char *key, size_t keylen)
{
    abuf_reserve(b, 4 + name_len + keylen + 26);
    memcpy(b->p + b->len, "*2\r\n", 4);
    memcpy(b->p + b->len + 4, name_resp, name_len);
    b->len += 4 + name_len;
    put_bulk(b, key, keylen);
}

static int connect_timed(int fd, const struct sockaddr *sa, socklen_t salen,
                         unsigned timeout_ms, char *err, size_t errlen)
{
    int flags = fcntl(fd, F_GETFL, 0);
    if (fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        return -1;
    }
    if (connect(fd, sa, salen) == -1) {
        if (errno != EINPROGRESS) {
            snprintf(err, errlen, "%s", strerror(errno));
            return -1;
        }
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        int n = poll(&pfd, 1, (int)timeout_ms);
        if (n == 0) {
            snprintf(err, errlen, "connect timed out after %u ms", timeout_ms);
            return -1;
        }
        if (n < 0) {
            snprintf(err, errlen, "%s", errno == EINTR ? "interrupted" : strerror(errno));
            return -1;
        }
        int soerr = 0;
        socklen_t len = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        if (soerr != 0) {
            snprintf(err, errlen, "%s", strerror(soerr));
            return -1;
        }
    }
    if (fcntl(fd, F_SETFL, flags) == -1) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* A connected blocking socket for a, or -1. */
static int dial(const struct addr *a, unsigned timeout_ms, char *err, size_t errlen)
{
    if (a->is_unix) {
        struct sockaddr_un sun;
        memset(&sun, 0, sizeof sun);
        sun.sun_family = AF_UNIX;
        /* addr_parse() keeps unix paths under sizeof sun_path. */
        snprintf(sun.sun_path, sizeof sun.sun_path, "%.107s", a->host);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd == -1) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            return -1;
        }
        if (connect_timed(fd, (struct sockaddr *)&sun, sizeof sun, timeout_ms, err, errlen) == -1) {
            close(fd);
            return -1;
        }
        return fd;
    }

    char port[16];
    snprintf(port, sizeof port, "%d", a->port);
    struct addrinfo hints, *res, *ai;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(a->host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s", gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd == -1) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            continue;
        }
        if (connect_timed(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms, err, errlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd != -1) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

struct aconn *aconn_open(const struct addr *a, unsigned timeout_ms, unsigned io_timeout_ms,
                         struct tls_context *tls, const char *tls_name, char *err,
                         size_t errlen)
{
    char where[300], why[200];
    addr_format(a, where, sizeof where);
    int fd = dial(a, timeout_ms, why, sizeof why);
    if (fd == -1) {
        snprintf(err, errlen, "cannot connect to %s: %s", where, why);
        return NULL;
    }
    struct timeval tv = { .tv_sec = io_timeout_ms / 1000, .tv_usec = (io_timeout_ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct tls_blocking *tb = NULL;
    if (tls != NULL) {
        tb = tls_blocking_connect(tls, fd, tls_name != NULL ? tls_name : a->host, why,
                                  sizeof why);
        if (tb == NULL) {
            snprintf(err, errlen, "cannot connect to %s: %s", where, why);
            close(fd);
            return NULL;
        }
    }

    struct aconn *c = xcalloc(1, sizeof *c);
    c->fd = fd;
    c->tls = tb;
    c->reader = redisReaderCreate();
    if (c->reader == NULL) {
        log_error("out of memory creating a reply reader");
        abort();
    }
    c->default_fn = c->reader->fn;
    /* Keep the reader's buffer between batches instead of freeing it each
     * time it drains (the 16 KiB default would free it constantly). */
    c->reader->maxbuf = 0;
    c->rbuf = xmalloc(ACONN_RECV_BUF);
    return c;
}

void aconn_close(struct aconn *c)
{
    if (c == NULL)
        return;
    tls_blocking_free(c->tls);
    close(c->fd);
    redisReaderFree(c->reader);
    free(c->rbuf);
    abuf_free(&c->out);
    free(c);
}

int aconn_send(struct aconn *c, const char *buf, size_t len, char *err, size_t errlen)
{
    while (len > 0) {
        ssize_t n = c->tls != NULL ? tls_blocking_send(c->tls, buf, len)
                                   : send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            /* A signal does not stop a send: half a command would leave the
             * stream unusable, and the caller may still want the replies of
             * what it sent. Redis reads all the time; SO_SNDTIMEO bounds a
             * server that does not. */
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                snprintf(err, errlen, "timed out writing to the backend");
            else
                snprintf(err, errlen, "write to the backend: %s", strerror(errno));
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int aconn_read(struct aconn *c, void **reply, char *err, size_t errlen)
{
    c->eintr = 0;
    for (;;) {
        void *r = NULL;
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            snprintf(err, errlen, "bad reply from the backend: %s", c->reader->errstr);
            return -1;
        }
        if (r != NULL) {
            *reply = r;
            return 0;
        }
        if (c->rpos < c->rlen) {
            size_t n = c->rlen - c->rpos;
            if (n > ACONN_FEED_SLICE)
                n = ACONN_FEED_SLICE;
            if (redisReaderFeed(c->reader, c->rbuf + c->rpos, n) != REDIS_OK) {
                snprintf(err, errlen, "reply reader: %s", c->reader->errstr);
                return -1;
            }
            c->rpos += n;
            continue;
        }
        ssize_t n = c->tls != NULL ? tls_blocking_recv(c->tls, c->rbuf, ACONN_RECV_BUF)
                                   : recv(c->fd, c->rbuf, ACONN_RECV_BUF, 0);
        if (n == 0) {
            snprintf(err, errlen, "the backend closed the connection");
            return -1;
        }
        if (n < 0) {
            c->eintr = errno == EINTR;
            if (errno == EINTR)
                snprintf(err, errlen, "interrupted");
            else if (errno == EAGAIN || errno == EWOULDBLOCK)
                snprintf(err, errlen, "timed out waiting for the backend");
            else
                snprintf(err, errlen, "read from the backend: %s", strerror(errno));
            return -1;
        }
        c->rpos = 0;
        c->rlen = (size_t)n;
    }
}

int aconn_interrupted(const struct aconn *c)
{
    return c->eintr;
}

void aconn_use_functions(struct aconn *c, redisReplyObjectFunctions *fn, void *privdata)
{
    c->reader->fn = fn ? fn : c->default_fn;
    c->reader->privdata = fn ? privdata : NULL;
}

int aconn_call(struct aconn *c, redisReply **reply, char *err, size_t errlen,
               int argc, const char **argv)
{
    size_t lens[16];
    ASSERT(argc <= 16);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    c->out.len = 0;
    abuf_command(&c->out, argc, argv, lens);
    if (aconn_send(c, c->out.p, c->out.len, err, errlen) == -1)
        return -1;
    void *r;
    if (aconn_read(c, &r, err, errlen) == -1)
        return -1;
    *reply = r;
    return 0;
}
