#!/usr/bin/env bash
#
# bench/audit_bench.sh: keys per second of `ttlguard audit` on 1,000,000 mixed
# keys, next to the naive way (`redis-cli --scan`, then one `redis-cli TTL`
# per key), in one run against one redis-server of its own.
#
#   bench/audit_bench.sh > bench/audit_results.md
#
# - Data: bench/audit_gen.awk through `redis-cli --pipe`: strings, hashes,
#   lists, sets, sorted sets and streams; 62% with a TTL spread from a minute
#   to two months; leaked session and counter keys, durable ledgers with and
#   without a TTL, unregistered keys (see the comment at its top).
# - ttlguard: --runs audits (default 3), the table shows the median; each
#   line also says how much CPU redis-server spent, because on a shared
#   2-core machine the audit is bound by Redis (SCAN + PTTL + TYPE per key),
#   not by the client. One more run with --memory.
# - Naive: `redis-cli --scan` over the whole keyspace is timed; one
#   `redis-cli TTL KEY` process per key is timed over a bounded sample
#   (--naive-sample keys, default 20000, but at most --naive-seconds, default
#   60: on a busy machine one redis-cli process can take 20 ms) and
#   extrapolated to all keys; the table says so. It does less work than the
#   audit (no TYPE, no rules).
# - Own processes only: redis-server on --port (default 7340, in the audit's
#   range 7300-7349), stopped by PID on exit, also on Ctrl-C or an error.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    cat <<EOF
usage: bench/audit_bench.sh [--keys N] [--naive-sample N] [--naive-seconds S]
                           [--runs N] [--port P]

  --keys N           keys to fill (default 1000000)
  --naive-sample N   keys checked one redis-cli process at a time (default 20000)
  --naive-seconds S  ...but stop that sample after S seconds (default 60)
  --runs N           audits; the table shows the median (default 3)
  --port P           loopback port for the redis-server (default 7340)

environment: TTLG_BIN (default build/ttlguard), REDIS_SERVER, REDIS_CLI
EOF
}

KEYS=1000000
NAIVE_SAMPLE=20000
NAIVE_SECONDS=60
RUNS=3
PORT=7340
while (($#)); do
    case $1 in
    --keys) KEYS=${2:?}; shift ;;
    --naive-sample) NAIVE_SAMPLE=${2:?}; shift ;;
    --naive-seconds) NAIVE_SECONDS=${2:?}; shift ;;
    --runs) RUNS=${2:?}; shift ;;
    --port) PORT=${2:?}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done

TTLG_BIN=${TTLG_BIN:-$ROOT/build/ttlguard}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
if [[ ! -x $TTLG_BIN ]]; then
    echo "no ttlguard binary at $TTLG_BIN; build one first:" >&2
    echo "  cmake -S $ROOT -B $ROOT/build -DCMAKE_BUILD_TYPE=Release && cmake --build $ROOT/build --target ttlguard" >&2
    exit 2
fi

say() { printf '%s\n' "$*" >&2; }
now_ms() { date +%s%3N; }
cli() { "$REDIS_CLI" -p "$PORT" "$@"; }
redis_cpu_ms() {
    cli info cpu | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%d", s * 1000 }'
}

WORK=$(mktemp -d /tmp/ttlg-audit-bench.XXXXXX)
REDIS_PID=
cleanup() {
    if [[ -n $REDIS_PID ]]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if cli ping >/dev/null 2>&1; then
    say "port $PORT is taken; pick another with --port"
    exit 2
fi
"$REDIS_SERVER" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" --daemonize no &
REDIS_PID=$!
for _ in $(seq 100); do
    cli ping >/dev/null 2>&1 && break
    sleep 0.05
done
cli ping >/dev/null

say "filling $KEYS keys..."
t0=$(now_ms)
awk -v n="$KEYS" -f "$ROOT/bench/audit_gen.awk" | cli --pipe >"$WORK/pipe.log"
t1=$(now_ms)
got=$(cli dbsize)
if [[ $got != "$KEYS" ]]; then
    say "filled $got keys, wanted $KEYS:"; cat "$WORK/pipe.log" >&2
    exit 1
fi
say "filled in $(( (t1 - t0) / 1000 )) s"

cat >"$WORK/bench.ini" <<EOF
[proxy]
backend = 127.0.0.1:$PORT

[ttl "session:"]
ttl = 900

[ttl "counter:"]
ttl = 3600
action = log

[durable "billing:ledger:"]
owner = payments
reason = ledger of record
rebuild = replay ledger_entries from Postgres
EOF

# One audit; prints "elapsed_ms keys redis_cpu_ms".
audit_once() {
    local before after out=$WORK/audit.json rc=0
    before=$(redis_cpu_ms)
    "$TTLG_BIN" audit --config "$WORK/bench.ini" --json "$@" >"$out" 2>"$WORK/audit.err" || rc=$?
    after=$(redis_cpu_ms)
    if [[ $rc -ne 0 && $rc -ne 1 ]]; then
        say "ttlguard audit failed (exit $rc):"; cat "$WORK/audit.err" >&2
        exit 1
    fi
    local ms keys
    ms=$(grep -o '"elapsed_ms":[0-9]*' "$out" | cut -d: -f2)
    keys=$(grep -o '"scan":{"keys":[0-9]*' "$out" | grep -o '[0-9]*$')
    echo "$ms $keys $((after - before))"
}

declare -a RUN_MS RUN_CPU
for r in $(seq "$RUNS"); do
    read -r ms keys cpu < <(audit_once)
    [[ $keys == "$KEYS" ]] || { say "audit saw $keys keys, wanted $KEYS"; exit 1; }
    say "audit run $r: $ms ms, redis-server CPU $cpu ms, load $(cut -d' ' -f1 /proc/loadavg)"
    RUN_MS+=("$ms")
    RUN_CPU+=("$cpu")
done
read -r MEM_MS _ MEM_CPU < <(audit_once --memory)
say "audit --memory: $MEM_MS ms"
cp "$WORK/audit.json" "$WORK/last.json"

MEDIAN_MS=$(printf '%s\n' "${RUN_MS[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
MEDIAN_CPU=$(printf '%s\n' "${RUN_CPU[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')

say "naive: redis-cli --scan over all keys..."
t0=$(now_ms)
cli --scan >"$WORK/keys.txt"
t1=$(now_ms)
SCAN_MS=$((t1 - t0))
SCANNED=$(wc -l <"$WORK/keys.txt")
SAMPLE=$((NAIVE_SAMPLE < SCANNED ? NAIVE_SAMPLE : SCANNED))
say "naive: one redis-cli TTL per key for up to $SAMPLE keys or $NAIVE_SECONDS s..."
head -n "$SAMPLE" "$WORK/keys.txt" >"$WORK/sample.txt"
t0=$(now_ms)
deadline=$((t0 + NAIVE_SECONDS * 1000))
SAMPLE=0
while IFS= read -r k; do
    cli ttl "$k" >/dev/null
    SAMPLE=$((SAMPLE + 1))
    if ((SAMPLE % 100 == 0)) && (($(now_ms) > deadline)); then
        break
    fi
done <"$WORK/sample.txt"
t1=$(now_ms)
SAMPLE_MS=$((t1 - t0))

awk -v keys="$KEYS" -v runs="$RUNS" -v med="$MEDIAN_MS" -v medcpu="$MEDIAN_CPU" \
    -v allms="${RUN_MS[*]}" -v mem="$MEM_MS" -v memcpu="$MEM_CPU" \
    -v scan="$SCAN_MS" -v sample="$SAMPLE" -v sample_ms="$SAMPLE_MS" \
    -v load="$(cut -d' ' -f1-3 /proc/loadavg)" -v cpus="$(nproc)" 'BEGIN {
    audit_rate = keys / (med / 1000)
    naive_ms = scan + sample_ms / sample * keys
    naive_rate = keys / (naive_ms / 1000)
    printf "## ttlguard audit vs the naive way, %d keys\n\n", keys
    printf "| method | time for %d keys | keys/s | redis-server CPU |\n", keys
    printf "| --- | ---: | ---: | ---: |\n"
    printf "| `ttlguard audit` (median of %d runs: %s ms) | %.2f s | %.0f | %.2f s |\n", runs, allms, med / 1000, audit_rate, medcpu / 1000
    printf "| `ttlguard audit --memory` | %.2f s | %.0f | %.2f s |\n", mem / 1000, keys / (mem / 1000), memcpu / 1000
    printf "| naive: `redis-cli --scan` + one `redis-cli TTL` per key | %.0f s (extrapolated) | %.0f | - |\n", naive_ms / 1000, naive_rate
    printf "\n"
    printf "- speed-up of `ttlguard audit` over the naive way: **%.0fx**\n", audit_rate / naive_rate
    printf "- naive, measured: `redis-cli --scan` of all keys took %.2f s; %d `redis-cli TTL` calls took %.2f s (%.2f ms each), extrapolated to %d keys\n", scan / 1000, sample, sample_ms / 1000, sample_ms / sample, keys
    printf "- the naive way asks less (TTL only: no TYPE, no rules, no report)\n"
    printf "- machine: %d CPUs, load average at the end %s (shared: other jobs run too)\n", cpus, load
}'
