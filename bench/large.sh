#!/usr/bin/env bash
#
# bench/large.sh: SET and GET of large values straight to redis-server and through
# ttlguard (shared and 1:1, with and without a rewrite rule on the key), in one run.
#
# usage: bench/large.sh [--quick] [--rounds N] [--seconds S] [options] > out.md
#   --quick          plumbing check (a minute): --rounds 1 --seconds 0.2 --sizes 16kb,1mb,10mb
#   --rounds N       rounds per case, the table shows the median (default 3)
#   --seconds S      length of one measurement on the first target, calibrated per case
#                    (default 1); at least 2 requests per client whatever the size
#   --cap F          a measurement is cut after F times the first target's time for it
#                    (and at least 3 s; default 4): a target slower than 1/F of it shows
#                    the rate it had reached when cut, marked *
#   --sizes LIST     value sizes, bytes or with kb / mb (x1024), comma separated
#                    (default 16kb,256kb,1mb,10mb,100mb); the RSS table is for the largest
#   --clients LIST   redis-benchmark -c values (default 1,4)
#   --tests LIST     set,get or one of them (default set,get)
#   --targets LIST   comma separated subset, the first is the calibration target (default all):
#     direct              redis-server itself
#     ttlguard            ttlguard, multiplex = on (the default config), no rules
#     ttlguard_1to1       ttlguard, multiplex = off, no rules
#     ttlguard_rule       multiplex = on, [ttl "key:"] action = rewrite, ttl = 3600
#     ttlguard_1to1_rule  multiplex = off, the same rule
#     nutcracker          nutcracker (twemproxy), one server connection: what another proxy's
#                         second hop costs on the same machine, for reference
#   -h, --help       this text
# environment: TTLG_BIN (default build/ttlguard, built in Release when unset and
#   missing), BENCH_PORTS (default 7500-7599), REDIS_SERVER REDIS_CLI REDIS_BENCHMARK,
#   NUTCRACKER (default /usr/sbin/nutcracker)
#
# redis-benchmark 7.0 (-q, no -r) writes and reads the one key "key:__rand_int__" with
# -t set / -t get and -d SIZE; it takes -d up to 1 GB. Under the rule every SET is
# rewritten as MULTI; SET ... KEEPTTL; EXPIRE key 3600 NX; EXEC: held whole below 64 KiB,
# from 64 KiB on streamed, the value passing as it arrives (a SET with options after the
# value would stream with the SET in WRAP_LUA; this one has none); GET is judged and passed.
# Each round runs every case on every target back to back, a different target first;
# median of rounds; one request count per case, calibrated on the first target. Before
# every GET case the key is set to a value of the case's size straight on redis-server.
# ttlguard's peak RSS during the largest size: VmHWM after a reset through
# /proc/PID/clear_refs (or VmRSS sampled every 20 ms where that is refused), and its
# growth over the RSS just before. Target (issue 24): every ttlguard target >= 0.80 x direct.
# Own processes on free loopback ports, stopped by PID on exit. Markdown to stdout.
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ALL_TARGETS=direct,ttlguard,ttlguard_1to1,ttlguard_rule,ttlguard_1to1_rule,nutcracker
usage() { sed -n '/^# usage:/,/^#$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

ROUNDS=3 SECONDS_PER=1 CAP=4 TARGETS=$ALL_TARGETS
SIZES=16kb,256kb,1mb,10mb,100mb CLIENT_LIST=1,4 TESTS=set,get
while (($#)); do
    case $1 in
    --quick) ROUNDS=1 SECONDS_PER=0.2 SIZES=16kb,1mb,10mb ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --seconds) SECONDS_PER=${2:?--seconds needs a value}; shift ;;
    --cap) CAP=${2:?--cap needs a value}; shift ;;
    --sizes) SIZES=${2:?--sizes needs a value}; shift ;;
    --clients) CLIENT_LIST=${2:?--clients needs a value}; shift ;;
    --tests) TESTS=${2:?--tests needs a value}; shift ;;
    --targets) TARGETS=${2:?--targets needs a value}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/large.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

BENCH_NAME=large.sh BENCH_PORTS=${BENCH_PORTS:-7500-7599} BENCH_TOOLS="timeout"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

[[ $CAP =~ ^[0-9]*\.?[0-9]+$ ]] || die "--cap must be a number"
# bytes SIZE: the size in bytes (16kb, 1mb, 1048576)
bytes() {
    local s=${1,,}
    case $s in
    *kb) s=${s%kb}; [[ $s =~ ^[0-9]+$ ]] && echo $((s * 1024)) ;;
    *mb) s=${s%mb}; [[ $s =~ ^[0-9]+$ ]] && echo $((s * 1024 * 1024)) ;;
    *) [[ $s =~ ^[0-9]+$ ]] && echo "$s" ;;
    esac
}
size_label() { # 16 KB, 1 MB, 1000 B
    local b=$1
    if ((b >= 1048576 && b % 1048576 == 0)); then echo "$((b / 1048576)) MB"
    elif ((b >= 1024 && b % 1024 == 0)); then echo "$((b / 1024)) KB"
    else echo "$b B"; fi
}
IFS=, read -r -a SIZE_IN <<<"$SIZES"
SIZE_B=()
for s in "${SIZE_IN[@]}"; do
    b=$(bytes "$s") || true
    [[ -n $b ]] && ((b >= 1 && b <= 512 * 1024 * 1024)) || die "--sizes: '$s' is not a size from 1 byte to 512mb"
    SIZE_B+=("$b")
done
MAX_SIZE=$(printf '%s\n' "${SIZE_B[@]}" | sort -n | tail -n 1)
IFS=, read -r -a CLIST <<<"$CLIENT_LIST"
for c in "${CLIST[@]}"; do [[ $c =~ ^[1-9][0-9]*$ ]] || die "--clients: '$c' is not a positive integer"; done
IFS=, read -r -a TEST_LIST <<<"$TESTS"
for t in "${TEST_LIST[@]}"; do [[ $t == set || $t == get ]] || die "--tests: '$t' is not set or get"; done

# A copy of the binary, so that a rebuild of build/ during the run changes nothing.
cp "$TTLG_BIN" "$WORK/ttlguard"

free_port REDIS_PORT
start_bg "$WORK/redis.log" "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" \
    --save '' --appendonly no --daemonize no --protected-mode yes
REDIS_PID=$PID_LAST
wait_ping redis-server "$REDIS_PID" "$REDIS_PORT"
rcli() { "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

KEY='key:__rand_int__' # what redis-benchmark 7.0 -t set / -t get use without -r
vm() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || true; } # vm PID VmRSS: kB
declare -A TPORT TPID RSS_START
TPORT[direct]=$REDIS_PORT
start_ttlguard() { # start_ttlguard TARGET MULTIPLEX RULE(0|1)
    local port
    free_port port
    {
        printf '; written by bench/large.sh\n[proxy]\nlisten = 127.0.0.1:%s\n' "$port"
        printf 'backend = 127.0.0.1:%s\nmultiplex = %s\n' "$REDIS_PORT" "$2"
        (($3)) && printf '\n[ttl "key:"]\nttl = 3600\naction = rewrite\n'
        true
    } >"$WORK/$1.ini"
    start_bg "$WORK/$1.log" "$WORK/ttlguard" --config "$WORK/$1.ini"
    wait_ping "$1" "$PID_LAST" "$port"
    TPORT[$1]=$port TPID[$1]=$PID_LAST
    RSS_START[$1]=$(vm "$PID_LAST" VmRSS)
}
in_targets ttlguard && start_ttlguard ttlguard on 0
in_targets ttlguard_1to1 && start_ttlguard ttlguard_1to1 off 0
in_targets ttlguard_rule && start_ttlguard ttlguard_rule on 1
in_targets ttlguard_1to1_rule && start_ttlguard ttlguard_1to1_rule off 1
if in_targets nutcracker; then
    NUTCRACKER=${NUTCRACKER:-/usr/sbin/nutcracker}
    [[ -x $NUTCRACKER ]] || die "$NUTCRACKER not found (Debian package nutcracker)"
    # shellcheck source=bench/nutcracker.sh
    . "$ROOT/bench/nutcracker.sh"
    free_port port
    free_port nc_stats
    nutcracker_yml "$WORK/nutcracker.yml" "$port" "$REDIS_PORT"
    start_bg "$WORK/nutcracker.out" "$NUTCRACKER" -c "$WORK/nutcracker.yml" -s "$nc_stats" \
        -a 127.0.0.1 -o "$WORK/nutcracker.log"
    wait_ping nutcracker "$PID_LAST" "$port"
    TPORT[nutcracker]=$port TPID[nutcracker]=$PID_LAST
    RSS_START[nutcracker]=$(vm "$PID_LAST" VmRSS)
fi

# ---- plumbing check: a 1 MB value through every target arrives whole both ways, and
# the rule targets give the key a TTL (the others do not) ----------------------------
PLUMB=()
for tg in "${TLIST[@]}"; do
    rcli del "$KEY" >/dev/null
    timeout 30 "$REDIS_BENCHMARK" -h 127.0.0.1 -p "${TPORT[$tg]}" -c 1 -n 1 -d 1048576 -t set -q \
        >/dev/null 2>>"$WORK/redis-benchmark.err" || PLUMB+=("$tg: SET of 1 MB failed")
    len=$(rcli strlen "$KEY") ttl=$(rcli ttl "$KEY")
    [[ $len == 1048576 ]] || PLUMB+=("$tg: SET of 1 MB left $len bytes")
    if [[ $tg == *_rule ]]; then
        ((ttl > 0)) || PLUMB+=("$tg: the rule gave no TTL (TTL $ttl)")
    else
        [[ $ttl == -1 ]] || PLUMB+=("$tg: TTL $ttl after a SET under no rule (want -1)")
    fi
    got=$(timeout 30 "$REDIS_CLI" -h 127.0.0.1 -p "${TPORT[$tg]}" get "$KEY" | wc -c)
    [[ $got == 1048577 ]] || PLUMB+=("$tg: GET of 1 MB returned $((got - 1)) bytes")
done
((${#PLUMB[@]} == 0)) || say "WARNING: plumbing check: ${PLUMB[*]}"

# ---- setup ------------------------------------------------------------------------
build=
[[ $TTLG_BIN -ef $ROOT/build/ttlguard ]] &&
    build=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=\(.*\)/, \1 build/p' "$ROOT/build/CMakeCache.txt" 2>/dev/null)
ldd "$TTLG_BIN" 2>/dev/null | grep -qE 'libasan|libubsan' && build+=" - SANITIZER BUILD, numbers are meaningless"
cpu_model=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
echo "## Large values"
echo
echo "- $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs (${cpu_model:-unknown}), $(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release 2>/dev/null), kernel $(uname -r), not pinned; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $(first_line "$REDIS_SERVER" --version | cut -d' ' -f1-3), --save '' --appendonly no; $(first_line "$REDIS_BENCHMARK" --version)"
echo "- ttlguard: $TTLG_BIN, $(first_line "$TTLG_BIN" --version)$build; max_buffer 4 MB (the default); rule targets: \`[ttl \"key:\"] ttl = 3600, action = rewrite\`"
in_targets nutcracker && echo "- nutcracker: $(first_line "$NUTCRACKER" --version | sed 's/^This is //; s/ *$//'), one server connection (bench/nutcracker.sh)"
echo "- \`redis-benchmark -q -c CLIENTS -n N -d SIZE -t set|get\` (key \`$KEY\`); $ROUNDS round(s), interleaved, median shown; N calibrated for about ${SECONDS_PER}s on ${TLIST[0]}, at least 2 per client; a measurement is cut after ${CAP}x ${TLIST[0]}'s time (at least 3 s)"
echo

# ---- measuring ----------------------------------------------------------------------
# measure TARGET TEST SIZE CLIENTS N CAP: print "RPS full", or "RPS cut" when the cap
# stopped it (RPS: requests completed over the time until then, from redis-benchmark's
# progress line, which it prints every 250 ms), or return 1.
measure() {
    local out rc=0 rps
    out=$(timeout -k 5 "$6" "$REDIS_BENCHMARK" -h 127.0.0.1 -p "${TPORT[$1]}" -c "$4" -n "$5" \
        -d "$3" -t "$2" -q 2>>"$WORK/redis-benchmark.err" | tr '\r' '\n') || rc=$?
    if ((rc == 0)); then
        rps=$(awk '/ requests per second/ { for (i = 2; i <= NF; i++) if ($i == "requests") r = $(i - 1) } END { print r }' <<<"$out")
        [[ $rps =~ ^[0-9]+(\.[0-9]+)?$ ]] && { echo "$rps full"; return 0; }
    elif ((rc == 124)); then
        rps=$(grep -o '(overall: [0-9.]*) avg_msec' <<<"$out" | tail -n 1 | tr -dc '0-9.')
        echo "${rps:-0} cut"
        return 0
    fi
    return 1
}
set_direct() { # set_direct SIZE: the key holds SIZE bytes, set straight on redis-server
    timeout 60 "$REDIS_BENCHMARK" -h 127.0.0.1 -p "$REDIS_PORT" -c 1 -n 1 -d "$1" -t set -q \
        >/dev/null 2>>"$WORK/redis-benchmark.err" || die "could not set a $(size_label "$1") value on redis-server"
}
median() { tr ' ' '\n' | awk NF | sort -g | awk '{ a[NR] = $1 } END {
    if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread() { tr ' ' '\n' | awk NF | sort -g | awk '{ a[NR] = $1 } END { if (NR < 2) { print 0; exit }
    m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print (m > 0) ? (a[NR] - a[1]) / m : 0 }'; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

# Peak RSS: VmHWM after clear_refs 5 resets it, else a sampler of VmRSS every 20 ms.
HWM_OK=1
rss_start() { # rss_start PID: RSS_BEFORE (kB), and the peak tracking armed
    RSS_BEFORE=$(vm "$1" VmRSS)
    if ((HWM_OK)) && ! { echo 5 >"/proc/$1/clear_refs"; } 2>/dev/null; then
        HWM_OK=0
        say "cannot reset VmHWM through /proc/$1/clear_refs: sampling VmRSS every 20 ms instead"
    fi
    if ((!HWM_OK)); then
        (
            trap 'echo "$peak" >"$WORK/rss.peak"; exit 0' TERM
            peak=0
            while :; do
                r=$(vm "$1" VmRSS); [[ -n $r ]] && ((r > peak)) && peak=$r
                sleep 0.02
            done
        ) &
        SAMPLER=$!
        PIDS+=("$SAMPLER")
    fi
}
rss_peak() { # rss_peak PID: RSS_PEAK, the peak RSS (kB) since rss_start
    if ((HWM_OK)); then RSS_PEAK=$(vm "$1" VmHWM); return; fi
    kill -TERM "$SAMPLER" 2>/dev/null || true
    wait "$SAMPLER" 2>/dev/null || true
    local keep=() p
    for p in "${PIDS[@]}"; do [[ $p == "$SAMPLER" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
    RSS_PEAK=$(cat "$WORK/rss.peak" 2>/dev/null || echo 0)
}

declare -A N CAPS RESULTS CUT GROWTH RSS1
NT=${#TLIST[@]} FAILED=0 ci=0
rcli flushall >/dev/null
for s in "${SIZE_B[@]}"; do
    for c in "${CLIST[@]}"; do
        for t in "${TEST_LIST[@]}"; do
            [[ $t == get ]] && set_direct "$s"
            # A probe of about 32 MB (at least one request per client), then N for
            # SECONDS_PER on the first target, at least 2 requests per client.
            probe=$(((32 * 1048576 + s - 1) / s)); ((probe < c)) && probe=$c
            out=$(measure "${TLIST[0]}" "$t" "$s" "$c" "$probe" 120) && [[ $out == *full ]] ||
                { KEEP_WORK=1; die "calibration of ${t^^} $(size_label "$s") -c $c on ${TLIST[0]} failed (see $WORK/redis-benchmark.err)"; }
            rps=${out% *}
            k="$t|$s|$c"
            N[$k]=$(awk -v r="$rps" -v s="$SECONDS_PER" -v min=$((2 * c)) 'BEGIN {
                n = int(r * s + 0.5); if (n > 1000) n = int(n / 100 + 0.5) * 100; print (n < min ? min : n) }')
            CAPS[$k]=$(awk -v n="${N[$k]}" -v r="$rps" -v f="$CAP" 'BEGIN { c = f * n / r; printf "%.1f", (c < 3 ? 3 : c) }')
            say "calibrated ${t^^} $(size_label "$s") -c $c on ${TLIST[0]}: ${N[$k]} requests (${rps}/s), cap ${CAPS[$k]}s"
        done
    done
done
for ((r = 1; r <= ROUNDS; r++)); do
    for s in "${SIZE_B[@]}"; do
        for c in "${CLIST[@]}"; do
            for t in "${TEST_LIST[@]}"; do
                k="$t|$s|$c"
                [[ $t == get ]] && set_direct "$s"
                for ((i = 0; i < NT; i++)); do
                    tg=${TLIST[$(((i + r + ci) % NT))]}
                    pid=${TPID[$tg]:-}
                    [[ $s == "$MAX_SIZE" && -n $pid ]] && rss_start "$pid"
                    out=
                    if out=$(measure "$tg" "$t" "$s" "$c" "${N[$k]}" "${CAPS[$k]}"); then
                        RESULTS[$k|$tg]+=" ${out% *}"
                        [[ $out == *cut ]] && CUT[$k|$tg]=1
                        say "[round $r/$ROUNDS] ${t^^} $(size_label "$s") -c $c $tg: ${out/ full/}/s"
                    else
                        FAILED=1 KEEP_WORK=1
                        say "[round $r/$ROUNDS] ${t^^} $(size_label "$s") -c $c $tg: FAILED"
                        tail -n 3 "$WORK/redis-benchmark.err" >&2 || true
                    fi
                    if [[ $s == "$MAX_SIZE" && -n $pid ]]; then
                        rss_peak "$pid"
                        RSS1[$k|$tg]=$(max "${RSS1[$k|$tg]:-0}" "${RSS_PEAK:-0}")
                        GROWTH[$k|$tg]=$(max "${GROWTH[$k|$tg]:-0}" "$((${RSS_PEAK:-0} - ${RSS_BEFORE:-0}))")
                    fi
                    # A target cut mid-request leaves the server to finish it: let it.
                    [[ $out == *cut ]] && sleep 1
                done
                ci=$((ci + 1))
            done
        done
    done
done

# ---- tables ---------------------------------------------------------------------
fmt() { # fmt RPS CUT: the rate with 3 significant figures at least, * when cut
    [[ -n $1 ]] || { printf -- '-'; return; }
    awk -v r="$1" -v c="$2" 'BEGIN { f = (r >= 100) ? "%.0f" : (r >= 10) ? "%.1f" : "%.2f"; printf f "%s", r, (c ? "*" : "") }'
}
declare -A LABEL=([direct]=direct [ttlguard]="ttlguard" [ttlguard_1to1]="ttlguard 1:1"
    [ttlguard_rule]="ttlguard + rule" [ttlguard_1to1_rule]="ttlguard 1:1 + rule"
    [nutcracker]=nutcracker)
PROXIES=() NTTLG=0   # every target but direct; the ttlguard ones among them
for tg in "${TLIST[@]}"; do [[ $tg == direct ]] || PROXIES+=("$tg"); [[ $tg == ttlguard* ]] && NTTLG=$((NTTLG + 1)); done
have_direct=0
in_targets direct && have_direct=1
printf '| test | value | clients | direct MB/s |'
for tg in "${TLIST[@]}"; do printf ' %s/s |' "${LABEL[$tg]}"; done
((have_direct)) && for tg in "${PROXIES[@]}"; do printf ' %s / direct |' "${LABEL[$tg]}"; done
echo ' spread |'
printf '| --- | ---: | ---: | ---: |'
for tg in "${TLIST[@]}"; do printf ' ---: |'; done
((have_direct)) && for tg in "${PROXIES[@]}"; do printf ' ---: |'; done
echo ' ---: |'
MISSES=() ANY_CUT=0
for t in "${TEST_LIST[@]}"; do
    for s in "${SIZE_B[@]}"; do
        for c in "${CLIST[@]}"; do
            k="$t|$s|$c" sp=0
            d=$(median <<<"${RESULTS[$k|direct]:-}")
            mbs=-
            [[ -n $d ]] && mbs=$(awk -v r="$d" -v s="$s" 'BEGIN { printf "%.0f", r * s / 1048576 }')
            printf '| %s | %s | %s | %s |' "${t^^}" "$(size_label "$s")" "$c" "$mbs"
            for tg in "${TLIST[@]}"; do
                printf ' %s |' "$(fmt "$(median <<<"${RESULTS[$k|$tg]:-}")" "${CUT[$k|$tg]:-}")"
                [[ -n ${CUT[$k|$tg]:-} ]] && ANY_CUT=1
                sp=$(max "$(spread <<<"${RESULTS[$k|$tg]:-}")" "$sp")
            done
            if ((have_direct)); then
                for tg in "${PROXIES[@]}"; do
                    q=$(ratio "$(median <<<"${RESULTS[$k|$tg]:-}")" "$d")
                    printf ' %s |' "$q"
                    if [[ $tg == ttlguard* ]] && { [[ $q == - ]] || awk -v a="$q" 'BEGIN { exit !(a < 0.80) }'; }; then
                        MISSES+=("${t^^} $(size_label "$s") -c $c ${LABEL[$tg]} $q")
                    fi
                done
            fi
            if ((ROUNDS > 1)); then awk -v s="$sp" 'BEGIN { printf " %.0f%% |\n", 100 * s }'; else echo ' - |'; fi
        done
    done
done
echo
printf 'Requests per measurement (%s):' "${TLIST[0]}-calibrated"
for t in "${TEST_LIST[@]}"; do for s in "${SIZE_B[@]}"; do for c in "${CLIST[@]}"; do
    printf ' %s/%s/c%s %s' "${t^^}" "$(size_label "$s" | tr -d ' ')" "$c" "${N[$t|$s|$c]}"
done; done; done
echo ". Spread: the largest (max - min)/median over rounds of the row's targets. Run time ${SECONDS}s."
((ANY_CUT)) && echo "* cut at the cap: requests completed over the time until cut (a rate it reached, not a full measurement; 0 when not one request completed)."
echo
if ((!have_direct)); then echo "Target >= 0.80 x direct: not checked, no direct target."
elif ((${#MISSES[@]})); then echo "**Target >= 0.80 x direct missed on ${#MISSES[@]} of $((${#TEST_LIST[@]} * ${#SIZE_B[@]} * ${#CLIST[@]} * NTTLG)) cells:** $(printf '%s, ' "${MISSES[@]}" | sed 's/, $//')."
else echo "Target met: every ttlguard target >= 0.80 x direct on every row."; fi

if ((${#PROXIES[@]})); then
    echo
    echo "Each proxy's RSS during the $(size_label "$MAX_SIZE") cases ($( ((HWM_OK)) && echo "VmHWM, reset before each measurement" || echo "VmRSS sampled every 20 ms"); largest over rounds), MB:"
    echo
    echo "| test | clients | target | RSS at start | peak RSS | growth | growth / value |"
    echo "| --- | ---: | --- | ---: | ---: | ---: | ---: |"
    for t in "${TEST_LIST[@]}"; do
        for c in "${CLIST[@]}"; do
            for tg in "${PROXIES[@]}"; do
                k="$t|$MAX_SIZE|$c|$tg"
                awk -v z="${RSS_START[$tg]:-0}" -v a="${GROWTH[$k]:-0}" -v b="${RSS1[$k]:-0}" -v s="$MAX_SIZE" \
                    -v t="${t^^}" -v c="$c" -v g="${LABEL[$tg]}" 'BEGIN {
                    printf "| %s | %s | %s | %.1f | %.1f | %.1f | %.2f |\n", t, c, g, z / 1024, b / 1024, a / 1024, a * 1024 / s }'
            done
        done
    done
    echo
    echo "RSS at start: right after the proxy answered PING. Peak: the largest over rounds. Growth: peak minus the RSS just" \
        "before the measurement, the largest over rounds (the allocator may keep memory from earlier cases, which the peak includes and the growth does not)."
    echo "Bound of issue 24 item 2: growth of about max_buffer (4 MB) plus a read chunk per client, whatever the value's size."
fi
((${#PLUMB[@]} == 0)) || { echo; echo "**WARNING: plumbing check: $(printf '%s; ' "${PLUMB[@]}" | sed 's/; $//')**"; }

# ---- health: ttlguard alive, what it logged, what redis-benchmark said -------------
for tg in "${PROXIES[@]}"; do
    kill -0 "${TPID[$tg]}" 2>/dev/null || { FAILED=1 KEEP_WORK=1; printf '\n**%s died during the run**\n' "${LABEL[$tg]}"; }
    bad=$(grep -iE 'error|warn|fail|crit|abort|assert' "$WORK/$tg.log" | grep -v 'open files limit' || true)
    if [[ -n $bad ]]; then
        KEEP_WORK=1
        printf '\n%s logged (count, line; all in %s):\n\n' "${LABEL[$tg]}" "$WORK/$tg.log"
        sort <<<"$bad" | uniq -c | sort -rn | head -n 5 | sed 's/^ *\([0-9]*\) /- \1x `/; s/$/`/'
    fi
done
kill -0 "$REDIS_PID" 2>/dev/null || { FAILED=1 KEEP_WORK=1; printf '\n**redis-server died during the run**\n'; }
# nutcracker refuses the CONFIG GET redis-benchmark sends at its start: its warning is no error.
BENCH_ERR=$(grep -v -e '^WARNING: Could not fetch server CONFIG' -e '^[[:space:]]*$' "$WORK/redis-benchmark.err" 2>/dev/null | sort | uniq -c | sort -rn || true)
if [[ -n $BENCH_ERR ]]; then
    KEEP_WORK=1
    printf '\nredis-benchmark wrote to stderr (count, line; all in %s):\n\n' "$WORK/redis-benchmark.err"
    head -n 5 <<<"$BENCH_ERR" | sed 's/^ *\([0-9]*\) /- \1x `/; s/$/`/'
fi
((FAILED == 0)) || die "some measurements failed or a process died; logs in $WORK"
