/*
 * html: page, tables and SVG charts for the offline reports. See html.h.
 *
 * Charts are drawn at a fixed size in CSS pixels (the page is for reading
 * on a screen or printing), text in SVG <text>, so the numbers are in the
 * document and not only in the picture.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "html.h"

static const char *palette[HTML_COLORS] = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
};

static const char style[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;"
    "max-width:1120px;margin:24px auto;padding:0 16px}\n"
    "h1{font-size:22px;margin-bottom:4px}\n"
    "h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}\n"
    "table{border-collapse:collapse;margin:8px 0 18px}\n"
    "th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}\n"
    "th{background:#f4f5f7;font-weight:600}\n"
    "td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\n"
    "td{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:13px}\n"
    "figure{margin:10px 0 22px}\n"
    "figcaption{font-weight:600;margin-bottom:6px}\n"
    "svg text{font:12px ui-monospace,'DejaVu Sans Mono',monospace;fill:#333}\n"
    "svg .axis{fill:#777}\n"
    "svg line{stroke:#e3e3e3}\n"
    ".legend{margin-top:6px}\n"
    ".legend span{display:inline-block;margin:2px 14px 2px 0;white-space:nowrap}\n"
    ".legend i{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px}\n"
    ".note{color:#555}\n"
    ".warn{color:#b03000;font-weight:600}\n"
    ".empty{color:#777;font-style:italic}\n";

/* ---- text ----------------------------------------------------------------- */

void html_textn(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        switch (s[i]) {
        case '&':  fputs("&amp;", f); break;
        case '<':  fputs("&lt;", f); break;
        case '>':  fputs("&gt;", f); break;
        case '"':  fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:   fputc(s[i], f); break;
        }
    }
}

void html_text(FILE *f, const char *s)
{
    html_textn(f, s, strlen(s));
}

void html_printf(FILE *f, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    html_text(f, buf);
}

const char *html_color(size_t i)
{
    return palette[i % HTML_COLORS];
}

/* Bytes of the first maxchars characters of UTF-8 text s (a character
 * is a byte that is not a continuation byte, and what follows it). */
static size_t utf8_prefix(const char *s, size_t len, size_t maxchars)
{
    size_t chars = 0;
    for (size_t i = 0; i < len; i++) {
        if (((unsigned char)s[i] & 0xc0) != 0x80 && chars++ == maxchars)
            return i;
    }
    return len;
}

/* A label cut to maxchars characters, an ellipsis marking the cut. */
static void html_label(FILE *f, const char *s, size_t maxchars)
{
    size_t len = strlen(s);
    size_t n = utf8_prefix(s, len, maxchars);
    if (n == len) {
        html_textn(f, s, len);
        return;
    }
    n = utf8_prefix(s, len, maxchars - 1);
    html_textn(f, s, n);
    fputs("\xe2\x80\xa6", f);       /* U+2026 */
}

/* ---- page ---------------------------------------------------------------- */

void html_page_begin(FILE *f, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>", f);
    html_text(f, title);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>", style);
    html_text(f, title);
    fputs("</h1>\n", f);
}

void html_page_end(FILE *f)
{
    fputs("</body>\n</html>\n", f);
}

void html_section(FILE *f, const char *title)
{
    fputs("<h2>", f);
    html_text(f, title);
    fputs("</h2>\n", f);
}

void html_para(FILE *f, const char *cls, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (cls != NULL)
        fprintf(f, "<p class=\"%s\">", cls);
    else
        fputs("<p>", f);
    html_text(f, buf);
    fputs("</p>\n", f);
}

/* ---- tables -------------------------------------------------------------- */

void html_table_begin(struct html_table *t, FILE *f, const char *align, const char *const *head)
{
    t->f = f;
    t->align = align;
    t->ncol = strlen(align);
    t->col = 0;
    fputs("<table>\n<thead><tr>", f);
    for (size_t c = 0; c < t->ncol; c++) {
        fputs(align[c] == 'r' ? "<th class=\"n\">" : "<th>", f);
        html_text(f, head[c]);
        fputs("</th>", f);
    }
    fputs("</tr></thead>\n<tbody>\n", f);
}

void html_cell(struct html_table *t, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (t->col == 0)
        fputs("<tr>", t->f);
    fputs(t->align[t->col] == 'r' ? "<td class=\"n\">" : "<td>", t->f);
    html_text(t->f, buf);
    fputs("</td>", t->f);
    if (++t->col == t->ncol) {
        fputs("</tr>\n", t->f);
        t->col = 0;
    }
}

void html_table_end(struct html_table *t)
{
    if (t->col != 0) {              /* a short last row: close it */
        while (t->col != 0)
            html_cell(t, "%s", "");
    }
    fputs("</tbody>\n</table>\n", t->f);
}

/* ---- bar chart ------------------------------------------------------------- */

enum {
    BAR_W = 760,                /* the whole chart */
    BAR_LABEL_W = 300,          /* labels, right-aligned to the bars */
    BAR_VALUE_W = 110,          /* the value after the longest bar */
    BAR_ROW = 22,
    BAR_H = 14,
    BAR_LABEL_CHARS = 40,
};

static void figure_begin(FILE *f, const char *title)
{
    fputs("<figure>\n<figcaption>", f);
    html_text(f, title);
    fputs("</figcaption>\n", f);
}

static void svg_begin(FILE *f, const char *cls, int w, int h, const char *title)
{
    fprintf(f, "<svg class=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
            "aria-label=\"", cls, w, h, w, h);
    html_text(f, title);
    fputs("\">\n", f);
}

static void bar_row(FILE *f, const struct html_bar *b, size_t i, uint64_t max, size_t color)
{
    char num[24];
    const char *vt = b->value_text;
    if (vt == NULL) {
        snprintf(num, sizeof num, "%llu", (unsigned long long)b->value);
        vt = num;
    }
    double area = BAR_W - BAR_LABEL_W - BAR_VALUE_W;
    double w = max > 0 ? (double)b->value * area / (double)max : 0;
    if (b->value > 0 && w < 1)
        w = 1;
    int y = 4 + (int)i * BAR_ROW;

    fputs("<g><title>", f);
    html_text(f, b->label);
    fputs(": ", f);
    html_text(f, vt);
    fprintf(f, "</title><text x=\"%d\" y=\"%d\" text-anchor=\"end\">", BAR_LABEL_W - 8, y + 14);
    html_label(f, b->label, BAR_LABEL_CHARS);
    fprintf(f, "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" rx=\"2\" fill=\"%s\"/>",
            BAR_LABEL_W, y + (BAR_ROW - BAR_H) / 2, w, BAR_H, html_color(color));
    fprintf(f, "<text x=\"%.1f\" y=\"%d\">", BAR_LABEL_W + w + 6, y + 14);
    html_text(f, vt);
    fputs("</text></g>\n", f);
}

void html_bar_chart(FILE *f, const char *title, const struct html_bar *v, size_t n, size_t color)
{
    uint64_t max = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].value > max)
            max = v[i].value;
    figure_begin(f, title);
    if (n == 0) {
        fputs("<p class=\"empty\">(none)</p>\n</figure>\n", f);
        return;
    }
    int h = (int)n * BAR_ROW + 8;
    svg_begin(f, "bars", BAR_W, h, title);
    for (size_t i = 0; i < n; i++)
        bar_row(f, &v[i], i, max, color);
    fputs("</svg>\n</figure>\n", f);
}

/* ---- time buckets ---------------------------------------------------------- */

#define SEC  1000LL
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

int64_t html_pick_step(int64_t span_ms, size_t max_buckets)
{
    static const int64_t steps[] = {
        SEC, 2 * SEC, 5 * SEC, 10 * SEC, 15 * SEC, 30 * SEC,
        MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN,
        HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR,
        DAY, 2 * DAY, 7 * DAY, 30 * DAY,
    };
    if (span_ms < 0)
        span_ms = 0;
    if (max_buckets < 2)
        max_buckets = 2;
    /* +2: the first bucket starts at a multiple of the step, before the data. */
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        if (span_ms / steps[i] + 2 <= (int64_t)max_buckets)
            return steps[i];
    int64_t k = span_ms / (30 * DAY) / (int64_t)(max_buckets - 1) + 1;
    while (span_ms / (k * 30 * DAY) + 2 > (int64_t)max_buckets)
        k++;
    return k * 30 * DAY;
}

void html_timeline_for(struct html_timeline *tl, int64_t first_ms, int64_t last_ms,
                       size_t max_buckets)
{
    if (last_ms < first_ms)
        last_ms = first_ms;
    tl->step_ms = html_pick_step(last_ms - first_ms, max_buckets);
    tl->start_ms = first_ms - ((first_ms % tl->step_ms) + tl->step_ms) % tl->step_ms;
    tl->nbuckets = (size_t)((last_ms - tl->start_ms) / tl->step_ms) + 1;
}

/* A time as the axis shows it: the finer the step, the finer the time. */
static void fmt_time(char *buf, size_t len, int64_t ms, int64_t step, int full)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    const char *fmt = full ? "%Y-%m-%d %H:%M:%S"
                    : step < MIN ? "%H:%M:%S" : step < DAY ? "%H:%M" : "%m-%d";
    if (strftime(buf, len, fmt, &tm) == 0)
        buf[0] = '\0';
}

static void fmt_step(char *buf, size_t len, int64_t step)
{
    if (step % DAY == 0)
        snprintf(buf, len, "%lld d", (long long)(step / DAY));
    else if (step % HOUR == 0)
        snprintf(buf, len, "%lld h", (long long)(step / HOUR));
    else if (step % MIN == 0)
        snprintf(buf, len, "%lld min", (long long)(step / MIN));
    else
        snprintf(buf, len, "%lld s", (long long)(step / SEC));
}

/* ---- stacked chart ---------------------------------------------------------- */

enum {
    ST_W = 760, ST_H = 260,
    ST_ML = 64, ST_MR = 12, ST_MT = 10, ST_MB = 34,     /* margins around the plot */
    ST_TICKS = 4,
    ST_XLABELS = 6,
};

/* A round step (1, 2 or 5 times a power of ten) for about `ticks` ticks up to max. */
static uint64_t nice_step(uint64_t max, int ticks)
{
    uint64_t raw = (max + (uint64_t)ticks - 1) / (uint64_t)ticks;
    uint64_t mag = 1;
    if (raw == 0)
        return 1;
    while (mag <= raw / 10)
        mag *= 10;
    if (raw <= mag)
        return mag;
    if (raw <= 2 * mag)
        return 2 * mag;
    if (raw <= 5 * mag)
        return 5 * mag;
    return 10 * mag;
}

static double st_x(const struct html_timeline *tl, double bucket)
{
    return ST_ML + bucket * (double)(ST_W - ST_ML - ST_MR) / (double)tl->nbuckets;
}

static double st_y(uint64_t v, uint64_t top)
{
    return ST_MT + (ST_H - ST_MT - ST_MB) * (1.0 - (double)v / (double)top);
}

/* Grid lines with their counts, and the time under some buckets. */
static void st_axes(FILE *f, const struct html_timeline *tl, uint64_t top, uint64_t ystep)
{
    char buf[32];
    for (uint64_t v = 0; v <= top; v += ystep) {
        double y = st_y(v, top);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>"
                "<text class=\"axis\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%llu</text>\n",
                ST_ML, y, ST_W - ST_MR, y, ST_ML - 6, y + 4, (unsigned long long)v);
    }
    size_t every = (tl->nbuckets + ST_XLABELS - 1) / ST_XLABELS;
    for (size_t b = 0; b < tl->nbuckets; b += every) {
        fmt_time(buf, sizeof buf, tl->start_ms + (int64_t)b * tl->step_ms, tl->step_ms, 0);
        fprintf(f, "<text class=\"axis\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                st_x(tl, (double)b + 0.5), ST_H - ST_MB + 16, buf);
    }
}

/* The bars: series stacked bottom up in their order, a tooltip each. */
static void st_columns(FILE *f, const struct html_timeline *tl, const struct html_series *s,
                       size_t ns, uint64_t top)
{
    char when[32];
    double bw = st_x(tl, 1) - st_x(tl, 0);
    double gap = bw > 4 ? 1 : 0;
    for (size_t b = 0; b < tl->nbuckets; b++) {
        uint64_t below = 0;
        fmt_time(when, sizeof when, tl->start_ms + (int64_t)b * tl->step_ms, tl->step_ms, 1);
        for (size_t i = 0; i < ns; i++) {
            uint64_t v = s[i].v[b];
            if (v == 0)
                continue;
            double y0 = st_y(below, top), y1 = st_y(below + v, top);
            below += v;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                    "<title>", st_x(tl, (double)b) + gap / 2, y1, bw - gap, y0 - y1, html_color(i));
            html_text(f, s[i].name);
            fprintf(f, ", %s UTC: %llu</title></rect>\n", when, (unsigned long long)v);
        }
    }
}

/* Under the chart: each series' color, name and total (a gauge: its value
 * in bucket *last), and the time span. */
static void st_legend(FILE *f, const struct html_timeline *tl, const struct html_series *s,
                      size_t ns, const size_t *last)
{
    char from[32], to[32], step[32];
    fputs("<div class=\"legend\">", f);
    for (size_t i = 0; i < ns; i++) {
        uint64_t total = 0;
        for (size_t b = 0; b < tl->nbuckets; b++)
            total += last == NULL || b == *last ? s[i].v[b] : 0;
        fprintf(f, "<span><i style=\"background:%s\"></i>", html_color(i));
        html_text(f, s[i].name);
        fprintf(f, " <b>%llu</b></span>", (unsigned long long)total);
    }
    fputs("</div>\n", f);
    fmt_time(from, sizeof from, tl->start_ms, tl->step_ms, 1);
    fmt_time(to, sizeof to, tl->start_ms + (int64_t)tl->nbuckets * tl->step_ms, tl->step_ms, 1);
    fmt_step(step, sizeof step, tl->step_ms);
    html_para(f, "note", "%s to %s UTC, one bar per %s", from, to, step);
}

static void stacked_chart(FILE *f, const char *title, const struct html_timeline *tl,
                          const struct html_series *s, size_t ns, const size_t *last)
{
    uint64_t ymax = 0;
    for (size_t b = 0; b < tl->nbuckets; b++) {
        uint64_t sum = 0;
        for (size_t i = 0; i < ns; i++)
            sum += s[i].v[b];
        if (sum > ymax)
            ymax = sum;
    }
    figure_begin(f, title);
    if (ns == 0 || tl->nbuckets == 0 || ymax == 0) {
        fputs("<p class=\"empty\">(none)</p>\n</figure>\n", f);
        return;
    }
    uint64_t ystep = nice_step(ymax, ST_TICKS);
    uint64_t top = (ymax + ystep - 1) / ystep * ystep;
    svg_begin(f, "stacked", ST_W, ST_H, title);
    st_axes(f, tl, top, ystep);
    st_columns(f, tl, s, ns, top);
    fputs("</svg>\n", f);
    st_legend(f, tl, s, ns, last);
    fputs("</figure>\n", f);
}

void html_stacked_chart(FILE *f, const char *title, const struct html_timeline *tl,
                        const struct html_series *s, size_t ns)
{
    stacked_chart(f, title, tl, s, ns, NULL);
}

void html_gauge_chart(FILE *f, const char *title, const struct html_timeline *tl,
                      const struct html_series *s, size_t ns, size_t last)
{
    stacked_chart(f, title, tl, s, ns, &last);
}
