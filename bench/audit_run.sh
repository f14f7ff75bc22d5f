#!/usr/bin/env bash
#
# bench/audit_run.sh: one background audit pass over a keyspace whose counts are
# known, and what the proxy then shows: the /metrics gauges and the audit_pass event.
#
# usage: bench/audit_run.sh [--scale N] [--rate N] > out.md
#   --scale N   thousands of keys per 30 (default 10: 300,000 keys)
#   --rate N    audit_rate, keys per second (default 50000)
#   -h, --help  this text
# environment: TTLG_BIN (default build/ttlguard, built in Release when unset and
#   missing), BENCH_PORTS (default 7900-7999), REDIS_SERVER REDIS_CLI
#
# The keyspace, loaded by a Lua script (scale 10):
#   200,000  session:leak:<i>  no TTL                 leaked      [ttl "session:"]
#    60,000  session:live:<i>  EX 86400               expiring    [ttl "session:"]
#    30,000  billing:<i>       no TTL                 registered  [durable "billing:"]
#    10,000  user:<i>          no TTL                 unregistered (default allow)
# Two passes (audit_interval = 20: the first starts at once, the second 20 s
# later), with 1,000 more leaked keys and 500 more unregistered ones written
# between them: the gauges ttlguard_audit_* after each, the passes' durations,
# Redis's and the proxy's CPU time during the first, and the two audit_pass
# events with their lists cut to three entries. Markdown to stdout.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '/^# usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

SCALE=10 RATE=50000 ROUNDS=1 SECONDS_PER=1 TARGETS=audit ALL_TARGETS=audit
while (($#)); do
    case $1 in
    --scale) SCALE=${2:?--scale needs a value}; shift ;;
    --rate) RATE=${2:?--rate needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/audit_run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
for v in SCALE RATE; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench/audit_run.sh: --${v,,} must be a positive integer" >&2; exit 2; }
done

BENCH_NAME=audit_run.sh BENCH_PORTS=${BENCH_PORTS:-7900-7999} BENCH_TOOLS="curl jq"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

start_redis "$WORK/redis.log"
free_port TTLG_PORT; free_port ADMIN_PORT
cli() { "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

k=$((SCALE * 1000))
say "loading $((30 * k)) keys"
cli EVAL "local function fill(prefix, n, ttl)
    for i = 1, n do
      if ttl > 0 then redis.call('SET', prefix .. i, 'v', 'EX', ttl)
      else redis.call('SET', prefix .. i, 'v') end
    end
  end
  local k = tonumber(ARGV[1])
  fill('session:leak:', 20 * k, 0)
  fill('session:live:', 6 * k, 86400)
  fill('billing:', 3 * k, 0)
  fill('user:', k, 0)
  return redis.call('DBSIZE')" 0 "$k" >/dev/null
DBSIZE=$(cli DBSIZE)

cat >"$WORK/audit.ini" <<EOF
[proxy]
listen = 127.0.0.1:$TTLG_PORT
backend = 127.0.0.1:$REDIS_PORT
admin = 127.0.0.1:$ADMIN_PORT
events = $WORK/events.log
audit_interval = 20
audit_rate = $RATE

[ttl "session:"]
ttl = 900
action = rewrite

[durable "billing:"]
owner = payments
reason = ledger of record
rebuild = replay from Postgres
EOF

start_bg "$WORK/ttlguard.log" "$TTLG_BIN" --config "$WORK/audit.ini"
TTLG_PID=$PID_LAST
wait_ping ttlguard "$TTLG_PID" "$TTLG_PORT"
metrics() { curl -s "127.0.0.1:$ADMIN_PORT/metrics"; }
gauges() { metrics | grep -E '^ttlguard_audit_(keys|last_pass|passes|keys_read)'; }
wait_pass() { # wait_pass N: until N passes are done
    local t0; t0=$(date +%s)
    until metrics | grep -q "^ttlguard_audit_passes_total $1\$"; do
        kill -0 "$TTLG_PID" 2>/dev/null || { KEEP_WORK=1; die "ttlguard exited (logs: $WORK)"; }
        (($(date +%s) - t0 < 600)) || { KEEP_WORK=1; die "no pass $1 in 600 s (logs: $WORK)"; }
        sleep 0.1
    done
}
rc0=$(cpu_ticks "$REDIS_PID") tc0=$(cpu_ticks "$TTLG_PID")
wait_pass 1
rc1=$(cpu_ticks "$REDIS_PID") tc1=$(cpu_ticks "$TTLG_PID")
first=$(gauges)
cli EVAL "for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'session:leak2:' .. i, 'v') end
  for i = 1, tonumber(ARGV[2]) do redis.call('SET', 'user2:' .. i, 'v') end return 1" \
    0 1000 500 >/dev/null
wait_pass 2
hz=$(getconf CLK_TCK)

echo "## A background audit pass over $((30 * k)) keys at audit_rate $RATE"
echo
echo "$(first_line "$REDIS_SERVER" --version); $(first_line "$TTLG_BIN" --version)"
echo
echo "Loaded: $((20 * k)) leaked and $((6 * k)) expiring under ttl \"session:\", $((3 * k))"
echo "registered under durable \"billing:\", $k unregistered (DBSIZE $DBSIZE)."
echo
echo "CPU time from the proxy's start to the end of the first pass: Redis"
echo "$(((rc1 - rc0) * 1000 / hz)) ms, ttlguard $(((tc1 - tc0) * 1000 / hz)) ms."
echo
echo "/metrics after the first pass:"
echo
echo '```'
echo "$first"
echo '```'
echo
echo "After the second (1,000 leaked and 500 unregistered keys more):"
echo
echo '```'
gauges
echo '```'
echo
echo "The audit_pass events (lists cut to three entries):"
echo
echo '```json'
jq -c 'select(.event == "audit_pass")
       | with_entries(if (.value | type) == "array" then .value |= .[:3] else . end)' \
    "$WORK/events.log"
echo '```'
