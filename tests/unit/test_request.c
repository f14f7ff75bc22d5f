/*
 * Unit tests for the request framer (proxy/resp_request.c).
 *
 * The expected behaviour is redis-server 7.0's, checked byte for byte
 * against a real 7.0.15 (raw bytes over a socket), including its quirks:
 * the two bytes after a bulk payload are skipped unchecked, negative
 * multibulk counts are empty requests, an inline line stops at a NUL byte
 * (strchr), and the exact protocol error lines.
 *
 * Each well-formed case is a list of parts laid back to back: a request
 * (its raw bytes and the argv the framer must produce) or bytes Redis skips
 * (empty lines, *0, *-1). The stream is framed
 *   - in one buffer,
 *   - with a growing buffer (the same bytes, one more visible per call),
 *   - in chunks the caller compacts between calls (req_framer_moved), cut
 *     in two at every offset and one byte at a time, each chunk copied
 *     into a freshly allocated buffer so stale pointers show under ASan,
 *   - one byte at a time with req_framer_release() whenever idle,
 * and every way must produce the same requests with the same raw spans.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp_request.h"

#define MAXARGS 8

struct part {
    const char *bytes;
    size_t n;
    int is_req;                 /* 0: bytes Redis skips without running anything */
    int inl;
    const char *argv[MAXARGS];  /* NULL-terminated */
    size_t alen[MAXARGS];       /* 0: strlen(argv[i]) */
};

#define REQ(raw, ...) { raw, sizeof(raw) - 1, 1, 0, { __VA_ARGS__, NULL }, { 0 } }
#define INL(raw, ...) { raw, sizeof(raw) - 1, 1, 1, { __VA_ARGS__, NULL }, { 0 } }
#define SKIP(raw)     { raw, sizeof(raw) - 1, 0, 0, { NULL }, { 0 } }
#define END           { NULL, 0, 0, 0, { NULL }, { 0 } }

struct expect {
    size_t raw_off, raw_len;    /* in the stream */
    int inl;
    int argc;
    const char *argv[MAXARGS];
    size_t alen[MAXARGS];
    size_t aoff[MAXARGS];       /* RESP: stream offset of each argument */
};

struct stream {
    char *buf;
    size_t len;
    struct expect *exp;
    int nexp;
};

/* Offsets of the arguments of a well-formed RESP request at raw[0..). */
static void resp_arg_offsets(const char *raw, size_t base, struct expect *e)
{
    const char *p = strchr(raw, '\n') + 1;

    for (int i = 0; i < e->argc; i++) {
        long n = strtol(p + 1, NULL, 10);

        p = strchr(p, '\n') + 1;
        e->aoff[i] = base + (size_t)(p - raw);
        p += n + 2;
    }
}

static void stream_from_parts(const struct part *parts, struct stream *st)
{
    size_t total = 0;
    int nparts, nreq = 0;

    for (nparts = 0; parts[nparts].bytes; nparts++) {
        total += parts[nparts].n;
        nreq += parts[nparts].is_req;
    }
    st->buf = malloc(total + 1);
    st->exp = calloc((size_t)nreq + 1, sizeof(*st->exp));
    st->len = 0;
    st->nexp = 0;
    for (int i = 0; i < nparts; i++) {
        const struct part *pt = &parts[i];

        if (pt->is_req) {
            struct expect *e = &st->exp[st->nexp++];

            e->raw_off = st->len;
            e->raw_len = pt->n;
            e->inl = pt->inl;
            for (e->argc = 0; pt->argv[e->argc]; e->argc++) {
                e->argv[e->argc] = pt->argv[e->argc];
                e->alen[e->argc] = pt->alen[e->argc] ? pt->alen[e->argc]
                                                     : strlen(pt->argv[e->argc]);
            }
            if (!pt->inl)
                resp_arg_offsets(pt->bytes, st->len, e);
        }
        memcpy(st->buf + st->len, pt->bytes, pt->n);
        st->len += pt->n;
    }
}

static void stream_free(struct stream *st)
{
    free(st->buf);
    free(st->exp);
}

struct run {
    struct req_framer *f;
    const struct stream *st;
    int got;                    /* requests framed so far */
    int rc;                     /* last req_next() result */
    char err[256];
    int release;                /* call req_framer_release() whenever idle */
    size_t max_keep;            /* most unconsumed bytes a caller should hold */
    const char *how;
};

static void check_request(struct run *run, const struct request *req, const char *buf,
                          size_t base)
{
    const struct expect *e;
    const char *how = run->how;
    int i = run->got;

    cr_assert_lt(run->got, run->st->nexp, "%s: unexpected request %d", how, run->got);
    e = &run->st->exp[run->got];
    cr_assert_eq((size_t)(req->raw.p - buf) + base, e->raw_off,
                 "%s: request %d raw span starts at %zu, expected %zu", how, i,
                 (size_t)(req->raw.p - buf) + base, e->raw_off);
    cr_assert_eq(req->raw.len, e->raw_len, "%s: request %d raw span %zu bytes, expected %zu",
                 how, i, req->raw.len, e->raw_len);
    cr_assert_eq(req->inline_cmd, e->inl, "%s: request %d inline flag", how, i);
    cr_assert_eq(req->argc, e->argc, "%s: request %d argc %d, expected %d", how, i,
                 req->argc, e->argc);
    for (int a = 0; a < e->argc; a++) {
        cr_assert_eq(req->argv[a].len, e->alen[a], "%s: request %d argv[%d] len %zu, expected %zu",
                     how, i, a, req->argv[a].len, e->alen[a]);
        cr_assert(memcmp(req->argv[a].p, e->argv[a], e->alen[a]) == 0,
                  "%s: request %d argv[%d] is \"%.*s\", expected \"%s\"", how, i, a,
                  (int)req->argv[a].len, req->argv[a].p, e->argv[a]);
        if (!e->inl)        /* zero copy: the argument is read in place */
            cr_assert_eq(req->argv[a].p, buf + (e->aoff[a] - base),
                         "%s: request %d argv[%d] does not point into the buffer", how, i, a);
    }
    run->got++;
}

/* req_next() until it needs more bytes or fails. buf[0] is stream offset base. */
static void drain(struct run *run, const char *buf, size_t len, size_t *pos, size_t base)
{
    for (;;) {
        struct request req;
        size_t before = *pos;

        memset(&req, 0xa5, sizeof(req));
        run->rc = req_next(run->f, buf, len, pos, &req);
        cr_assert(run->rc >= -1 && run->rc <= 1, "%s: req_next returned %d", run->how, run->rc);
        if (run->rc < 0) {
            snprintf(run->err, sizeof(run->err), "%s", req_framer_error(run->f));
            return;
        }
        cr_assert(*pos >= before && *pos <= len, "%s: pos %zu -> %zu (len %zu)", run->how,
                  before, *pos, len);
        if (run->rc == 0)
            return;
        cr_assert(req.raw.p >= buf + before && req.raw.p + req.raw.len == buf + *pos,
                  "%s: raw span does not end where pos moved", run->how);
        check_request(run, &req, buf, base);
        if (run->release && req_framer_idle(run->f))
            req_framer_release(run->f);
    }
}

static void run_init(struct run *run, const struct stream *st, const char *how)
{
    memset(run, 0, sizeof(*run));
    run->f = req_framer_new();
    run->st = st;
    run->how = how;
    run->max_keep = 64;     /* room for skipped lines before a request */
    for (int i = 0; i < st->nexp; i++)
        if (st->exp[i].raw_len + 64 > run->max_keep)
            run->max_keep = st->exp[i].raw_len + 64;
}

static void run_one_buffer(struct run *run)
{
    size_t pos = 0;

    drain(run, run->st->buf, run->st->len, &pos, 0);
}

/* The same buffer, one more byte visible per call. */
static void run_growing(struct run *run)
{
    size_t pos = 0;

    for (size_t l = 1; l <= run->st->len && run->rc >= 0; l++)
        drain(run, run->st->buf, l, &pos, 0);
}

/* Chunks ending at cuts[] and at the end of the stream; between chunks the
 * caller drops what was consumed and moves the rest to a new buffer. */
static void run_chunks(struct run *run, const size_t *cuts, size_t ncuts)
{
    char *cur = NULL;
    size_t clen = 0, pos = 0, base = 0, from = 0;

    for (size_t i = 0; i <= ncuts && run->rc >= 0; i++) {
        size_t to = i < ncuts ? cuts[i] : run->st->len;
        size_t keep = clen - pos;
        char *nb;

        /* Unconsumed bytes are at most the request being framed (and the
         * empty lines before it): past that the framer stopped consuming. */
        cr_assert_leq(keep, run->max_keep, "%s: %zu bytes left unconsumed", run->how, keep);
        nb = malloc(keep + (to - from) + 1);

        if (keep)
            memcpy(nb, cur + pos, keep);
        memcpy(nb + keep, run->st->buf + from, to - from);
        if (pos > 0)
            req_framer_moved(run->f, pos, 0);
        free(cur);
        cur = nb;
        base += pos;
        clen = keep + (to - from);
        pos = 0;
        from = to;
        drain(run, cur, clen, &pos, base);
    }
    free(cur);
}

static void run_done(struct run *run)
{
    req_framer_free(run->f);
    run->f = NULL;
}

/* A well-formed stream: every way of feeding it gives every request, and
 * leaves the framer idle. */
static void check_stream(const struct stream *st, int every_split)
{
    struct run run;
    size_t *cuts = malloc((st->len + 1) * sizeof(*cuts));
    char how[64];

#define FINISH()                                                                       \
    do {                                                                               \
        cr_assert_eq(run.rc, 0, "%s: ended with %d (%s)", run.how, run.rc, run.err);   \
        cr_assert_eq(run.got, st->nexp, "%s: %d requests framed, %d expected",         \
                     run.how, run.got, st->nexp);                                      \
        cr_assert(req_framer_idle(run.f), "%s: not idle at the end", run.how);         \
        run_done(&run);                                                                \
    } while (0)

    run_init(&run, st, "one buffer");
    run_one_buffer(&run);
    FINISH();

    run_init(&run, st, "growing buffer");
    run_growing(&run);
    FINISH();

    for (size_t k = 1; k < st->len; k++)
        cuts[k - 1] = k;
    run_init(&run, st, "byte by byte, moved");
    run_chunks(&run, cuts, st->len - 1);
    FINISH();

    run_init(&run, st, "byte by byte, released when idle");
    run.release = 1;
    run_chunks(&run, cuts, st->len - 1);
    FINISH();

    if (every_split) {
        for (size_t k = 1; k < st->len; k++) {
            snprintf(how, sizeof(how), "split at %zu", k);
            run_init(&run, st, how);
            run_chunks(&run, &k, 1);
            FINISH();
        }
    } else {
        size_t n = 0;

        for (size_t k = 1, step = 1; k < st->len; k += step, step = step % 97 + 1)
            cuts[n++] = k;
        run_init(&run, st, "chunks of 1..97");
        run_chunks(&run, cuts, n);
        FINISH();
    }
#undef FINISH
    free(cuts);
}

static void check_parts(const struct part *parts)
{
    struct stream st;

    stream_from_parts(parts, &st);
    check_stream(&st, 1);
    stream_free(&st);
}

/* Malformed input: the requests before the faulty one come out, then
 * req_next() fails with redis-server's exact error line, however the bytes
 * arrive. */
static void check_error_n(const char *bytes, size_t n, int good_before, const char *msg)
{
    struct stream st = { (char *)bytes, n, NULL, good_before };
    struct expect exp[4];
    struct run run;
    size_t *cuts = malloc((n + 1) * sizeof(*cuts));
    size_t pos = 0;

    /* The good requests are inline "PING" lines or "*1\r\n$4\r\nPING\r\n". */
    cr_assert(good_before <= 4);
    for (int i = 0; i < good_before; i++) {
        int inl = bytes[pos] != '*';
        size_t rl = inl ? (size_t)(strchr(bytes + pos, '\n') + 1 - (bytes + pos)) : 14;

        memset(&exp[i], 0, sizeof(exp[i]));
        exp[i].raw_off = pos;
        exp[i].raw_len = rl;
        exp[i].inl = inl;
        exp[i].argc = 1;
        exp[i].argv[0] = "PING";
        exp[i].alen[0] = 4;
        exp[i].aoff[0] = pos + 8;
        pos += rl;
    }
    st.exp = exp;

#define FINISH()                                                                         \
    do {                                                                                 \
        cr_assert_eq(run.rc, -1, "%s: \"%.*s\" not refused (%d)", run.how,               \
                     (int)(n < 40 ? n : 40), bytes, run.rc);                              \
        cr_assert_str_eq(run.err, msg, "%s: \"%s\" instead of \"%s\"", run.how, run.err,  \
                         msg);                                                            \
        cr_assert_eq(run.got, good_before, "%s: %d good requests before the error",      \
                     run.how, run.got);                                                  \
        run_done(&run);                                                                  \
    } while (0)

    run_init(&run, &st, "one buffer");
    run.max_keep = n;
    run_one_buffer(&run);
    FINISH();

    if (n <= 4096) {
        run_init(&run, &st, "growing buffer");
    run.max_keep = n;
        run_growing(&run);
        FINISH();

        for (size_t k = 1; k < n; k++)
            cuts[k - 1] = k;
        run_init(&run, &st, "byte by byte");
    run.max_keep = n;
        run_chunks(&run, cuts, n - 1);
        FINISH();
    } else {
        size_t nc = 0;

        for (size_t k = 4096; k < n; k += 4096)
            cuts[nc++] = k;
        run_init(&run, &st, "4 KiB chunks");
    run.max_keep = n;
        run_chunks(&run, cuts, nc);
        FINISH();
    }
#undef FINISH
    free(cuts);
}

#define ERR(lit, before, msg) check_error_n(lit, sizeof(lit) - 1, before, msg)

/* Bytes that are fine so far: the framer waits for more, holding a partial request. */
static void check_waits(const char *bytes, size_t n, int partial)
{
    struct req_framer *f = req_framer_new();
    struct request req;
    size_t pos = 0;

    cr_assert_eq(req_next(f, bytes, n, &pos, &req), 0, "\"%.*s\" not waiting: %s",
                 (int)(n < 40 ? n : 40), bytes, req_framer_error(f));
    if (partial)
        cr_assert(!req_framer_idle(f));
    req_framer_free(f);
}

#define WAITS(lit, partial) check_waits(lit, sizeof(lit) - 1, partial)

Test(request, resp_basic)
{
    static const struct part p[] = {
        REQ("*1\r\n$4\r\nPING\r\n", "PING"),
        REQ("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n", "SET", "k", "value"),
        REQ("*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", "ECHO", ""),
        /* an empty command name is a request: Redis answers "unknown command ''" */
        REQ("*1\r\n$0\r\n\r\n", ""),
        /* payloads that look like protocol */
        REQ("*2\r\n$4\r\nECHO\r\n$4\r\n*1\r\n\r\n", "ECHO", "*1\r\n"),
        REQ("*3\r\n$3\r\nSET\r\n$2\r\n$1\r\n$6\r\n\r\n\r\n\r\n\r\n", "SET", "$1", "\r\n\r\n\r\n"),
        REQ("*1\r\n$10\r\n0123456789\r\n", "0123456789"),
        END
    };
    check_parts(p);
}

Test(request, resp_binary_args)
{
    static const char r1[] = "*2\r\n$4\r\nECHO\r\n$6\r\na\r\n\0b\r\r\n";
    static const char r2[] = "*3\r\n$3\r\nSET\r\n$3\r\n\0\0\0\r\n$2\r\n\xff\n\r\n";
    static const struct part p[] = {
        { r1, sizeof(r1) - 1, 1, 0, { "ECHO", "a\r\n\0b\r", NULL }, { 4, 6 } },
        { r2, sizeof(r2) - 1, 1, 0, { "SET", "\0\0\0", "\xff\n", NULL }, { 3, 3, 2 } },
        END
    };
    check_parts(p);
}

/* *0 and negative counts run nothing: Redis skips them silently. */
Test(request, resp_empty_multibulk_skipped)
{
    static const struct part p[] = {
        SKIP("*0\r\n"),
        SKIP("*-1\r\n"),
        REQ("*1\r\n$4\r\nPING\r\n", "PING"),
        SKIP("*-5\r\n"),
        SKIP("*0\r\n"),
        INL("PING\r\n", "PING"),
        SKIP("*-1\r\n"),
        END
    };
    check_parts(p);
}

/* redis-server skips the two bytes after a payload without checking them,
 * and so does hiredis: "PINGxx" is a PING. */
Test(request, resp_payload_terminator_unchecked)
{
    static const struct part p[] = {
        REQ("*1\r\n$4\r\nPINGxx", "PING"),
        REQ("*1\r\n$4\r\nPING\r\n", "PING"),
        END
    };
    check_parts(p);
}

/* More arguments than any table above: argv grows. */
Test(request, resp_many_args)
{
    char *raw = malloc(300 * 16);
    size_t n = (size_t)sprintf(raw, "*300\r\n");
    struct req_framer *f = req_framer_new();
    struct request req;
    size_t pos = 0;

    for (int i = 0; i < 300; i++)
        n += (size_t)sprintf(raw + n, "$%d\r\n%0*d\r\n", i % 10 + 3, i % 10 + 3, i);
    for (size_t l = 1; l < n; l++)
        cr_assert_eq(req_next(f, raw, l, &pos, &req), 0);
    cr_assert_eq(req_next(f, raw, n, &pos, &req), 1);
    cr_assert_eq(req.argc, 300);
    cr_assert_eq(pos, n);
    for (int i = 0; i < 300; i++) {
        char want[16];
        int wl = sprintf(want, "%0*d", i % 10 + 3, i);

        cr_assert_eq(req.argv[i].len, (size_t)wl);
        cr_assert(memcmp(req.argv[i].p, want, (size_t)wl) == 0, "argv[%d]", i);
    }
    req_framer_free(f);
    free(raw);
}

Test(request, inline_basic)
{
    static const struct part p[] = {
        INL("PING\r\n", "PING"),
        INL("PING\n", "PING"),
        INL("  PING  \r\n", "PING"),
        INL("\tPING\r\n", "PING"),
        INL("SET a b\r\n", "SET", "a", "b"),
        INL("SET   a    b\n", "SET", "a", "b"),
        /* not starting with '*': inline, whatever it looks like */
        INL("$4\r\n", "$4"),
        INL("ECHO \\x41\r\n", "ECHO", "\\x41"),
        /* \r is a separator inside the line, as for sdssplitargs */
        INL("ECHO a\rb\r\n", "ECHO", "a", "b"),
        END
    };
    check_parts(p);
}

Test(request, inline_empty_lines_skipped)
{
    static const struct part p[] = {
        SKIP("\r\n"),
        SKIP("\n"),
        SKIP("   \r\n"),
        SKIP("\t\n"),
        INL("PING\r\n", "PING"),
        SKIP("\r\n"),
        INL("ECHO x\n", "ECHO", "x"),
        SKIP("\n"),
        END
    };
    check_parts(p);
}

Test(request, inline_quotes_and_escapes)
{
    static const struct part p[] = {
        INL("SET a \"b c\"\r\n", "SET", "a", "b c"),
        INL("ECHO \"\\x41\\n\"\r\n", "ECHO", "A\n"),
        INL("ECHO \"\\x41\\x4a\"\r\n", "ECHO", "AJ"),
        INL("ECHO \"\\xAf\"\r\n", "ECHO", "\xaf"),
        INL("ECHO \"\\x4\"\r\n", "ECHO", "x4"),
        INL("ECHO \"\\xzz\"\r\n", "ECHO", "xzz"),
        INL("ECHO \"\\q\"\r\n", "ECHO", "q"),
        INL("ECHO \"\\r\\n\\t\\b\\a\"\r\n", "ECHO", "\r\n\t\b\a"),
        INL("ECHO \"a\\\\b\"\r\n", "ECHO", "a\\b"),
        INL("ECHO \"a\\\"b\"\r\n", "ECHO", "a\"b"),
        INL("ECHO '\\x41\\''\r\n", "ECHO", "\\x41'"),
        INL("ECHO 'a\\nb'\r\n", "ECHO", "a\\nb"),
        INL("ECHO 'a\"b' \"a'b\"\r\n", "ECHO", "a\"b", "a'b"),
        INL("ECHO \"\"\r\n", "ECHO", ""),
        INL("ECHO ''\r\n", "ECHO", ""),
        INL("ECHO \"\" ''\n", "ECHO", "", ""),
        /* a quote inside a word opens a quoted part of that word */
        INL("ECHO a\"b\"\r\n", "ECHO", "ab"),
        INL("ECHO a\"b c\"\r\n", "ECHO", "ab c"),
        INL("ECHO \"a\"\tb\r\n", "ECHO", "a", "b"),
        END
    };
    check_parts(p);
}

Test(request, inline_and_resp_mixed)
{
    static const struct part p[] = {
        REQ("*1\r\n$4\r\nPING\r\n", "PING"),
        INL("PING\r\n", "PING"),
        REQ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "GET", "k"),
        SKIP("\r\n"),
        INL("SET k \"v w\"\n", "SET", "k", "v w"),
        SKIP("*0\r\n"),
        INL("GET k\r\n", "GET", "k"),
        REQ("*2\r\n$4\r\nECHO\r\n$5\r\nPING\n\r\n", "ECHO", "PING\n"),
        INL("ECHO *1\r\n", "ECHO", "*1"),
        REQ("*1\r\n$4\r\nPING\r\n", "PING"),
        END
    };
    check_parts(p);
}

/* Many requests in one buffer, RESP and inline, fed whole, growing, and in
 * chunks of every size from 1 to 97 bytes. */
Test(request, pipeline)
{
    enum { N = 4000 };
    struct stream st;
    size_t cap = (size_t)N * 64;
    char keys[N][8];

    st.buf = malloc(cap);
    st.exp = calloc(N, sizeof(*st.exp));
    st.len = 0;
    st.nexp = N;
    for (int i = 0; i < N; i++) {
        struct expect *e = &st.exp[i];
        int kl = sprintf(keys[i], "k%d", i);

        e->raw_off = st.len;
        if (i % 3 == 2) {
            st.len += (size_t)sprintf(st.buf + st.len, "GET %s\r\n", keys[i]);
            e->inl = 1;
            e->argc = 2;
            e->argv[0] = "GET";
            e->argv[1] = keys[i];
        } else {
            st.len += (size_t)sprintf(st.buf + st.len, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%d\r\n",
                                      kl, keys[i], kl - 1, i);
            e->argc = 3;
            e->argv[0] = "SET";
            e->argv[1] = keys[i];
            e->argv[2] = keys[i] + 1;
        }
        for (int a = 0; a < e->argc; a++)
            e->alen[a] = strlen(e->argv[a]);
        e->raw_len = st.len - e->raw_off;
        if (!e->inl)
            resp_arg_offsets(st.buf + e->raw_off, e->raw_off, e);
    }
    check_stream(&st, 0);
    stream_free(&st);
}

/* A 4 MB argument arriving in 64 KiB reads. */
Test(request, large_argument)
{
    size_t vlen = 4 << 20;
    struct stream st;
    struct expect e;
    size_t ncuts = 0, *cuts = malloc((vlen / 65536 + 2) * sizeof(*cuts));
    struct run run;
    int hl;

    st.buf = malloc(vlen + 64);
    hl = sprintf(st.buf, "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%zu\r\n", vlen);
    for (size_t i = 0; i < vlen; i++)
        st.buf[hl + i] = (char)('a' + i % 26);
    memcpy(st.buf + hl + vlen, "\r\n", 2);
    st.len = (size_t)hl + vlen + 2;
    memset(&e, 0, sizeof(e));
    e.raw_len = st.len;
    e.argc = 3;
    e.argv[0] = "SET";
    e.argv[1] = "big";
    e.argv[2] = st.buf + hl;
    e.alen[0] = 3;
    e.alen[1] = 3;
    e.alen[2] = vlen;
    resp_arg_offsets(st.buf, 0, &e);
    st.exp = &e;
    st.nexp = 1;
    for (size_t k = 65536; k < st.len; k += 65536)
        cuts[ncuts++] = k;
    run_init(&run, &st, "64 KiB reads");
    run_chunks(&run, cuts, ncuts);
    cr_assert_eq(run.rc, 0);
    cr_assert_eq(run.got, 1);
    cr_assert(req_framer_idle(run.f));
    run_done(&run);
    free(cuts);
    free(st.buf);
}

/* Bulks of 4 KiB or more are framed by hand, not by hiredis: several of
 * them, between small ones, in a pipeline, framed the same at every cut. */
Test(request, hand_framed_bulks)
{
    size_t sizes[3] = { 4096, 5000, 4097 };
    struct stream st;
    struct expect e[2];
    size_t off = 0;

    st.buf = malloc(20000);
    memset(e, 0, sizeof(e));
    off += (size_t)sprintf(st.buf, "*5\r\n$4\r\nHSET\r\n$1\r\nh\r\n");
    e[0].argc = 5;
    e[0].argv[0] = "HSET";
    e[0].argv[1] = "h";
    for (int i = 0; i < 3; i++) {
        off += (size_t)sprintf(st.buf + off, "$%zu\r\n", sizes[i]);
        memset(st.buf + off, 'a' + i, sizes[i]);
        e[0].argv[2 + i] = st.buf + off;
        e[0].alen[2 + i] = sizes[i];
        off += sizes[i];
        memcpy(st.buf + off, "\r\n", 2);
        off += 2;
    }
    e[0].alen[0] = 4;
    e[0].alen[1] = 1;
    e[0].raw_len = off;
    resp_arg_offsets(st.buf, 0, &e[0]);
    e[1].raw_off = off;
    off += (size_t)sprintf(st.buf + off, "*1\r\n$4\r\nPING\r\n");
    e[1].raw_len = off - e[1].raw_off;
    e[1].argc = 1;
    e[1].argv[0] = "PING";
    e[1].alen[0] = 4;
    resp_arg_offsets(st.buf + e[1].raw_off, e[1].raw_off, &e[1]);
    st.len = off;
    st.exp = e;
    st.nexp = 2;
    check_stream(&st, 0);
    free(st.buf);
}

/* A bulk framed by hand is checked as Redis checks it: what follows it
 * gets the same errors. */
Test(request, errors_after_hand_framed_bulk)
{
    static const struct { const char *tail; const char *msg; } cases[] = {
        { ":1\r\n", "ERR Protocol error: expected '$', got ':'" },
        { "$-1\r\n", "ERR Protocol error: invalid bulk length" },
        { "$600000000\r\n", "ERR Protocol error: invalid bulk length" },
        { "$x\r\n", "ERR Protocol error: invalid bulk length" },
    };
    char *buf = malloc(8192);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = (size_t)sprintf(buf, "*3\r\n$3\r\nSET\r\n$4096\r\n");
        memset(buf + n, 'v', 4096);
        n += 4096;
        n += (size_t)sprintf(buf + n, "\r\n%s", cases[i].tail);
        check_error_n(buf, n, 0, cases[i].msg);
    }
    free(buf);
}

/* With req_framer_set_stream(): a request whose large bulk is not all here
 * comes out early as its head; streamed, its rest comes out in parts that
 * add up to exactly its bytes, whatever the cuts, and the argument after
 * the large one is kept (req_framer_tail()); the next request is framed as
 * usual. Held, it comes out whole. */
static void check_streamed(const char *buf, size_t len, size_t reqlen, size_t step, int hold)
{
    struct req_framer *f = req_framer_new();
    struct request req;
    size_t pos = 0, end = 0, streamed = 0, heads = 0, whole = 0;
    char *chunk = NULL;

    req_framer_set_stream(f, 4096, 65536);
    while (end < len) {
        end = end + step < len ? end + step : len;
        free(chunk);
        chunk = malloc(end);            /* fresh each call: stale pointers show under ASan */
        memcpy(chunk, buf, end);
        int rc;
        while ((rc = req_next(f, chunk, end, &pos, &req)) != 0) {
            cr_assert_gt(rc, 0, "%s", req_framer_error(f));
            if (rc == REQ_HEAD) {
                heads++;
                cr_assert_eq(req.argc, 2);
                cr_assert_eq(req.head->total, 4);
                cr_assert_eq(req.head->big, 2);
                cr_assert_eq(req.head->big_len, 100000);
                cr_assert_eq(memcmp(req.raw.p, buf, req.raw.len), 0);
                streamed = req.raw.len;
                if (hold) {
                    req_framer_hold(f);
                } else {
                    pos = req_framer_stream(f);
                    cr_assert_eq(pos, streamed);
                }
            } else if (rc == REQ_PART) {
                cr_assert_eq(req.raw.p, chunk + streamed, "parts follow each other");
                streamed += req.raw.len;
                cr_assert_eq(req_framer_streaming(f), streamed < reqlen);
                if (streamed == reqlen) {       /* what came after the large bulk */
                    struct slice tail[2];
                    cr_assert_eq(req_framer_tail(f, tail, 0), -1);
                    cr_assert_eq(req_framer_tail(f, tail, 2), 1);
                    cr_assert_eq(tail[0].len, 1);
                    cr_assert_eq(tail[0].p[0], 'z');
                }
            } else if (++whole == 1 && (hold || heads == 0)) {
                cr_assert_eq(req.argc, 4, "the large request, whole");
                cr_assert_eq(req.raw.len, reqlen);
                cr_assert_eq(req.argv[2].len, 100000);
                cr_assert_eq(req.argv[3].len, 1);
            } else {
                cr_assert_eq(req.argc, 1, "the request after it");
            }
        }
    }
    cr_assert_eq(heads, step < reqlen ? 1 : 0, "step %zu", step);
    cr_assert_eq(whole, hold || step >= reqlen ? 2 : 1, "step %zu", step);
    if (!hold && step < reqlen)
        cr_assert_eq(streamed, reqlen);
    cr_assert(req_framer_idle(f));
    free(chunk);
    req_framer_free(f);
}

Test(request, stream_head_and_parts)
{
    size_t n = 100000;
    char *buf = malloc(n + 128);
    size_t len = (size_t)sprintf(buf, "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", n);
    memset(buf + len, 'x', n);
    len += n;
    len += (size_t)sprintf(buf + len, "\r\n$1\r\nz\r\n");
    size_t reqlen = len;
    len += (size_t)sprintf(buf + len, "*1\r\n$4\r\nPING\r\n");
    static const size_t steps[] = { 1, 7, 4096, 65536, 99991, 1 << 20 };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        check_streamed(buf, len, reqlen, steps[i], 0);
        check_streamed(buf, len, reqlen, steps[i], 1);
    }
    free(buf);
}

/* The arguments after a streamed bulk, whatever the cuts: small ones as
 * sent, one over REQ_TAIL_ARG_MAX bytes as an empty string. */
Test(request, stream_tail_arguments)
{
    size_t n = 100000, big = REQ_TAIL_ARG_MAX + 1;
    char *buf = malloc(n + big + 128);
    size_t len = (size_t)sprintf(buf, "*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", n);
    memset(buf + len, 'x', n);
    len += n;
    len += (size_t)sprintf(buf + len, "\r\n$2\r\nEX\r\n$%zu\r\n", big);
    memset(buf + len, 'y', big);
    len += big;
    len += (size_t)sprintf(buf + len, "\r\n$3\r\nGET\r\n");
    static const size_t steps[] = { 1, 3, 4096, 99991 };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        struct req_framer *f = req_framer_new();
        struct request req;
        size_t pos = 0, end = 0;
        int done = 0;
        req_framer_set_stream(f, 4096, 65536);
        while (end < len && !done) {
            end = end + steps[i] < len ? end + steps[i] : len;
            int rc;
            while (!done && (rc = req_next(f, buf, end, &pos, &req)) != 0) {
                cr_assert_gt(rc, 0);
                if (rc == REQ_HEAD)
                    pos = req_framer_stream(f);
                done = rc == REQ_PART && !req_framer_streaming(f);
            }
        }
        cr_assert(done, "step %zu", steps[i]);
        struct slice tail[4];
        cr_assert_eq(req_framer_tail(f, tail, 4), 3, "step %zu", steps[i]);
        cr_assert(tail[0].len == 2 && memcmp(tail[0].p, "EX", 2) == 0);
        cr_assert_eq(tail[1].len, 0);
        cr_assert(tail[2].len == 3 && memcmp(tail[2].p, "GET", 3) == 0);
        req_framer_free(f);
    }
    free(buf);
}

Test(request, idle_tracking)
{
    static const char msg[] = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    struct req_framer *f = req_framer_new();
    struct request req;
    size_t pos = 0;

    cr_assert(req_framer_idle(f));
    cr_assert_eq(req_next(f, msg, 13, &pos, &req), 0);
    cr_assert(!req_framer_idle(f), "a partial RESP request is held");
    cr_assert_eq(req_next(f, msg, sizeof(msg) - 1, &pos, &req), 1);
    cr_assert_eq(pos, sizeof(msg) - 1);
    cr_assert(req_framer_idle(f));
    req_framer_release(f);
    pos = 0;
    cr_assert_eq(req_next(f, msg, sizeof(msg) - 1, &pos, &req), 1, "works after release");
    cr_assert_eq(req.argc, 2);
    req_framer_free(f);
}

Test(request, errors_multibulk_length)
{
    ERR("*3000000000\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*2147483648\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*abc\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*-0\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*01\r\n$4\r\nPING\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("*+1\r\n$4\r\nPING\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("* 1\r\n$4\r\nPING\r\n", 0, "ERR Protocol error: invalid multibulk length");
    /* Redis looks for the CR: "1\n$4" is the number */
    ERR("*1\n$4\r\nPING\r\n", 0, "ERR Protocol error: invalid multibulk length");
    ERR("PING\r\n*x\r\n", 1, "ERR Protocol error: invalid multibulk length");
}

Test(request, errors_bulk_length)
{
    /* refused as soon as the header is there, without the payload */
    ERR("*1\r\n$600000000\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$536870913\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*2\r\n$3\r\nSET\r\n$9223372036854775807\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$99999999999999999999\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$-1\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$-2\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$-0\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*2\r\n$4\r\nECHO\r\n$-1\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$abc\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$04\r\nPING\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$+4\r\nPING\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$ 4\r\nPING\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$4\nPING\r\n", 0, "ERR Protocol error: invalid bulk length");
    ERR("*1\r\n$4\r\nPING\r\n*1\r\n$-1\r\n", 1, "ERR Protocol error: invalid bulk length");
    /* a CR without LF ends the length for the declared-bulk wait but not for
     * hiredis: found by fuzz_request, the same answer at every split */
    ERR("*6\r\n$227\r*\r\n'", 0, "ERR Protocol error: invalid bulk length");
}

Test(request, errors_expected_dollar)
{
    ERR("*1\r\n*1\r\n", 0, "ERR Protocol error: expected '$', got '*'");
    ERR("*1\r\n:1\r\n", 0, "ERR Protocol error: expected '$', got ':'");
    ERR("*1\r\n+OK\r\n", 0, "ERR Protocol error: expected '$', got '+'");
    ERR("*1\r\n-x\r\n", 0, "ERR Protocol error: expected '$', got '-'");
    ERR("*1\r\nx\r\n", 0, "ERR Protocol error: expected '$', got 'x'");
    /* Redis's error replies turn CR and LF into spaces */
    ERR("*1\r\n\r\n", 0, "ERR Protocol error: expected '$', got ' '");
    ERR("*2\r\n$1\r\na\r\n*1\r\n", 0, "ERR Protocol error: expected '$', got '*'");
    /* the type byte is checked before any count: a nil array is no exception */
    ERR("*1\r\n*-1\r\n", 0, "ERR Protocol error: expected '$', got '*'");
    ERR("*1\r\n*0\r\n", 0, "ERR Protocol error: expected '$', got '*'");
    /* a nested count hiredis refuses: Redis stops at the '*' (fuzz_request) */
    ERR("*2\r\n$1\r\nM\r\n*5\r$\n$3\r\n", 0, "ERR Protocol error: expected '$', got '*'");
    ERR("*2\r\n$1\r\na\r\n*-1\r\n", 0, "ERR Protocol error: expected '$', got '*'");
    ERR("*1\r\n_\r\n", 0, "ERR Protocol error: expected '$', got '_'");
    ERR("PING\r\n*1\r\n:1\r\n", 1, "ERR Protocol error: expected '$', got ':'");
    ERR("*1\r\n$4\r\nPING\r\nPING\r\n*1\r\n_\r\n", 2, "ERR Protocol error: expected '$', got '_'");
}

Test(request, errors_unbalanced_quotes)
{
    ERR("SET a \"b\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("SET a 'b\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("SET a \"b\"c\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("ECHO 'ab'c\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("ECHO \"a\"'b'\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("ECHO \"a\\\"\r\n", 0, "ERR Protocol error: unbalanced quotes in request");
    ERR("PING\r\nECHO \"x\n", 1, "ERR Protocol error: unbalanced quotes in request");
}

/* Redis's limits are "more than 64 KiB from the start of the line without
 * the character that ends it" (\n inline, \r for count lines). */
Test(request, errors_too_big_lines)
{
    size_t n = REQ_MAX_INLINE + 8;
    char *buf = malloc(n + 8);

    memset(buf, 'x', REQ_MAX_INLINE + 1);
    check_waits(buf, REQ_MAX_INLINE, 0);
    check_error_n(buf, REQ_MAX_INLINE + 1, 0, "ERR Protocol error: too big inline request");

    buf[0] = '*';
    memset(buf + 1, '1', REQ_MAX_INLINE);
    check_waits(buf, REQ_MAX_INLINE, 0);
    check_error_n(buf, REQ_MAX_INLINE + 1, 0, "ERR Protocol error: too big mbulk count string");

    memcpy(buf, "*1\r\n$", 5);
    memset(buf + 5, '1', REQ_MAX_INLINE);
    check_waits(buf, 4 + REQ_MAX_INLINE, 1);
    check_error_n(buf, 4 + REQ_MAX_INLINE + 1, 0, "ERR Protocol error: too big bulk count string");
    free(buf);
}

/* Lengths right at Redis's limits are accepted: the framer waits for the rest. */
Test(request, limits_accepted)
{
    WAITS("*1\r\n$536870912\r\n", 1);
    WAITS("*2147483647\r\n", 1);
    WAITS("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\nabc", 1);
}

/* Redis finds the end of an inline line with strchr(): a NUL byte hides the
 * newline after it, so the line waits for more bytes until it is too big. */
Test(request, inline_nul_byte_like_redis)
{
    static const char head[] = "ECHO a\0b\r\nPING\r\n";
    size_t n = sizeof(head) - 1 + REQ_MAX_INLINE;
    char *buf = malloc(n);

    memcpy(buf, head, sizeof(head) - 1);
    memset(buf + sizeof(head) - 1, 'x', REQ_MAX_INLINE);
    check_waits(buf, sizeof(head) - 1, 0);
    check_error_n(buf, n, 0, "ERR Protocol error: too big inline request");
    free(buf);
}

/* Valkey 9 splits inline arguments as a shell does: a closing quote ends the
 * quoted part, not the argument. */
static void check_joined(const char *line, int argc, const char *const *want)
{
    struct req_framer *f = req_framer_new();
    struct request req;
    size_t pos = 0;

    req_framer_set_inline_join(f, 1);
    cr_assert_eq(req_next(f, line, strlen(line), &pos, &req), 1, "%s: %s", line,
                 req_framer_error(f));
    cr_assert_eq(req.argc, argc, "%s: argc %d", line, req.argc);
    for (int i = 0; i < argc; i++)
        cr_assert(req.argv[i].len == strlen(want[i]) &&
                  memcmp(req.argv[i].p, want[i], req.argv[i].len) == 0, "%s: argv[%d]", line, i);
    req_framer_free(f);
}

Test(request, inline_join_valkey9)
{
    check_joined("ECHO 'it''s'\r\n", 2, (const char *const[]){ "ECHO", "its" });
    check_joined("ECHO \"a\"b\r\n", 2, (const char *const[]){ "ECHO", "ab" });
    check_joined("ECHO \"a\"'b' c\r\n", 3, (const char *const[]){ "ECHO", "ab", "c" });
    check_joined("SET k \"x y\"z\n", 3, (const char *const[]){ "SET", "k", "x yz" });

    struct req_framer *f = req_framer_new();
    struct request req;
    size_t pos = 0;
    req_framer_set_inline_join(f, 1);
    cr_assert_eq(req_next(f, "ECHO 'it\r\n", 10, &pos, &req), -1, "an open quote stays an error");
    req_framer_free(f);
}
