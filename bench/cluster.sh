#!/usr/bin/env bash
#
# bench/cluster.sh: redis-benchmark --cluster straight to a 6-node Redis Cluster versus
# through ttlguard (cluster = on), in one run (issue 12); with --route, versus plain
# redis-benchmark through ttlguard's one address (cluster = route, issue 27).
#
# usage: bench/cluster.sh [--quick] [--tls|--route] [--rounds N] [--seconds S] [--targets LIST] > out.md
#   --tls            a TLS cluster (tls-port, tls-cluster, tls-replication; certificates made
#                    here) and redis-benchmark --tls: direct to the nodes' TLS ports, through
#                    ttlguard with backend_tls = on and tls_listen (TLS node ports); GET/SET
#   --route          targets direct and route (default); GET SET MGET MSET, MGET and MSET
#                    of 10 keys: in one slot with --cluster (redis-benchmark gives every key
#                    of a command its client's {tag}: a cluster refuses keys of several
#                    slots), across slots without (ttlguard splits them by slot)
#   --quick          plumbing check: --seconds 0.2 (figures rounded to 250 ms, meaningless)
#   --rounds N       rounds per case, the table shows the median (default 3)
#   --seconds S      length of one measurement, calibrated on the first target (default 2)
#   --targets LIST   comma separated, the first is the calibration target (default
#                    direct,ttlguard,ttlguard_rules; with --route direct,route):
#     direct           --cluster -> the first node (the baseline)
#     ttlguard         --cluster -> ttlguard's entry port, no rules (the headline)
#     ttlguard_rules   --cluster -> a second ttlguard: [ttl "key:"], [ttl "counter:"] and
#                      [ttl "mylist:"], action = rewrite, ttl = 900: every write rewritten
#     route            plain redis-benchmark (no --cluster) -> ttlguard with cluster = route
#   -h, --help       this text
# environment: TTLG_BIN (default build/ttlguard, built in Release when unset and
#   missing), BENCH_PORTS (default 7600-7699), REDIS_SERVER REDIS_CLI REDIS_BENCHMARK
#
# 6 redis-server on 127.0.0.1, 3 primaries with a replica each. SET GET INCR LPUSH at -P 1
# and -P 16, -c 50 -r 100000 (key:* filled first). As bench/tls.sh: rounds of every target
# back to back per case, a different one first; medians; request counts calibrated on the
# first target; own processes on free ports, stopped by PID on exit. Also ttlguard's CPU
# time per request and what it logged at warn/error level. Markdown to stdout.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ALL_TARGETS=direct,ttlguard,ttlguard_rules,route
usage() { sed -n '/^# usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

ROUNDS=3 SECONDS_PER=2 TARGETS= CLIENTS=50 KEYSPACE=100000 TLS=0 ROUTE=0
while (($#)); do
    case $1 in
    --quick) SECONDS_PER=0.2 ;;
    --tls) TLS=1 ;;
    --route) ROUTE=1 ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --seconds) SECONDS_PER=${2:?--seconds needs a value}; shift ;;
    --targets) TARGETS=${2:?--targets needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/cluster.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

((TLS && ROUTE)) && { echo "bench/cluster.sh: --tls and --route: one at a time" >&2; exit 2; }
if [[ -z $TARGETS ]]; then ((ROUTE)) && TARGETS=direct,route || TARGETS=direct,ttlguard,ttlguard_rules; fi
BENCH_NAME=cluster.sh BENCH_PORTS=${BENCH_PORTS:-7600-7699} BENCH_TOOLS=""
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
wait_for() { # wait_for WHAT PID SECONDS CMD...: until CMD succeeds, while PID lives
    local what=$1 pid=$2 secs=$3 i; shift 3
    for i in $(seq 1 $((10 * secs))); do
        kill -0 "$pid" 2>/dev/null || { KEEP_WORK=1; die "$what: process $pid exited (logs: $WORK)"; }
        "$@" && return 0
        sleep 0.1
    done
    KEEP_WORK=1; die "$what: not after $secs s (logs: $WORK)"
}
cli() { timeout 5 "$REDIS_CLI" -h 127.0.0.1 -p "$@" 2>/dev/null; }
pong() { [[ $(cli "$1" ping) == PONG ]]; }
cp "$TTLG_BIN" "$WORK/ttlguard" # so that a rebuild of build/ during the run changes nothing

# ---- --tls: a CA and one certificate (127.0.0.1) for the nodes and ttlguard ----------
TLS_ARGS=() NODE_TLS=()
if ((TLS)); then
    ssl() { openssl "$@" >>"$WORK/openssl.log" 2>&1 || die "openssl $1 failed (see $WORK/openssl.log)"; }
    EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    ssl req -x509 "${EC[@]}" -keyout "$WORK/ca.key" -out "$WORK/ca.crt" -subj /CN=bench-ca -days 2 \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign
    ssl req -new "${EC[@]}" -keyout "$WORK/tls.key" -out "$WORK/tls.csr" -subj /CN=bench
    printf 'subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth,clientAuth\n' >"$WORK/ext.cnf"
    ssl x509 -req -in "$WORK/tls.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" -set_serial 2 -days 2 \
        -extfile "$WORK/ext.cnf" -out "$WORK/tls.crt"
    TLS_ARGS=(--tls --cacert "$WORK/ca.crt")
    NODE_TLS=(--tls-cluster yes --tls-replication yes --tls-cert-file "$WORK/tls.crt" --tls-key-file
        "$WORK/tls.key" --tls-ca-cert-file "$WORK/ca.crt" --tls-auth-clients no)
fi

# ---- the cluster (bus ports from BENCH_PORTS too) ----------------------------------
NODES=() NODE_PIDS=() TNODES=() port='' bus='' tport=''
for i in 1 2 3 4 5 6; do
    free_port port; free_port bus; mkdir "$WORK/node$i"
    tls=() && ((TLS)) && free_port tport && tls=(--tls-port "$tport" "${NODE_TLS[@]}") && TNODES+=("$tport")
    start_bg "$WORK/node$i/redis.log" "$REDIS_SERVER" --port "$port" --cluster-port "$bus" \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 --save '' \
        --appendonly no --bind 127.0.0.1 --dir "$WORK/node$i" --daemonize no --repl-diskless-sync-delay 0 \
        "${tls[@]}"
    NODES+=("$port") NODE_PIDS+=("$PID_LAST")
done
SEEDS=("${NODES[@]}") && ((TLS)) && SEEDS=("${TNODES[@]}")
pcli() { timeout 5 "$REDIS_CLI" "${TLS_ARGS[@]}" -h 127.0.0.1 -p "$@" 2>/dev/null; } # as clients do
ppong() { [[ $(pcli "$1" ping) == PONG ]]; }
for i in "${!NODES[@]}"; do wait_for "redis-server :${NODES[i]} PING" "${NODE_PIDS[i]}" 10 pong "${NODES[i]}"; done
timeout 60 "$REDIS_CLI" --cluster create "${NODES[@]/#/127.0.0.1:}" --cluster-replicas 1 --cluster-yes \
    >"$WORK/cluster-create.log" 2>&1 || { KEEP_WORK=1; die "redis-cli --cluster create failed (see $WORK/cluster-create.log)"; }
cluster_ok() { # cluster_ok PORT: state ok, and the node sees 3 primaries with slots and 3 replicas
    [[ $(cli "$1" cluster info) == *cluster_state:ok* ]] && [[ $(cli "$1" cluster nodes |
        awk '$3 ~ /master/ && NF > 8 { m++ } $3 ~ /slave/ { r++ } END { print m + 0, r + 0 }') == "3 3" ]]
}
for i in "${!NODES[@]}"; do wait_for "cluster_state:ok on :${NODES[i]}" "${NODE_PIDS[i]}" 30 cluster_ok "${NODES[i]}"; done
primaries() { cli "${NODES[0]}" cluster nodes | awk '$3 ~ /master/ { split($2, a, "[:@]"); print a[2] }'; }
flush_all() { local p; for p in $(primaries); do cli "$p" flushall >/dev/null || true; done; }

# ---- ttlguard targets, one process each ------------------------------------------------
declare -A TPORT TPID
TPORT[direct]=${SEEDS[0]} RANGES=
own_slots() { # own_slots PORT LO: CLUSTER SLOTS through ttlguard names >= 3 nodes, all its own ports
    pcli "$1" cluster slots | awk -v lo="$2" 'prev == "127.0.0.1" { n++; bad += ($1 < lo || $1 >= lo + 10) }
        { prev = $0 } END { exit !(n >= 3 && !bad) }'; }
start_ttlguard() { # start_ttlguard TARGET RULES(0|1)
    local port lo
    free_port port; free_range lo 10 # 6 nodes, room for a few more
    {
        printf '; written by bench/cluster.sh\n[proxy]\nmultiplex = on\ncluster = on\n'
        if ((TLS)); then
            printf 'listen =\ntls_listen = 127.0.0.1:%s\nbackend_tls = on\n' "$port"
            printf 'backend_tls_ca_cert_file = %s\ntls_cert_file = %s\ntls_key_file = %s\n' \
                "$WORK/ca.crt" "$WORK/tls.crt" "$WORK/tls.key"
        else
            printf 'listen = 127.0.0.1:%s\n' "$port"
        fi
        printf 'backend = 127.0.0.1:%s 127.0.0.1:%s\n' "${SEEDS[0]}" "${SEEDS[1]}"
        printf 'cluster_ports = %s-%s\ncluster_announce = 127.0.0.1\n' "$lo" $((lo + 9))
        if (($2)); then printf '\n[ttl "%s"]\nttl = 900\naction = rewrite\n' key: counter: mylist:; fi
    } >"$WORK/$1.ini"
    start_bg "$WORK/$1.log" "$WORK/ttlguard" --config "$WORK/$1.ini"
    wait_for "$1 PING" "$PID_LAST" 10 ppong "$port"
    wait_for "$1 CLUSTER SLOTS with its own ports only" "$PID_LAST" 20 own_slots "$port" "$lo"
    TPORT[$1]=$port TPID[$1]=$PID_LAST RANGES+="${RANGES:+, }$1 $lo-$((lo + 9))"
}
if in_targets ttlguard; then start_ttlguard ttlguard 0; fi
if in_targets ttlguard_rules; then start_ttlguard ttlguard_rules 1; fi
routed_get() { [[ $(cli "$1" get bench:routed:probe) == "" ]] && [[ $(cli "$1" dbsize) =~ ^[0-9]+$ ]]; }
if in_targets route; then # cluster = route: no node listeners, plain TCP (TLS is --tls's)
    free_port port
    printf '; written by bench/cluster.sh\n[proxy]\nmultiplex = on\ncluster = route\nlisten = 127.0.0.1:%s\nbackend = 127.0.0.1:%s 127.0.0.1:%s\n' \
        "$port" "${NODES[0]}" "${NODES[1]}" >"$WORK/route.ini"
    start_bg "$WORK/route.log" "$WORK/ttlguard" --config "$WORK/route.ini"
    wait_for "route PING" "$PID_LAST" 10 pong "$port"
    wait_for "route GET and DBSIZE (the slot map read)" "$PID_LAST" 20 routed_get "$port"
    TPORT[route]=$port TPID[route]=$PID_LAST
fi

# ---- measuring ------------------------------------------------------------------------
bench() { # bench TARGET ARGS...: redis-benchmark at TARGET's port (--cluster but to route), bounded
    local port=${TPORT[$1]} limit cl=(--cluster)
    [[ $1 == route ]] && cl=(--threads "$NPRIM") # as many threads as --cluster runs
    shift
    limit=$(awk -v s="$SECONDS_PER" 'BEGIN { printf "%d", 60 + 20 * s }')
    timeout -k 5 "$limit" "$REDIS_BENCHMARK" "${cl[@]}" "${TLS_ARGS[@]}" -h 127.0.0.1 -p "$port" "$@" 2>>"$WORK/redis-benchmark.err"
}
test_args() { # test_args TARGET TEST: what redis-benchmark runs for TEST (MGET: 10 keys of key:*)
    local key=key:__rand_int__ i
    [[ $1 == route ]] || key="key:{tag}:__rand_int__" # the keys --cluster's SET made
    if [[ $2 == mget ]]; then printf 'MGET\n'; for i in $(seq 10); do printf '%s\n' "$key"; done
    else printf -- '-t\n%s\n' "$2"; fi
}
# With --cluster, redis-benchmark runs a thread per primary, and a thread whose clients are
# through stops only at its next 250 ms tick, so its final figure counts time up to a tick.
# The rate taken is the running "(overall: R)" printed at the last tick before the end (a
# thread's first tick comes after 1 ms, skipped), else the final figure (runs < 250 ms).
bench_rps() { # bench_rps TARGET TEST PIPELINE N: print the requests/s, or return 1
    local out rps skip=$NPRIM args
    mapfile -t args < <(test_args "$1" "$2")
    [[ $1 == route ]] && skip=1000000 # --threads ends together: its final figure is exact
    out=$(bench "$1" -c "$CLIENTS" -n "$4" -r "$KEYSPACE" -P "$3" -q "${args[@]}") || return 1
    rps=$(tr '\r' '\n' <<<"$out" | awk -v skip="$skip" '/\(overall: / && ++n > skip { t = $0
        sub(/.*rps=[^ ]* \(overall: /, "", t); sub(/\).*/, "", t) }
        / requests per second/ { f = $0; sub(/ requests per second.*/, "", f); sub(/.* /, "", f) }
        END { print (t != "" ? t : f) }')
    [[ $rps =~ ^[0-9]+(\.[0-9]+)?$ ]] && echo "$rps"
}
stats() { # stats VALUES: their median and (max - min)/median, or nothing
    tr ' ' '\n' | awk NF | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) exit
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m, (m > 0) ? (a[NR] - a[1]) / m : 0 }'; }
NPRIM=$(primaries | wc -l)

# The rules must bite: after a short write run through ttlguard_rules on an empty cluster, one
# key per kind and primary has a TTL (--cluster keys: key:{tag}:N, counter:{tag}:N, mylist:{tag}).
RULES_NOTE=
if in_targets ttlguard_rules; then
    flush_all
    bench ttlguard_rules -c 10 -n 3000 -r 1000 -t set,incr,lpush -q >/dev/null ||
        { KEEP_WORK=1; die "the write run through ttlguard_rules failed (see $WORK/redis-benchmark.err)"; }
    for pfx in key: counter: mylist:; do
        for p in $(primaries); do
            k=$(cli "$p" --scan --pattern "$pfx{*" | head -n 1) ttl=$(cli "$p" ttl "$k")
            [[ -n $k && $ttl -gt 0 && $ttl -le 900 ]] || { KEEP_WORK=1
                die "no ${pfx}{...} key with a TTL on :$p ('$k': '$ttl'; keys: $(cli "$p" --scan | head -n 5 | xargs))"; }
        done
        RULES_NOTE+="${RULES_NOTE:+, }\`$k\` TTL $ttl"
    done
    say "rules verified: $RULES_NOTE"
fi
flush_all
bench direct -c "$CLIENTS" -n $((KEYSPACE * 5)) -r "$KEYSPACE" -P 16 -t set -q >/dev/null || die "could not fill key:* on the cluster"
if in_targets route; then # route's plain keys (key:N) too, through it
    bench route -c "$CLIENTS" -n $((KEYSPACE * 5)) -r "$KEYSPACE" -P 16 -t set -q >/dev/null || die "could not fill key:* through route"
fi

build=
[[ $TTLG_BIN -ef $ROOT/build/ttlguard ]] &&
    build=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=\(.*\)/, \1 build/p' "$ROOT/build/CMakeCache.txt" 2>/dev/null)
ldd "$TTLG_BIN" 2>/dev/null | grep -qE 'libasan|libubsan' && build+=" - SANITIZER BUILD, numbers are meaningless"
echo "## Redis Cluster pass-through$( ((TLS)) && echo ", TLS")$( ((ROUTE)) && echo ", cluster = route")"
((TLS)) && echo && echo "- TLS everywhere: nodes with tls-port, tls-cluster and tls-replication (EC P-256 certificate); redis-benchmark --tls; ttlguard backend_tls = on and tls_listen (its node ports speak TLS)"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)), not pinned, all processes on this host; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $(first_line "$REDIS_SERVER" --version | cut -d' ' -f1-3); $(first_line "$REDIS_BENCHMARK" --version); cluster of 6 nodes, $NPRIM primaries with 1 replica each, node timeout 2000 ms, no persistence"
mode="cluster = on, multiplex = on (the default); node listeners: ${RANGES:-none}"
((ROUTE)) && mode="cluster = route (one address, plain redis-benchmark), multiplex = on, no rules"
echo "- ttlguard: $TTLG_BIN, $(first_line "$TTLG_BIN" --version)$build; $mode"
[[ -z $RULES_NOTE ]] || echo "- ttlguard_rules: [ttl \"key:\"], [ttl \"counter:\"], [ttl \"mylist:\"], action = rewrite, ttl = 900; after a write run: $RULES_NOTE"
echo "- redis-benchmark --cluster -c $CLIENTS -r $KEYSPACE (a thread per primary), one test per invocation, rate at its last 250 ms tick; $ROUNDS round(s), interleaved, median shown; about ${SECONDS_PER}s per measurement"
((ROUTE)) && echo "- route: the same without --cluster (--threads $NPRIM, as many as --cluster runs; its final rate) at ttlguard's address; MGET is \`MGET key:__rand_int__\` x10 there (keys in 10 slots: split by slot, merged), \`MGET key:{tag}:__rand_int__\` x10 with --cluster (one slot); -t mset likewise (redis-benchmark's own 10 keys)"
echo

declare -A N RESULTS CPU REQS
TESTS=(set get incr lpush) PIPES=(1 16) NT=${#TLIST[@]} FAILED=0 ci=0
((TLS)) && TESTS=(set get)
((ROUTE)) && TESTS=(get set mget mset)
for t in "${TESTS[@]}"; do
    for p in "${PIPES[@]}"; do
        # A probe of about half the wanted length at a guessed rate; >= 20 pipelines per client.
        probe=$(awk -v s="$SECONDS_PER" -v p="$p" 'BEGIN { n = (p == 1 ? 40000 : 400000) * s; printf "%d", (n < 2000 ? 2000 : n) }')
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
                    FAILED=1 KEEP_WORK=1; say "[round $r/$ROUNDS] ${t^^} -P $p $tg: FAILED"; tail -n 3 "$WORK/redis-benchmark.err" >&2 || true
                fi
            done
            ci=$((ci + 1))
        done
    done
done

# ---- table: rps, ratios to direct, ttlguard CPU per request ---------------------------
TG=() RT=() && declare -A M
for tg in "${TLIST[@]}"; do [[ -z ${TPID[$tg]:-} ]] || { TG+=("$tg"); ! in_targets direct || RT+=("$tg"); }; done
printf '| test | pipeline |'; printf ' rps %s |' "${TLIST[@]}"; ((${#RT[@]} == 0)) || printf ' %s/direct |' "${RT[@]}"
((${#TG[@]} == 0)) || printf ' CPU us/req %s |' "${TG[@]}"; echo ' spread |'
printf '| --- | ---: |'; printf ' ---: |%.0s' "${TLIST[@]}" "${RT[@]}" "${TG[@]}"; echo ' ---: |'
for t in "${TESTS[@]}"; do
    for p in "${PIPES[@]}"; do
        printf '| %s | %s |' "${t^^}" "$p"
        sp=0 M=()
        for tg in "${TLIST[@]}"; do
            v= && read -r v s < <(stats <<<"${RESULTS[$t|$p|$tg]:-}") || true
            if [[ -n $v ]]; then printf ' %.0f |' "$v"; sp=$(awk -v a="$s" -v b="$sp" 'BEGIN { print (a > b) ? a : b }'); else printf ' - |'; fi
            M[$tg]=$v
        done
        for tg in "${RT[@]}"; do printf ' %s |' "$(ratio "${M[$tg]}" "${M[direct]}")"; done
        for tg in "${TG[@]}"; do
            awk -v c="${CPU[$t|$p|$tg]:-0}" -v n="${REQS[$t|$p|$tg]:-0}" -v hz="$(getconf CLK_TCK)" \
                'BEGIN { printf (n > 0 ? " %.2f |" : " - |"), c / hz * 1e6 / (n > 0 ? n : 1) }'
        done
        if ((ROUNDS > 1)); then awk -v s="$sp" 'BEGIN { printf " %.0f%% |\n", 100 * s }'; else echo ' - |'; fi
    done
done
echo
printf 'Requests per measurement:'
for t in "${TESTS[@]}"; do for p in "${PIPES[@]}"; do printf ' %s/-P%s %s' "${t^^}" "$p" "${N[$t$p]}"; done; done
echo ". CPU us/req: ttlguard's user + system time over all rounds of the row, connection set-up included. Spread: the largest (max - min)/median over rounds of the row's targets; more than a few percent means a busy machine. Run time ${SECONDS}s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."

# ---- health: cluster and ttlguard alive, what ttlguard logged, what redis-benchmark said
for port in "${NODES[@]}"; do cluster_ok "$port" || { FAILED=1 KEEP_WORK=1; printf '\n**node :%s down or not ok at the end**\n' "$port"; }; done
for tg in "${TG[@]}"; do
    kill -0 "${TPID[$tg]}" 2>/dev/null || { FAILED=1 KEEP_WORK=1; printf '\n**ttlguard %s died during the run**\n' "$tg"; }
    # The start-up warning about the open files limit is about max_clients, not this run.
    bad=$(grep -E ' ttlguard (warn|error):|[Aa]bort|[Aa]ssert|Sanitizer|Segmentation' "$WORK/$tg.log" |
        grep -v 'open files limit' | sed 's/^[0-9T:.Z-]* //' || true)
    [[ -z $bad ]] || { KEEP_WORK=1; printf '\nttlguard %s logged (count, line without its time; all in %s):\n\n' "$tg" "$WORK/$tg.log"
        sort <<<"$bad" | uniq -c | sort -rn | head -n 8 | sed 's/^ *\([0-9]*\) /- \1x `/; s/$/`/'; }
done
BENCH_ERR=$(grep -v '^[[:space:]]*$' "$WORK/redis-benchmark.err" 2>/dev/null | sort | uniq -c | sort -rn || true)
[[ -z $BENCH_ERR ]] || { KEEP_WORK=1; printf '\nredis-benchmark wrote to stderr (count, line; all in %s):\n\n' "$WORK/redis-benchmark.err"
    head -n 5 <<<"$BENCH_ERR" | sed 's/^ *\([0-9]*\) /- \1x `/; s/$/`/'; }
((FAILED == 0)) || die "some measurements failed, a node or ttlguard died; logs in $WORK"
