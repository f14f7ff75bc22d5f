#!/usr/bin/env bash
#
# bench/instructions.sh: user-space instructions ttlguard spends per forwarded
# request (GET, redis-benchmark -c 50 -P 16), counted by callgrind. It is the
# figure `perf stat -e instructions:u` would give, for machines without
# hardware counters (VMs): two runs of N1 and N2 requests, and the difference
# of their totals over N2 - N1, so start-up and shutdown cancel out.
#
#   bench/instructions.sh [N1 N2]        (default 20000 120000)
#
# environment: TTLG_BIN (default build/ttlguard), REDIS_SERVER, REDIS_CLI, REDIS_BENCHMARK,
# BENCH_PORTS (default 7300-7301: redis, ttlguard). Prints one line per mode
# (multiplex = off, on). Needs valgrind. Stops what it started, by PID.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N1=${1:-20000}
N2=${2:-120000}
TTLG_BIN=${TTLG_BIN:-$ROOT/build/ttlguard}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-redis-benchmark}
REDIS_CLI=${REDIS_CLI:-redis-cli}
ports=${BENCH_PORTS:-7300-7301}
RPORT=${ports%-*}
TPORT=$((RPORT + 1))
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind" >&2; exit 2; }
[ -x "$TTLG_BIN" ] || { echo "instructions.sh: no ttlguard at $TTLG_BIN (set TTLG_BIN)" >&2; exit 2; }

WORK=$(mktemp -d)
rpid=""
cleanup() {
    [ -n "$rpid" ] && kill "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

"$REDIS_SERVER" --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
rpid=$!
for _ in $(seq 50); do
    [ "$("$REDIS_CLI" -p "$RPORT" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
done

# total_ir MULTIPLEX N: callgrind's instruction total for one proxy run of N GETs
total_ir() {
    local mux=$1 n=$2 pid
    printf '[proxy]\nlisten = 127.0.0.1:%d\nbackend = 127.0.0.1:%d\nmultiplex = %s\n' \
        "$TPORT" "$RPORT" "$mux" >"$WORK/t.ini"
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" \
        "$TTLG_BIN" --config "$WORK/t.ini" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        [ "$("$REDIS_CLI" -p "$TPORT" ping 2>/dev/null)" = PONG ] && break
        sleep 0.2
    done
    sleep 1.5       # the control connection has answered: clients may share
    "$REDIS_BENCHMARK" -p "$TPORT" -c 50 -n "$n" -P 16 -r 100000 -t get -q >/dev/null 2>&1 \
        || echo "instructions.sh: redis-benchmark failed" >&2
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    awk '/^(summary|totals):/ { print $2; exit }' "$WORK/cg.out"
}

for mux in off on; do
    a=$(total_ir "$mux" "$N1")
    b=$(total_ir "$mux" "$N2")
    [ -n "$a" ] && [ -n "$b" ] || { echo "instructions.sh: no callgrind totals" >&2; exit 1; }
    echo "multiplex = $mux: $(( (b - a) / (N2 - N1) )) user-space instructions per GET (-P 16)"
done
