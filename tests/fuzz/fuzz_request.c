/*
 * libFuzzer harness for the request framer (proxy/resp_request.c).
 *
 * Input: one byte that picks how the rest is cut, then the client's bytes.
 * They are framed in one buffer, and in pieces of pseudo-random sizes
 * derived from that byte, with the caller compacting its buffer between
 * reads (req_framer_moved) into a fresh allocation, for odd first bytes
 * giving memory back whenever the framer is idle (req_framer_release), and
 * for first bytes with bit 1 set framing bulks of 8 bytes or more by hand
 * in both (req_framer_set_stream(f, 0, 16); a head, REQ_HEAD, is held).
 * Both ways must produce
 * the same requests (raw span, argv bytes, inline flag) and end the same
 * way; every call must keep the req_next() contract.
 *
 * Inputs are meant to stay under the 64 KiB line limits (the default
 * -max_len is 4096): past them Redis itself answers differently depending
 * on how the bytes arrive (a long inline line is refused only if no newline
 * was read yet), and so may the framer.
 *
 *   CC=clang cmake -S . -B build-fuzz -DTTLG_FUZZ=ON -DTTLG_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_request
 *   build-fuzz/fuzz_request -max_total_time=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp_request.h"
#include "fuzz_check.h"

#define PROTO_ERR "ERR Protocol error: "

struct framed {
    size_t raw_off, raw_len;    /* in the input */
    int inline_cmd;
    int argc;
    uint64_t hash;              /* of every argument's length and bytes */
};

struct outcome {
    struct framed *req;
    size_t n;
    int rc;                     /* last req_next() result: 0 or -1 */
    char err[256];
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Frame buf[*pos..len) until more bytes are needed or an error; buf[0] is
 * input offset base. */
static void drain(struct req_framer *f, const char *buf, size_t len, size_t *pos, size_t base,
                  int release, struct outcome *o)
{
    for (;;) {
        struct request req;
        size_t before = *pos;
        struct framed *fr;

        o->rc = req_next(f, buf, len, pos, &req);
        check(o->rc >= -1 && o->rc <= REQ_HEAD && o->rc != 2);
        if (o->rc == REQ_HEAD) {
            /* *pos may have passed empty requests; it stays at the head's start */
            check(req.argc == req.head->big && req.head->total > req.argc);
            check(req.raw.p == buf + *pos && req.raw.p + req.raw.len <= buf + len);
            req_framer_hold(f);
            continue;
        }
        if (o->rc < 0) {
            const char *e = req_framer_error(f);

            check(e != NULL && strncmp(e, PROTO_ERR, strlen(PROTO_ERR)) == 0);
            strncpy(o->err, e, sizeof(o->err) - 1);
            return;
        }
        check(*pos >= before && *pos <= len);
        if (o->rc == 0)
            return;

        check(req.raw.p >= buf + before && req.raw.len > 0);
        check(req.raw.p + req.raw.len == buf + *pos);
        check(req.argc >= 1);
        check(req.inline_cmd == 0 || req.inline_cmd == 1);
        fr = &o->req[o->n++];
        fr->raw_off = base + (size_t)(req.raw.p - buf);
        fr->raw_len = req.raw.len;
        fr->inline_cmd = req.inline_cmd;
        fr->argc = req.argc;
        fr->hash = 0xcbf29ce484222325ull;
        for (int i = 0; i < req.argc; i++) {
            /* RESP arguments are read in place, inside the request */
            if (!req.inline_cmd)
                check(req.argv[i].p >= req.raw.p &&
                      req.argv[i].p + req.argv[i].len <= req.raw.p + req.raw.len);
            fr->hash = fnv(fr->hash, &req.argv[i].len, sizeof(req.argv[i].len));
            fr->hash = fnv(fr->hash, req.argv[i].p, req.argv[i].len);
        }
        if (release && req_framer_idle(f))
            req_framer_release(f);
    }
}

static size_t random_size(uint32_t *state)
{
    uint32_t x = *state;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    return 1 + x % (x >> 24 & 1 ? 5 : 211);
}

static void frame_whole(const uint8_t *data, size_t size, int hand, struct outcome *o)
{
    struct req_framer *f = req_framer_new();
    if (hand)
        req_framer_set_stream(f, 0, 16);
    size_t pos = 0;

    o->n = 0;
    drain(f, (const char *)data, size, &pos, 0, 0, o);
    req_framer_free(f);
}

/* Reads of random sizes into a buffer the caller compacts after each one;
 * with `release`, memory is given back whenever the framer is idle. */
static void frame_pieces(const uint8_t *data, size_t size, uint32_t seed, int release,
                         int hand, struct outcome *o)
{
    struct req_framer *f = req_framer_new();
    if (hand)
        req_framer_set_stream(f, 0, 16);
    char *cur = NULL;
    size_t clen = 0, pos = 0, base = 0, from = 0;

    o->n = 0;
    o->rc = 0;
    while (from < size && o->rc >= 0) {
        size_t piece = random_size(&seed);
        size_t to = piece < size - from ? from + piece : size;
        size_t keep = clen - pos;
        char *nb = malloc(keep + (to - from));

        if (keep)
            memcpy(nb, cur + pos, keep);
        memcpy(nb + keep, data + from, to - from);
        if (pos > 0)
            req_framer_moved(f, pos, 0);
        free(cur);
        cur = nb;
        base += pos;
        clen = keep + (to - from);
        pos = 0;
        from = to;
        drain(f, cur, clen, &pos, base, release, o);
    }
    free(cur);
    req_framer_free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct outcome whole, pieces;
    uint32_t seed;
    int release, hand;

    if (size < 1)
        return 0;
    seed = 0x9e3779b9u * (data[0] + 1u);
    release = data[0] & 1;
    hand = data[0] & 2;
    data++;
    size--;

    /* a request takes at least 2 bytes ("x\n") */
    memset(&whole, 0, sizeof(whole));
    memset(&pieces, 0, sizeof(pieces));
    whole.req = malloc((size / 2 + 1) * sizeof(struct framed));
    pieces.req = malloc((size / 2 + 1) * sizeof(struct framed));
    frame_whole(data, size, hand, &whole);
    frame_pieces(data, size, seed, release, hand, &pieces);

    check(whole.n == pieces.n);
    for (size_t i = 0; i < whole.n; i++) {
        check(whole.req[i].raw_off == pieces.req[i].raw_off);
        check(whole.req[i].raw_len == pieces.req[i].raw_len);
        check(whole.req[i].inline_cmd == pieces.req[i].inline_cmd);
        check(whole.req[i].argc == pieces.req[i].argc);
        check(whole.req[i].hash == pieces.req[i].hash);
    }
    check(whole.rc == pieces.rc);
    if (whole.rc < 0 && strcmp(whole.err, pieces.err) != 0) {
        fprintf(stderr, "in one buffer: %s\nin pieces: %s\n", whole.err, pieces.err);
        check(strcmp(whole.err, pieces.err) == 0);
    }

    free(whole.req);
    free(pieces.req);
    return 0;
}
