/*
 * events: counters, folding and the JSON-lines writer (see events.h, and
 * docs/events.md for the schema).
 *
 * Cost on the request path. Every call bumps counters. With a log, it also
 * looks the event's identity up in the fold table (SipHash of a few dozen
 * bytes, one probe in the common case) and rewrites the entry's example (the
 * key and client of the last occurrence, JSON-escaped into a buffer the entry
 * keeps). Only the first occurrence in a window formats a whole line; the
 * repeats are one counter increment each. No allocation happens for a repeat
 * unless its example is longer than any before it.
 *
 * Windows. Each fold entry has its own window of `event_window` seconds,
 * started by the line that was written for it. When it closes, the entry
 * writes one line with "count" (the occurrences since its last line) and
 * starts a new window, or, when nothing happened, leaves the table, so that
 * the next occurrence is a "first" one again and is written at once. All
 * windows have the same length, so the entries sit in one FIFO ordered by
 * deadline and one uv timer, armed for the head, closes them.
 *
 * Writing. Lines go to out[cur]. A uv_check handle (once per loop turn, after
 * the poll) hands the buffer to the libuv thread pool, which opens, writes
 * and closes files there, so neither a slow disk nor a full one ever blocks
 * the loop; lines keep collecting in the other buffer meanwhile. Lines that
 * would take more than EV_PENDING_MAX bytes of buffers, and lines whose write
 * failed, are counted in events_dropped with a warning at most once a minute.
 *
 * Hashing keys (log_keys = hash). SipHash-2-4 under a 128-bit key drawn from
 * getrandom() when the process starts. A fixed key would let anyone who reads
 * the log confirm guessed key names (user:1, user:2 ...) offline; a key from
 * the config would be better still, but there is none. So a key hashes to
 * the same value for the life of the process (across reloads and reopens)
 * and to another one after a restart. Each `log_opened` line carries a
 * hash_id (a hash of a constant under the same key) so that readers can tell
 * which hashes are comparable.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "commands.h"
#include "events.h"

#define EV_PENDING_MAX  (4u << 20)      /* bytes of lines waiting for the writer */
#define EV_SHRINK       (256u << 10)    /* a written buffer larger than this is freed */
#define EV_KEY_MAX      1024            /* bytes of a key written to the log */
#define EV_NAME_MAX     256             /* bytes of a client name written */
#define EV_CMD_MAX      64              /* bytes of a command name kept */
#define EV_DETAIL_MAX   512             /* bytes of an unverified detail kept */
#define EV_UKEYS_MAX    16              /* keys listed in an unverified event */
#define EV_FOLD_MAX     16384           /* distinct events folded at once */
#define EV_WARN_MS      60000           /* at most one warning a minute */

enum ev_kind { EK_VIOLATION, EK_DURABLE_WRITE, EK_TTL_ON_DURABLE, EK_UNVERIFIED };

static const enum event_name kind_event[] = {
    EVN_VIOLATION, EVN_DURABLE_WRITE, EVN_TTL_ON_DURABLE, EVN_UNVERIFIED,
};

#define EVN_TEXT(id, name) [id] = name,
static const char *const event_names[EVN__COUNT] = { EVENT_NAMES(EVN_TEXT) };
#undef EVN_TEXT

const char *event_name(enum event_name e)
{
    return e < EVN__COUNT ? event_names[e] : "?";
}

int event_name_lookup(struct slice s)
{
    for (int i = 0; i < EVN__COUNT; i++)
        if (slice_eq_nocase(s, event_names[i]))
            return i;
    return -1;
}

#define NO_RULE UINT32_MAX

/* One folded event: its identity, its window, and the example it will be
 * written with. */
struct fold {
    uint64_t hash;
    uint8_t kind;               /* enum ev_kind */
    uint8_t effect, action;     /* violations; 0 otherwise */
    uint8_t cmdlen;
    uint32_t rule;              /* index into the rules (n = default); NO_RULE for unverified */
    char cmd[EV_CMD_MAX];       /* upper case */
    char *detail;               /* unverified: owned copy; else NULL */
    size_t detail_len;
    uint64_t deadline;          /* uv_now() at which the window closes */
    uint64_t count;             /* occurrences since the last line written */
    struct fold *next;          /* the due list, by deadline */
    struct sbuf example;       /* ,"key":...,"client":...,"db":N of the last occurrence */
};

/* The writer; see the top of the file. Fields under "job" belong to the
 * thread pool while busy and to the loop otherwise. */
struct writer {
    struct sbuf out[2];
    uint64_t lines[2];
    int cur;                    /* out[cur] collects lines */
    int busy;                   /* a job is in the thread pool */
    char *target;               /* "stderr", a path, or NULL (off) */
    uint64_t target_gen;        /* bumped to (re)open the target */
    int closing;                /* events_shutdown(): close after the last write */
    uv_work_t work;

    /* job */
    int fd;                     /* -1: none; 2: stderr */
    uint64_t have_gen;          /* the target_gen fd was opened for */
    char *job_path;             /* what to open when job_gen != have_gen (owned) */
    uint64_t job_gen;
    int job_buf;                /* index of out[] the job writes */
    int job_close;              /* close fd after writing */
    struct sbuf header;        /* log_opened line, written first into a newly opened file */
    uint64_t header_lines;
    int open_errno;             /* results */
    int write_errno;
    size_t written;
    int header_written;
};

static struct {
    uv_loop_t *loop;
    const struct config *cfg;   /* the running config */
    int on;                     /* a log is configured: format lines */
    int handles;                /* check and timer initialised */
    enum log_keys log_keys;
    uint64_t window_ms;
    uint8_t hash_key[16];
    char hash_id[17];

    struct events_counters counters;
    uint64_t *rule_viol;        /* [(rule * EFF__COUNT + effect) * EACT__COUNT + action] */
    uint64_t *rule_durable;
    uint64_t *rule_ttl_durable;
    size_t nrules;              /* rules + the default */

    struct fold **slots;        /* open addressing, linear probing */
    size_t cap, nfolds;
    struct fold *due, *due_tail;
    uv_timer_t timer;
    uv_check_t check;

    struct writer w;
    size_t line_start;          /* offset of the line being formatted in out[cur] */

    time_t ts_sec;              /* second that ts_text holds */
    char ts_text[24];           /* "2026-11-30T06:00:00" */
    uint64_t warn_at;           /* monotonic ms of the last warning */
    uint64_t warn_dropped;      /* events_dropped at the last warning */
} ev = { .w = { .fd = -1 } };

/* ---- buffers --------------------------------------------------------------- */



void evbuf_adds(struct sbuf *b, const char *s)
{
    sbuf_add(b, s, strlen(s));
}

void evbuf_u64(struct sbuf *b, uint64_t v)
{
    sbuf_reserve(b, 20);
    b->len += u64_to_dec(b->p + b->len, v);
}


static void evbuf_free(struct sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- JSON ------------------------------------------------------------------ */

size_t events_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    if (c < 0xc2)                   /* a continuation byte, or an overlong 2-byte form */
        return 0;
    if (c < 0xe0)
        return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c < 0xf0) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xe0 && s[1] < 0xa0) ||       /* overlong */
            (c == 0xed && s[1] >= 0xa0))        /* U+D800..U+DFFF */
            return 0;
        return 3;
    }
    if (c < 0xf5) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xf0 && s[1] < 0x90) ||       /* overlong */
            (c == 0xf4 && s[1] >= 0x90))        /* above U+10FFFF */
            return 0;
        return 4;
    }
    return 0;
}

static const char hexdig[] = "0123456789abcdef";

void evbuf_prom_label(struct sbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            sbuf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            evbuf_adds(b, "\\n");
        else
            sbuf_add(b, s, 1);
    }
}

void evbuf_json_str(struct sbuf *b, const char *p, size_t len)
{
    const unsigned char *s = (const unsigned char *)p;
    sbuf_reserve(b, len * 6 + 2);
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned c = s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        if (c >= 0x80) {
            size_t n = events_utf8_len(s + i, len - i);
            if (n > 0) {
                memcpy(o, s + i, n);
                o += n;
                i += n - 1;
                continue;
            }
            memcpy(o, "\\udc", 4);
            o[4] = hexdig[c >> 4];
            o[5] = hexdig[c & 15];
            o += 6;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':  *o++ = '"';  break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b';  break;
        case '\f': *o++ = 'f';  break;
        case '\n': *o++ = 'n';  break;
        case '\r': *o++ = 'r';  break;
        case '\t': *o++ = 't';  break;
        default:
            memcpy(o, "u00", 3);
            o[3] = hexdig[c >> 4];
            o[4] = hexdig[c & 15];
            o += 5;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
}

/* ,"name": -- without printf: examples are rebuilt on every occurrence. */
static void json_name(struct sbuf *b, const char *name)
{
    size_t n = strlen(name);
    sbuf_reserve(b, n + 4);
    char *o = b->p + b->len;
    o[0] = ',';
    o[1] = '"';
    memcpy(o + 2, name, n);
    o[n + 2] = '"';
    o[n + 3] = ':';
    b->len += n + 4;
}

/* ,"name":"value" for NUL-terminated text. */
static void json_member_str(struct sbuf *b, const char *name, const char *value)
{
    json_name(b, name);
    evbuf_json_str(b, value, strlen(value));
}

static void json_member_u64(struct sbuf *b, const char *name, uint64_t v)
{
    json_name(b, name);
    evbuf_u64(b, v);
}

void events_rule_json(struct sbuf *b, const struct rule *r)
{
    sbuf_printf(b, "\"kind\":\"%s\"", rule_kind_name(r->kind));
    json_member_str(b, "rule", r->label);
    evbuf_adds(b, ",\"prefix\":");
    evbuf_json_str(b, r->prefix, r->prefix_len);
    if (r->kind == RULE_DURABLE) {
        json_member_str(b, "owner", r->owner ? r->owner : "");
        json_member_str(b, "reason", r->reason ? r->reason : "");
        json_member_str(b, "rebuild", r->rebuild ? r->rebuild : "");
    } else {
        sbuf_printf(b, ",\"action\":\"%s\",\"ttl\":%lld,\"refresh\":\"%s\",\"max_ttl\":%lld",
                     rule_action_name(r->action), r->ttl, rule_refresh_name(r->refresh),
                     r->max_ttl);
        if (r->unknown != UNKNOWN_PROTECT)
            sbuf_printf(b, ",\"unknown\":\"%s\"", rule_unknown_name(r->unknown));
    }
    if (r->line > 0)
        sbuf_printf(b, ",\"line\":%d", r->line);
}

/* ---- SipHash-2-4 (Aumasson and Bernstein, reference algorithm) -------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                        \
    do {                                                                \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);       \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                          \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                          \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);       \
    } while (0)

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

uint64_t events_siphash(const uint8_t key[16], const void *data, size_t len)
{
    const uint8_t *in = data;
    uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
    uint64_t v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
    uint64_t v3 = 0x7465646279746573ULL ^ k1;
    const uint8_t *end = in + len - len % 8;

    for (; in != end; in += 8) {
        uint64_t m = load_le64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7: b |= (uint64_t)in[6] << 48; /* fall through */
    case 6: b |= (uint64_t)in[5] << 40; /* fall through */
    case 5: b |= (uint64_t)in[4] << 32; /* fall through */
    case 4: b |= (uint64_t)in[3] << 24; /* fall through */
    case 3: b |= (uint64_t)in[2] << 16; /* fall through */
    case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)in[0];       break;
    case 0: break;
    }
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static void hex64(uint64_t h, char out[17])
{
    for (int i = 15; i >= 0; i--) {
        out[i] = hexdig[h & 15];
        h >>= 4;
    }
    out[16] = '\0';
}

/* Draw the process's hash key once. getrandom() cannot fail for 16 bytes
 * once the kernel pool is initialised; if it does anyway, the clock and pid
 * still make the key differ between runs. */
static void hash_key_init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    if (getrandom(ev.hash_key, sizeof ev.hash_key, 0) != (ssize_t)sizeof ev.hash_key) {
        uint64_t a = now_ms_wall() ^ ((uint64_t)getpid() << 32), b = now_ms_monotonic();
        memcpy(ev.hash_key, &a, 8);
        memcpy(ev.hash_key + 8, &b, 8);
    }
    char id[17];
    hex64(events_siphash(ev.hash_key, "ttlguard hash id", 16), id);
    memcpy(ev.hash_id, id, 8);
    ev.hash_id[8] = '\0';
}

void events_key_hash(const char *key, size_t len, char out[17])
{
    hash_key_init();
    hex64(events_siphash(ev.hash_key, key, len), out);
}

/* ---- names ------------------------------------------------------------------- */

const char *ev_effect_name(enum ev_effect e)
{
    switch (e) {
    case EFF_CREATES_WITHOUT_TTL: return "creates-without-ttl";
    case EFF_DROPS_TTL:           return "drops-ttl";
    case EFF_PERSIST:             return "persist";
    case EFF_EXCEEDS_MAX_TTL:     return "exceeds-max-ttl";
    case EFF_EXTENDS_TTL:         return "extends-ttl";
    case EFF_MOVES_WITHOUT_TTL:   return "moves-without-ttl";
    case EFF_FOUND_WITHOUT_TTL:   return "found-without-ttl";
    case EFF__COUNT:              break;
    }
    return "?";
}

const char *ev_action_name(enum ev_action a)
{
    switch (a) {
    case EACT_REWRITTEN: return "rewritten";
    case EACT_REJECTED:  return "rejected";
    case EACT_LOGGED:    return "logged";
    case EACT_OBSERVED:  return "observed";
    case EACT__COUNT:    break;
    }
    return "?";
}

static const char *log_keys_name(enum log_keys k)
{
    return k == LOG_KEYS_HASH ? "hash" : k == LOG_KEYS_PREFIX ? "prefix" : "full";
}

/* ---- warnings ------------------------------------------------------------------ */

/* Lost events are said once a minute at most, with how many since. */
static void warn_dropped(const char *why)
{
    uint64_t now = now_ms_monotonic();
    if (ev.warn_at != 0 && now - ev.warn_at < EV_WARN_MS)
        return;
    log_warn("events: %s; %llu events lost since the last warning (%llu in all)", why,
             (unsigned long long)(ev.counters.events_dropped - ev.warn_dropped),
             (unsigned long long)ev.counters.events_dropped);
    ev.warn_at = now;
    ev.warn_dropped = ev.counters.events_dropped;
}

/* ---- lines --------------------------------------------------------------------- */

static void ts_append(struct sbuf *b)
{
    struct timespec tv;
    clock_gettime(CLOCK_REALTIME, &tv);
    if (tv.tv_sec != ev.ts_sec || ev.ts_text[0] == '\0') {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        strftime(ev.ts_text, sizeof ev.ts_text, "%Y-%m-%dT%H:%M:%S", &tm);
        ev.ts_sec = tv.tv_sec;
    }
    unsigned ms = (unsigned)(tv.tv_nsec / 1000000);
    sbuf_reserve(b, 40);
    b->len += (size_t)snprintf(b->p + b->len, 40, "{\"ts\":\"%s.%03uZ\"", ev.ts_text, ms);
}

/* Start a line in out[cur]: {"ts":"...","event":"NAME" */
static struct sbuf *line_begin(enum event_name event)
{
    struct sbuf *b = &ev.w.out[ev.w.cur];
    ev.line_start = b->len;
    ts_append(b);
    sbuf_printf(b, ",\"event\":\"%s\"", event_name(event));
    return b;
}

/* Close the line, or take it back when the buffers are full. */
static void line_end(struct sbuf *b)
{
    sbuf_add(b, "}\n", 2);
    size_t pending = ev.w.out[0].len + ev.w.out[1].len;
    if (pending > EV_PENDING_MAX) {
        b->len = ev.line_start;
        ev.counters.events_dropped++;
        warn_dropped("more than 4 MB of events waiting to be written");
        return;
    }
    ev.w.lines[ev.w.cur]++;
}

/* ---- the writer (thread pool side) ------------------------------------------------ */

static int write_all(int fd, const char *p, size_t len, size_t *done)
{
    *done = 0;
    while (*done < len) {
        ssize_t n = write(fd, p + *done, len - *done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        *done += (size_t)n;
    }
    return 0;
}

static void close_fd(struct writer *w)
{
    if (w->fd > 2)
        close(w->fd);
    w->fd = -1;
}

/* Runs in the thread pool (or, at shutdown, on the loop): switch files if
 * asked, then write out[job_buf]. Touches only the job fields. */
static void job_run(uv_work_t *req)
{
    struct writer *w = &ev.w;
    struct sbuf *b = &w->out[w->job_buf];
    size_t done;

    w->open_errno = 0;
    w->write_errno = 0;
    w->written = 0;
    w->header_written = 0;

    if (w->job_gen != w->have_gen && w->job_path == NULL) {
        /* Turned off: what is left belongs to the file being closed. */
        if (w->fd >= 0 && b->len > 0) {
            w->write_errno = write_all(w->fd, b->p, b->len, &w->written);
        }
        close_fd(w);
        w->have_gen = w->job_gen;
        return;
    }
    if (w->job_gen != w->have_gen) {
        int fd = config_events_to_stderr(w->job_path) ? 2 :
                 open(w->job_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            w->open_errno = errno;      /* keep writing to the old file, if any */
        } else {
            close_fd(w);
            w->fd = fd;
            if (w->header.len > 0 && write_all(fd, w->header.p, w->header.len, &done) == 0)
                w->header_written = 1;
        }
        w->have_gen = w->job_gen;
    }
    if (b->len > 0) {
        if (w->fd < 0)
            w->write_errno = EBADF;
        else
            w->write_errno = write_all(w->fd, b->p, b->len, &w->written);
    }
    if (w->job_close)
        close_fd(w);
}

/* ---- the writer (loop side) ----------------------------------------------------------- */

static void log_opened_line(struct sbuf *b);

/* Hand out[cur] to a job; returns 0 when there was nothing to do. */
static int job_prepare(int closing)
{
    struct writer *w = &ev.w;
    int reopen = w->target_gen != w->have_gen;
    if (!reopen && w->out[w->cur].len == 0 && !(closing && w->fd >= 0))
        return 0;
    if (reopen) {
        free(w->job_path);
        w->job_path = w->target ? xstrdup(w->target) : NULL;
        w->header.len = 0;
        w->header_lines = 0;
        if (w->target != NULL) {
            log_opened_line(&w->header);
            w->header_lines = 1;
        }
    }
    w->job_gen = w->target_gen;
    w->job_buf = w->cur;
    w->job_close = closing;
    w->cur ^= 1;
    return 1;
}

static size_t count_lines(const char *p, size_t len)
{
    size_t n = 0;
    const char *end = p + len;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

/* Account for a finished job: counters, warnings, buffer reuse. */
static void job_account(void)
{
    struct writer *w = &ev.w;
    struct sbuf *b = &w->out[w->job_buf];
    char why[512];

    if (w->open_errno != 0) {
        log_warn("events: cannot open %s: %s; %s", w->job_path, strerror(w->open_errno),
                 w->fd >= 0 ? "still writing to the file open before" : "events are lost until it can be opened");
    }
    if (w->header_written)
        ev.counters.events_written += w->header_lines;
    if (w->write_errno == 0) {
        ev.counters.events_written += w->lines[w->job_buf];
    } else {
        uint64_t lost = count_lines(b->p + w->written, b->len - w->written);
        ev.counters.events_written += w->lines[w->job_buf] - lost;
        ev.counters.events_dropped += lost;
        if (w->write_errno == EBADF && w->fd < 0)
            snprintf(why, sizeof why, "no event log is open");
        else
            snprintf(why, sizeof why, "writing to %s failed: %s",
                     w->target ? w->target : "the event log", strerror(w->write_errno));
        warn_dropped(why);
    }
    b->len = 0;
    w->lines[w->job_buf] = 0;
    if (b->cap > EV_SHRINK)
        evbuf_free(b);
}

static void writer_finish_sync(void);

static void job_done(uv_work_t *req, int status)
{
    ev.w.busy = 0;
    job_account();
    if (ev.w.closing)
        writer_finish_sync();
}

static void writer_kick(void)
{
    if (ev.w.busy || ev.w.closing || !job_prepare(0))
        return;
    ev.w.busy = 1;
    uv_queue_work(ev.loop, &ev.w.work, job_run, job_done);
}

/* Shutdown: the last lines are written on the loop, a blocking write being
 * the right thing once nobody is served any more. Up to two rounds: the
 * buffer collected while the last job ran, then a reopen still pending. */
static void writer_finish_sync(void)
{
    for (int i = 0; i < 3 && job_prepare(1); i++) {
        job_run(NULL);
        job_account();
    }
    close_fd(&ev.w);
    evbuf_free(&ev.w.out[0]);
    evbuf_free(&ev.w.out[1]);
    evbuf_free(&ev.w.header);
    free(ev.w.job_path);
    ev.w.job_path = NULL;
}

static void on_check(uv_check_t *h)
{
    writer_kick();
}

/* Where lines go; a change reopens in the next job. */
static void writer_target(const char *target)
{
    struct writer *w = &ev.w;
    if ((w->target == NULL && target == NULL) ||
        (w->target != NULL && target != NULL && strcmp(w->target, target) == 0))
        return;
    free(w->target);
    w->target = target ? xstrdup(target) : NULL;
    w->target_gen++;
}

/* ---- the fold table ------------------------------------------------------------------- */

/* The identity of an event, as hashed and compared. */
struct fold_id {
    uint8_t kind, effect, action, cmdlen;
    uint32_t rule;
    char cmd[EV_CMD_MAX];
    const char *detail;
    size_t detail_len;
};

static void fold_id_init(struct fold_id *id, enum ev_kind kind, uint32_t rule, int effect,
                         int action, struct slice cmd, const char *detail)
{
    id->kind = (uint8_t)kind;
    id->effect = (uint8_t)effect;
    id->action = (uint8_t)action;
    id->rule = rule;
    size_t n = cmd.len < EV_CMD_MAX ? cmd.len : EV_CMD_MAX;
    for (size_t i = 0; i < n; i++) {
        char c = cmd.p[i];
        id->cmd[i] = c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
    }
    id->cmdlen = (uint8_t)n;
    id->detail = detail;
    id->detail_len = detail ? strnlen(detail, EV_DETAIL_MAX) : 0;
}

static uint64_t fold_id_hash(const struct fold_id *id)
{
    uint8_t buf[8 + EV_CMD_MAX + EV_DETAIL_MAX];
    size_t n = 0;
    buf[n++] = id->kind;
    buf[n++] = id->effect;
    buf[n++] = id->action;
    buf[n++] = id->cmdlen;
    memcpy(buf + n, &id->rule, 4);
    n += 4;
    memcpy(buf + n, id->cmd, id->cmdlen);
    n += id->cmdlen;
    if (id->detail_len > 0)
        memcpy(buf + n, id->detail, id->detail_len);
    n += id->detail_len;
    return events_siphash(ev.hash_key, buf, n);
}

static int fold_is(const struct fold *f, const struct fold_id *id, uint64_t h)
{
    return f->hash == h && f->kind == id->kind && f->effect == id->effect &&
           f->action == id->action && f->rule == id->rule && f->cmdlen == id->cmdlen &&
           memcmp(f->cmd, id->cmd, id->cmdlen) == 0 && f->detail_len == id->detail_len &&
           (id->detail_len == 0 || memcmp(f->detail, id->detail, id->detail_len) == 0);
}

static void table_grow(void)
{
    size_t cap = ev.cap ? ev.cap * 2 : 64;
    struct fold **slots = xcalloc(cap, sizeof *slots);
    for (size_t i = 0; i < ev.cap; i++) {
        struct fold *f = ev.slots[i];
        if (f == NULL)
            continue;
        size_t j = (size_t)f->hash & (cap - 1);
        while (slots[j] != NULL)
            j = (j + 1) & (cap - 1);
        slots[j] = f;
    }
    free(ev.slots);
    ev.slots = slots;
    ev.cap = cap;
}

/* Remove f from the slots (backward-shift deletion keeps probe chains whole). */
static void table_remove(struct fold *f)
{
    size_t mask = ev.cap - 1, i = (size_t)f->hash & mask;
    while (ev.slots[i] != f)
        i = (i + 1) & mask;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        struct fold *g = ev.slots[j];
        if (g == NULL)
            break;
        size_t home = (size_t)g->hash & mask;
        /* g may move into the hole at i unless its home lies in (i, j]. */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            ev.slots[i] = g;
            i = j;
        }
    }
    ev.slots[i] = NULL;
    ev.nfolds--;
}

static void fold_free(struct fold *f)
{
    free(f->detail);
    evbuf_free(&f->example);
    free(f);
}

/* Find the entry for id or make one; *fresh says which. NULL when the table
 * is full (the event is lost and counted). */
static struct fold *fold_get(const struct fold_id *id, int *fresh)
{
    uint64_t h = fold_id_hash(id);
    *fresh = 0;
    if (ev.cap > 0) {
        size_t mask = ev.cap - 1;
        for (size_t i = (size_t)h & mask; ev.slots[i] != NULL; i = (i + 1) & mask) {
            if (fold_is(ev.slots[i], id, h))
                return ev.slots[i];
        }
    }
    if (ev.nfolds >= EV_FOLD_MAX) {
        ev.counters.events_dropped++;
        warn_dropped("more than 16384 different events within one event_window");
        return NULL;
    }
    if (ev.nfolds * 2 >= ev.cap)
        table_grow();

    struct fold *f = xcalloc(1, sizeof *f);
    f->hash = h;
    f->kind = id->kind;
    f->effect = id->effect;
    f->action = id->action;
    f->rule = id->rule;
    f->cmdlen = id->cmdlen;
    memcpy(f->cmd, id->cmd, id->cmdlen);
    if (id->detail_len > 0) {
        f->detail = xmemdup(id->detail, id->detail_len);
        f->detail_len = id->detail_len;
    }
    size_t mask = ev.cap - 1, i = (size_t)h & mask;
    while (ev.slots[i] != NULL)
        i = (i + 1) & mask;
    ev.slots[i] = f;
    ev.nfolds++;
    *fresh = 1;
    return f;
}

static const struct rule *rule_at(uint32_t i)
{
    const struct ruleset *rs = &ev.cfg->rules;
    return i < rs->n ? &rs->v[i] : &rs->dflt;
}

/* The line of a fold entry: count 0 for a first occurrence (no "count"). */
static void fold_write(const struct fold *f, uint64_t count)
{
    struct sbuf *b = line_begin(kind_event[f->kind]);
    if (f->rule != NO_RULE) {
        const struct rule *r = rule_at(f->rule);
        json_member_str(b, "rule", r->label);
        evbuf_adds(b, ",\"prefix\":");
        evbuf_json_str(b, r->prefix, r->prefix_len);
    }
    evbuf_adds(b, ",\"command\":");
    evbuf_json_str(b, f->cmd, f->cmdlen);
    if (f->kind == EK_VIOLATION)
        sbuf_printf(b, ",\"effect\":\"%s\",\"action\":\"%s\"",
                     ev_effect_name(f->effect), ev_action_name(f->action));
    if (f->detail != NULL) {
        evbuf_adds(b, ",\"detail\":");
        evbuf_json_str(b, f->detail, f->detail_len);
    }
    sbuf_add(b, f->example.p, f->example.len);
    if (count > 0)
        json_member_u64(b, "count", count);
    line_end(b);
}

static void due_append(struct fold *f)
{
    f->next = NULL;
    if (ev.due_tail != NULL)
        ev.due_tail->next = f;
    else
        ev.due = f;
    ev.due_tail = f;
}

static void on_timer(uv_timer_t *t);

static void timer_arm(void)
{
    if (ev.due == NULL || !ev.handles)
        return;
    uint64_t now = uv_now(ev.loop);
    uv_timer_start(&ev.timer, on_timer, ev.due->deadline > now ? ev.due->deadline - now : 0, 0);
}

/* Windows that closed: one line with the count, or out of the table. */
static void on_timer(uv_timer_t *t)
{
    uint64_t now = uv_now(ev.loop);
    while (ev.due != NULL && ev.due->deadline <= now) {
        struct fold *f = ev.due;
        ev.due = f->next;
        if (ev.due == NULL)
            ev.due_tail = NULL;
        if (f->count > 0) {
            fold_write(f, f->count);
            f->count = 0;
            f->deadline = now + ev.window_ms;
            due_append(f);
        } else {
            table_remove(f);
            fold_free(f);
        }
    }
    timer_arm();
}

/* Write what is folded and empty the table (reload, shutdown). */
static void folds_flush(void)
{
    while (ev.due != NULL) {
        struct fold *f = ev.due;
        ev.due = f->next;
        if (f->count > 0 && ev.on)
            fold_write(f, f->count);
        fold_free(f);
    }
    ev.due_tail = NULL;
    free(ev.slots);
    ev.slots = NULL;
    ev.cap = ev.nfolds = 0;
    if (ev.handles)
        uv_timer_stop(&ev.timer);
}

/* One occurrence of f, whose example is already set. */
static void fold_hit(struct fold *f, int fresh)
{
    if (!fresh) {
        f->count++;
        return;
    }
    fold_write(f, 0);
    f->deadline = uv_now(ev.loop) + ev.window_ms;
    int was_empty = ev.due == NULL;
    due_append(f);
    if (was_empty)
        timer_arm();
}

/* ---- examples ------------------------------------------------------------------------ */

static void example_client(struct sbuf *e, const struct ev_client *c)
{
    if (c == NULL)
        return;
    if (c->addr != NULL)
        json_member_str(e, "client", c->addr);
    if (c->name != NULL) {
        json_name(e, "client_name");
        evbuf_json_str(e, c->name, strnlen(c->name, EV_NAME_MAX));
    }
    json_member_u64(e, "db", (uint64_t)(c->db < 0 ? 0 : c->db));
    if (c->node != NULL)
        json_member_str(e, "node", c->node);
}

/* The key as log_keys wants it. In prefix mode the line's "prefix" says it. */
static void example_key(struct sbuf *e, struct slice key)
{
    switch (ev.log_keys) {
    case LOG_KEYS_FULL:
        json_name(e, "key");
        evbuf_json_str(e, key.p, key.len < EV_KEY_MAX ? key.len : EV_KEY_MAX);
        if (key.len > EV_KEY_MAX)
            json_member_u64(e, "key_len", key.len);
        break;
    case LOG_KEYS_HASH: {
        char hex[19];
        hex[0] = '"';
        hex64(events_siphash(ev.hash_key, key.p, key.len), hex + 1);
        hex[17] = '"';
        json_name(e, "key_hash");
        sbuf_add(e, hex, 18);
        break;
    }
    case LOG_KEYS_PREFIX:
        break;
    }
}

/* Several keys: "keys", "key_hashes" or "key_prefixes" (the prefix of the
 * rule each key falls under; "" for the default). */
static void example_keys(struct sbuf *e, const struct slice *keys, int nkeys)
{
    static const char *const field[] = { "keys", "key_hashes", "key_prefixes" };
    if (nkeys <= 0)
        return;
    sbuf_printf(e, ",\"%s\":[", field[ev.log_keys]);
    int n = nkeys < EV_UKEYS_MAX ? nkeys : EV_UKEYS_MAX;
    for (int i = 0; i < n; i++) {
        struct slice k = keys[i];
        if (i > 0)
            sbuf_add(e, ",", 1);
        if (ev.log_keys == LOG_KEYS_FULL) {
            evbuf_json_str(e, k.p, k.len < EV_KEY_MAX ? k.len : EV_KEY_MAX);
        } else if (ev.log_keys == LOG_KEYS_HASH) {
            char hex[17];
            hex64(events_siphash(ev.hash_key, k.p, k.len), hex);
            sbuf_printf(e, "\"%s\"", hex);
        } else {
            const struct rule *r = rules_match(&ev.cfg->rules, k.p, k.len);
            evbuf_json_str(e, r->prefix, r->prefix_len);
        }
    }
    sbuf_add(e, "]", 1);
    if (nkeys > n)
        json_member_u64(e, "nkeys", (uint64_t)nkeys);
}

/* ---- per-rule counters ------------------------------------------------------------------ */

/* Index of r in the running config: rules, then the default. NO_RULE for a
 * rule of another config (a caller bug: asserted in debug builds). */
static uint32_t rule_index(const struct rule *r)
{
    if (ev.cfg == NULL)
        return NO_RULE;
    const struct ruleset *rs = &ev.cfg->rules;
    if (r == &rs->dflt)
        return (uint32_t)rs->n;
    uintptr_t p = (uintptr_t)r, lo = (uintptr_t)rs->v;
    if (rs->n > 0 && p >= lo && p < (uintptr_t)(rs->v + rs->n))
        return (uint32_t)(r - rs->v);
    ASSERT(!"rule from another config");
    return NO_RULE;
}

static void rule_counters_reset(void)
{
    free(ev.rule_viol);
    free(ev.rule_durable);
    free(ev.rule_ttl_durable);
    ev.nrules = ev.cfg->rules.n + 1;
    ev.rule_viol = xcalloc(ev.nrules * EFF__COUNT * EACT__COUNT, sizeof *ev.rule_viol);
    ev.rule_durable = xcalloc(ev.nrules, sizeof *ev.rule_durable);
    ev.rule_ttl_durable = xcalloc(ev.nrules, sizeof *ev.rule_ttl_durable);
}

uint64_t events_rule_violations(size_t i, enum ev_effect e, enum ev_action a)
{
    if (i >= ev.nrules || e >= EFF__COUNT || a >= EACT__COUNT)
        return 0;
    return ev.rule_viol[(i * EFF__COUNT + e) * EACT__COUNT + a];
}

uint64_t events_rule_durable_writes(size_t i)
{
    return i < ev.nrules ? ev.rule_durable[i] : 0;
}

uint64_t events_rule_ttl_on_durable(size_t i)
{
    return i < ev.nrules ? ev.rule_ttl_durable[i] : 0;
}

const struct events_counters *events_counters(void)
{
    return &ev.counters;
}

/* ---- the request path ---------------------------------------------------------------------- */

/* Count one event about a key in its fold (written at once when it is the
 * first of its kind in the window), with the key and client as example. */
static void fold_key_event(enum ev_kind kind, uint32_t ri, int effect, int action, struct slice cmd,
                           struct slice key, const char *detail, const struct ev_client *c)
{
    struct fold_id id;
    int fresh;
    fold_id_init(&id, kind, ri, effect, action, cmd, detail);
    struct fold *f = fold_get(&id, &fresh);
    if (f == NULL)
        return;
    f->example.len = 0;
    example_key(&f->example, key);
    example_client(&f->example, c);
    fold_hit(f, fresh);
}

void events_violation(const struct rule *r, struct slice cmd, struct slice key,
                      enum ev_effect effect, enum ev_action action, const struct ev_client *c)
{
    events_violation_detail(r, cmd, key, effect, action, NULL, c);
}

void events_violation_detail(const struct rule *r, struct slice cmd, struct slice key,
                             enum ev_effect effect, enum ev_action action, const char *detail,
                             const struct ev_client *c)
{
    ev.counters.violations[effect][action]++;
    uint32_t ri = rule_index(r);
    if (ri == NO_RULE)
        return;
    ev.rule_viol[((size_t)ri * EFF__COUNT + effect) * EACT__COUNT + action]++;
    if (!ev.on)
        return;

    fold_key_event(EK_VIOLATION, ri, effect, action, cmd, key, detail, c);
}

void events_durable_write(const struct rule *r, struct slice cmd, struct slice key,
                          int sets_ttl, const struct ev_client *c)
{
    ev.counters.durable_writes++;
    if (sets_ttl)
        ev.counters.ttl_on_durable++;
    uint32_t ri = rule_index(r);
    if (ri == NO_RULE)
        return;
    ev.rule_durable[ri]++;
    if (sets_ttl)
        ev.rule_ttl_durable[ri]++;
    if (!ev.on)
        return;

    fold_key_event(sets_ttl ? EK_TTL_ON_DURABLE : EK_DURABLE_WRITE, ri, 0, 0, cmd, key, NULL, c);
}

void events_unverified_keys(struct slice cmd, const char *detail, const struct slice *keys,
                            int nkeys, const struct ev_client *c)
{
    ev.counters.unverified++;
    if (!ev.on)
        return;

    struct fold_id id;
    int fresh;
    fold_id_init(&id, EK_UNVERIFIED, NO_RULE, 0, 0, cmd, detail);
    struct fold *f = fold_get(&id, &fresh);
    if (f == NULL)
        return;
    f->example.len = 0;
    example_keys(&f->example, keys, nkeys);
    example_client(&f->example, c);
    fold_hit(f, fresh);
}

void events_unverified(struct slice cmd, const char *detail, const struct ev_client *c)
{
    events_unverified_keys(cmd, detail, NULL, 0, c);
}

/* ---- lifecycle and rare events ----------------------------------------------------------------- */

static void log_opened_line(struct sbuf *b)
{
    ts_append(b);
    sbuf_printf(b, ",\"event\":\"%s\",\"version\":\"%s\",\"pid\":%d,\"log_keys\":\"%s\"",
                 event_name(EVN_LOG_OPENED), TTLG_VERSION, (int)getpid(), log_keys_name(ev.log_keys));
    if (ev.log_keys == LOG_KEYS_HASH)
        sbuf_printf(b, ",\"hash_id\":\"%s\"", ev.hash_id);
    json_member_u64(b, "event_window", ev.window_ms / 1000);
    if (ev.cfg != NULL && ev.cfg->path != NULL)
        json_member_str(b, "config", ev.cfg->path);
    sbuf_add(b, "}\n", 2);
}

static void registrations(void)
{
    const struct ruleset *rs = &ev.cfg->rules;
    for (size_t i = 0; i <= rs->n; i++) {
        const struct rule *r = i < rs->n ? &rs->v[i] : &rs->dflt;
        struct sbuf *b = line_begin(EVN_REGISTRATION);
        sbuf_add(b, ",", 1);
        events_rule_json(b, r);
        line_end(b);
    }
}

static void apply_config(const struct config *cfg)
{
    ev.cfg = cfg;
    ev.log_keys = cfg->log_keys;
    ev.window_ms = (uint64_t)(cfg->event_window ? cfg->event_window : 1) * 1000;
    rule_counters_reset();
}

static int open_at_start(const char *target, char *err, size_t errlen)
{
    if (config_events_to_stderr(target)) {
        ev.w.fd = 2;
        return 0;
    }
    int fd = open(target, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "events = %s: cannot open: %s", target, strerror(errno));
        return -1;
    }
    ev.w.fd = fd;
    return 0;
}

int events_init(uv_loop_t *loop, const struct config *cfg, char *err, size_t errlen)
{
    if (cfg->events != NULL && open_at_start(cfg->events, err, errlen) != 0)
        return -1;
    ev.loop = loop;
    hash_key_init();
    apply_config(cfg);
    writer_target(cfg->events);
    ev.w.have_gen = ev.w.target_gen;
    ev.on = cfg->events != NULL;

    uv_check_init(loop, &ev.check);
    uv_check_start(&ev.check, on_check);
    uv_unref((uv_handle_t *)&ev.check);
    uv_timer_init(loop, &ev.timer);
    uv_unref((uv_handle_t *)&ev.timer);
    ev.handles = 1;

    if (ev.on) {
        struct sbuf *b = &ev.w.out[ev.w.cur];
        log_opened_line(b);
        ev.w.lines[ev.w.cur]++;
        registrations();
    }
    return 0;
}

void events_reconfigure(const struct config *cfg)
{
    folds_flush();          /* under the old rules, which are still valid */
    apply_config(cfg);
    ev.counters.config_reloads++;

    if (cfg->events == NULL && ev.on) {
        /* The last line of the log says why it ends. */
        struct sbuf *b = line_begin(EVN_CONFIG_RELOADED);
        json_member_str(b, "config", cfg->path ? cfg->path : "");
        evbuf_adds(b, ",\"events\":null");
        line_end(b);
    }
    writer_target(cfg->events);
    ev.on = cfg->events != NULL;
    if (!ev.on)
        return;
    registrations();
    struct sbuf *b = line_begin(EVN_CONFIG_RELOADED);
    json_member_str(b, "config", cfg->path ? cfg->path : "");
    json_member_u64(b, "rules", cfg->rules.n + 1);
    line_end(b);
}

void events_config_rejected(const char *path, const char *reason)
{
    ev.counters.config_rejected++;
    if (!ev.on)
        return;
    struct sbuf *b = line_begin(EVN_CONFIG_REJECTED);
    json_member_str(b, "config", path ? path : "");
    json_member_str(b, "reason", reason);
    line_end(b);
}

void events_watch_gap(uint64_t gap_ms, uint64_t missed)
{
    if (!ev.on)
        return;
    struct sbuf *b = line_begin(EVN_WATCH_GAP);
    json_member_u64(b, "gap_ms", gap_ms);
    json_member_u64(b, "missed_checks", missed);
    json_member_str(b, "message", "keyspace notifications were not received for gap_ms: keys "
                    "written meanwhile were not checked; run ttlguard audit for the rules' "
                    "prefixes");
    line_end(b);
}

void events_members(enum event_name e, const char *members, size_t len)
{
    if (!ev.on)
        return;
    struct sbuf *b = line_begin(e);
    if (len > 0) {
        sbuf_add(b, ",", 1);
        sbuf_add(b, members, len);
    }
    line_end(b);
}

void events_backend_policy(const struct config *cfg, const char *policy, const char *why)
{
    size_t durable = 0, ttl = 0;
    for (size_t i = 0; i < cfg->rules.n; i++) {
        if (cfg->rules.v[i].kind == RULE_DURABLE)
            durable++;
        else
            ttl++;
    }
    if (cfg->rules.dflt.action != ACTION_ALLOW)
        ttl++;

    const char *level = "ok";
    struct sbuf msg = { 0 };
    if (policy == NULL) {
        level = "unknown";
        sbuf_printf(&msg, "cannot read maxmemory-policy (%s): whether keys without a TTL "
                     "can be evicted is unknown", why ? why : "refused");
    } else if (durable > 0 && strncmp(policy, "allkeys-", 8) == 0) {
        level = "warn";
        sbuf_printf(&msg, "maxmemory-policy %s evicts keys without a TTL too: keys under "
                     "the %zu durable rule%s can be evicted (use noeviction or a volatile-* "
                     "policy)", policy, durable, durable == 1 ? "" : "s");
    } else if (ttl > 0 && strncmp(policy, "volatile-", 9) == 0) {
        level = "note";
        sbuf_printf(&msg, "maxmemory-policy %s evicts keys with a TTL: a key given a TTL by "
                     "a ttl rule may be evicted before it expires", policy);
    }
    sbuf_add(&msg, "", 1);         /* NUL-terminate, also when empty */

    if (strcmp(level, "warn") == 0)
        log_warn("backend: %s", msg.p);
    else if (strcmp(level, "ok") != 0)
        log_info("backend: %s", msg.p);

    if (ev.on) {
        struct sbuf *b = line_begin(EVN_BACKEND_POLICY);
        if (policy != NULL)
            json_member_str(b, "policy", policy);
        else
            evbuf_adds(b, ",\"policy\":null");
        json_member_str(b, "level", level);
        if (msg.p[0] != '\0')
            json_member_str(b, "message", msg.p);
        json_member_u64(b, "durable_rules", durable);
        json_member_u64(b, "ttl_rules", ttl);
        line_end(b);
    }
    evbuf_free(&msg);
}

void events_backend_server(const struct config *cfg, const struct command_set *set,
                           int from_backend, const char *why)
{
    char name[48];
    int table, derived, unjudged;
    const struct server_id *id = command_set_server(set);

    server_id_format(id, name, sizeof name);
    command_set_counts(set, &table, &derived, &unjudged);
    const char *level = !from_backend || why != NULL ? "warn" : unjudged > 0 ? "note" : "ok";
    struct sbuf msg = { 0 };
    if (!from_backend)
        sbuf_printf(&msg, "the backend's name and version are unknown (%s): commands are "
                     "judged as Redis 7.0's", why ? why : "not read");
    else if (why != NULL)
        sbuf_printf(&msg, "%s", why);
    else if (unjudged > 0)
        sbuf_printf(&msg, "%d command%s outside the table cannot be judged from %s key specs "
                     "(rule option unknown decides)", unjudged, unjudged == 1 ? "" : "s",
                     unjudged == 1 ? "its" : "their");
    if (command_set_features(set) & FT_NEWER) {
        char table_note[96];
        command_set_table_note(set, table_note, sizeof table_note);
        sbuf_printf(&msg, "%s%s is newer than the command table (%s): a write with arguments "
                     "the table does not know is protected under rules with unknown = protect "
                     "(the default), else recorded as unverified", msg.len ? "; " : "", name,
                     table_note);
    }
    sbuf_add(&msg, "", 1);

    log_info("backend: %s, %d commands from the table, %d derived from its key specs%s%s",
             name, table, derived, msg.p[0] ? ": " : "", msg.p);
    if (ev.on) {
        struct sbuf *b = line_begin(EVN_BACKEND_SERVER);
        json_member_str(b, "server", id->kind == SRV_VALKEY ? "valkey" : "redis");
        json_member_str(b, "version", strchr(name, ' ') + 1);
        json_member_str(b, "source", from_backend ? "backend" : "assumed");
        json_member_str(b, "level", level);
        if (msg.p[0] != '\0')
            json_member_str(b, "message", msg.p);
        json_member_u64(b, "table_commands", (uint64_t)table);
        json_member_u64(b, "derived_commands", (uint64_t)derived);
        json_member_u64(b, "unjudged_commands", (uint64_t)unjudged);
        line_end(b);
    }
    evbuf_free(&msg);
}

void events_reopen(void)
{
    if (ev.w.target == NULL || config_events_to_stderr(ev.w.target))
        return;
    ev.w.target_gen++;
}

static void on_handle_closed(uv_handle_t *h)
{
}

void events_shutdown(void)
{
    if (ev.w.closing)
        return;
    folds_flush();
    if (ev.handles) {
        uv_close((uv_handle_t *)&ev.check, on_handle_closed);
        uv_close((uv_handle_t *)&ev.timer, on_handle_closed);
        ev.handles = 0;
    }
    ev.on = 0;
    ev.w.closing = 1;
    if (!ev.w.busy)
        writer_finish_sync();
    free(ev.rule_viol);
    free(ev.rule_durable);
    free(ev.rule_ttl_durable);
    ev.rule_viol = ev.rule_durable = ev.rule_ttl_durable = NULL;
    ev.nrules = 0;
    free(ev.w.target);
    ev.w.target = NULL;
    ev.cfg = NULL;
}
