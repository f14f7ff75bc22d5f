# bench/audit_gen.awk: RESP commands that fill Redis with N mixed keys for
# bench/audit_bench.sh (feed to `redis-cli --pipe`). Deterministic: key i is
# always the same key, so runs compare.
#
#   awk -v n=1000000 -f bench/audit_gen.awk | redis-cli -p PORT --pipe
#
# Per 20 keys (i % 20), under bench/audit_bench.sh's rules:
#   0-5   session:<uuid>:billableSecondsPending  string, EX 60..900; every
#         100th key without a TTL (seed 000's leak)            [ttl "session:"]
#   6-9   cache:<40 hex>                          string, EX 1h..7d  (default)
#   10-11 user:<n>:profile                        hash, no TTL       (unregistered)
#   12-13 billing:ledger:<n>                      zset, no TTL; every 1000th
#         gets a TTL                                           [durable "billing:ledger:"]
#   14-15 queue:<n>                               list, EX 1d..60d on half
#   16-17 tags:<n>                                set, no TTL        (unregistered)
#   18-19 counter:<n>                             INCRBY + EXPIRE 3600; every
#         100th without                                        [ttl "counter:"]
#   and every 1000th key (i % 1000 == 999) is a stream events:<n> instead.

function emit(argc,    s, k) {
    s = "*" argc "\r\n"
    for (k = 1; k <= argc; k++)
        s = s "$" length(A[k]) "\r\n" A[k] "\r\n"
    printf "%s", s
}

# Deterministic pseudo-random 32-bit value for (i, salt).
function h32(i, salt) {
    return (i * 2654435761 + salt * 40503) % 4294967296
}

BEGIN {
    if (n == "") n = 1000000
    for (i = 0; i < n; i++) {
        r = i % 20
        if (i % 1000 == 999) {
            A[1] = "XADD"; A[2] = "events:" i; A[3] = "*"; A[4] = "f"; A[5] = "v"
            emit(5)
        } else if (r <= 5) {
            A[1] = "SET"
            A[2] = sprintf("session:%08x-%04x-4%03x-a%03x-%08x%04x:billableSecondsPending",
                           h32(i, 1), h32(i, 2) % 65536, h32(i, 3) % 4096, h32(i, 4) % 4096,
                           h32(i, 5), i % 65536)
            A[3] = "0"
            if (i % 100 == 0) {
                emit(3)
            } else {
                A[4] = "EX"; A[5] = 60 + h32(i, 6) % 841
                emit(5)
            }
        } else if (r <= 9) {
            A[1] = "SET"
            A[2] = sprintf("cache:%08x%08x%08x%08x%08x", h32(i, 7), h32(i, 8), h32(i, 9), h32(i, 10), i)
            A[3] = "payload-" i
            A[4] = "EX"; A[5] = 3600 + h32(i, 11) % (7 * 86400 - 3600)
            emit(5)
        } else if (r <= 11) {
            A[1] = "HSET"; A[2] = "user:" i ":profile"; A[3] = "name"; A[4] = "u" i; A[5] = "plan"; A[6] = "free"
            emit(6)
        } else if (r <= 13) {
            A[1] = "ZADD"; A[2] = "billing:ledger:" i; A[3] = i; A[4] = "entry-" i
            emit(4)
            if (i % 1000 == 12) {
                A[1] = "EXPIRE"; A[2] = "billing:ledger:" i; A[3] = 86400
                emit(3)
            }
        } else if (r <= 15) {
            A[1] = "RPUSH"; A[2] = "queue:" i; A[3] = "job-" i; A[4] = "job-" i + 1
            emit(4)
            if (i % 2 == 0) {
                A[1] = "EXPIRE"; A[2] = "queue:" i; A[3] = 86400 + h32(i, 12) % (59 * 86400)
                emit(3)
            }
        } else if (r <= 17) {
            A[1] = "SADD"; A[2] = "tags:" i; A[3] = "red"; A[4] = "blue"
            emit(4)
        } else {
            A[1] = "INCRBY"; A[2] = "counter:" i; A[3] = i % 97
            emit(3)
            if (i % 100 != 18 && i % 100 != 19) {
                A[1] = "EXPIRE"; A[2] = "counter:" i; A[3] = 3600
                emit(3)
            }
        }
    }
}
