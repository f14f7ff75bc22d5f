/*
 * libFuzzer harness for the admin endpoint's HTTP side (proxy/admin.c): bytes
 * a peer sends -> the answers, through a real loopback connection to the
 * endpoint on its own libuv loop, as in the proxy.
 *
 * Input: one byte that picks the sizes of the writes, then the peer's bytes.
 * They are written in pieces, the loop runs between them, the peer half-closes
 * and reads until the endpoint closes (or 3 s pass: a hang is a finding). The
 * answer stream must be whole HTTP/1.1 responses only, each with a status the
 * endpoint gives (200 404 405 400 431 503), a Content-Length and that many
 * bytes of body (none after a HEAD: the harness does not parse the requests,
 * so headers followed by the next response or the end count as one).
 *
 *   CC=clang cmake -S . -B build-fuzz -DTTLG_FUZZ=ON -DTTLG_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_admin
 *   build-fuzz/fuzz_admin tests/fuzz/corpus/admin -max_total_time=60
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "admin.h"
#include "backend.h"
#include "config.h"
#include "events.h"
#include "loop.h"
#include "session.h"
#include "fuzz_check.h"

static struct loop_ctx ctx;
static struct target backend;
static struct clients clients = { .ctx = &ctx };
static struct config cfg;
static int port;

static int free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    check(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    check(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[] = "/tmp/fuzz_admin.XXXXXX", err[512], text[512];
    port = free_port();
    int n = snprintf(text, sizeof text,
                     "[proxy]\nlisten = 127.0.0.1:1\nbackend = 127.0.0.1:1\nconnect_timeout = 50\n"
                     "admin = 127.0.0.1:%d\n[ttl \"t:\"]\nttl = 9\n[durable \"d:\"]\n"
                     "owner = o\nreason = r\nrebuild = b\n", port);
    int fd = mkstemp(path);
    check(fd >= 0 && write(fd, text, (size_t)n) == n);
    close(fd);
    check(config_load(path, &cfg, err, sizeof err) == 0);
    unlink(path);
    ctx.loop = uv_default_loop();
    ctx.cfg = &cfg;
    ctx.backend = &backend;
    struct addr a;
    check(addr_parse(cfg.backend, &a, err, sizeof err) == 0);
    target_set(&backend, &ctx, &a, 1);
    check(events_init(ctx.loop, &cfg, err, sizeof err) == 0);
    check(admin_start(&ctx, &clients, err, sizeof err) == 0);
    return 0;
}

static int connect_endpoint(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    check(fd >= 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    check(rc == 0 || errno == EINPROGRESS);
    return fd;
}

/* Whole responses only; returns 0, or -1 when the stream is not that. */
static int responses_ok(const char *p, size_t n)
{
    static const char *const statuses[] = { "200", "404", "405", "400", "431", "503" };
    while (n > 0) {
        const char *end = memmem(p, n, "\r\n\r\n", 4);
        if (n < 13 || memcmp(p, "HTTP/1.1 ", 9) != 0 || end == NULL)
            return -1;
        int known = 0;
        for (size_t i = 0; i < 6; i++)
            known |= memcmp(p + 9, statuses[i], 3) == 0;
        const char *cl = memmem(p, (size_t)(end - p), "\r\nContent-Length: ", 18);
        if (!known || cl == NULL)
            return -1;
        size_t body = strtoul(cl + 18, NULL, 10), head = (size_t)(end + 4 - p);
        /* After a HEAD the headers alone: the next response, or the end. No
         * body of the endpoint's starts like a response. */
        if (n == head || (n - head >= 9 && memcmp(p + head, "HTTP/1.1 ", 9) == 0))
            body = 0;
        else if (n - head < body)
            return -1;
        p += head + body;
        n -= head + body;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = 1 + data[0] % 97, at = 1, got = 0, cap = 1 << 16;
    char *out = malloc(cap);
    int fd = connect_endpoint(), eof = 0, half = 0;
    uint64_t deadline = uv_hrtime() + 3000000000ull;
    while (!eof) {
        check(uv_hrtime() < deadline);      /* the endpoint must answer or close */
        uv_run(ctx.loop, UV_RUN_NOWAIT);
        if (at < size) {
            size_t k = size - at < piece ? size - at : piece;
            ssize_t w = send(fd, data + at, k, MSG_NOSIGNAL);
            if (w > 0)
                at += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != ENOTCONN)
                at = size;                  /* closed on us: read what came */
        } else if (!half) {
            shutdown(fd, SHUT_WR);
            half = 1;
        }
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        poll(&pf, 1, 1);
        ssize_t r = recv(fd, out + got, cap - got, 0);
        if (r > 0) {
            got += (size_t)r;
            if (got == cap)
                out = realloc(out, cap *= 2);
        } else if (r == 0 || (errno != EAGAIN && errno != ENOTCONN)) {
            eof = 1;
        }
    }
    close(fd);
    uv_run(ctx.loop, UV_RUN_NOWAIT);
    if (responses_ok(out, got) != 0) {
        size_t from = got > 600 ? got - 600 : 0;
        fprintf(stderr, "answers (%zu bytes), the last ones:\n%.*s\n", got, (int)(got - from), out + from);
        check(!"whole HTTP responses");
    }
    free(out);
    return 0;
}
