/*
 * stats: bucket bounds and the global counters (see stats.h).
 *
 * The bounds follow the 1-2.5-5 series from 50 µs to 1 s: a proxy on the
 * same host as Redis answers in tens to hundreds of microseconds, so the
 * resolution is where the requests are; anything slower than a second is a
 * stalled backend and lands in +Inf.
 */
#include "stats.h"

const uint64_t stats_bounds_ns[STATS_NBOUNDS] = {
    50000ULL, 100000ULL, 250000ULL, 500000ULL,
    1000000ULL, 2500000ULL, 5000000ULL,
    10000000ULL, 25000000ULL, 50000000ULL,
    100000000ULL, 250000000ULL, 500000000ULL,
    1000000000ULL,
};

const char *const stats_bounds_text[STATS_NBOUNDS] = {
    "0.00005", "0.0001", "0.00025", "0.0005",
    "0.001", "0.0025", "0.005",
    "0.01", "0.025", "0.05",
    "0.1", "0.25", "0.5",
    "1",
};

struct stats_proxy stats_proxy;
