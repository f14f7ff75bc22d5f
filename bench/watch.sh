#!/usr/bin/env bash
#
# bench/watch.sh: can the watcher (watch = on) keep up with a busy server? Writers
# talk straight to Redis (redis-benchmark, the clients the proxy never sees) while
# ttlguard checks every key they write; the same load with no watcher is the baseline.
#
# usage: bench/watch.sh [--quick] [--rounds N] [--requests N] > out.md
#   --quick          plumbing check: --requests 20000 --rounds 1
#   --rounds N       rounds per case, the table shows the median (default 3)
#   --requests N     requests per measurement (default 1000000)
#   -h, --help       this text
# environment: TTLG_BIN (default build/ttlguard, built in Release when unset and
#   missing), BENCH_PORTS (default 7700-7799), REDIS_SERVER REDIS_CLI REDIS_BENCHMARK
#
# Cases: SET key:__rand_int__ (every SET drops the TTL: every check fixes one) and
# INCR counter:__rand_int__ (a key is created once, then keeps its TTL), -c 50
# -r 1000000, at -P 1 and -P 16. Redis has notify-keyspace-events KEA in both runs, so
# the baseline pays for publishing too; only the subscriber and its checks differ.
# Per case: requests/s without and with the watcher, keys checked per second, how
# long after the load the last check was answered, checks missed, and CPU time per
# 1,000 writes of Redis and of ttlguard (/proc/PID/stat). Markdown to stdout.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '/^# usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

ROUNDS=3 REQUESTS=1000000 SECONDS_PER=1 TARGETS=watch ALL_TARGETS=watch
while (($#)); do
    case $1 in
    --quick) REQUESTS=20000 ROUNDS=1 ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --requests) REQUESTS=${2:?--requests needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/watch.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $REQUESTS =~ ^[1-9][0-9]*$ ]] || { echo "bench/watch.sh: --requests must be a positive integer" >&2; exit 2; }

BENCH_NAME=watch.sh BENCH_PORTS=${BENCH_PORTS:-7700-7799} BENCH_TOOLS="curl"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
cp "$TTLG_BIN" "$WORK/ttlguard"

start_redis "$WORK/redis.log" --notify-keyspace-events KEA
free_port TTLG_PORT; free_port ADMIN_PORT
cat >"$WORK/watch.ini" <<EOF
[proxy]
listen = 127.0.0.1:$TTLG_PORT
backend = 127.0.0.1:$REDIS_PORT
admin = 127.0.0.1:$ADMIN_PORT
watch = on

[ttl "key:"]
ttl = 3600
action = rewrite

[ttl "counter:"]
ttl = 3600
action = rewrite
EOF

metric() { curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
now() { date +%s.%N; }
rps() { awk -F'","' '{ gsub(/"/, "", $2); print $2 }' <<<"$1" | tail -n 1; }

# run_case TEST PIPELINE WATCH: one measurement; prints "rps redis_ticks ttlg_ticks checks
# missed drain_s elapsed_s".
run_case() {
    local test=$1 pipe=$2 watch=$3 out t0 t1 r0 r1 g0=0 g1=0 c0=0 c1=0 m0=0 m1=0 drain=0 last
    "$REDIS_CLI" -p "$REDIS_PORT" flushall >/dev/null
    if ((watch)); then
        c0=$(metric ttlguard_watch_checks_total) m0=$(metric ttlguard_watch_missed_total)
        g0=$(cpu_ticks "$TTLG_PID")
    fi
    r0=$(cpu_ticks "$REDIS_PID") t0=$(now)
    out=$("$REDIS_BENCHMARK" -h 127.0.0.1 -p "$REDIS_PORT" -t "$test" -n "$REQUESTS" -c 50 \
        -r 1000000 -P "$pipe" -q --csv 2>/dev/null)
    t1=$(now)
    if ((watch)); then
        # Until the checks stop: the backlog the load left behind.
        last=-1 c1=$(metric ttlguard_watch_checks_total)
        while [[ $c1 != "$last" ]]; do last=$c1; sleep 0.05; c1=$(metric ttlguard_watch_checks_total); done
        drain=$(awk -v a="$t1" -v b="$(now)" 'BEGIN { d = b - a - 0.05; printf "%.2f", d < 0 ? 0 : d }')
        m1=$(metric ttlguard_watch_missed_total) g1=$(cpu_ticks "$TTLG_PID")
    fi
    r1=$(cpu_ticks "$REDIS_PID")
    echo "$(rps "$out") $((r1 - r0)) $((g1 - g0)) $((c1 - c0)) $((m1 - m0)) $drain" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

say "redis $("$REDIS_SERVER" --version | awk '{ print $3 }'), $REQUESTS requests per run, $ROUNDS round(s)"
echo "| test | -P | writes/s, no watcher | writes/s, watcher | ratio | keys checked/s | drained after load | missed | Redis CPU ms / 1k writes (no watcher → watcher) | ttlguard CPU ms / 1k writes |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for test in set incr; do
    for pipe in 1 16; do
        base=() with=() cps=() drains=() missed=0 rb=() rw=() tw=()
        for ((round = 0; round < ROUNDS; round++)); do
            read -r rate rt _ _ _ _ _ <<<"$(run_case "$test" "$pipe" 0)"
            base+=("$rate") rb+=("$(awk -v t="$rt" -v n="$REQUESTS" 'BEGIN { printf "%.3f", t * 10 / n * 1000 }')")
            start_bg "$WORK/ttlguard.log" "$WORK/ttlguard" --config "$WORK/watch.ini"
            TTLG_PID=$PID_LAST
            wait_ping ttlguard "$TTLG_PID" "$TTLG_PORT"
            for i in $(seq 1 100); do [[ $(metric ttlguard_watch_subscribed) == 1 ]] && break; sleep 0.05; done
            read -r rate rt gt checks miss drain el <<<"$(run_case "$test" "$pipe" 1)"
            kill -TERM "$TTLG_PID"; wait "$TTLG_PID" 2>/dev/null || true
            with+=("$rate") drains+=("$drain") missed=$((missed + miss))
            cps+=("$(awk -v c="$checks" -v e="$el" -v d="$drain" 'BEGIN { printf "%.0f", c / (e + d) }')")
            rw+=("$(awk -v t="$rt" -v n="$REQUESTS" 'BEGIN { printf "%.3f", t * 10 / n * 1000 }')")
            tw+=("$(awk -v t="$gt" -v n="$REQUESTS" 'BEGIN { printf "%.3f", t * 10 / n * 1000 }')")
        done
        b=$(printf '%s\n' "${base[@]}" | median) w=$(printf '%s\n' "${with[@]}" | median)
        printf '| %s | %s | %.0f | %.0f | %s | %.0f | %s s | %s | %s → %s | %s |\n' "${test^^}" "$pipe" "$b" "$w" \
            "$(ratio "$w" "$b")" "$(printf '%s\n' "${cps[@]}" | median)" \
            "$(printf '%s\n' "${drains[@]}" | median)" "$missed" \
            "$(printf '%s\n' "${rb[@]}" | median)" "$(printf '%s\n' "${rw[@]}" | median)" \
            "$(printf '%s\n' "${tw[@]}" | median)"
    done
done
echo
echo "Setup: $(nproc) CPUs shared by Redis, redis-benchmark and ttlguard; -c 50 -r 1000000;" \
    "$REQUESTS writes per run, median of $ROUNDS; bench/watch.sh."
