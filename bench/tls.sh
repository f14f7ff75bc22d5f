#!/usr/bin/env bash
#
# bench/tls.sh: redis-benchmark --tls straight to a TLS redis-server versus
# through ttlguard, TLS on the client side, the backend side or both, in one run.
#
# usage: bench/tls.sh [--quick] [--rounds N] [--seconds S] [--targets LIST] > out.md
#   --quick          plumbing check: --seconds 0.2
#   --rounds N       rounds per case, the table shows the median (default 3)
#   --seconds S      length of one measurement, calibrated on the first target (default 2)
#   --targets LIST   comma separated subset, the first is the calibration target (default all):
#     direct_tls            --tls -> redis tls-port (the baseline)
#     ttlguard_tls          --tls -> ttlguard tls_listen, backend_tls = on (the headline)
#     ttlguard_tls_client   --tls -> ttlguard tls_listen, plain backend
#     ttlguard_tls_backend  plain -> ttlguard listen, backend_tls = on
#     direct_plain          plain -> redis port
#     ttlguard_plain        plain -> ttlguard listen, plain backend
#   -h, --help       this text
# environment: TTLG_BIN (default build/ttlguard, built in Release when unset and
#   missing), BENCH_PORTS (default 7300-7399), REDIS_SERVER REDIS_CLI REDIS_BENCHMARK
#
# GET and SET at -P 1 and -P 16, -c 50 -r 100000 (key:* filled first). As bench/run.sh:
# each round runs every target back to back per case, a different one first; median of
# rounds; one request count per case, calibrated on the first target; own processes on
# free ports, stopped by PID on exit. Target: ttlguard_tls >= 0.5 x direct_tls on every
# row. Also ttlguard's CPU time per request (/proc/PID/stat). Markdown to stdout.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ALL_TARGETS=direct_tls,ttlguard_tls,ttlguard_tls_client,ttlguard_tls_backend,direct_plain,ttlguard_plain
usage() { sed -n '/^# usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

ROUNDS=3 SECONDS_PER=2 TARGETS=$ALL_TARGETS CLIENTS=50 KEYSPACE=100000
while (($#)); do
    case $1 in
    --quick) SECONDS_PER=0.2 ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --seconds) SECONDS_PER=${2:?--seconds needs a value}; shift ;;
    --targets) TARGETS=${2:?--targets needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/tls.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

BENCH_NAME=tls.sh BENCH_PORTS=${BENCH_PORTS:-7300-7399} BENCH_TOOLS="openssl"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

# A copy of the binary, so that a rebuild of build/ during the run changes nothing.
cp "$TTLG_BIN" "$WORK/ttlguard"
# A throwaway CA and a server certificate for localhost and 127.0.0.1.
(
    cd "$WORK"
    openssl req -x509 -new -nodes -newkey rsa:2048 -days 2 -subj "/CN=ttlguard bench CA" \
        -keyout ca.key -out ca.crt
    openssl req -new -nodes -newkey rsa:2048 -subj "/CN=localhost" -keyout server.key -out server.csr
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile san.ext -out server.crt
) >"$WORK/openssl.log" 2>&1 || { KEEP_WORK=1; die "openssl failed (see $WORK/openssl.log)"; }
CA=$WORK/ca.crt TLS_CLI=(--tls --cacert "$WORK/ca.crt")

free_port REDIS_PORT; free_port REDIS_TLS_PORT
start_bg "$WORK/redis.log" "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" \
    --tls-port "$REDIS_TLS_PORT" --tls-cert-file "$WORK/server.crt" --tls-key-file "$WORK/server.key" \
    --tls-ca-cert-file "$CA" --tls-auth-clients no --save '' --appendonly no --daemonize no
wait_ping redis-server "$PID_LAST" "$REDIS_PORT"
wait_ping redis-server "$PID_LAST" "$REDIS_TLS_PORT" "${TLS_CLI[@]}"

# Two ttlguards, each with listen and tls_listen: tg_tlsb (backend_tls = on) serves
# ttlguard_tls and ttlguard_tls_backend, tg_plainb ttlguard_tls_client and ttlguard_plain.
declare -A TPORT TTLS TPID NPID
TPORT[direct_tls]=$REDIS_TLS_PORT TTLS[direct_tls]=1 TPORT[direct_plain]=$REDIS_PORT TTLS[direct_plain]=0
start_ttlguard() { # start_ttlguard NAME BACKEND_TLS(0|1) TLS_TARGET PLAIN_TARGET
    local name=$1 port tport
    free_port port; free_port tport
    {
        printf '; written by bench/tls.sh\n[proxy]\nlisten = 127.0.0.1:%s\ntls_listen = 127.0.0.1:%s\n' "$port" "$tport"
        printf 'tls_cert_file = %s\ntls_key_file = %s\nmultiplex = on\n' "$WORK/server.crt" "$WORK/server.key"
        (($2)) && printf 'backend = 127.0.0.1:%s\nbackend_tls = on\nbackend_tls_ca_cert_file = %s\n' "$REDIS_TLS_PORT" "$CA"
        (($2)) || printf 'backend = 127.0.0.1:%s\n' "$REDIS_PORT"
    } >"$WORK/$name.ini"
    start_bg "$WORK/$name.log" "$WORK/ttlguard" --config "$WORK/$name.ini"
    wait_ping "$name" "$PID_LAST" "$port"
    wait_ping "$name" "$PID_LAST" "$tport" "${TLS_CLI[@]}"
    NPID[$name]=$PID_LAST
    TPORT[$3]=$tport TTLS[$3]=1 TPID[$3]=$PID_LAST TPORT[$4]=$port TTLS[$4]=0 TPID[$4]=$PID_LAST
}
if in_targets ttlguard_tls || in_targets ttlguard_tls_backend; then start_ttlguard tg_tlsb 1 ttlguard_tls ttlguard_tls_backend; fi
if in_targets ttlguard_tls_client || in_targets ttlguard_plain; then start_ttlguard tg_plainb 0 ttlguard_tls_client ttlguard_plain; fi

# ---- setup ------------------------------------------------------------------------
cipher() { # cipher PORT: the protocol and cipher openssl s_client negotiates there
    timeout 5 openssl s_client -connect "127.0.0.1:$1" -CAfile "$CA" </dev/null 2>/dev/null |
        awk '/^New, / { sub(/^New, /, ""); sub(/Cipher is /, ""); print; exit }' || true
}
build=
[[ $TTLG_BIN -ef $ROOT/build/ttlguard ]] &&
    build=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=\(.*\)/, \1 build/p' "$ROOT/build/CMakeCache.txt" 2>/dev/null)
ldd "$TTLG_BIN" 2>/dev/null | grep -qE 'libasan|libubsan' && build+=" - SANITIZER BUILD, numbers are meaningless"
echo "## TLS pass-through"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)), not pinned; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $(first_line "$REDIS_SERVER" --version | cut -d' ' -f1-3); $(first_line openssl version | cut -d' ' -f1-2)"
echo "- ttlguard: $TTLG_BIN, $(first_line "$TTLG_BIN" --version)$build; multiplex = on (the default), no rules"
echo "- TLS: redis $(cipher "$REDIS_TLS_PORT")${TPID[ttlguard_tls]:+, ttlguard $(cipher "${TPORT[ttlguard_tls]}")}; RSA 2048 certificate, no client certificates"
echo "- redis-benchmark -c $CLIENTS -r $KEYSPACE, one test per invocation; $ROUNDS round(s), interleaved, median shown; about ${SECONDS_PER}s per measurement"
echo

# ---- measuring ------------------------------------------------------------------
bench_rps() { # bench_rps TARGET TEST PIPELINE N: print the requests/s, or return 1
    local tg=$1 out rps limit args=()
    ((TTLS[$tg])) && args=("${TLS_CLI[@]}")
    limit=$(awk -v s="$SECONDS_PER" 'BEGIN { printf "%d", 60 + 20 * s }')
    out=$(timeout -k 5 "$limit" "$REDIS_BENCHMARK" "${args[@]}" -h 127.0.0.1 -p "${TPORT[$tg]}" -c "$CLIENTS" \
        -n "$4" -r "$KEYSPACE" -P "$3" -t "$2" --csv 2>>"$WORK/redis-benchmark.err") || return 1
    rps=$(awk -F'"' '$2 != "test" && NF > 4 { r = $4 } END { print r }' <<<"$out")
    [[ $rps =~ ^[0-9]+(\.[0-9]+)?$ ]] && echo "$rps"
}
median() { tr ' ' '\n' | awk NF | sort -g | awk '{ a[NR] = $1 } END {
    if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread() { tr ' ' '\n' | awk NF | sort -g | awk '{ a[NR] = $1 } END { if (NR < 2) { print 0; exit }
    m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print (m > 0) ? (a[NR] - a[1]) / m : 0 }'; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }

"$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" flushall >/dev/null
timeout 120 "$REDIS_BENCHMARK" -h 127.0.0.1 -p "$REDIS_PORT" -c "$CLIENTS" -n $((KEYSPACE * 5)) \
    -r "$KEYSPACE" -P 16 -t set -q >/dev/null 2>&1 || die "could not fill key:* on redis-server"

declare -A N RESULTS CPU REQS
TESTS=(get set) PIPES=(1 16) NT=${#TLIST[@]} FAILED=0 ci=0
for t in "${TESTS[@]}"; do
    for p in "${PIPES[@]}"; do
        # A probe of a quarter of the wanted length at a guessed rate; at least 20
        # full pipelines per client, so that connecting does not dominate.
        probe=$(awk -v s="$SECONDS_PER" -v p="$p" 'BEGIN { n = (p == 1 ? 10000 : 100000) * s; printf "%d", (n < 2000 ? 2000 : n) }')
        rps=$(bench_rps "${TLIST[0]}" "$t" "$p" "$probe") ||
            { KEEP_WORK=1; die "calibration of $t -P $p on ${TLIST[0]} failed (see $WORK/redis-benchmark.err)"; }
        N[$t$p]=$(awk -v r="$rps" -v s="$SECONDS_PER" -v min=$((CLIENTS * p * 20)) 'BEGIN {
            n = int(r * s / 1000 + 0.5) * 1000; print (n < min ? min : n) }')
        say "calibrated ${t^^} -P $p on ${TLIST[0]}: ${N[$t$p]} requests"
    done
done
for ((r = 1; r <= ROUNDS; r++)); do
    for t in "${TESTS[@]}"; do
        for p in "${PIPES[@]}"; do
            for ((i = 0; i < NT; i++)); do
                tg=${TLIST[$(((i + r + ci) % NT))]}
                pid=${TPID[$tg]:-} k="$t|$p|$tg" c0=0
                [[ -n $pid ]] && c0=$(cpu_ticks "$pid")
                if rps=$(bench_rps "$tg" "$t" "$p" "${N[$t$p]}"); then
                    RESULTS[$k]+=" $rps"
                    [[ -n $pid ]] && CPU[$k]=$((${CPU[$k]:-0} + $(cpu_ticks "$pid") - c0)) REQS[$k]=$((${REQS[$k]:-0} + N[$t$p]))
                    say "[round $r/$ROUNDS] ${t^^} -P $p $tg: $rps"
                else
                    FAILED=1 KEEP_WORK=1
                    say "[round $r/$ROUNDS] ${t^^} -P $p $tg: FAILED"
                    tail -n 3 "$WORK/redis-benchmark.err" >&2 || true
                fi
            done
            ci=$((ci + 1))
        done
    done
done

# ---- tables ---------------------------------------------------------------------
med() { median <<<"${RESULTS[$1|$2|$3]:-}"; }
printf '| test | pipeline |'; printf ' rps %s |' "${TLIST[@]}"; echo ' ttlguard_tls/direct_tls | ttlguard_plain/direct_plain | spread |'
printf '| --- | ---: |'; printf ' ---: |%.0s' "${TLIST[@]}"; echo ' ---: | ---: | ---: |'
MISSES=()
for t in "${TESTS[@]}"; do
    for p in "${PIPES[@]}"; do
        printf '| %s | %s |' "${t^^}" "$p"
        sp=0
        for tg in "${TLIST[@]}"; do
            v=$(med "$t" "$p" "$tg")
            if [[ -n $v ]]; then printf ' %.0f |' "$v"; else printf ' - |'; fi
            sp=$(max "$(spread <<<"${RESULTS[$t|$p|$tg]:-}")" "$sp")
        done
        tls=$(ratio "$(med "$t" "$p" ttlguard_tls)" "$(med "$t" "$p" direct_tls)")
        printf ' %s | %s |' "$tls" "$(ratio "$(med "$t" "$p" ttlguard_plain)" "$(med "$t" "$p" direct_plain)")"
        if ((ROUNDS > 1)); then awk -v s="$sp" 'BEGIN { printf " %.0f%% |\n", 100 * s }'; else echo ' - |'; fi
        if [[ $tls == - ]] || awk -v a="$tls" 'BEGIN { exit !(a < 0.5) }'; then MISSES+=("${t^^} -P $p ($tls)"); fi
    done
done
echo
printf 'Requests per measurement:'
for t in "${TESTS[@]}"; do for p in "${PIPES[@]}"; do printf ' %s/-P%s %s' "${t^^}" "$p" "${N[$t$p]}"; done; done
echo ". Spread: the largest (max - min)/median over rounds of the row's targets; more than a few percent means a busy machine. Run time ${SECONDS}s."
echo
if ! in_targets ttlguard_tls || ! in_targets direct_tls; then echo "Target ttlguard_tls >= 0.5 x direct_tls: not checked, both targets needed."
elif ((${#MISSES[@]})); then echo "**Target ttlguard_tls >= 0.5 x direct_tls missed on:** $(printf '%s, ' "${MISSES[@]}" | sed 's/, $//')."
else echo "Target met: ttlguard_tls >= 0.5 x direct_tls on every row."; fi

CPU_TG=()
for tg in "${TLIST[@]}"; do [[ -n ${TPID[$tg]:-} ]] && CPU_TG+=("$tg"); done
if ((${#CPU_TG[@]})); then
    echo
    echo "ttlguard CPU time (user + system) per request in microseconds, all rounds, connection set-up included:"
    echo
    printf '| test | pipeline |'; printf ' %s |' "${CPU_TG[@]}"; echo
    printf '| --- | ---: |'; printf ' ---: |%.0s' "${CPU_TG[@]}"; echo
    for t in "${TESTS[@]}"; do
        for p in "${PIPES[@]}"; do
            printf '| %s | %s |' "${t^^}" "$p"
            for tg in "${CPU_TG[@]}"; do
                awk -v c="${CPU[$t|$p|$tg]:-0}" -v n="${REQS[$t|$p|$tg]:-0}" -v hz="$(getconf CLK_TCK)" \
                    'BEGIN { printf (n > 0 ? " %.1f |" : " - |"), c / hz * 1e6 / (n > 0 ? n : 1) }'
            done
            echo
        done
    done
fi

# ---- health: ttlguard alive, what it logged, what redis-benchmark said ------------
for name in "${!NPID[@]}"; do
    kill -0 "${NPID[$name]}" 2>/dev/null || { FAILED=1 KEEP_WORK=1; printf '\n**ttlguard %s died during the run**\n' "$name"; }
    # The start-up warning about the open files limit is about max_clients, not this run.
    bad=$(grep -iE 'error|warn|fail|crit|abort|assert' "$WORK/$name.log" | grep -v 'open files limit' || true)
    if [[ -n $bad ]]; then
        KEEP_WORK=1
        printf '\nttlguard %s logged (count, line; all in %s):\n\n' "$name" "$WORK/$name.log"
        sort <<<"$bad" | uniq -c | sort -rn | head -n 5 | sed 's/^ *\([0-9]*\) /- \1x `/; s/$/`/'
    fi
done
BENCH_ERR=$(grep -v '^[[:space:]]*$' "$WORK/redis-benchmark.err" 2>/dev/null | sort | uniq -c | sort -rn || true)
if [[ -n $BENCH_ERR ]]; then
    KEEP_WORK=1
    printf '\nredis-benchmark wrote to stderr (count, line; all in %s):\n\n' "$WORK/redis-benchmark.err"
    head -n 5 <<<"$BENCH_ERR" | sed 's/^ *\([0-9]*\) /- \1x `/; s/$/`/'
fi
((FAILED == 0)) || die "some measurements failed or ttlguard died; logs in $WORK"
