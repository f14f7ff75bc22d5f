#!/usr/bin/env bash
#
# bench/audit_bg.sh: what the background audit (audit_interval, audit_rate) costs
# Redis's other clients, against the same SCAN rate from `redis-cli --scan`.
#
# usage: bench/audit_bg.sh [--quick] [--rounds N] [--keys N] [--rate N] [--requests N] > out.md
#   --quick          plumbing check: --keys 20000 --requests 20000 --rounds 1
#   --rounds N       rounds per case, the table shows the median (default 3)
#   --keys N         keys in the server (default 300000: a third leaked, a third with
#                    a TTL, a third durable)
#   --rate N         keys per second: audit_rate, and redis-cli --scan --count N/10 -i 0.1
#                    (default 10000)
#   --requests N     GETs per measurement (default 200000)
#   -h, --help       this text
# environment: TTLG_BIN (default build/ttlguard, built in Release when unset and
#   missing), BENCH_PORTS (default 7800-7899), REDIS_SERVER REDIS_CLI REDIS_BENCHMARK
#
# Cases, each while redis-benchmark (GET, -c 10, -r 100000, straight to Redis: the
# other clients) runs: `idle` nothing else; `cli-scan` redis-cli --scan walking the
# keyspace at the rate (SCAN only; redis-cli before 7.2 has no --count, and the same
# SCAN loop runs from a Python snippet instead); `audit` a ttlguard with audit_interval = 1 (passes
# back to back) at audit_rate (SCAN, then PTTL and TYPE of every key). Per case: GETs/s,
# p50 and p99 latency (ms), Redis CPU time per second of the measurement (/proc/PID/stat),
# and the keys the scanner read per second. Markdown to stdout.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '/^# usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

ROUNDS=3 KEYS=300000 RATE=10000 REQUESTS=200000 SECONDS_PER=1 TARGETS=audit ALL_TARGETS=audit
while (($#)); do
    case $1 in
    --quick) KEYS=20000 REQUESTS=20000 ROUNDS=1 ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --keys) KEYS=${2:?--keys needs a value}; shift ;;
    --rate) RATE=${2:?--rate needs a value}; shift ;;
    --requests) REQUESTS=${2:?--requests needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/audit_bg.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
for v in KEYS RATE REQUESTS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench/audit_bg.sh: --${v,,} must be a positive integer" >&2; exit 2; }
done

BENCH_NAME=audit_bg.sh BENCH_PORTS=${BENCH_PORTS:-7800-7899} BENCH_TOOLS="curl"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
cp "$TTLG_BIN" "$WORK/ttlguard"

start_redis "$WORK/redis.log"
free_port TTLG_PORT; free_port ADMIN_PORT
cli() { "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

say "loading $KEYS keys"
third=$((KEYS / 3))
cli EVAL "for i = 1, tonumber(ARGV[1]) do
    redis.call('SET', 'session:' .. i, 'v')
    redis.call('SET', 'cache:' .. i, 'v', 'EX', 86400)
    redis.call('SET', 'billing:' .. i, 'v')
  end return 1" 0 "$third" >/dev/null

cat >"$WORK/audit.ini" <<EOF
[proxy]
listen = 127.0.0.1:$TTLG_PORT
backend = 127.0.0.1:$REDIS_PORT
admin = 127.0.0.1:$ADMIN_PORT
audit_interval = 1
audit_rate = $RATE

[ttl "session:"]
ttl = 900
action = rewrite

[ttl "cache:"]
ttl = 86400
action = rewrite

[durable "billing:"]
owner = payments
reason = ledger
rebuild = replay
EOF

keys_read() { curl -s "127.0.0.1:$ADMIN_PORT/metrics" | awk '$1 == "ttlguard_audit_keys_read_total" { print $2 }'; }

# SCAN cursor COUNT rate/10 every 0.1 s, walking the keyspace again and again:
# what redis-cli --scan --count rate/10 -i 0.1 does.
SCAN_PY='
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = s.makefile("rb")
count = str(max(1, int(sys.argv[2]) // 10)).encode()
def line():
    return f.readline()[:-2]
def reply():
    t = line()
    if t[:1] == b"*":
        return [reply() for _ in range(int(t[1:]))]
    if t[:1] == b"$":
        n = int(t[1:])
        v = f.read(n + 2)[:-2]
        return v
    return t
cursor = b"0"
while True:
    s.sendall(b"*4\r\n$4\r\nSCAN\r\n$%d\r\n%s\r\n$5\r\nCOUNT\r\n$%d\r\n%s\r\n"
              % (len(cursor), cursor, len(count), count))
    cursor = reply()[0]
    time.sleep(0.1)
'

# start_load CASE: the scanner of CASE in the background (LOAD_PID, or none).
start_load() {
    LOAD_PID=
    case $1 in
    cli-scan)
        if cli --scan --count 1 -i 0 --pattern nothing-matches >/dev/null 2>&1; then
            (while :; do cli --scan --count $((RATE / 10)) -i 0.1 >/dev/null; done) &
        else    # redis-cli before 7.2 has no --count: the same SCAN loop in Python
            python3 -c "$SCAN_PY" "$REDIS_PORT" "$RATE" &
        fi
        LOAD_PID=$! ;;
    audit)
        start_bg "$WORK/ttlguard.log" "$WORK/ttlguard" --config "$WORK/audit.ini"
        LOAD_PID=$PID_LAST
        wait_ping ttlguard "$LOAD_PID" "$TTLG_PORT" ;;
    esac
    sleep 1
}
stop_load() {
    [[ -n $LOAD_PID ]] || return 0
    local kids
    kids=$(pgrep -P "$LOAD_PID" || true)         # cli-scan: the redis-cli of the loop
    kill -TERM "$LOAD_PID" 2>/dev/null || true
    for k in $kids; do kill -TERM "$k" 2>/dev/null || true; done
    wait "$LOAD_PID" 2>/dev/null || true
}

# measure CASE: one line "rps p50 p99 cpu_ms_per_s keys_per_s".
measure() {
    local c=$1 t0 t1 c0 c1 k0 k1 csv
    start_load "$c"
    [[ $c == audit ]] && k0=$(keys_read) || k0=0
    c0=$(cpu_ticks "$REDIS_PID") t0=$(date +%s.%N)
    csv=$("$REDIS_BENCHMARK" -h 127.0.0.1 -p "$REDIS_PORT" -t get -c 10 -r 100000 \
          -n "$REQUESTS" --csv 2>/dev/null | tail -n 1)
    c1=$(cpu_ticks "$REDIS_PID") t1=$(date +%s.%N)
    [[ $c == audit ]] && k1=$(keys_read) || k1=0
    stop_load "$c"
    # "GET","rps","avg","min","p50","p95","p99","max"
    awk -F'"' -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v k0="$k0" -v k1="$k1" \
        -v hz="$(getconf CLK_TCK)" '{
        s = t1 - t0
        printf "%s %s %s %.0f %s\n", $4, $10, $14, (c1 - c0) * 1000 / hz / s,
               (k1 > k0 ? sprintf("%.0f", (k1 - k0) / s) : "-")
    }' <<<"$csv"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "-") }'; }

{
    echo "## Background audit against redis-cli --scan at the same rate"
    echo
    echo "$KEYS keys, rate $RATE keys/s, redis-benchmark GET -c 10 -n $REQUESTS, median of $ROUNDS."
    echo "$(first_line "$REDIS_SERVER" --version)"
    echo
    echo "| case | GETs/s | p50 ms | p99 ms | Redis CPU ms/s | scanner keys/s |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: |"
}
for c in idle cli-scan audit; do
    : >"$WORK/$c.txt"
    for r in $(seq 1 "$ROUNDS"); do
        say "$c, round $r"
        measure "$c" >>"$WORK/$c.txt"
    done
    printf '| %s | %s | %s | %s | %s | %s |\n' "$c" \
        "$(awk '{ print $1 }' "$WORK/$c.txt" | median)" "$(awk '{ print $2 }' "$WORK/$c.txt" | median)" \
        "$(awk '{ print $3 }' "$WORK/$c.txt" | median)" "$(awk '{ print $4 }' "$WORK/$c.txt" | median)" \
        "$(awk '{ print $5 }' "$WORK/$c.txt" | median)"
done
