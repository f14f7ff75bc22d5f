/*
 * bench/lat1.c: the latency of one client's requests, one at a time, to the
 * nanosecond. bench/run.sh --mode latency builds and runs it for its
 * 1-client rows, because redis-benchmark 7.0 files latencies in an HDR
 * histogram whose smallest unit is 8 us (lowest value 10 us): at 1 client a
 * p50 of 15 us and one of 23 us are the two neighbouring values it can print.
 *
 *   lat1 HOST PORT REQUESTS get|set
 *
 * Sends GET key:lat1 (or SET key:lat1 xxx: 3 bytes, as redis-benchmark's
 * default values) REQUESTS times, each after the previous reply, with
 * TCP_NODELAY, after 1,000 unrecorded ones; checks every reply byte for byte
 * ("$3\r\nxxx\r\n" or "+OK\r\n": the script sets the key to xxx first) and
 * prints "p50_us p99_us mean_us rps". The time of one request runs from
 * before its write to after its reply's last byte (CLOCK_MONOTONIC).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* One request: write it whole, read exactly the expected reply. */
static int roundtrip(int fd, const char *req, size_t reqlen, const char *want, size_t wantlen)
{
    char buf[64];
    size_t off = 0, got = 0;
    while (off < reqlen) {
        ssize_t n = write(fd, req + off, reqlen - off);
        if (n <= 0) return -1;
        off += (size_t)n;
    }
    while (got < wantlen) {
        ssize_t n = read(fd, buf + got, wantlen - got);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    return memcmp(buf, want, wantlen) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: lat1 HOST PORT REQUESTS get|set\n");
        return 2;
    }
    long n = atol(argv[3]);
    if (n < 100) {
        fprintf(stderr, "lat1: REQUESTS must be at least 100\n");
        return 2;
    }
    static const char get_req[] = "*2\r\n$3\r\nGET\r\n$8\r\nkey:lat1\r\n";
    static const char set_req[] = "*3\r\n$3\r\nSET\r\n$8\r\nkey:lat1\r\n$3\r\nxxx\r\n";
    int is_set = strcmp(argv[4], "set") == 0;
    if (!is_set && strcmp(argv[4], "get") != 0) {
        fprintf(stderr, "lat1: the command is get or set\n");
        return 2;
    }
    const char *req = is_set ? set_req : get_req;
    size_t reqlen = is_set ? sizeof set_req - 1 : sizeof get_req - 1;
    const char *want = is_set ? "+OK\r\n" : "$3\r\nxxx\r\n";
    size_t wantlen = strlen(want);

    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
        fprintf(stderr, "lat1: HOST must be an IPv4 address\n");
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("lat1: connect");
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    int64_t *lat = malloc((size_t)n * sizeof *lat);
    if (!lat) return 1;
    for (int i = 0; i < 1000; i++) {
        if (roundtrip(fd, req, reqlen, want, wantlen) != 0) {
            fprintf(stderr, "lat1: unexpected reply or connection closed (warm-up)\n");
            return 1;
        }
    }
    int64_t start = now_ns(), sum = 0;
    for (long i = 0; i < n; i++) {
        int64_t t0 = now_ns();
        if (roundtrip(fd, req, reqlen, want, wantlen) != 0) {
            fprintf(stderr, "lat1: unexpected reply or connection closed after %ld requests\n", i);
            return 1;
        }
        lat[i] = now_ns() - t0;
        sum += lat[i];
    }
    int64_t total = now_ns() - start;
    close(fd);
    qsort(lat, (size_t)n, sizeof *lat, cmp_i64);
    /* Nearest rank: the smallest value with at least p % of the samples at or below it. */
    long i50 = (n * 50 + 99) / 100 - 1, i99 = (n * 99 + 99) / 100 - 1;
    printf("%.2f %.2f %.2f %.0f\n", lat[i50] / 1e3, lat[i99] / 1e3, (double)sum / n / 1e3,
           n / (total / 1e9));
    free(lat);
    return 0;
}
