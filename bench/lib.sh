# bench/lib.sh: what bench/tls.sh and bench/cluster.sh share, sourced by them
# after their option parsing. The script sets before sourcing:
#   BENCH_NAME    its name, for messages ("tls.sh")
#   BENCH_PORTS   the default port range (each script has its own)
#   ROUNDS SECONDS_PER TARGETS ALL_TARGETS   from its options
#   BENCH_TOOLS   commands it needs besides redis-server/-cli/-benchmark and ss
# and gets: die, say, in_targets, REDIS_SERVER/CLI/BENCHMARK, TTLG_BIN (built
# in Release when unset and missing), WORK (a temp dir, removed on exit unless
# KEEP_WORK=1), start_bg (every process started is stopped on exit: TERM, a
# moment, KILL), free_port/free_range (ports of BENCH_PORTS nobody listens
# on), start_redis (REDIS_PORT, REDIS_PID), cpu_ticks, ratio, first_line, wait_ping.

die() { echo "bench/$BENCH_NAME: $*" >&2; exit 1; }
say() { echo "$*" >&2; }

[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ $SECONDS_PER =~ ^[0-9]*\.?[0-9]+$ ]] || die "--seconds must be a number"
IFS=, read -r -a TLIST <<<"$TARGETS"
((${#TLIST[@]})) || die "--targets is empty"
for t in "${TLIST[@]}"; do [[ ",$ALL_TARGETS," == *",$t,"* ]] || die "unknown target '$t'"; done
in_targets() { [[ ",$TARGETS," == *",$1,"* ]]; }

REDIS_SERVER=${REDIS_SERVER:-redis-server} REDIS_CLI=${REDIS_CLI:-redis-cli}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-redis-benchmark}
PORT_LO=${BENCH_PORTS%-*} PORT_HI=${BENCH_PORTS#*-}
[[ $PORT_LO =~ ^[0-9]+$ && $PORT_HI =~ ^[0-9]+$ ]] || die "BENCH_PORTS must look like 7300-7399"
for tool in "$REDIS_SERVER" "$REDIS_CLI" "$REDIS_BENCHMARK" ss $BENCH_TOOLS; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
if [[ -z ${TTLG_BIN:-} && ! -x $ROOT/build/ttlguard ]]; then
    say "building $ROOT/build/ttlguard (Release)"
    cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >&2
    cmake --build "$ROOT/build" --target ttlguard -j"$(nproc)" >&2
fi
TTLG_BIN=${TTLG_BIN:-$ROOT/build/ttlguard}
[[ -x $TTLG_BIN ]] || die "TTLG_BIN=$TTLG_BIN is not an executable"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ttlg-${BENCH_NAME%.sh}-bench.XXXXXX")
PIDS=() KEEP_WORK=0
cleanup() {
    local pid i alive
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for i in $(seq 1 30); do # a moment to exit cleanly, then KILL
        alive=0; for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        ((alive)) && sleep 0.1 || break
    done
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    if ((KEEP_WORK)); then say "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

TAKEN=" "
free_range() { # free_range VAR N: the first of N consecutive free ports of BENCH_PORTS, now taken
    local p q
    for ((p = PORT_LO; p + $2 - 1 <= PORT_HI; p++)); do
        for ((q = p; q < p + $2; q++)); do [[ $TAKEN == *" $q "* || -n $(ss -Htln "sport = :$q") ]] && continue 2; done
        for ((q = p; q < p + $2; q++)); do TAKEN+="$q "; done
        printf -v "$1" '%s' "$p" && return 0
    done
    die "no $2 free consecutive port(s) in $BENCH_PORTS"
}
free_port() { free_range "$1" 1; }
start_bg() { # start_bg LOG CMD...: CMD in the background, its PID in PIDS and PID_LAST
    local log=$1; shift
    "$@" >"$log" 2>&1 &
    PIDS+=("$!") PID_LAST=$!
}

start_redis() { # start_redis LOG [redis-server options]: redis-server on REDIS_PORT (REDIS_PID), answering
    local log=$1; shift
    free_port REDIS_PORT
    start_bg "$log" "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
        --appendonly no --daemonize no "$@"
    REDIS_PID=$PID_LAST
    wait_ping redis-server "$REDIS_PID" "$REDIS_PORT"
}
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
ratio() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.2f" : "-"), a / (b > 0 ? b : 1) }' || printf -- '-'; }
first_line() { "$@" 2>&1 | head -n 1 || true; }
wait_ping() { # wait_ping NAME PID PORT [redis-cli TLS options]: until PORT answers PING
    local name=$1 pid=$2 port=$3 i; shift 3
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || { KEEP_WORK=1; die "$name exited during start (logs: $WORK)"; }
        [[ $(timeout 2 "$REDIS_CLI" "$@" -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]] && return 0
        sleep 0.1
    done
    KEEP_WORK=1; die "$name does not answer PING on 127.0.0.1:$port${*:+ (TLS)} (logs: $WORK)"
}
