/*
 * libFuzzer harness for the reply framer (proxy/resp_reply.c).
 *
 * Input: one byte that picks how the rest is cut, then the reply bytes.
 * The bytes are scanned in one piece, in pieces of pseudo-random sizes
 * derived from that byte, and one byte at a time. Every way must find the
 * same reply ends with the same types and end the same way (error with the
 * same message, idle, or inside a reply), and every call must keep the
 * reply_scan() contract. The scanner holds heap memory only inside a reply
 * nested deeper than RESP_INLINE_DEPTH, and is freed with
 * reply_scanner_free() however the input ends (ASan reports a leak
 * otherwise). Built with TTLG_FUZZ=ON (clang):
 *
 *   CC=clang cmake -S . -B build-fuzz -DTTLG_FUZZ=ON -DTTLG_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_reply
 *   build-fuzz/fuzz_reply -max_total_time=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp_reply.h"
#include "fuzz_check.h"

struct outcome {
    size_t *ends;       /* offset just past each reply found */
    char *types;        /* reply_scanner_type() once it ended */
    size_t n;
    const char *err;    /* NULL when no error */
    int idle;           /* reply_scanner_idle() after the last byte */
};

/* Scan data[0..len) in pieces whose sizes come from next_size(), recording
 * each reply end. */
static void scan(const uint8_t *data, size_t len, size_t (*next_size)(uint32_t *), uint32_t seed,
                 struct outcome *o)
{
    struct reply_scanner s;
    size_t off = 0;

    reply_scanner_init(&s);
    o->n = 0;
    o->err = NULL;
    while (off < len) {
        size_t piece = next_size ? next_size(&seed) : len;
        size_t stop = piece < len - off ? off + piece : len;

        while (off < stop) {
            int done = -1;
            ssize_t r = reply_scan(&s, (const char *)data + off, stop - off, &done);

            if (r < 0) {
                o->err = reply_scanner_error(&s);
                check(o->err != NULL);
                /* errors stick, and give the level stack back */
                check(reply_scan(&s, "+OK\r\n", 5, &done) == -1);
                check(s.heap == NULL);
                reply_scanner_free(&s);
                check(reply_scanner_idle(&s));
                return;
            }
            check(done == 0 || done == 1);
            check((size_t)r <= stop - off);
            if (done) {
                check(r > 0);
                off += (size_t)r;
                /* every reply ends with the LF of a CRLF */
                check(data[off - 1] == '\n');
                check(reply_scanner_idle(&s));
                check(reply_scanner_type(&s) != 0);
                check(s.heap == NULL && s.depth == 0);  /* idle: no heap memory */
                o->ends[o->n] = off;
                o->types[o->n] = reply_scanner_type(&s);
                o->n++;
            } else {
                check((size_t)r == stop - off);
                check(!reply_scanner_idle(&s));
                check(s.heap != NULL || s.depth <= RESP_INLINE_DEPTH);
                off = stop;
            }
        }
    }
    o->idle = reply_scanner_idle(&s);
    /* The input may end inside a (deep) reply. */
    reply_scanner_free(&s);
    check(s.heap == NULL && reply_scanner_idle(&s));
}

static size_t random_size(uint32_t *state)
{
    uint32_t x = *state;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    return 1 + x % (*state >> 24 & 1 ? 7 : 301);
}

static size_t one_byte(uint32_t *state)
{
    (void)state;
    return 1;
}

static void same(const struct outcome *a, const struct outcome *b)
{
    check(a->n == b->n);
    check(memcmp(a->ends, b->ends, a->n * sizeof(*a->ends)) == 0);
    check(memcmp(a->types, b->types, a->n) == 0);
    check((a->err == NULL) == (b->err == NULL));
    if (a->err)
        check(strcmp(a->err, b->err) == 0);
    else
        check(a->idle == b->idle);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct outcome whole, pieces, bytes;
    uint32_t seed;

    if (size < 1)
        return 0;
    seed = 0x9e3779b9u * (data[0] + 1u);
    data++;
    size--;

    whole.ends = malloc((size + 1) * sizeof(size_t));
    whole.types = malloc(size + 1);
    pieces.ends = malloc((size + 1) * sizeof(size_t));
    pieces.types = malloc(size + 1);
    bytes.ends = malloc((size + 1) * sizeof(size_t));
    bytes.types = malloc(size + 1);

    scan(data, size, NULL, 0, &whole);
    scan(data, size, random_size, seed, &pieces);
    scan(data, size, one_byte, 0, &bytes);
    same(&whole, &pieces);
    same(&whole, &bytes);

    free(whole.ends);
    free(whole.types);
    free(pieces.ends);
    free(pieces.types);
    free(bytes.ends);
    free(bytes.types);
    return 0;
}
