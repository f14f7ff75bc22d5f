/*
 * libFuzzer harness for the policy (proxy/policy.c): client bytes -> requests
 * -> verdicts -> the bytes ttlguard would send to Redis instead.
 *
 * Input: one byte that picks the server's command table (Redis 7.0.15, 8.0.6,
 * Valkey 8.1.1, 9.1.2) and the session's context (RESP3, inside MULTI, may
 * wrap in a MULTI of its own), then the client's bytes, framed by the request
 * framer. Every whole request goes through policy_check() under rules of
 * every kind: a rewrite rule with refresh = bound and max_ttl, a reject rule,
 * a log rule, a durable rule and a strict default.
 *
 * For each verdict:
 *   REJECT   one "-TTLGUARD ..." line, CRLF once, at the end;
 *   REWRITE  pre + the original argument bytes + tail frame as whole RESP
 *            requests and nothing else: one request (a script, or the command
 *            with changed arguments), or MULTI, the command, one EXPIRE per
 *            key, EXEC (exec_first + 1 requests); every key the command writes
 *            is still an argument of them, byte for byte;
 *   followup one whole request (the FIX_LUA script).
 *
 *   CC=clang cmake -S . -B build-fuzz -DTTLG_FUZZ=ON -DTTLG_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_policy
 *   build-fuzz/fuzz_policy tests/fuzz/corpus/policy -max_total_time=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "commands.h"
#include "config.h"
#include "events.h"
#include "policy.h"
#include "resp_request.h"
#include "fuzz_check.h"

static const char CONFIG[] =
    "[proxy]\nlisten = 127.0.0.1:1\nbackend = 127.0.0.1:2\n"
    "[ttl \"t:\"]\nttl = 900\naction = rewrite\nrefresh = bound\nmax_ttl = 3600\n"
    "[ttl \"r:\"]\nttl = 900\naction = reject\n"
    "[ttl \"l:\"]\nttl = 900\naction = log\n"
    "[durable \"d:\"]\nowner = o\nreason = r\nrebuild = b\n"
    "[default]\naction = rewrite\nttl = 60\nunknown = reject\n";

static const char *const SERVERS[] = { "redis:7.0.15", "redis:8.0.6", "valkey:8.1.1",
                                       "valkey:9.1.2" };
static struct command_set *sets[4];
static struct config cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[] = "/tmp/fuzz_policy.XXXXXX", err[512];
    int fd = mkstemp(path);
    check(fd >= 0 && write(fd, CONFIG, sizeof CONFIG - 1) == (ssize_t)(sizeof CONFIG - 1));
    close(fd);
    check(config_load(path, &cfg, err, sizeof err) == 0);
    unlink(path);
    check(events_init(uv_default_loop(), &cfg, err, sizeof err) == 0);
    for (int i = 0; i < 4; i++) {
        struct server_id id;
        check(server_id_parse(SERVERS[i], &id) == 0);
        sets[i] = command_set_new(&id);
    }
    return 0;
}

/* Frames all of p[0..n) as whole requests; returns their count, or -1 when
 * anything is left over or is not a request. Arguments go to args[]. */
static int frame_all(const char *p, size_t n, struct slice *args, int cap, int *nargs)
{
    struct req_framer *f = req_framer_new();
    size_t pos = 0;
    int count = 0;
    *nargs = 0;
    for (;;) {
        struct request req;
        int rc = req_next(f, p, n, &pos, &req);
        if (rc <= 0) {
            int whole = rc == 0 && pos == n && req_framer_idle(f);
            req_framer_free(f);
            return whole ? count : -1;
        }
        check(!req.inline_cmd);
        for (int i = 0; i < req.argc && *nargs < cap; i++)
            args[(*nargs)++] = req.argv[i];
        count++;
    }
}

static int has_arg(const struct slice *args, int n, struct slice key)
{
    for (int i = 0; i < n; i++)
        if (args[i].len == key.len && memcmp(args[i].p, key.p, key.len) == 0)
            return 1;
    return 0;
}

static void check_rewrite(const struct request *req, const struct cmd_info *ci,
                          const struct rewrite *rw)
{
    size_t n = rw->pre.len + rw->orig_args.len + rw->tail.len;
    char *all = malloc(n + 1);
    const struct slice parts[3] = { { rw->pre.p, rw->pre.len }, rw->orig_args,
                                    { rw->tail.p, rw->tail.len } };
    for (size_t i = 0, at = 0; i < 3; at += parts[i].len, i++)
        if (parts[i].len > 0)
            memcpy(all + at, parts[i].p, parts[i].len);

    int cap = req->argc * 2 + 64, nargs;
    struct slice *args = malloc(sizeof *args * (size_t)cap);
    int count = frame_all(all, n, args, cap, &nargs);
    check(count == (rw->exec_first > 0 ? rw->exec_first + 1 : 1));
    if (ci != NULL && ci->row != NULL) {
        struct key_ref *keys = malloc(sizeof *keys * (size_t)(req->argc + 1));
        int nk = command_keys(ci, req->argc, req->argv, keys);
        for (int i = 0; i < nk; i++)
            check(has_arg(args, nargs, req->argv[keys[i].argi]));
        free(keys);
    }
    free(args);
    free(all);
}

static void judge(const struct request *req, const struct command_set *set, unsigned ctx)
{
    static struct rewrite rw;
    const struct cmd_info *ci = command_resolve(set, req->argv[0].p, req->argv[0].len);
    struct ev_client client = { .addr = "fuzz", .db = 0 };
    struct policy_ctx pc = {
        .cmd = ci, .resp3 = ctx & 1, .in_multi = (ctx >> 1) & 1,
        .can_multi = !((ctx >> 1) & 1) && ((ctx >> 2) & 1), .client = &client,
    };
    enum verdict v = policy_check(&cfg, req, &pc, &rw);
    switch (v) {
    case V_REJECT:
        check(rw.err.len > 12 && memcmp(rw.err.p, "-TTLGUARD ", 10) == 0);
        check(memcmp(rw.err.p + rw.err.len - 2, "\r\n", 2) == 0);
        check(memchr(rw.err.p, '\n', rw.err.len) == rw.err.p + rw.err.len - 1);
        check(memchr(rw.err.p, '\r', rw.err.len) == rw.err.p + rw.err.len - 2);
        break;
    case V_REWRITE:
        check_rewrite(req, ci, &rw);
        break;
    default:
        check(v == V_FORWARD);
        break;
    }
    if (v != V_REJECT && rw.followup.len > 0) {
        int nargs;
        struct slice args[1];
        check(frame_all(rw.followup.p, rw.followup.len, args, 1, &nargs) == 1);
    }
    if (v != V_REJECT && rw.nprobe > 0) {
        /* One PTTL per carried key, and a record for each of their replies. */
        int nargs, cap = rw.nprobe * 2;
        struct slice *args = malloc(sizeof *args * (size_t)cap);
        check(frame_all(rw.probe.p, rw.probe.len, args, cap, &nargs) == rw.nprobe);
        free(args);
        for (int remaining = rw.nprobe; remaining > 0; remaining--)
            policy_probe_answered(&cfg, rw.probe_ev.p, rw.probe_ev.len, remaining, 1, &client);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const struct command_set *set = sets[data[0] & 3];
    unsigned ctx = data[0] >> 2;
    struct req_framer *f = req_framer_new();
    size_t pos = 0;
    struct request req;
    while (req_next(f, (const char *)data + 1, size - 1, &pos, &req) == 1)
        judge(&req, set, ctx);
    req_framer_free(f);
    return 0;
}
