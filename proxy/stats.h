/*
 * stats: request latency histograms and the backend connection gauge, the
 * numbers behind /metrics that struct stats (loop.h) does not hold.
 *
 * stats_latency_observe() runs once per forwarded request, so it is inline
 * and touches one cache line: a bucket index found by at most STATS_NBOUNDS
 * comparisons (two or three for the sub-millisecond replies that are the
 * common case), three additions. Buckets are kept non-cumulative; the admin
 * endpoint adds them up when it renders Prometheus' cumulative `le` buckets.
 *
 * Like everything else in the proxy, only the loop thread touches these.
 */
#ifndef TTLG_STATS_H
#define TTLG_STATS_H

#include <stdint.h>

/* Upper bounds of the buckets, in seconds as Prometheus prints them and in
 * nanoseconds as they are compared. A last, implicit bucket is +Inf. */
#define STATS_NBOUNDS 14

extern const uint64_t stats_bounds_ns[STATS_NBOUNDS];
extern const char *const stats_bounds_text[STATS_NBOUNDS];     /* "0.00005" ... "1" */

enum stats_path {
    STATS_PASS,         /* forwarded unchanged */
    STATS_REWRITTEN,    /* rewritten by a TTL rule */
    STATS__PATHS
};

struct stats_hist {
    uint64_t bucket[STATS_NBOUNDS + 1];     /* [i]: observations in (bound[i-1], bound[i]]; last: +Inf */
    uint64_t count;
    uint64_t sum_ns;
};

struct stats_proxy {
    struct stats_hist latency[STATS__PATHS];
    int64_t backend_connections;            /* backend connections open now: +1 when one is
                                             * established, -1 when it closes */
};

extern struct stats_proxy stats_proxy;

/* Index of the bucket ns falls in: the first bound >= ns, or STATS_NBOUNDS. */
static inline unsigned stats_bucket(uint64_t ns)
{
    unsigned i = 0;
    while (i < STATS_NBOUNDS && ns > stats_bounds_ns[i])
        i++;
    return i;
}

/* One forwarded request whose reply came back after ns nanoseconds (from
 * the request being read to its reply being complete). */
static inline void stats_latency_observe(int rewritten, uint64_t ns)
{
    struct stats_hist *h = &stats_proxy.latency[rewritten ? STATS_REWRITTEN : STATS_PASS];
    h->bucket[stats_bucket(ns)]++;
    h->count++;
    h->sum_ns += ns;
}

#endif
