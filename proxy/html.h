/*
 * html: one self-contained HTML page for the offline reports
 * (`ttlguard report --html`, `ttlguard audit --html`).
 *
 * The page holds everything itself: inline CSS, inline SVG charts, no
 * script, no external URL, so it can be attached to a ticket and opened
 * anywhere, offline. Charts carry their numbers as text (a bar's value next
 * to it, a tooltip per bar in <title>), and every chart comes with a table
 * of the exact counts.
 *
 * Every string handed to these functions is text and is HTML-escaped on the
 * way out. Bytes from Redis (keys, prefixes) must first be put in printable
 * form by the caller, the way its text output prints them, so that a binary
 * key reads the same on the page as in the terminal.
 */
#ifndef TTLG_HTML_H
#define TTLG_HTML_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HTML_COLORS 10          /* palette size; color indexes wrap */

/* Text with & < > " ' escaped (fit for element content and attributes). */
void html_text(FILE *f, const char *s);
void html_textn(FILE *f, const char *s, size_t len);
/* printf, then escaped. */
void html_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The palette's color i (wraps), "#rrggbb". */
const char *html_color(size_t i);

/* <!doctype html>, <head> with the style sheet, <body>, <h1>title</h1>. */
void html_page_begin(FILE *f, const char *title);
void html_page_end(FILE *f);
/* <h2>title</h2>. */
void html_section(FILE *f, const char *title);
/* A paragraph of formatted text; cls is its class ("note", "warn") or NULL. */
void html_para(FILE *f, const char *cls, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A table filled cell by cell, like the text reports' tables: rows open and
 * close by themselves every ncol cells. align has one 'l' or 'r' per
 * column ('r': numbers, right-aligned in tabular figures); head has as many
 * column titles. */
struct html_table {
    FILE *f;
    const char *align;
    size_t ncol;
    size_t col;                 /* column of the next cell */
};

void html_table_begin(struct html_table *t, FILE *f, const char *align, const char *const *head);
void html_cell(struct html_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void html_table_end(struct html_table *t);

/* A horizontal bar chart, one bar per item, longest = largest value. */
struct html_bar {
    const char *label;          /* cut short in the chart (whole in its tooltip) */
    uint64_t value;
    const char *value_text;     /* printed after the bar; NULL = the value */
};

void html_bar_chart(FILE *f, const char *title, const struct html_bar *v, size_t n, size_t color);

/* Time buckets: nbuckets of step_ms each from start_ms (ms since the epoch, UTC). */
struct html_timeline {
    int64_t start_ms;
    int64_t step_ms;
    size_t nbuckets;
};

/* The bucket width for data spanning span_ms: a round width (1 s, 2 s, 5 s,
 * ... 1 h, ... 1 d, 7 d, 30 d, multiples of 30 d) giving at most
 * max_buckets buckets. */
int64_t html_pick_step(int64_t span_ms, size_t max_buckets);
/* The timeline covering [first_ms, last_ms] with at most max_buckets buckets. */
void html_timeline_for(struct html_timeline *tl, int64_t first_ms, int64_t last_ms,
                       size_t max_buckets);

/* One series of a stacked chart: v[tl->nbuckets] values. */
struct html_series {
    const char *name;
    const uint64_t *v;
};

/* A stacked bar chart over time, series i in html_color(i), with a y axis,
 * time labels and a legend of the series with their totals. */
void html_stacked_chart(FILE *f, const char *title, const struct html_timeline *tl,
                        const struct html_series *s, size_t ns);
/* The same for gauges sampled over time (keys at each audit pass): the
 * legend gives each series' value in bucket last (the latest), not a total. */
void html_gauge_chart(FILE *f, const char *title, const struct html_timeline *tl,
                      const struct html_series *s, size_t ns, size_t last);

#endif
