/*
 * rules: prefix -> rule, longest prefix wins.
 *
 * rules_match() runs once per key on the request path, so the set is laid
 * out for lookups, not for edits:
 *
 *   key ──▶ first byte in bitmap? ──no──▶ default (or the "" rule)
 *                 │ yes
 *                 ▼
 *   binary search: last prefix <= key ──▶ is it a prefix of key? ──yes──▶ rule
 *                                             │ no
 *                                             ▼
 *                                  parent[] chain until one is
 *
 * Why the parent chain is enough: the prefixes are sorted so that every
 * prefix comes right before all strings that extend it. If P is the longest
 * prefix of key, every rule sorted between P and key starts with P, so P is
 * on the ancestor chain of the last rule <= key. The chain is as long as the
 * nesting of prefixes (a carve-out inside a carve-out: 2 or 3 steps).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "util.h"

/* Byte order of prefixes and keys: memcmp, and a string sorts before every
 * longer string it is a prefix of. */
static int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int is_prefix_of(const struct rule *r, const char *key, size_t len)
{
    return r->prefix_len <= len && memcmp(r->prefix, key, r->prefix_len) == 0;
}

const struct rule *rules_match(const struct ruleset *rs, const char *key, size_t len)
{
    /* With a "" rule it sorts first (v[0]) and matches whatever nothing
     * longer matches; it plays the part of the default. */
    const struct rule *fallback = rs->has_empty_prefix ? &rs->v[0] : &rs->dflt;
    if (len == 0)
        return fallback;
    uint8_t b = (uint8_t)key[0];
    if (!(rs->first_byte[b >> 3] & (1u << (b & 7))))
        return fallback;

    /* Last rule sorting <= key. The bitmap hit means some prefix starts with
     * key[0], but it may still sort after key ("ab:" vs key "aa"). */
    size_t lo = 0, hi = rs->n;          /* answer is in [lo, hi), or none */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct rule *r = &rs->v[mid];
        if (bytes_cmp(r->prefix, r->prefix_len, key, len) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return fallback;

    for (size_t i = lo - 1; i != SIZE_MAX; i = rs->parent[i]) {
        if (is_prefix_of(&rs->v[i], key, len))
            return &rs->v[i];
    }
    return fallback;
}

void rules_init(struct ruleset *rs)
{
    memset(rs, 0, sizeof *rs);
    rs->dflt.kind = RULE_DEFAULT;
    rs->dflt.prefix = xstrdup("");
    rs->dflt.prefix_len = 0;
    rs->dflt.label = xstrdup("default");
    rs->dflt.action = ACTION_ALLOW;
    rs->dflt.refresh = REFRESH_ALLOW;
}

void rules_add(struct ruleset *rs, const struct rule *r)
{
    ASSERT(r->kind != RULE_DEFAULT);
    ASSERT(rs->parent == NULL);         /* not after rules_finish() */

    /* One realloc per rule: sets are built once per (re)load and hold
     * hundreds of rules at most. */
    rs->v = xrealloc(rs->v, (rs->n + 1) * sizeof *rs->v);
    struct rule *d = &rs->v[rs->n++];
    *d = *r;
    if (d->label == NULL) {
        char *q = rules_quote(d->prefix, d->prefix_len);
        const char *kind = rule_kind_name(d->kind);
        size_t n = strlen(kind) + 1 + strlen(q) + 1;
        d->label = xmalloc(n);
        snprintf(d->label, n, "%s %s", kind, q);
        free(q);
    }
}

static int rule_cmp(const void *a, const void *b)
{
    const struct rule *x = a, *y = b;
    return bytes_cmp(x->prefix, x->prefix_len, y->prefix, y->prefix_len);
}

int rules_finish(struct ruleset *rs, char *err, size_t errlen)
{
    if (rs->n > 0)
        qsort(rs->v, rs->n, sizeof *rs->v, rule_cmp);

    for (size_t i = 1; i < rs->n; i++) {
        const struct rule *a = &rs->v[i - 1], *b = &rs->v[i];
        if (rule_cmp(a, b) == 0) {
            /* qsort is not stable: name the rules in file order. */
            if (b->line < a->line) {
                const struct rule *t = a;
                a = b;
                b = t;
            }
            snprintf(err, errlen, "duplicate prefix: [%s] (line %d) and [%s] (line %d)",
                     a->label, a->line, b->label, b->line);
            return -1;
        }
    }

    /* Sorted order is a depth-first walk of the prefix tree, so the rules
     * that prefix v[i] are exactly the ones left on a stack of open
     * ancestors once those that do not prefix v[i] are popped. */
    rs->parent = xmalloc((rs->n ? rs->n : 1) * sizeof *rs->parent);
    size_t *stack = xmalloc((rs->n ? rs->n : 1) * sizeof *stack);
    size_t depth = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const struct rule *r = &rs->v[i];
        while (depth > 0 && !is_prefix_of(&rs->v[stack[depth - 1]], r->prefix, r->prefix_len))
            depth--;
        rs->parent[i] = depth > 0 ? stack[depth - 1] : SIZE_MAX;
        stack[depth++] = i;

        if (r->prefix_len == 0) {
            rs->has_empty_prefix = 1;
        } else {
            uint8_t b = (uint8_t)r->prefix[0];
            rs->first_byte[b >> 3] |= (uint8_t)(1u << (b & 7));
        }
    }
    free(stack);
    return 0;
}

static void rule_free(struct rule *r)
{
    free(r->prefix);
    free(r->label);
    free(r->owner);
    free(r->reason);
    free(r->rebuild);
}

void rules_free(struct ruleset *rs)
{
    rule_free(&rs->dflt);
    for (size_t i = 0; i < rs->n; i++)
        rule_free(&rs->v[i]);
    free(rs->v);
    free(rs->parent);
    memset(rs, 0, sizeof *rs);
}

const char *rule_action_name(enum rule_action a)
{
    switch (a) {
    case ACTION_ALLOW:   return "allow";
    case ACTION_LOG:     return "log";
    case ACTION_REWRITE: return "rewrite";
    case ACTION_REJECT:  return "reject";
    }
    return "?";
}

const char *rule_unknown_name(enum rule_unknown u)
{
    switch (u) {
    case UNKNOWN_LOG:    return "log";
    case UNKNOWN_ALLOW:  return "allow";
    case UNKNOWN_REJECT: return "reject";
    default:             return "protect";
    }
}

const char *rule_refresh_name(enum rule_refresh r)
{
    switch (r) {
    case REFRESH_ALLOW: return "allow";
    case REFRESH_BOUND: return "bound";
    }
    return "?";
}

const char *rule_kind_name(enum rule_kind k)
{
    switch (k) {
    case RULE_DEFAULT: return "default";
    case RULE_TTL:     return "ttl";
    case RULE_DURABLE: return "durable";
    }
    return "?";
}

int rules_unquote(const char *text, char **out, size_t *outlen, char *err, size_t errlen)
{
    size_t tlen = strlen(text);
    if (tlen == 0 || text[0] != '"') {
        snprintf(err, errlen, "expected a quoted prefix like \"session:\"");
        return -1;
    }

    /* The decoded bytes are never longer than the text. */
    char *buf = xmalloc(tlen);
    size_t n = 0;
    const char *p = text + 1;
    for (;;) {
        char c = *p++;
        if (c == '\0') {
            snprintf(err, errlen, "missing closing '\"' after the prefix");
            goto fail;
        }
        if (c == '"')
            break;
        if (c != '\\') {
            buf[n++] = c;
            continue;
        }
        c = *p++;
        switch (c) {
        case '\\': buf[n++] = '\\'; break;
        case '"':  buf[n++] = '"';  break;
        case 'n':  buf[n++] = '\n'; break;
        case 'r':  buf[n++] = '\r'; break;
        case 't':  buf[n++] = '\t'; break;
        case 'x': {
            int hi = hex_digit_value(p[0]);
            int lo = hi < 0 ? -1 : hex_digit_value(p[1]);
            if (lo < 0) {
                snprintf(err, errlen, "bad escape in prefix: \\x needs two hex digits (\\x00 to \\xff)");
                goto fail;
            }
            buf[n++] = (char)(hi << 4 | lo);
            p += 2;
            break;
        }
        case '\0':
            snprintf(err, errlen, "missing closing '\"' after the prefix");
            goto fail;
        default:
            snprintf(err, errlen, "unknown escape '\\%c' in prefix (use \\xHH, \\\\, \\\", \\n, \\r or \\t)", c);
            goto fail;
        }
    }
    if (*p != '\0') {
        snprintf(err, errlen, "unexpected text after the closing '\"' of the prefix: '%s'", p);
        goto fail;
    }
    buf[n] = '\0';
    *out = buf;
    *outlen = n;
    return 0;

fail:
    free(buf);
    return -1;
}

char *rules_quote(const char *p, size_t len)
{
    /* Worst case every byte becomes \xHH; plus the quotes and the NUL. */
    char *q = xmalloc(len * 4 + 3);
    char *o = q;
    *o++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (c) {
        case '"':  *o++ = '\\'; *o++ = '"';  break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n';  break;
        case '\r': *o++ = '\\'; *o++ = 'r';  break;
        case '\t': *o++ = '\\'; *o++ = 't';  break;
        default:
            if (c >= 0x20 && c < 0x7f) {
                *o++ = (char)c;
            } else {
                static const char hex[] = "0123456789abcdef";
                *o++ = '\\';
                *o++ = 'x';
                *o++ = hex[c >> 4];
                *o++ = hex[c & 15];
            }
        }
    }
    *o++ = '"';
    *o = '\0';
    return q;
}
