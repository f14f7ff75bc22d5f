/*
 * policy: a request and the rules -> a verdict (see policy.h).
 *
 * Rewrites are atomic and reply-identical, in one of two forms:
 *
 *  - keys that may only be created without a TTL (INCR, HSET, LPUSH, and SET
 *    or GETSET once KEEPTTL is added): MULTI; cmd; EXPIRE key ttl NX; EXEC.
 *    The client gets the first element of EXEC's reply, which is exactly the
 *    command's own reply, whatever its type. Used when the client is not in
 *    a MULTI of its own, has no WATCH and does not suppress replies.
 *  - keys whose TTL the command would drop (*STORE, COPY, RENAME, ...), and
 *    the rest when the MULTI form is not possible: the command runs inside
 *    one Lua script (WRAP_LUA) that also puts the expiry back, and returns
 *    redis.pcall's result, errors included. Lua turns a nil bulk into false,
 *    which Redis turns back into the null of the caller's protocol; only
 *    doubles need the script to speak RESP3 (ZINCRBY, ZADD ... INCR), whose
 *    double Redis writes as a bulk string for a RESP2 caller, as the command
 *    itself does. Lua numbers are doubles: integers beyond 2^53 are rounded,
 *    which is why the MULTI form is preferred. EVAL carries the script body
 *    every time, so SCRIPT FLUSH, a restart or a failover never produce
 *    NOSCRIPT.
 *
 * Either way no other client, no crash and no failover can observe the key
 * without its TTL in between.
 *
 * Blocking commands cannot block inside a script, commands flagged noscript
 * cannot run in one at all, and a script would round the integers of INCR's
 * or BITFIELD's reply past 2^53: those run as sent and are followed by a
 * FIX_LUA call in the same pipeline (its reply is swallowed by the session).
 * That closes the gap as soon as Redis executes the next command of this
 * connection, but is not atomic; docs/reliability.md, "Limits", says so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "policy.h"
#include "util.h"

#define MAX_WRAP_ARGS 7000      /* Lua's unpack() limit is ~8000 values */

/* KEYS: the keys to protect. ARGV: ttl per key, mode per key ('c': may be
 * created, keep its TTL; 'o': may be overwritten, restore its expire time),
 * '3' or '2' (protocol for doubles), then the command and its arguments. */
static const char WRAP_LUA[] =
    "local n=#KEYS local t={} "
    "for i=1,n do if ARGV[n+i]=='o' then t[i]=redis.call('PEXPIRETIME',KEYS[i]) end end "
    "if ARGV[2*n+1]=='3' then redis.setresp(3) end "
    "local r=redis.pcall(unpack(ARGV,2*n+2)) "
    "if type(r)=='table' and r.err then return r end "
    "for i=1,n do local k=KEYS[i] if redis.call('PTTL',k)==-1 then "
    "local e=t[i] if e and e>0 then redis.call('PEXPIREAT',k,e) "
    "else redis.call('EXPIRE',k,ARGV[i]) end end end "
    "return r";

/* KEYS: keys that must not be left without a TTL; ARGV: ttl per key. */
static const char FIX_LUA[] =
    "for i,k in ipairs(KEYS) do if redis.call('PTTL',k)==-1 then "
    "redis.call('EXPIRE',k,ARGV[i]) end end return 0";

/* MOVE and COPY ... DB n, the key carried to database ARGV[2]. ARGV[1] 'w':
 * after the command, KEYS[1] (the destination) gets ARGV[3] seconds there if
 * it has no TTL; 'r': refused with error ARGV[3] when KEYS[1] (the source)
 * has none. Then the command and its arguments. A script may SELECT since
 * Redis 7.0 without changing its caller's database. */
static const char INTO_DB_LUA[] =
    "local m=ARGV[1] "
    "if m=='r' and redis.call('PTTL',KEYS[1])==-1 then return redis.error_reply(ARGV[3]) end "
    "local r=redis.pcall(unpack(ARGV,4)) "
    "if m=='w' and r==1 then redis.call('SELECT',ARGV[2]) "
    "if redis.call('PTTL',KEYS[1])==-1 then redis.call('EXPIRE',KEYS[1],ARGV[3]) end end "
    "return r";

/* MIGRATE: the keys leave for another server. ARGV[i] per key: 'r', refused
 * with error ARGV[n+i] when KEYS[i] has no TTL; 'w', given ARGV[n+i] seconds
 * before it leaves, taken back if the migration fails (it changes nothing
 * then). Then the command. */
static const char LEAVE_LUA[] =
    "local n=#KEYS local g={} "
    "for i=1,n do if ARGV[i]=='r' and redis.call('PTTL',KEYS[i])==-1 then "
    "return redis.error_reply(ARGV[n+i]) end end "
    "for i=1,n do if ARGV[i]=='w' and redis.call('PTTL',KEYS[i])==-1 then "
    "redis.call('EXPIRE',KEYS[i],ARGV[n+i]) g[#g+1]=KEYS[i] end end "
    "local r=redis.pcall(unpack(ARGV,2*n+1)) "
    "if type(r)=='table' and (r.err or r.ok=='NOKEY') then "
    "for _,k in ipairs(g) do redis.call('PERSIST',k) end end "
    "return r";

/* One key's finding. */
struct finding {
    int argi;                   /* the key in argv */
    const struct rule *rule;
    enum ev_effect effect;
    enum ev_action action;
    int ttl_argi;               /* exceeds-max-ttl: the argument to cap */
    unsigned char unit;
};

static struct key_ref *keys;
static struct finding *found;
static struct slice *nargv;     /* argv of a rewritten command */
static int cap;                 /* of the three arrays above */
static char numbuf[8][24];      /* new numeric arguments */

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */

static void sb_str(struct sbuf *b, const char *s)
{
    sbuf_add(b, s, strlen(s));
}


/* "*<n>\r\n" or "$<n>\r\n", without printf: every rewrite writes several. */
static void sb_header(struct sbuf *b, char type, uint64_t n)
{
    char tmp[24];
    tmp[0] = type;
    size_t len = 1 + u64_to_dec(tmp + 1, n);
    tmp[len++] = '\r';
    tmp[len++] = '\n';
    sbuf_add(b, tmp, len);
}

static void sb_bulk(struct sbuf *b, const char *p, size_t n)
{
    sb_header(b, '$', n);
    sbuf_add(b, p, n);
    sbuf_add(b, "\r\n", 2);
}

static void sb_bulk_str(struct sbuf *b, const char *s)
{
    sb_bulk(b, s, strlen(s));
}

static void sb_bulk_u64(struct sbuf *b, uint64_t v)
{
    char tmp[20];
    sb_bulk(b, tmp, u64_to_dec(tmp, v));
}

static void sb_args(struct sbuf *b, int argc, const struct slice *argv)
{
    for (int i = 0; i < argc; i++)
        sb_bulk(b, argv[i].p, argv[i].len);
}

/* ------------------------------------------------------------------------ */

int policy_inactive(const struct config *cfg)
{
    return cfg->rules.n == 0 && cfg->rules.dflt.action == ACTION_ALLOW &&
           cfg->rules.dflt.unknown != UNKNOWN_REJECT;
}

static void ensure_cap(int argc)
{
    if (argc <= cap)
        return;
    cap = argc * 2;
    keys = xrealloc(keys, sizeof *keys * (size_t)cap);
    found = xrealloc(found, sizeof *found * (size_t)cap);
    nargv = xrealloc(nargv, sizeof *nargv * (size_t)cap);
}

/* The TTL argument as seconds from now; -1 when it is not a number (Redis
 * will refuse the command itself). */
static int ttl_seconds(struct slice arg, enum ttl_unit unit, long long *secs)
{
    long long v;
    if (slice_to_ll(arg, &v) != 0)
        return -1;
    switch (unit) {
    case TTL_SEC:      *secs = v; break;
    case TTL_MS:       *secs = v / 1000; break;
    case TTL_UNIX_SEC: *secs = v - (long long)(now_ms_wall() / 1000); break;
    case TTL_UNIX_MS:  *secs = (v - (long long)now_ms_wall()) / 1000; break;
    }
    return 0;
}

static long long ttl_in_unit(long long secs, enum ttl_unit unit)
{
    switch (unit) {
    case TTL_SEC:      return secs;
    case TTL_MS:       return secs * 1000;
    case TTL_UNIX_SEC: return (long long)(now_ms_wall() / 1000) + secs;
    case TTL_UNIX_MS:  return (long long)now_ms_wall() + secs * 1000;
    }
    return secs;
}

/* EXPIRE key ttl [NX|XX|GT|LT]: can it extend an existing TTL? NX only
 * sets one where there is none; LT only shortens. */
static int expire_may_extend(int argc, const struct slice *argv)
{
    for (int i = 3; i < argc; i++)
        if (slice_eq_nocase(argv[i], "nx") || slice_eq_nocase(argv[i], "lt"))
            return 0;
    return 1;
}

/* Printable key for an error line: no CR/LF, bounded. */
static void sb_key(struct sbuf *b, struct slice key)
{
    size_t n = key.len > 100 ? 100 : key.len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key.p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            sbuf_add(b, &key.p[i], 1);
        else
            sbuf_printf(b, "\\x%02x", c);
    }
    if (n < key.len)
        sbuf_add(b, "...", 3);
}

/* The command's name for an error line: upper case, printable, bounded. */
static void cmd_upper(struct slice cmd, char name[33])
{
    size_t n = cmd.len < 32 ? cmd.len : 32;
    for (size_t i = 0; i < n; i++) {
        char c = cmd.p[i];
        name[i] = (char)((c >= 'a' && c <= 'z') ? c - 32 : (c < 0x20 || c > 0x7e) ? '?' : c);
    }
    name[n] = '\0';
}

static void build_reject(struct sbuf *b, struct slice cmd, enum cmd_id id, struct slice key,
                         const struct finding *f)
{
    const struct rule *r = f->rule;
    char name[33];
    cmd_upper(cmd, name);

    b->len = 0;
    sbuf_printf(b, "-TTLGUARD %s would ", name);
    switch (f->effect) {
    case EFF_CREATES_WITHOUT_TTL: sbuf_printf(b, "create without a TTL '"); break;
    case EFF_DROPS_TTL:           sbuf_printf(b, "drop the TTL of '"); break;
    case EFF_PERSIST:             sbuf_printf(b, "remove the TTL of '"); break;
    case EFF_EXCEEDS_MAX_TTL:     sbuf_printf(b, "set a TTL above max_ttl %lld s on '", r->max_ttl); break;
    case EFF_EXTENDS_TTL:         sbuf_printf(b, "extend the TTL of '"); break;
    default: break;
    }
    sb_key(b, key);
    sbuf_printf(b, "' (rule %s): ", r->label);

    long long ttl = r->ttl > 0 ? r->ttl : 3600;
    switch (f->effect) {
    case EFF_CREATES_WITHOUT_TTL:
        if (id == CID_SET || id == CID_SETNX)
            sbuf_printf(b, "give it a TTL in the same call: SET key value EX %lld", ttl);
        else
            sbuf_printf(b, "give it a TTL in the same MULTI/EXEC or script: "
                         "%s ...; EXPIRE key %lld NX", name, ttl);
        break;
    case EFF_DROPS_TTL:
        if (id == CID_SET || id == CID_GETSET)
            sbuf_printf(b, "keep the TTL with SET key value KEEPTTL%s, or set one with EX %lld",
                      id == CID_GETSET ? " GET" : "", ttl);
        else
            sbuf_printf(b, "read PEXPIRETIME first and restore it with PEXPIREAT in the same "
                         "MULTI/EXEC or script, or add EXPIRE key %lld", ttl);
        break;
    case EFF_PERSIST:
        sbuf_printf(b, "keys under this rule must expire; change the TTL with EXPIRE key seconds, "
                     "or register the prefix as [durable]");
        break;
    case EFF_EXCEEDS_MAX_TTL:
        sbuf_printf(b, "use a TTL of at most %lld seconds", r->max_ttl);
        break;
    case EFF_EXTENDS_TTL:
        sbuf_printf(b, "the first TTL is a bound (refresh = bound): use EXPIRE key seconds NX");
        break;
    default:
        break;
    }
    sbuf_add(b, "\r\n", 2);
}

/* The refusal INTO_DB_LUA or LEAVE_LUA sends when a key has no TTL: no
 * "-" and no CRLF, the script adds them. */
static void build_carry_reject(struct sbuf *b, struct slice cmd, struct slice key,
                               const struct rule *r, const char *where, int copy)
{
    char name[33];
    cmd_upper(cmd, name);
    b->len = 0;
    sbuf_printf(b, "TTLGUARD %s would carry '", name);
    sb_key(b, key);
    long long ttl = r->ttl > 0 ? r->ttl : 3600;
    sbuf_printf(b, "' to %s without a TTL (rule %s): ", where, r->label);
    if (copy)
        sbuf_printf(b, "the copy takes the source's TTL: give the source one first, or copy in "
                     "a script that then runs SELECT db; EXPIRE key %lld NX", ttl);
    else
        sbuf_printf(b, "give it one first: EXPIRE key %lld NX", ttl);
}

/* How strict an `unknown` setting is: the strictest of a command's rules
 * decides. */
static int unknown_rank(enum rule_unknown u)
{
    switch (u) {
    case UNKNOWN_REJECT:  return 3;
    case UNKNOWN_PROTECT: return 2;
    case UNKNOWN_LOG:     return 1;
    default:              return 0;
    }
}

static void build_unjudged_reject(struct sbuf *b, struct slice cmd, const struct rule *r,
                                  const char *why)
{
    char name[33];
    cmd_upper(cmd, name);
    b->len = 0;
    sbuf_printf(b, "-TTLGUARD %s: %s, and rule %s has unknown = reject: send it straight to "
                 "the server, or set unknown = log in that rule\r\n", name, why, r->label);
}

/* The request's bytes after its "*N\r\n" line, for reuse in a rewrite. */
static struct slice args_span(const struct request *req)
{
    struct slice s = { NULL, 0 };
    if (req->inline_cmd)
        return s;
    const char *nl = memchr(req->raw.p, '\n', req->raw.len);
    s.p = nl + 1;
    s.len = req->raw.len - (size_t)(s.p - req->raw.p);
    return s;
}

/* FIX_LUA over the protected keys. */
static void build_followup(struct sbuf *b, const struct request *req, int np)
{
    b->len = 0;
    sb_header(b, '*', 3 + 2 * np);
    sb_bulk_str(b, "EVAL");
    sb_bulk_str(b, FIX_LUA);
    sb_bulk_u64(b, np);
    for (int i = 0; i < np; i++)
        sb_bulk(b, req->argv[found[i].argi].p, req->argv[found[i].argi].len);
    for (int i = 0; i < np; i++)
        sb_bulk_u64(b, found[i].rule->ttl);
}

/* Of keys[0..nk), those under a rule that judges (not durable, not allow)
 * go to nargv[] for the event (*nrule of them), and those a rewrite rule
 * with a TTL can give one to go to found[] (returns how many). unjudged: a
 * command the proxy cannot judge, where only keys it may write count, under
 * rules with unknown = protect. */
static int keys_to_protect(const struct config *cfg, const struct request *req, int nk,
                           int unjudged, int *nrule)
{
    int np = 0;
    *nrule = 0;
    for (int i = 0; i < nk; i++) {
        struct slice key = req->argv[keys[i].argi];
        const struct rule *r = rules_match(&cfg->rules, key.p, key.len);
        if (r->kind == RULE_DURABLE || r->action == ACTION_ALLOW)
            continue;
        nargv[(*nrule)++] = key;
        if (r->action != ACTION_REWRITE || r->ttl <= 0 ||
            (unjudged && (keys[i].effect == TE_NONE || r->unknown != UNKNOWN_PROTECT)))
            continue;
        found[np++] = (struct finding){ .argi = keys[i].argi, .rule = r,
                                        .effect = EFF_CREATES_WITHOUT_TTL,
                                        .action = EACT_REWRITTEN, .ttl_argi = -1 };
    }
    return np;
}

/* Scripts and functions declare their keys; what they do to them happens out
 * of sight. Record them; in rewrite mode make sure they end with a TTL. */
static enum verdict check_script(const struct config *cfg, const struct request *req, int nk,
                                 const struct policy_ctx *ctx, struct rewrite *rw)
{
    int nrule;
    int np = keys_to_protect(cfg, req, nk, 0, &nrule);
    char detail[128];

    if (nrule == 0)
        return V_FORWARD;

    /* Name the script as Redis does: EVAL's body hashed, EVALSHA's sha, or
     * the function. */
    struct slice name = req->argv[0];
    enum cmd_id id = ctx->cmd->id;
    if (id == CID_EVAL || id == CID_EVAL_RO) {
        char sha[41];
        sha1_hex(req->argv[1].p, req->argv[1].len, sha);
        snprintf(detail, sizeof detail, "sha=%s", sha);
    } else if (id == CID_EVALSHA || id == CID_EVALSHA_RO) {
        int n = snprintf(detail, sizeof detail, "sha=%.*s",
                         (int)(req->argv[1].len > 40 ? 40 : req->argv[1].len), req->argv[1].p);
        for (int i = 4; i < n; i++)
            detail[i] = (char)(detail[i] >= 'A' && detail[i] <= 'F' ? detail[i] + 32 : detail[i]);
    } else {
        snprintf(detail, sizeof detail, "function=%.*s",
                 (int)(req->argv[1].len > 64 ? 64 : req->argv[1].len), req->argv[1].p);
    }
    events_unverified_keys(name, detail, nargv, nrule, ctx->client);
    if (np > 0)
        build_followup(&rw->followup, req, np);
    return V_FORWARD;
}

static enum verdict unjudged(const struct config *cfg, const struct request *req,
                             const struct policy_ctx *ctx, const char *why, struct rewrite *rw);
static enum verdict rewrite_command(const struct request *req, const struct policy_ctx *ctx,
                                    unsigned flags, int nf, struct rewrite *rw);

/* The guard record: the command's name, then each key the server may
 * refuse, each as a 4-byte length and the bytes. */
static void guard_add(struct sbuf *b, struct slice s)
{
    uint32_t n = (uint32_t)s.len;
    sbuf_add(b, &n, sizeof n);
    sbuf_add(b, s.p, s.len);
}

static int guard_next(const char **p, const char *end, struct slice *out)
{
    uint32_t n;
    if ((size_t)(end - *p) < sizeof n)
        return -1;
    memcpy(&n, *p, sizeof n);
    *p += sizeof n;
    if ((size_t)(end - *p) < n)
        return -1;
    out->p = *p;
    out->len = n;
    *p += n;
    return 0;
}

int policy_guard_refused(const struct config *cfg, const char *guard, size_t len,
                          const char *err, size_t errlen, const struct ev_client *client)
{
    static const char mark[] = " would carry '";
    const char *p = guard, *end = guard + len;
    struct slice name, key;
    struct sbuf esc = { 0 };

    if (errlen < 10 || memcmp(err, "-TTLGUARD ", 10) != 0 || guard_next(&p, end, &name) < 0)
        return 0;
    const char *at = memmem(err, errlen, mark, sizeof mark - 1);
    if (at == NULL)
        return 0;
    at += sizeof mark - 1;
    size_t seen = errlen - (size_t)(at - err);      /* the error may be cut short */
    while (guard_next(&p, end, &key) == 0) {
        esc.len = 0;
        sb_key(&esc, key);
        sbuf_add(&esc, "'", 1);
        size_t n = esc.len < seen ? esc.len : seen;
        if (memcmp(esc.p, at, n) == 0) {
            const struct rule *r = rules_match(&cfg->rules, key.p, key.len);
            events_violation(r, name, key, EFF_MOVES_WITHOUT_TTL, EACT_REJECTED, client);
            break;
        }
    }
    free(esc.p);
    return 1;
}

/* A key carried to another database or server under a log or rewrite rule
 * is a violation only when it has no TTL (a copy: when its source, src, has
 * none), which only the server knows. A PTTL of src sent right before the
 * command tells (policy_probe_answered()): no event for a key that keeps its
 * TTL. Where the proxy cannot send one (inside the client's MULTI, with WATCH
 * active, replies off) the event is recorded now, for every such key. */
static void carry_event(const struct request *req, struct slice key, struct slice src,
                        const struct rule *r, enum ev_action act, const struct policy_ctx *ctx,
                        struct rewrite *rw)
{
    if (!ctx->can_multi) {
        events_violation(r, req->argv[0], key, EFF_MOVES_WITHOUT_TTL, act, ctx->client);
        return;
    }
    if (rw->nprobe == 0)
        guard_add(&rw->probe_ev, req->argv[0]);
    char a = (char)act;
    sbuf_add(&rw->probe_ev, &a, 1);
    guard_add(&rw->probe_ev, key);
    sb_header(&rw->probe, '*', 2);
    sb_bulk_str(&rw->probe, "PTTL");
    sb_bulk(&rw->probe, src.p, src.len);
    rw->nprobe++;
}

void policy_probe_answered(const struct config *cfg, const char *rec, size_t len,
                           int remaining, int no_ttl, const struct ev_client *client)
{
    const char *p = rec, *end = rec + len;
    struct slice name, key;
    enum ev_action act = EACT_LOGGED;
    int n = 0;

    if (!no_ttl || guard_next(&p, end, &name) < 0)
        return;
    /* After the name, an action byte and a key per probe, in sending order. */
    const char *first = p;
    while (p < end) {
        p++;
        if (guard_next(&p, end, &key) < 0)
            return;
        n++;
    }
    if (remaining < 1 || remaining > n)
        return;
    p = first;
    for (int i = 0; i <= n - remaining; i++) {
        act = (enum ev_action)*p++;
        guard_next(&p, end, &key);
    }
    const struct rule *r = rules_match(&cfg->rules, key.p, key.len);
    if (r->kind != RULE_DURABLE && r->action != ACTION_ALLOW)  /* unless a reload said so */
        events_violation(r, name, key, EFF_MOVES_WITHOUT_TTL, act, client);
}

/* The command itself: its original argument bytes as far as they are
 * unchanged (rw->orig_args, sent as they are: a large value is not copied),
 * the rest, argv[m..argc), into rw->tail after them; all of argv into b for
 * an inline request or one changed from its name on. */
static void command_bytes(struct sbuf *b, const struct request *req, int modified, int argc,
                          const struct slice *argv, struct rewrite *rw)
{
    int m = 0;
    if (!req->inline_cmd)
        while (m < argc && m < req->argc && argv[m].p == req->argv[m].p &&
               argv[m].len == req->argv[m].len)
            m++;
    if (m == 0) {
        sb_args(b, argc, argv);
        return;
    }
    rw->orig_args = args_span(req);
    if (!modified)
        return;
    const struct slice *last = &req->argv[m - 1];
    rw->orig_args.len = (size_t)(last->p + last->len + 2 - rw->orig_args.p);
    sb_args(&rw->tail, argc - m, argv + m);
}

/* INTO_DB_LUA for MOVE or COPY ... DB n: one key, found[0] (MOVE's, or COPY's
 * destination, whose TTL is the source's). */
static void into_db_script(const struct request *req, int db_argi, struct rewrite *rw)
{
    const struct finding *f = &found[0];
    struct sbuf *b = &rw->pre;
    int reject = f->action == EACT_REJECTED;
    int src = reject ? 1 : f->argi;         /* reject checks the source */
    struct slice db = req->argv[db_argi];
    sb_header(b, '*', 3 + 1 + 3 + req->argc);
    sb_bulk_str(b, "EVAL");
    sb_bulk_str(b, INTO_DB_LUA);
    sb_bulk_str(b, "1");
    sb_bulk(b, req->argv[src].p, req->argv[src].len);
    sb_bulk_str(b, reject ? "r" : "w");
    sb_bulk(b, db.p, db.len);
    if (!reject) {
        sb_bulk_u64(b, f->rule->ttl);
        return;
    }
    char where[40];
    struct sbuf msg = { 0 };
    snprintf(where, sizeof where, "db %.*s", (int)(db.len > 20 ? 20 : db.len), db.p);
    build_carry_reject(&msg, req->argv[0], req->argv[f->argi], f->rule, where, src != f->argi);
    sb_bulk(b, msg.p, msg.len);
    free(msg.p);
    guard_add(&rw->guard, req->argv[f->argi]);
}

/* LEAVE_LUA for MIGRATE: found[0..np), each given its TTL or refused. */
static void leave_script(const struct request *req, int np, struct rewrite *rw)
{
    struct sbuf *b = &rw->pre, msg = { 0 };
    sb_header(b, '*', 3 + 3 * np + req->argc);
    sb_bulk_str(b, "EVAL");
    sb_bulk_str(b, LEAVE_LUA);
    sb_bulk_u64(b, np);
    for (int i = 0; i < np; i++)
        sb_bulk(b, req->argv[found[i].argi].p, req->argv[found[i].argi].len);
    for (int i = 0; i < np; i++)
        sb_bulk_str(b, found[i].action == EACT_REJECTED ? "r" : "w");
    for (int i = 0; i < np; i++) {
        const struct finding *f = &found[i];
        if (f->action != EACT_REJECTED) {
            sb_bulk_u64(b, f->rule->ttl);
            continue;
        }
        build_carry_reject(&msg, req->argv[0], req->argv[f->argi], f->rule, "another server", 0);
        sb_bulk(b, msg.p, msg.len);
        guard_add(&rw->guard, req->argv[f->argi]);
    }
    free(msg.p);
}

/* MOVE, COPY ... DB n, MIGRATE: keys go to another database or server with
 * the TTL they have. Only one that has none already (leaked, or older than
 * its rule) arrives without, and only the server knows which: the command
 * runs in a script that checks, atomically. Rewrite gives such a key its
 * rule's TTL where it lands (before it leaves, for MIGRATE); reject refuses
 * the command, and its event is recorded when the server did refuse it
 * (policy_guard_refused()); log records every such command. */
static enum verdict check_carry(const struct config *cfg, const struct request *req, int nk,
                                const struct policy_ctx *ctx, struct rewrite *rw)
{
    struct slice name = req->argv[0];
    int np = 0, nrej = 0;
    int db_argi = keys[0].db_argi;

    for (int i = 0; i < nk; i++) {
        struct slice key = req->argv[keys[i].argi];
        const struct rule *r = rules_match(&cfg->rules, key.p, key.len);
        if (r->kind == RULE_DURABLE) {
            events_durable_write(r, name, key, 0, ctx->client);
            continue;
        }
        if (r->action == ACTION_ALLOW ||
            (r->action == ACTION_REWRITE && r->ttl <= 0))
            continue;
        /* MOVE key db, COPY src dst DB n: the TTL is the source's. */
        struct slice src = db_argi >= 0 ? req->argv[1] : key;
        if (r->action == ACTION_LOG) {
            carry_event(req, key, src, r, EACT_LOGGED, ctx, rw);
            continue;
        }
        if (r->action == ACTION_REWRITE)
            carry_event(req, key, src, r, EACT_REWRITTEN, ctx, rw);
        else
            nrej++;
        found[np].argi = keys[i].argi;
        found[np].rule = r;
        found[np].action = r->action == ACTION_REWRITE ? EACT_REWRITTEN : EACT_REJECTED;
        np++;
    }
    if (np == 0)
        return V_FORWARD;           /* log rules only: forwarded after the probes */
    if (req->argc + 3 * np >= MAX_WRAP_ARGS) {
        rw->nprobe = 0;
        return unjudged(cfg, req, ctx, "too many keys for the proxy's script", rw);
    }
    if (nrej > 0)
        guard_add(&rw->guard, name);

    if (db_argi >= 0)
        into_db_script(req, db_argi, rw);
    else
        leave_script(req, np, rw);
    command_bytes(&rw->pre, req, 0, req->argc, req->argv, rw);
    return V_REWRITE;
}

/* A command whose keys are known but whose effect on their TTLs is not (an
 * argument the table does not know, a server newer than the table), under
 * unknown = protect: every key it may write that falls under a rewrite rule
 * with a TTL and unknown = protect is protected the way derived commands are,
 * MULTI; cmd; EXPIRE key ttl NX ...; EXEC, whose reply is the command's own
 * whatever its type. A key that had a TTL and lost it gets the rule's. The
 * keys it only reads are left alone. nk keys are in keys[]. */
static enum verdict protect_unjudged(const struct config *cfg, const struct request *req,
                                     int nk, const struct policy_ctx *ctx, const char *why,
                                     struct rewrite *rw)
{
    static const char how[] = "; protected: each key it may write under a rewrite rule "
                              "ends with a TTL (EXPIRE key ttl NX in its MULTI)";
    char detail[256];
    int nrule;
    int np = keys_to_protect(cfg, req, nk, 1, &nrule);

    snprintf(detail, sizeof detail, "%s%s", why, np > 0 ? how : "");
    events_unverified_keys(req->argv[0], detail, nargv, nrule, ctx->client);
    if (np == 0)
        return V_FORWARD;
    unsigned flags = command_flags(ctx->cmd->row) & (CMD_BLOCKING | CMD_NOSCRIPT);
    return rewrite_command(req, ctx, flags | CMD_DERIVED, np, rw);
}

/* A command the proxy cannot judge: the rule option `unknown` of the rules
 * its keys fall under decides (the strictest of them); the default rule's
 * when it names no key; the strictest of every rule when its keys cannot be
 * known (a name the server did not list, a derived row whose key specs may
 * miss keys). */
static enum verdict unjudged(const struct config *cfg, const struct request *req,
                             const struct policy_ctx *ctx, const char *why, struct rewrite *rw)
{
    const struct rule *decides = &cfg->rules.dflt;
    int nk = ctx->cmd != NULL ? command_key_args(ctx->cmd, req->argc, req->argv, keys) : -1;
    int found_rule = 0;

    for (size_t i = 0; nk < 0 && i < cfg->rules.n; i++) {
        const struct rule *r = &cfg->rules.v[i];
        if (r->kind != RULE_DURABLE && unknown_rank(r->unknown) > unknown_rank(decides->unknown))
            decides = r;
    }
    for (int i = 0; i < nk; i++) {
        struct slice key = req->argv[keys[i].argi];
        const struct rule *r = rules_match(&cfg->rules, key.p, key.len);
        if (r->kind == RULE_DURABLE)
            continue;
        if (!found_rule || unknown_rank(r->unknown) > unknown_rank(decides->unknown))
            decides = r;
        found_rule = 1;
    }
    if (nk > 0 && !found_rule)
        return V_FORWARD;           /* every key is durable */
    switch (decides->unknown) {
    case UNKNOWN_ALLOW:
        return V_FORWARD;
    case UNKNOWN_REJECT: {
        char detail[160];
        snprintf(detail, sizeof detail, "%s; rejected (rule %s, unknown = reject)", why,
                 decides->label);
        events_unverified(req->argv[0], detail, ctx->client);
        build_unjudged_reject(&rw->err, req->argv[0], decides, why);
        return V_REJECT;
    }
    case UNKNOWN_PROTECT:
        if (nk > 0)
            return protect_unjudged(cfg, req, nk, ctx, why, rw);
        break;                      /* no key the proxy can find: as log */
    default:
        break;
    }
    events_unverified(req->argv[0], why, ctx->client);
    return V_FORWARD;
}

/* Why command_keys() could not judge a command of a row with these flags,
 * on a server with these features. */
static const char *unjudged_why(unsigned flags, unsigned feat)
{
    if (flags & CMD_DERIVED)
        return "its key specs say too little to judge it";
    if ((feat & FT_NEWER) && !(flags & CMD_UNVERIFIED))
        return "arguments the command table does not know (the server is newer than the table)";
    return "not judged by the proxy";
}

/* What one key's write breaks under its rule r: 0, 1 or 2 findings into f
 * (a TTL both over max_ttl and extending a bound: two for the same key). */
static int key_findings(const struct request *req, unsigned flags, const struct key_ref *k,
                        const struct rule *r, struct finding *f)
{
    f->argi = k->argi;
    f->rule = r;
    f->ttl_argi = -1;
    switch (k->effect) {
    case TE_CREATE:     f->effect = EFF_CREATES_WITHOUT_TTL; return 1;
    case TE_OVERWRITE:  f->effect = EFF_DROPS_TTL; return 1;
    case TE_PERSIST:    f->effect = EFF_PERSIST; return 1;
    case TE_SETS_TTL:   break;
    default:            return 0;
    }
    long long secs = 0;
    if (k->ttl_argi < 0 || ttl_seconds(req->argv[k->ttl_argi], k->ttl_unit, &secs) != 0)
        return 0;
    int n = 0;
    if (r->max_ttl > 0 && secs > r->max_ttl) {
        f[0].effect = EFF_EXCEEDS_MAX_TTL;
        f[0].ttl_argi = k->ttl_argi;
        f[0].unit = k->ttl_unit;
        n = 1;
    }
    if ((flags & CMD_EXPIRE) && r->refresh == REFRESH_BOUND &&
        expire_may_extend(req->argc, req->argv)) {
        f[n] = f[0];
        f[n].effect = EFF_EXTENDS_TTL;
        n++;
    }
    return n;
}

static enum ev_action finding_action(const struct rule *r, enum ev_effect e)
{
    switch (r->action) {
    case ACTION_LOG:
        return EACT_LOGGED;
    case ACTION_REJECT:
        /* A bound cannot be checked without reading the key: the LT form
         * enforces it whatever the key holds. */
        return e == EFF_EXTENDS_TTL ? EACT_REWRITTEN : EACT_REJECTED;
    default:
        return e == EFF_PERSIST ? EACT_REJECTED : EACT_REWRITTEN;
    }
}

/* The findings of every key the command writes, into found[] (durable
 * writes are recorded on the way, when record). Returns how many. */
static int find_violations(const struct config *cfg, const struct request *req, int nk,
                           unsigned flags, const struct policy_ctx *ctx, int record)
{
    int nf = 0;
    for (int i = 0; i < nk; i++) {
        struct slice key = req->argv[keys[i].argi];
        const struct rule *r = rules_match(&cfg->rules, key.p, key.len);
        if (r->kind == RULE_DURABLE) {
            if (record)
                events_durable_write(r, req->argv[0], key, keys[i].effect == TE_SETS_TTL,
                                     ctx->client);
            continue;
        }
        if (r->action == ACTION_ALLOW)
            continue;
        int n = key_findings(req, flags, &keys[i], r, &found[nf]);
        for (int j = nf; j < nf + n; j++)
            found[j].action = finding_action(r, found[j].effect);
        nf += n;
    }
    return nf;
}

/* The arguments that change (nargv[0..*argc)): TTLs capped to max_ttl,
 * EXPIRE ... LT for a bound, SET/GETSET ... KEEPTTL. The keys the rewrite
 * must protect are compacted to found[0..*np). Returns 1 when argv changed. */
static int new_args(const struct request *req, enum cmd_id id, int nf, int *argc, int *np)
{
    int modified = 0, nnum = 0;
    *argc = req->argc;
    *np = 0;
    memcpy(nargv, req->argv, sizeof *nargv * (size_t)*argc);
    for (int i = 0; i < nf; i++) {
        struct finding *f = &found[i];
        if (f->action != EACT_REWRITTEN)
            continue;
        if (f->effect == EFF_EXCEEDS_MAX_TTL && nnum < 8) {
            int n = snprintf(numbuf[nnum], sizeof numbuf[nnum], "%lld",
                             ttl_in_unit(f->rule->max_ttl, f->unit));
            nargv[f->ttl_argi].p = numbuf[nnum];
            nargv[f->ttl_argi].len = (size_t)n;
            nnum++;
            modified = 1;
        } else if (f->effect == EFF_EXTENDS_TTL) {
            /* A bound: EXPIRE key ttl [XX] [GT] -> EXPIRE key ttl [XX] LT.
             * LT never extends, still shortens, and treats a key without a
             * TTL as infinite, so it still gives one to such a key. */
            static const struct slice lt = { "LT", 2 };
            int j = 3;
            for (int k = 3; k < *argc; k++)
                if (slice_eq_nocase(nargv[k], "xx"))
                    nargv[j++] = nargv[k];
            nargv[j++] = lt;
            *argc = j;
            modified = 1;
        } else if (f->effect == EFF_CREATES_WITHOUT_TTL || f->effect == EFF_DROPS_TTL) {
            found[(*np)++] = *f;        /* compact: protected keys first */
        }
    }
    /* SET and GETSET drop a TTL; with KEEPTTL they keep it and are otherwise
     * the same command with the same reply (GETSET is SET ... GET), so the key
     * only needs a TTL when it had none: the create-only form, no script. */
    if (*np == 1 && found[0].effect == EFF_DROPS_TTL && found[0].argi == 1) {
        static const struct slice set = { "SET", 3 }, keepttl = { "KEEPTTL", 7 },
                                  get = { "GET", 3 };
        if (id == CID_SET) {
            nargv[(*argc)++] = keepttl;
            found[0].effect = EFF_CREATES_WITHOUT_TTL;
            modified = 1;
        } else if (id == CID_GETSET && *argc == 3) {
            nargv[0] = set;
            nargv[(*argc)++] = keepttl;
            nargv[(*argc)++] = get;
            found[0].effect = EFF_CREATES_WITHOUT_TTL;
            modified = 1;
        }
    }
    return modified;
}

/* EXPIRE key ttl NX for each protected key (found[0..np)). */
static void expire_nx(struct sbuf *t, const struct request *req, int np)
{
    for (int i = 0; i < np; i++) {
        sb_str(t, "*4\r\n$6\r\nEXPIRE\r\n");
        sb_bulk(t, req->argv[found[i].argi].p, req->argv[found[i].argi].len);
        sb_bulk_u64(t, found[i].rule->ttl);
        sb_str(t, "$2\r\nNX\r\n");
    }
}

/* The end of the proxy's MULTI: expire_nx(), then EXEC. */
static void expire_nx_exec(struct sbuf *t, const struct request *req, int np)
{
    expire_nx(t, req, np);
    sb_str(t, "*1\r\n$4\r\nEXEC\r\n");
}

/* MULTI; cmd; EXPIRE key ttl NX ...; EXEC. Atomic without Lua, so replies
 * stay exact (Lua numbers are doubles: 2^53 and beyond would not survive a
 * script). The session gives the client only the first element of EXEC's
 * reply. */
static void multi_form(const struct request *req, int modified, int argc, int np,
                       struct rewrite *rw)
{
    struct sbuf *b = &rw->pre;
    sb_str(b, "*1\r\n$5\r\nMULTI\r\n");
    sb_header(b, '*', argc);
    command_bytes(b, req, modified, argc, nargv, rw);
    struct sbuf *t = rw->orig_args.len ? &rw->tail : b;
    expire_nx_exec(t, req, np);
    rw->exec_first = 2 + np;    /* +OK, +QUEUED per command, then EXEC */
}

static int protected_key(int argi, int np)
{
    for (int i = 0; i < np; i++)
        if (found[i].argi == argi)
            return 1;
    return 0;
}

/* MSET k v ... with keys under rewrite rules: MULTI; SET k v per pair, with
 * KEEPTTL for the keys under a rule; EXPIRE key ttl NX for those; EXEC. MSET
 * drops every TTL: the other keys lose theirs, as with MSET, and those under
 * a rule keep theirs or get the rule's. Two cheap commands per key instead
 * of the script's per-key work; the client gets the first SET's +OK, which is
 * MSET's reply. */
static void mset_form(const struct request *req, int np, struct rewrite *rw)
{
    struct sbuf *b = &rw->pre;
    int pairs = (req->argc - 1) / 2;
    sb_str(b, "*1\r\n$5\r\nMULTI\r\n");
    for (int i = 1; i + 1 < req->argc; i += 2) {
        int keep = protected_key(i, np);
        sb_header(b, '*', keep ? 4 : 3);
        sb_bulk_str(b, "SET");
        sb_bulk(b, req->argv[i].p, req->argv[i].len);
        sb_bulk(b, req->argv[i + 1].p, req->argv[i + 1].len);
        if (keep)
            sb_bulk_str(b, "KEEPTTL");
    }
    expire_nx_exec(b, req, np);
    rw->exec_first = 1 + pairs + np;    /* +OK, +QUEUED per command, then EXEC */
}

/* The command inside WRAP_LUA, which also puts back the expiry of keys it
 * overwrites. */
static void wrap_form(const struct request *req, enum cmd_id id, int modified, int argc, int np,
                      struct rewrite *rw)
{
    struct sbuf *b = &rw->pre;
    sb_header(b, '*', 3 + 3 * np + 1 + argc);
    sb_bulk_str(b, "EVAL");
    sb_bulk_str(b, WRAP_LUA);
    sb_bulk_u64(b, np);
    for (int i = 0; i < np; i++)
        sb_bulk(b, req->argv[found[i].argi].p, req->argv[found[i].argi].len);
    for (int i = 0; i < np; i++)
        sb_bulk_u64(b, found[i].rule->ttl);
    for (int i = 0; i < np; i++)
        sb_bulk_str(b, found[i].effect == EFF_DROPS_TTL ? "o" : "c");
    sb_bulk_str(b, id == CID_ZINCRBY || id == CID_ZADD ? "3" : "2");
    command_bytes(b, req, modified, argc, nargv, rw);
}

/* Rewrite a command with nf findings, none refused: the MULTI form when the
 * keys may only be created without a TTL (MSET: as SETs), else the script;
 * the command as sent plus a follow-up when neither can run it (blocking,
 * noscript). */
static enum verdict rewrite_command(const struct request *req, const struct policy_ctx *ctx,
                                    unsigned flags, int nf, struct rewrite *rw)
{
    enum cmd_id id = ctx->cmd->id;
    int argc, np;
    int modified = new_args(req, id, nf, &argc, &np);
    int blocks = (flags & CMD_BLOCKING) && !ctx->in_multi;
    int create_only = 1;
    for (int i = 0; i < np; i++)
        if (found[i].effect == EFF_DROPS_TTL)
            create_only = 0;
    /* A derived command's reply, or a documented one's, is of a type no
     * experiment checked: only the MULTI form returns it unchanged in both
     * protocols. A key it may overwrite then gets the rule's TTL rather than
     * its own expiry back. */
    unsigned unchecked = flags & (CMD_DERIVED | CMD_DOCUMENTED);
    if (unchecked)
        create_only = 1;

    if (np > 0 && create_only && !blocks && ctx->can_multi) {
        multi_form(req, modified, argc, np, rw);
        return V_REWRITE;
    }
    if (np > 0 && id == CID_MSET && ctx->can_multi && !unchecked) {
        mset_form(req, np, rw);
        return V_REWRITE;
    }
    if (np > 0 && !(flags & (CMD_NOSCRIPT | CMD_WIDEINT)) && !unchecked && !blocks &&
        argc < MAX_WRAP_ARGS) {
        wrap_form(req, id, modified, argc, np, rw);
        return V_REWRITE;
    }
    if (np > 0)
        build_followup(&rw->followup, req, np);
    if (!modified)
        return V_FORWARD;
    sb_header(&rw->pre, '*', argc);
    command_bytes(&rw->pre, req, modified, argc, nargv, rw);
    return V_REWRITE;
}

/* Flags of the commands a judged stream leaves out: what runs as sent with
 * a follow-up, or in a script of the proxy's that is not WRAP_LUA, or whose
 * effects no experiment checked, or whose TTL argument may need a bound. */
#define STREAM_HELD (CMD_BLOCKING | CMD_NOSCRIPT | CMD_WIDEINT | CMD_SCRIPT | CMD_UNVERIFIED | \
                     CMD_EXPIRE | CMD_DERIVED | CMD_DOCUMENTED | CMD_UNJUDGED)
#define STREAM_TAIL_ARGS 64     /* arguments after the large one a judged stream may have */

/* What the rules of the keys before the large argument ask (nk of them in
 * keys[]): SF_FREE, SF_PLAIN or SF_MULTI, or SF_HOLD for a TTL that may
 * need capping (a rewrite rule's max_ttl). The keys a rewrite rule gives a
 * TTL go to found[0..*np). */
static enum stream_form stream_rules(const struct config *cfg, const struct request *req,
                                     int nk, int *np)
{
    enum stream_form form = SF_FREE;
    *np = 0;
    for (int i = 0; i < nk; i++) {
        struct slice key = req->argv[keys[i].argi];
        const struct rule *r = rules_match(&cfg->rules, key.p, key.len);
        if (r->kind != RULE_DURABLE && r->action == ACTION_ALLOW)
            continue;
        if (r->kind == RULE_DURABLE || r->action == ACTION_LOG) {
            if (form == SF_FREE)
                form = SF_PLAIN;
            continue;
        }
        if (r->action == ACTION_REWRITE && r->max_ttl > 0)
            return SF_HOLD;
        form = SF_MULTI;
        if (r->action == ACTION_REWRITE && r->ttl > 0)
            found[(*np)++] = (struct finding){ .argi = keys[i].argi, .rule = r };
    }
    return form;
}

/* A large last argument: the request is its head and that argument, so its
 * held rewrite is known now (the value standing as an empty string, as at
 * its judgement: no rule reads a value). When that is the MULTI form with
 * arguments only appended after the client's (SET ... KEEPTTL) and EXPIRE
 * ... NX after it, the request streams inside that form rather than in
 * WRAP_LUA, whose copy of the value in the script costs Redis more than the
 * whole stream does (docs/performance.md, "Large values"). 1 when it does:
 * sp->pre has MULTI and the new "*N" line, sp->tail the rest up to EXEC. */
static int stream_multi_form(const struct config *cfg, const struct request *head,
                             const struct cmd_info *ci, int total, struct stream_plan *sp)
{
    struct slice *argv = xmalloc(sizeof *argv * (size_t)total);
    memcpy(argv, head->argv, sizeof *argv * (size_t)head->argc);
    argv[total - 1] = (struct slice){ "", 0 };
    struct request req = { .argc = total, .argv = argv, .inline_cmd = 1 };
    unsigned flags = command_flags(ci->row);
    int nk = command_keys(ci, total, argv, keys), nf = 0, ok = nk > 0;
    for (int i = 0; ok && i < nk; i++) {
        const struct rule *r = rules_match(&cfg->rules, argv[keys[i].argi].p,
                                           argv[keys[i].argi].len);
        if (r->kind == RULE_DURABLE || r->action == ACTION_ALLOW)
            continue;
        int n = key_findings(&req, flags, &keys[i], r, &found[nf]);
        for (int j = nf; j < nf + n; j++) {
            found[j].action = finding_action(r, found[j].effect);
            ok &= found[j].action == EACT_REWRITTEN;
        }
        nf += n;
    }
    int argc, np;
    if (ok)
        new_args(&req, ci->id, nf, &argc, &np);
    for (int i = 0; ok && i < np; i++)
        ok = found[i].effect == EFF_CREATES_WITHOUT_TTL;
    for (int i = 0; ok && i < total; i++)       /* the client's arguments, unchanged */
        ok = nargv[i].p == argv[i].p && nargv[i].len == argv[i].len;
    if (ok && np > 0) {
        sb_str(&sp->pre, "*1\r\n$5\r\nMULTI\r\n");
        sb_header(&sp->pre, '*', (uint64_t)argc);
        sb_args(&sp->tail, argc - total, nargv + total);
        expire_nx(&sp->tail, &req, np);
        sp->queued = 1 + np;
    }
    free(argv);
    return ok && np > 0;
}

enum stream_form policy_stream_form(const struct config *cfg, const struct request *req,
                                    const struct policy_ctx *ctx, struct stream_plan *sp)
{
    const struct cmd_info *ci = ctx->cmd;
    long long total = req->head->total;
    sp->pre.len = sp->tail.len = 0;
    sp->queued = 1;
    if (policy_inactive(cfg))
        return SF_FREE;
    if (ci == NULL || (ci->feat & FT_NEWER) || total >= MAX_WRAP_ARGS)
        return SF_HOLD;
    ensure_cap((int)total);
    int np, nk = command_keys_before(ci, (int)total, req->argc, req->argv, keys);
    enum stream_form form = nk < 0 ? SF_HOLD : stream_rules(cfg, req, nk, &np);
    if (form == SF_FREE || form == SF_HOLD)
        return form;
    const struct command *cmd = ci->row;
    if (!command_arity_ok(cmd, (int)total) || (command_flags(cmd) & STREAM_HELD) ||
        total - req->argc - 1 > STREAM_TAIL_ARGS || (form == SF_MULTI && !ctx->can_multi))
        return SF_HOLD;
    if (form == SF_PLAIN)
        return SF_PLAIN;
    if (np > 0 && total == req->argc + 1) {
        if (stream_multi_form(cfg, req, ci, (int)total, sp))
            return SF_MULTI;
        nk = command_keys_before(ci, (int)total, req->argc, req->argv, keys);
        stream_rules(cfg, req, nk, &np);        /* keys[] and found[] are the head's again */
    }
    /* Every protected key as one WRAP_LUA may overwrite ('o'): its expiry
     * before the command is put back if the command dropped it, the rule's
     * TTL given if it had none, whatever options follow the value. */
    struct sbuf *pre = &sp->pre;
    sb_str(pre, "*1\r\n$5\r\nMULTI\r\n");
    if (np == 0) {
        sb_header(pre, '*', (uint64_t)total);
        return SF_MULTI;
    }
    sb_header(pre, '*', 3 + 3 * (uint64_t)np + 1 + (uint64_t)total);
    sb_bulk_str(pre, "EVAL");
    sb_bulk_str(pre, WRAP_LUA);
    sb_bulk_u64(pre, (uint64_t)np);
    for (int i = 0; i < np; i++)
        sb_bulk(pre, req->argv[found[i].argi].p, req->argv[found[i].argi].len);
    for (int i = 0; i < np; i++)
        sb_bulk_u64(pre, (uint64_t)found[i].rule->ttl);
    for (int i = 0; i < np; i++)
        sb_bulk_str(pre, "o");
    sb_bulk_str(pre, ci->id == CID_ZINCRBY || ci->id == CID_ZADD ? "3" : "2");
    return SF_MULTI;
}

void policy_rewrite_reset(struct rewrite *rw)
{
    rw->pre.len = 0;
    rw->tail.len = 0;
    rw->exec_first = 0;
    rw->followup.len = 0;
    rw->err.len = 0;
    rw->orig_args.len = 0;
    rw->guard.len = 0;
    rw->probe.len = 0;
    rw->probe_ev.len = 0;
    rw->nprobe = 0;
}

enum verdict policy_check(const struct config *cfg, const struct request *req,
                          const struct policy_ctx *ctx, struct rewrite *rw)
{
    policy_rewrite_reset(rw);
    if (policy_inactive(cfg))
        return V_FORWARD;
    if (ctx->cmd == NULL)
        return unjudged(cfg, req, ctx, "unknown command", rw);
    const struct command *cmd = ctx->cmd->row;
    /* A read; or Redis answers the arity error (but a server newer than the
     * table may have given the command more arguments: command_keys()). */
    if (cmd == NULL || (!command_arity_ok(cmd, req->argc) && !(ctx->cmd->feat & FT_NEWER)))
        return V_FORWARD;
    unsigned flags = command_flags(cmd);

    ensure_cap(req->argc);
    int nk = command_keys(ctx->cmd, req->argc, req->argv, keys);
    if (nk == -2)
        return unjudged(cfg, req, ctx, unjudged_why(flags, ctx->cmd->feat), rw);
    if (nk <= 0)
        return V_FORWARD;
    if (flags & CMD_SCRIPT)
        return check_script(cfg, req, nk, ctx, rw);
    if (keys[0].effect == TE_CARRY)
        return check_carry(cfg, req, nk, ctx, rw);

    int nf = find_violations(cfg, req, nk, flags, ctx, 1);
    int reject = -1, rewrite = 0;
    for (int i = 0; i < nf; i++) {
        if (found[i].action == EACT_REJECTED && reject < 0)
            reject = i;
        rewrite |= found[i].action == EACT_REWRITTEN;
    }
    struct slice name = req->argv[0];
    const char *derived = flags & CMD_DERIVED ?
        "classified from the server's key specs, not verified by experiment" :
        flags & CMD_DOCUMENTED ?
        "classified from the server's documentation, not verified by experiment" : NULL;
    if (reject >= 0) {
        /* The command does not run: every finding was refused with it. */
        for (int i = 0; i < nf; i++)
            events_violation_detail(found[i].rule, name, req->argv[found[i].argi],
                                    found[i].effect, EACT_REJECTED, derived, ctx->client);
        build_reject(&rw->err, name, ctx->cmd->id, req->argv[found[reject].argi],
                     &found[reject]);
        return V_REJECT;
    }
    for (int i = 0; i < nf; i++)
        events_violation_detail(found[i].rule, name, req->argv[found[i].argi], found[i].effect,
                                found[i].action, derived, ctx->client);
    return rewrite ? rewrite_command(req, ctx, flags, nf, rw) : V_FORWARD;
}

enum verdict policy_rewrite_part(const struct config *cfg, const struct request *req,
                                 const struct policy_ctx *ctx, struct rewrite *rw)
{
    policy_rewrite_reset(rw);
    unsigned flags = command_flags(ctx->cmd->row);
    ensure_cap(req->argc);
    int nk = command_keys(ctx->cmd, req->argc, req->argv, keys);
    int nf = nk > 0 ? find_violations(cfg, req, nk, flags, ctx, 0) : 0, rewrite = 0;
    for (int i = 0; i < nf; i++) {
        ASSERT(found[i].action != EACT_REJECTED);   /* the whole would have been refused */
        rewrite |= found[i].action == EACT_REWRITTEN;
    }
    return rewrite ? rewrite_command(req, ctx, flags, nf, rw) : V_FORWARD;
}
