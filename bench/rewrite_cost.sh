#!/usr/bin/env bash
#
# bench/rewrite_cost.sh: what a rewritten request costs Redis itself, from INFO
# commandstats: the microseconds Redis spent in every command ttlguard sent for it
# (MULTI and EXEC, which runs the command and EXPIRE ... NX; or EVAL of the wrap
# script) per client request, next to the plain command sent straight to Redis.
# Redis's own accounting of time in commands (not its I/O and parsing); run it on a
# quiet machine: a preempted command counts the time it waited.
#
# usage: bench/rewrite_cost.sh [--requests N] > out.md
#   --requests N     requests per command and target (default 200000)
#   -h, --help       this text
# environment: TTLG_BIN (default build/ttlguard, built in Release when unset and
#   missing), BENCH_PORTS (default 7800-7899), REDIS_SERVER REDIS_CLI REDIS_BENCHMARK
#
# Commands: SET, GETSET, INCR, LPUSH, HSET, SADD, ZADD (-P 16) and MSET of 10 keys,
# each with redis-benchmark -c 50 -r 100000 on keys under rewrite rules; every
# measurement starts on an empty Redis with CONFIG RESETSTAT. Markdown to stdout.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '/^# usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

REQUESTS=200000 ROUNDS=1 SECONDS_PER=1 TARGETS=x ALL_TARGETS=x
while (($#)); do
    case $1 in
    --requests) REQUESTS=${2:?--requests needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/rewrite_cost.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $REQUESTS =~ ^[1-9][0-9]*$ ]] || { echo "bench/rewrite_cost.sh: --requests must be a positive integer" >&2; exit 2; }

BENCH_NAME=rewrite_cost.sh BENCH_PORTS=${BENCH_PORTS:-7800-7899} BENCH_TOOLS=""
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
cp "$TTLG_BIN" "$WORK/ttlguard"

free_port REDIS_PORT; free_port TTLG_PORT
start_bg "$WORK/redis.log" "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
    --appendonly no --daemonize no
wait_ping redis-server "$PID_LAST" "$REDIS_PORT"
{
    printf '[proxy]\nlisten = 127.0.0.1:%s\nbackend = 127.0.0.1:%s\n' "$TTLG_PORT" "$REDIS_PORT"
    for p in key: counter: mylist myhash myset myzset; do
        printf '\n[ttl "%s"]\nttl = 3600\naction = rewrite\n' "$p"
    done
} >"$WORK/rewrite.ini"
start_bg "$WORK/ttlguard.log" "$WORK/ttlguard" --config "$WORK/rewrite.ini"
wait_ping ttlguard "$PID_LAST" "$TTLG_PORT"

# usec_per_request PORT ARGS...: Redis's microseconds per client request (top-level
# commands: MULTI + EXEC, or EVAL, whose time includes what they run), and the
# commands it ran ("multi:1.00 set:1.00 ..." per request).
usec_per_request() {
    local port=$1; shift
    "$REDIS_CLI" -p "$REDIS_PORT" flushall >/dev/null
    "$REDIS_CLI" -p "$REDIS_PORT" config resetstat >/dev/null
    "$REDIS_BENCHMARK" -h 127.0.0.1 -p "$port" -n "$REQUESTS" -c 50 -r 100000 -P 16 -q "$@" \
        >/dev/null 2>&1
    "$REDIS_CLI" -p "$REDIS_PORT" info commandstats | tr -d '\r' | awk -F'[:,=]' -v n="$REQUESTS" '
        /^cmdstat_/ {
            name = substr($1, 9)
            if (name ~ /^(flushall|config|info|ping|acl|client)/) next   # the control connection
            usec[name] = $5; calls[name] = $3
        }
        END {
            # Top-level commands only: EXEC and EVAL include the time of the
            # commands they run, which are counted on their own too.
            if ("exec" in usec) total = usec["multi"] + usec["exec"]
            else if ("eval" in usec) total = usec["eval"]
            else for (c in usec) total += usec[c]
            printf "%.2f", total / n
            for (c in calls) printf " %s:%.2f", c, calls[c] / n
            printf "\n"
        }'
}

echo "| command | form through ttlguard | Redis µs/request, plain | Redis µs/request, rewritten | ratio | commands Redis ran per request (rewritten) |"
echo "|---|---|---:|---:|---:|---|"
while IFS='|' read -r label args; do
    read -r -a argv <<<"$args"
    read -r plain _ <<<"$(usec_per_request "$REDIS_PORT" "${argv[@]}")"
    read -r rewr calls <<<"$(usec_per_request "$TTLG_PORT" "${argv[@]}")"
    form="MULTI form"
    [[ $calls == *eval* ]] && form="script (EVAL)"
    printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$form" "$plain" "$rewr" \
        "$(ratio "$rewr" "$plain")" "$(tr ' ' '\n' <<<"$calls" | sort | paste -sd' ')"
done <<'EOF'
SET|-t set
GETSET|GETSET key:__rand_int__ v
INCR|-t incr
LPUSH|-t lpush
HSET|HSET myhash f:__rand_int__ v
SADD|SADD myset m:__rand_int__
ZADD|ZADD myzset __rand_int__ m:__rand_int__
MSET (10 keys)|-t mset
EOF
echo
echo "Setup: redis-benchmark -c 50 -r 100000 -P 16, $REQUESTS requests per row and target;" \
    "Redis's INFO commandstats (usec of the top-level commands per client request: MULTI" \
    "+ EXEC, or EVAL, whose time includes the commands they run)." \
    "bench/rewrite_cost.sh."
