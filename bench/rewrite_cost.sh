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
# On Redis 8.4 and later (REDIS_SERVER), two rows more: SET ... IFNE judged by
# the table, and the same through a second ttlguard whose table is held back to
# Redis 8.0.6 (TTLG_TABLE_VERIFIED), which cannot judge IFNE and protects the key
# with the generic form (MULTI; cmd; EXPIRE key ttl NX; EXEC).
#
# A second table weighs the atomic forms a rewritten SET could take (issue 16's
# candidates) by what Redis spends on them in all, I/O and parsing included: its
# process CPU time (utime + stime) per request while redis-cli --pipe feeds it the
# same requests in each form, on existing keys: plain SET, ttlguard's MULTI form,
# one MULTI around 16 requests, EVAL, EVALSHA, FCALL of a library function, and the
# two commands without MULTI (not atomic: the floor of any form that sends both),
# and the generic form that protects a write the table cannot judge (the command
# as sent, MULTI; SET k v; EXPIRE k ttl NX; EXEC).
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

start_redis "$WORK/redis.log"
free_port TTLG_PORT
{
    printf '[proxy]\nlisten = 127.0.0.1:%s\nbackend = 127.0.0.1:%s\n' "$TTLG_PORT" "$REDIS_PORT"
    for p in key: counter: mylist myhash myset myzset; do
        printf '\n[ttl "%s"]\nttl = 3600\naction = rewrite\n' "$p"
    done
} >"$WORK/rewrite.ini"
start_bg "$WORK/ttlguard.log" "$WORK/ttlguard" --config "$WORK/rewrite.ini"
wait_ping ttlguard "$PID_LAST" "$TTLG_PORT"

# Redis 8.4+: a second ttlguard whose table is held back to 8.0.6, for the
# generic form of a write it cannot judge (SET ... IFNE).
read -r SRV_MAJOR SRV_MINOR < <("$REDIS_SERVER" --version |
    sed -n 's/^Redis server v=\([0-9]*\)\.\([0-9]*\).*/\1 \2/p') || true
HELD_PORT=""
if [[ -n ${SRV_MAJOR:-} ]] && ((SRV_MAJOR > 8 || (SRV_MAJOR == 8 && SRV_MINOR >= 4))); then
    free_port HELD_PORT
    sed "s/^listen = .*/listen = 127.0.0.1:$HELD_PORT/" "$WORK/rewrite.ini" >"$WORK/held.ini"
    TTLG_TABLE_VERIFIED=redis:8.0.6 start_bg "$WORK/held.log" "$WORK/ttlguard" --config "$WORK/held.ini"
    wait_ping ttlguard "$PID_LAST" "$HELD_PORT"
fi

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

# row LABEL PORT FORM ARGS...: one row of the table, through the ttlguard on
# PORT (FORM "table": the MULTI form or the script, as Redis's counts show).
row() {
    local label=$1 port=$2 form=$3 plain rewr calls
    shift 3
    read -r plain _ <<<"$(usec_per_request "$REDIS_PORT" "$@")"
    read -r rewr calls <<<"$(usec_per_request "$port" "$@")"
    if [[ $form == table ]]; then
        form="MULTI form"
        [[ $calls == *eval* ]] && form="script (EVAL)"
    fi
    printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$form" "$plain" "$rewr" \
        "$(ratio "$rewr" "$plain")" "$(tr ' ' '\n' <<<"$calls" | sort | paste -sd' ')"
}

echo "| command | form through ttlguard | Redis µs/request, plain | Redis µs/request, rewritten | ratio | commands Redis ran per request (rewritten) |"
echo "|---|---|---:|---:|---:|---|"
while IFS='|' read -r label args; do
    read -r -a argv <<<"$args"
    row "$label" "$TTLG_PORT" table "${argv[@]}"
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
if [[ -n $HELD_PORT ]]; then
    row "SET … IFNE" "$TTLG_PORT" table SET key:__rand_int__ v IFNE x
    row "SET … IFNE, table held back to 8.0.6" "$HELD_PORT" \
        "generic form (not judged)" SET key:__rand_int__ v IFNE x
fi
echo
echo "Setup: redis-benchmark -c 50 -r 100000 -P 16, $REQUESTS requests per row and target;" \
    "Redis's INFO commandstats (usec of the top-level commands per client request: MULTI" \
    "+ EXEC, or EVAL, whose time includes the commands they run)." \
    "bench/rewrite_cost.sh."

# ---- the candidate forms of a rewritten SET ----------------------------------

SCRIPT="redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL') redis.call('EXPIRE', KEYS[1], ARGV[2], 'NX') return redis.status_reply('OK')"
"$REDIS_CLI" -p "$REDIS_PORT" function load replace "#!lua name=ttlgbench
redis.register_function('ttlg_set', function(KEYS, ARGV) $SCRIPT end)" >/dev/null
SHA=$("$REDIS_CLI" -p "$REDIS_PORT" script load "$SCRIPT")

# form_file FORM: REQUESTS SETs of key:<12 digits> (100,000 keys) in FORM, as RESP.
form_file() {
    awk -v form="$1" -v n="$REQUESTS" -v script="$SCRIPT" -v sha="$SHA" '
        function cmd(s,   a, i, k) {
            k = split(s, a, "\t"); printf "*%d\r\n", k
            for (i = 1; i <= k; i++) printf "$%d\r\n%s\r\n", length(a[i]), a[i] }
        BEGIN {
            srand(1)
            for (i = 0; i < n; i++) {
                key = sprintf("key:%012d", int(rand() * 100000))
                if (form == "plain") cmd("SET\t" key "\txxx")
                else if (form == "multi") {
                    cmd("MULTI"); cmd("SET\t" key "\txxx\tKEEPTTL")
                    cmd("EXPIRE\t" key "\t3600\tNX"); cmd("EXEC")
                } else if (form == "multi16") {
                    if (i % 16 == 0) cmd("MULTI")
                    cmd("SET\t" key "\txxx\tKEEPTTL"); cmd("EXPIRE\t" key "\t3600\tNX")
                    if (i % 16 == 15 || i == n - 1) cmd("EXEC")
                } else if (form == "pair") {
                    cmd("SET\t" key "\txxx\tKEEPTTL"); cmd("EXPIRE\t" key "\t3600\tNX")
                } else if (form == "eval") cmd("EVAL\t" script "\t1\t" key "\txxx\t3600")
                else if (form == "evalsha") cmd("EVALSHA\t" sha "\t1\t" key "\txxx\t3600")
                else if (form == "fcall") cmd("FCALL\tttlg_set\t1\t" key "\txxx\t3600")
                else if (form == "generic") {
                    cmd("MULTI"); cmd("SET\t" key "\txxx")
                    cmd("EXPIRE\t" key "\t3600\tNX"); cmd("EXEC")
                }
            }
        }' >"$WORK/$1.resp"
}

# form_usec FORM: Redis's CPU microseconds per request of FORM (median of 3).
form_usec() {
    local r a b out usecs=()
    for r in 1 2 3; do
        "$REDIS_CLI" -p "$REDIS_PORT" flushall >/dev/null
        "$REDIS_CLI" -p "$REDIS_PORT" --pipe <"$WORK/plain.resp" >/dev/null # keys exist
        a=$(cpu_ticks "$REDIS_PID")
        out=$("$REDIS_CLI" -p "$REDIS_PORT" --pipe <"$WORK/$1.resp")
        b=$(cpu_ticks "$REDIS_PID")
        [[ $out == *"errors: 0,"* ]] || die "form $1 got error replies: $out"
        usecs+=("$(awk -v t=$((b - a)) -v hz="$HZ" -v n="$REQUESTS" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')")
    done
    printf '%s\n' "${usecs[@]}" | sort -g | sed -n 2p
}

HZ=$(getconf CLK_TCK)
echo
echo "| form of a rewritten SET | atomic | Redis CPU µs/request | vs plain SET |"
echo "|---|---|---:|---:|"
for form in plain multi multi16 pair eval evalsha fcall generic; do form_file "$form"; done
base=$(form_usec plain)
while IFS='|' read -r form atomic label; do
    u=$(form_usec "$form")
    printf '| %s | %s | %s | %s |\n' "$label" "$atomic" "$u" "$(ratio "$u" "$base")"
done <<'EOF'
plain|(drops the TTL)|`SET k v`, what the client sent
multi|yes|`MULTI; SET k v KEEPTTL; EXPIRE k ttl NX; EXEC` (ttlguard's form)
multi16|yes|one `MULTI` … `EXEC` around 16 requests' `SET … KEEPTTL; EXPIRE … NX`
pair|no|`SET k v KEEPTTL; EXPIRE k ttl NX` without `MULTI`
eval|yes|`EVAL <script> 1 k v ttl` (the script runs both)
evalsha|yes|`EVALSHA <sha> 1 k v ttl`
fcall|yes|`FCALL ttlg_set 1 k v ttl` (a library function)
generic|yes|`MULTI; SET k v; EXPIRE k ttl NX; EXEC` (the generic form: a write the table cannot judge)
EOF
echo
echo "Setup: $REQUESTS requests per form on 100,000 existing keys, sent by redis-cli --pipe;" \
    "Redis's process CPU time (utime + stime, $HZ ticks/s) per request, median of 3." \
    "bench/rewrite_cost.sh."
