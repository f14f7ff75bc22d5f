/*
 * resp_value: a whole reply as a tree (see resp_value.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp_value.h"
#include "util.h"

#define RV_DEPTH_MAX 64     /* topology replies are four levels deep */
#define RV_NULL_AGG ((size_t)-1)    /* len of a null aggregate (*-1) */

struct rv_arena {
    struct rv_arena *next;
    size_t used, cap;
    char data[];
};

static void *arena_alloc(struct rv_tree *t, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct rv_arena *a = t->arena;
    if (a == NULL || a->cap - a->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        struct rv_arena *b = xmalloc(sizeof *b + cap);
        b->next = a;
        b->used = 0;
        b->cap = cap;
        t->arena = a = b;
    }
    void *p = a->data + a->used;
    a->used += n;
    return p;
}

struct cursor {
    const char *p, *end;
};

/* The line at c (up to CRLF), or -1. */
static int take_line(struct cursor *c, const char **s, size_t *len)
{
    const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    if (nl == NULL || nl == c->p || nl[-1] != '\r')
        return -1;
    *s = c->p;
    *len = (size_t)(nl - 1 - c->p);
    c->p = nl + 1;
    return 0;
}

static int take_count(const char *s, size_t len, long long *out)
{
    char buf[24];
    char *end;
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    *out = strtoll(buf, &end, 10);
    return *end == '\0' ? 0 : -1;
}

static int parse_value(struct rv_tree *t, struct cursor *c, struct rv *v, int depth);

static int parse_elements(struct rv_tree *t, struct cursor *c, struct rv *v, long long count,
                          int depth)
{
    if (count < 0 || (unsigned long long)count > (size_t)(c->end - c->p))
        return -1;          /* every element takes three bytes at least */
    v->n = (size_t)count;
    v->el = v->n ? arena_alloc(t, v->n * sizeof *v->el) : NULL;
    for (size_t i = 0; i < v->n; i++)
        if (parse_value(t, c, &v->el[i], depth + 1) < 0)
            return -1;
    return 0;
}

static int parse_value(struct rv_tree *t, struct cursor *c, struct rv *v, int depth)
{
    const char *s;
    size_t len;
    long long n;
    memset(v, 0, sizeof *v);
    if (depth > RV_DEPTH_MAX || c->p >= c->end)
        return -1;
    v->type = *c->p++;
    if (take_line(c, &s, &len) < 0)
        return -1;
    switch (v->type) {
    case '+': case '-': case ':': case '_': case ',': case '#': case '(':
        v->s = s;
        v->len = len;
        return 0;
    case '$': case '!': case '=':
        if (take_count(s, len, &n) < 0)
            return -1;
        if (n == -1 && v->type == '$')
            return 0;       /* null bulk: s stays NULL */
        if (n < 0 || n + 2 > c->end - c->p || c->p[n] != '\r' || c->p[n + 1] != '\n')
            return -1;
        v->s = c->p;
        v->len = (size_t)n;
        c->p += n + 2;
        return 0;
    case '*': case '~': case '>':
        if (take_count(s, len, &n) < 0)
            return -1;
        if (n == -1 && v->type == '*') {
            v->len = RV_NULL_AGG;
            return 0;
        }
        return parse_elements(t, c, v, n, depth);
    case '%':
        if (take_count(s, len, &n) < 0 || n > (long long)((size_t)-1 / 4))
            return -1;
        return parse_elements(t, c, v, n * 2, depth);
    case '|': {
        struct rv *attr = arena_alloc(t, sizeof *attr);
        *attr = (struct rv){ .type = '%' };
        if (take_count(s, len, &n) < 0 || n > (long long)((size_t)-1 / 4) ||
            parse_elements(t, c, attr, n * 2, depth) < 0 || parse_value(t, c, v, depth) < 0)
            return -1;
        v->attr = attr;
        return 0;
    }
    default:
        return -1;
    }
}

int rv_parse(struct rv_tree *t, const char *p, size_t len)
{
    struct cursor c = { p, p + len };
    t->arena = NULL;
    t->root = arena_alloc(t, sizeof *t->root);
    if (parse_value(t, &c, t->root, 0) < 0 || c.p != c.end) {
        rv_free(t);
        return -1;
    }
    return 0;
}

void rv_free(struct rv_tree *t)
{
    struct rv_arena *a = t->arena, *next;
    for (; a != NULL; a = next) {
        next = a->next;
        free(a);
    }
    t->arena = NULL;
    t->root = NULL;
}

struct obuf {
    char *p;
    size_t len, cap;
};

static void put(struct obuf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_header(struct obuf *b, char type, long long n)
{
    char h[32];
    int k = snprintf(h, sizeof h, "%c%lld\r\n", type, n);
    put(b, h, (size_t)k);
}

static void encode(struct obuf *b, const struct rv *v)
{
    if (v->attr != NULL) {
        put_header(b, '|', (long long)(v->attr->n / 2));
        for (size_t i = 0; i < v->attr->n; i++)
            encode(b, &v->attr->el[i]);
    }
    switch (v->type) {
    case '$': case '!': case '=':
        if (v->s == NULL) {
            put(b, "$-1\r\n", 5);
            return;
        }
        put_header(b, v->type, (long long)v->len);
        put(b, v->s, v->len);
        put(b, "\r\n", 2);
        return;
    case '*': case '~': case '>': case '%':
        if (v->len == RV_NULL_AGG) {
            put(b, "*-1\r\n", 5);
            return;
        }
        put_header(b, v->type, (long long)(v->type == '%' ? v->n / 2 : v->n));
        for (size_t i = 0; i < v->n; i++)
            encode(b, &v->el[i]);
        return;
    default:
        put(b, &v->type, 1);
        put(b, v->s, v->len);
        put(b, "\r\n", 2);
        return;
    }
}

void rv_encode(const struct rv_tree *t, char **out, size_t *outlen)
{
    struct obuf b = { NULL, 0, 0 };
    encode(&b, t->root);
    *out = b.p;
    *outlen = b.len;
}

void rv_set_str(struct rv_tree *t, struct rv *v, const char *s, size_t len)
{
    char *copy = arena_alloc(t, len + 1);
    memcpy(copy, s, len);
    copy[len] = '\0';
    v->s = copy;
    v->len = len;
}

int rv_is(const struct rv *v, const char *text)
{
    size_t n = strlen(text);
    if (v->type != '+' && v->type != '$' && v->type != '=')
        return 0;
    return v->s != NULL && v->len == n && memcmp(v->s, text, n) == 0;
}

struct rv *rv_get(struct rv *v, const char *key)
{
    if (v->type != '%' && v->type != '*')
        return NULL;
    for (size_t i = 0; i + 1 < v->n; i += 2)
        if (rv_is(&v->el[i], key))
            return &v->el[i + 1];
    return NULL;
}
