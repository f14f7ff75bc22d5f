#!/usr/bin/env bash
# Run Redis's own test suite (the tcl suite of the redis source package matching the
# backend's version) in external mode against redis-server directly, or through ttlguard,
# standalone or (cluster = route) in front of a Redis Cluster.
#
#   tests/redis-suite/run.sh [--mode MODES] [--compare-direct] [--units LIST] [--jobs N]
#                            [--unit-timeout SEC] [--suite SUITE] [--work DIR]
#                            [--no-exclusions] [--list]
#
#   --mode MODES      one mode or several (comma separated), run in one pool of jobs:
#          direct     the runner talks to redis-server (default)
#          ttlguard   the runner talks to a ttlguard in front of that redis-server
#          mux        the same with [proxy] multiplex = on
#          cluster-direct  runtest --cluster-mode against a 1-node Redis Cluster (one
#                     cluster-enabled redis-server that owns all 16384 slots)
#          route      runtest --cluster-mode against ttlguard with cluster = route in
#                     front of a 3-primary Redis Cluster (no replicas, the first two
#                     nodes as seeds)
#   --compare-direct  run each proxied mode's reference too (first, in the same pool) and
#                     compare: direct for ttlguard and mux, cluster-direct for route.
#                     ttlguard, mux: a unit that passed fewer tests through ttlguard than
#                     directly fails, and so does every test that passes directly and
#                     fails through the proxy (compare.sh prints them). route: every test
#                     that passes on cluster-direct and fails through route fails, unless
#                     exclusions-route lists it (keys of several slots get -CROSSSLOT on
#                     both; where route does more, MGET across slots, a test may pass
#                     through route and fail directly: that is fine)
#   --units LIST      comma/space separated units (unit/type/list, integration/aof, ...);
#                     default: every unit of test_helper.tcl's all_tests, and for
#                     cluster-direct and route the units listed in units-route
#   --jobs N          units run in parallel, each with its own redis (and ttlguard) on
#                     distinct ports (default: nproc)
#   --unit-timeout S  hard limit per unit; a unit killed by it counts as failed (600)
#   --suite SUITE     Debian suite to take the redis source from (bookworm-security)
#   --work DIR        where logs go (default ${TTLG_CACHE:-/var/cache/ttlguard}/redis-suite/
#                     MODES-TIME); with several modes each has its own DIR/MODE
#   --no-exclusions   ignore tests/redis-suite/exclusions and exclusions-route
#   --skiptest NAME   also skip this test (runtest --skiptest; repeatable; for diagnosis)
#   --tags TAGS       runtest --tags, e.g. "-needs:repl" (for diagnosis)
#   --list            print the units and exit
#
# Environment: REDIS_SERVER (/usr/bin/redis-server), TTLG_BIN (build/ttlguard),
# TTLG_CACHE (/var/cache/ttlguard), TTLG_SUITE_PORTS (21000-21999: every port used).
#
# Every unit runs on its own, as
#   ./runtest --host 127.0.0.1 --port P --durable --single UNIT --clients 1 ...
# against a redis-server started for it on a free loopback port with an empty data
# directory (and a fresh ttlguard), both stopped after the unit; in the cluster modes
# (runtest --cluster-mode also) against a cluster started for the unit, each node with
# an empty directory. Per unit it prints "UNIT: P passed, F failed" and the failing
# tests (with several modes, "MODE UNIT: ..."). A unit fails (one failure more,
# "[unit ...]") when ttlguard or a redis-server exited during it, or when ttlguard did
# not exit 0 on SIGTERM after it.
#
# Two exclusion files, different in kind:
#   exclusions        tests that fail straight against redis-server too (in external
#                     mode), skipped in every mode. Their rule is checked whenever the
#                     direct mode runs: each unit with exclusions runs once more directly
#                     without them, and each excluded test must fail there (a check that
#                     holds counts as passed, one that does not as failed).
#   exclusions-route  what cluster = route does not do yet, or does differently on
#                     purpose: tests that pass on cluster-direct and fail through route.
#                     "fails" entries run through route and must fail there; "skip"
#                     entries are not run through route (their outcome depends on which
#                     node a keyless command reaches, or they would break the tests
#                     after them). Each entry is checked whenever route runs: a "fails"
#                     test that passes through route, any entry whose test does not run
#                     (or is not skipped) there, or (with cluster-direct) one that does
#                     not pass on cluster-direct, is stale and counts as failed.
#
# Last, "N passed, M failed": N the tests passed in every mode run plus the exclusion
# checks that held; M the tests failed in direct, ttlguard and mux, the units of the
# cluster modes that hung, aborted or crashed, the exclusion checks that did not hold,
# (--compare-direct) the units that passed fewer tests through ttlguard or mux than
# directly, and the tests that pass on cluster-direct and fail through route (the other
# failures of the cluster modes are what a cluster answers: counted, not failed).
# Exit status 1 when anything failed, 2 on a setup error.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

mode_arg=direct units_arg="" jobs=$(nproc 2>/dev/null || echo 2) unit_timeout=600
suite=bookworm-security work="" use_excl=1 list_only=0 tags="" compare=0
declare -a extra_skips=()
noprogress=300          # runtest --timeout: seconds without any progress message

die() { echo "run.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --mode) mode_arg=${2:?}; shift 2 ;;
    --mode=*) mode_arg=${1#*=}; shift ;;
    --compare-direct) compare=1; shift ;;
    --units) units_arg=${2:?}; shift 2 ;;
    --units=*) units_arg=${1#*=}; shift ;;
    --jobs|-j) jobs=${2:?}; shift 2 ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    --unit-timeout) unit_timeout=${2:?}; shift 2 ;;
    --unit-timeout=*) unit_timeout=${1#*=}; shift ;;
    --suite) suite=${2:?}; shift 2 ;;
    --suite=*) suite=${1#*=}; shift ;;
    --work) work=${2:?}; shift 2 ;;
    --work=*) work=${1#*=}; shift ;;
    --no-exclusions) use_excl=0; shift ;;
    --skiptest) extra_skips+=("${2:?}"); shift 2 ;;
    --tags) tags=${2:?}; shift 2 ;;
    --list) list_only=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; usage 2 ;;
  esac
done
# The modes, the references (direct, cluster-direct) first when they are among them;
# each once. A proxied mode's reference: the mode it is compared with.
declare -a modes=()
declare -A ref_of=([ttlguard]=direct [mux]=direct [route]=cluster-direct)
have_mode() { local m; for m in "${modes[@]}"; do [ "$m" = "$1" ] && return 0; done; return 1; }
is_cluster() { [ "$1" = cluster-direct ] || [ "$1" = route ]; }
declare -a asked=()
for m in $(tr ', ' '\n\n' <<<"$mode_arg"); do
  case $m in direct|ttlguard|mux|cluster-direct|route) ;;
    *) die "--mode takes direct, ttlguard, mux, cluster-direct and route (got '$m')" ;; esac
  asked+=("$m")
  [ "$compare" = 1 ] && [ -n "${ref_of[$m]:-}" ] && asked+=("${ref_of[$m]}")
done
for m in direct cluster-direct; do
  for x in "${asked[@]}"; do [ "$x" = "$m" ] && { modes+=("$m"); break; }; done
done
for m in "${asked[@]}"; do have_mode "$m" || modes+=("$m"); done
[ ${#modes[@]} -gt 0 ] || die "--mode: no mode given"
proxied=0 clustered=0
for m in "${modes[@]}"; do
  [ -n "${ref_of[$m]:-}" ] && proxied=1
  is_cluster "$m" && clustered=1
done
[ "$compare" = 0 ] || [ "$proxied" = 1 ] || die "--compare-direct needs a proxied mode (--mode ttlguard, mux and/or route)"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer"
[[ $unit_timeout =~ ^[1-9][0-9]*$ ]] || die "--unit-timeout must be a positive integer"

REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
TTLG_BIN=${TTLG_BIN:-$root/build/ttlguard}
cache=${TTLG_CACHE:-/var/cache/ttlguard}
ports=${TTLG_SUITE_PORTS:-21000-21999}
port_lo=${ports%-*} port_hi=${ports#*-}
[[ $port_lo =~ ^[0-9]+$ && $port_hi =~ ^[0-9]+$ && $port_lo -lt $port_hi ]] || die "TTLG_SUITE_PORTS must be LOW-HIGH"
slot_size=50            # ports per parallel job: see run_unit
max_slots=$(( (port_hi - port_lo + 1) / slot_size ))
[ "$max_slots" -ge 1 ] || die "TTLG_SUITE_PORTS range is smaller than $slot_size ports"
[ "$jobs" -le "$max_slots" ] || { echo "run.sh: --jobs $jobs lowered to $max_slots (port range $ports)" >&2; jobs=$max_slots; }

for t in tclsh timeout flock awk; do command -v $t >/dev/null || die "$t is missing (apt-get install tcl coreutils util-linux gawk)"; done
if [ "$clustered" = 1 ]; then
  command -v redis-cli >/dev/null || die "redis-cli is missing (apt-get install redis-tools): the cluster modes form their cluster with it"
fi
[ -x "$REDIS_SERVER" ] || die "redis-server not found at $REDIS_SERVER (set REDIS_SERVER)"
if [ "$proxied" = 1 ]; then
  [ -x "$TTLG_BIN" ] || die "ttlguard binary not found at $TTLG_BIN (build it, or set TTLG_BIN)"
fi

# ---- the suite ------------------------------------------------------------------------
srv_version=$("$REDIS_SERVER" --version 2>/dev/null | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p')
[ -n "$srv_version" ] || die "cannot read the version of $REDIS_SERVER"
src=$(bash "$root/tests/debsrc.sh" "$suite" redis) || die "could not obtain the redis source package from $suite"
src_version=$(sed -n 's/^#define REDIS_VERSION "\(.*\)"/\1/p' "$src/src/version.h" 2>/dev/null)
[ -f "$src/tests/test_helper.tcl" ] || die "$src has no tests/test_helper.tcl"
if [ "$src_version" != "$srv_version" ]; then
  echo "run.sh: warning: the suite is redis $src_version ($suite) but $REDIS_SERVER is $srv_version; pick the suite with --suite" >&2
fi

all_units=$(awk '/^set ::all_tests \{/ {on=1; next} on && /^\}/ {exit} on && NF {print $1}' "$src/tests/test_helper.tcl")
if [ -z "$all_units" ]; then
  # Redis 8 lists no units: test_helper.tcl globs the *.tcl of its test_dirs (sorted)
  tdirs=$(awk '/^set test_dirs \{/ {on=1; next} on && /^\}/ {exit} on && NF {print $1}' "$src/tests/test_helper.tcl")
  all_units=$(for d in $tdirs; do
                for f in "$src/tests/$d"/*.tcl; do [ -f "$f" ] && echo "$d/$(basename "$f" .tcl)"; done | LC_ALL=C sort
              done)
fi
[ -n "$all_units" ] || die "no all_tests list and no test_dirs in $src/tests/test_helper.tcl"
if [ -n "$units_arg" ]; then
  units=$(tr ', ' '\n\n' <<<"$units_arg" | sed '/^$/d; s/\.tcl$//; s#^tests/##')
  while read -r u; do
    [ -f "$src/tests/$u.tcl" ] || die "no unit '$u' (no $src/tests/$u.tcl; --list shows them)"
  done <<<"$units"
  cunits=$units
else
  units=$all_units
  # the cluster modes' own list: units-route, "UNIT  # why" a line
  cunits=$(sed 's/#.*//; s/[[:space:]]*$//; /^$/d; s/^[[:space:]]*//' "$here/units-route" 2>/dev/null)
  [ -n "$cunits" ] || die "$here/units-route lists no unit"
  while read -r u; do
    [ -f "$src/tests/$u.tcl" ] || die "$here/units-route: no unit '$u' in $src/tests"
  done <<<"$cunits"
fi
# units_of MODE: the units that mode runs
units_of() { if is_cluster "$1"; then echo "$cunits"; else echo "$units"; fi; }
std_modes=0
for m in "${modes[@]}"; do is_cluster "$m" || std_modes=1; done
if [ "$list_only" = 1 ]; then
  [ "$std_modes" = 1 ] && echo "$units"
  [ "$clustered" = 1 ] && { [ "$std_modes" = 1 ] && echo "# cluster-direct, route:"; echo "$cunits"; }
  exit 0
fi

# ---- exclusions: "UNIT | REASON | TEST NAME" (TEST = * for the whole unit) -------------
excl_file=$here/exclusions
declare -A skip_args=()
declare -a excl_unit=() excl_name=() excl_reason=()
if [ "$use_excl" = 1 ] && [ -f "$excl_file" ]; then
  while IFS= read -r line; do
    case $line in ''|'#'*) continue ;; esac
    u=${line%% | *}; rest=${line#* | }
    [ "$u" != "$line" ] && [ "$rest" != "${rest#* | }" ] || die "$excl_file: bad line (want 'UNIT | REASON | TEST'): $line"
    reason=${rest%% | *}; name=${rest#* | }
    [ -n "$reason" ] || die "$excl_file: an exclusion needs a reason: $line"
    if [ "$name" = "*" ]; then skip_args[$u]+="--skipunit"$'\x1f'"$u"$'\x1f'
    else skip_args[$u]+="--skiptest"$'\x1f'"$name"$'\x1f'
    fi
    excl_unit+=("$u"); excl_name+=("$name"); excl_reason+=("$reason")
  done <"$excl_file"
fi

# ---- exclusions-route: "fails|skip | UNIT | REASON | TEST NAME" ------------------------
rexcl_file=$here/exclusions-route
declare -A rskip_args=()
declare -a rexcl_kind=() rexcl_unit=() rexcl_name=() rexcl_reason=()
if [ "$use_excl" = 1 ] && have_mode route && [ -f "$rexcl_file" ]; then
  while IFS= read -r line; do
    case $line in ''|'#'*) continue ;; esac
    IFS=$'\x1f' read -r k u reason name < <(sed 's/ | /\x1f/; s/ | /\x1f/; s/ | /\x1f/' <<<"$line")
    case $k in fails|skip) ;; *) die "$rexcl_file: bad line (want 'fails|skip | UNIT | REASON | TEST'): $line" ;; esac
    [ -n "$u" ] && [ -n "$reason" ] && [ -n "$name" ] || die "$rexcl_file: bad line (want 'fails|skip | UNIT | REASON | TEST'): $line"
    [ "$name" != "*" ] || die "$rexcl_file: a whole unit is left out of units-route, not excluded: $line"
    [ "$k" = skip ] && rskip_args[$u]+="--skiptest"$'\x1f'"$name"$'\x1f'
    rexcl_kind+=("$k"); rexcl_unit+=("$u"); rexcl_name+=("$name"); rexcl_reason+=("$reason")
  done <"$rexcl_file"
fi

# ---- work dirs ------------------------------------------------------------------------
modes_label=$(IFS=+; echo "${modes[*]}")
[ -n "$work" ] || work=$cache/redis-suite/$modes_label-$(date +%Y%m%d-%H%M%S)
mkdir -p "$work" || die "cannot create $work"
work=$(cd "$work" && pwd)
case $work/ in "$root"/*) die "--work must be outside the git tree ($root)" ;; esac
# One mode: its logs in the work dir itself; several: each mode's in WORK/MODE. Either
# is a directory compare.sh takes.
declare -A mwork=()
many=0
[ ${#modes[@]} -gt 1 ] && many=1
for m in "${modes[@]}"; do
  if [ "$many" = 1 ]; then mwork[$m]=$work/$m; else mwork[$m]=$work; fi
  mkdir -p "${mwork[$m]}/units" || die "cannot create ${mwork[$m]}"
done
nunits=""
[ "$std_modes" = 1 ] && nunits="$(wc -l <<<"$units") units"
[ "$clustered" = 1 ] && nunits+="${nunits:+, }$(wc -l <<<"$cunits") in the cluster modes"
echo "run.sh: modes ${modes[*]}$([ "$compare" = 1 ] && echo " (proxied compared with their reference)"), redis $srv_version ($REDIS_SERVER), suite $src, $nunits, $jobs jobs" >&2
[ "$proxied" = 1 ] && echo "run.sh: ttlguard $TTLG_BIN" >&2
echo "run.sh: logs in $work" >&2

# The queue: "MODE<TAB>UNIT" per unit and mode, the modes of a unit next to each other
# (so that the long units of every mode start early, side by side), and "excl<TAB>UNIT"
# after a unit with exclusions when the direct mode runs: that unit once more, directly,
# without its exclusions (check_exclusions).
declare -A excl_units=()
if have_mode direct; then
  for ((i = 0; i < ${#excl_unit[@]}; i++)); do
    grep -qxF "${excl_unit[$i]}" <<<"$units" && excl_units[${excl_unit[$i]}]=1
  done
fi
# The units that take longest (20 to 60 s each on 2 cores) first, so that no job is
# left alone with one of them at the end; the rest in the suite's order.
slow_units="unit/hyperloglog unit/type/list-3 unit/type/zset unit/dump unit/type/list unit/geo unit/expire"
# (The units of every mode: the cluster ones after the others, each unit once.)
every_unit=$(printf '%s\n%s\n' "$([ "$std_modes" = 1 ] && echo "$units")" "$([ "$clustered" = 1 ] && echo "$cunits")" |
             awk 'NF && !seen[$0]++')
queue_units=$( { for u in $slow_units; do grep -xF "$u" <<<"$every_unit"; done
                 grep -vxF -f <(tr ' ' '\n' <<<"$slow_units") <<<"$every_unit"; } )
while read -r u; do
  for m in "${modes[@]}"; do
    units_of "$m" | grep -qxF "$u" && printf '%s\t%s\n' "$m" "$u"
  done
  [ -n "${excl_units[$u]:-}" ] && printf 'excl\t%s\n' "$u"
done <<<"$queue_units" >"$work/queue"
: >"$work/queue.lock"
: >"$work/out.lock"
: >"$work/pids"

# ---- processes: started here, stopped by pid ---------------------------------------------
alive() {   # pid: running (a zombie is not)
  local st
  kill -0 "$1" 2>/dev/null || return 1
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [ "$st" != Z ]
}

# stop_pid PID [GRACE]: SIGTERM, then SIGKILL after GRACE seconds (10), and reap it.
# Sets stop_status to its exit status ("gone" when it had exited before: the caller
# reaps it itself to learn how) and stop_killed=1 when SIGKILL was needed.
stop_pid() {
  local pid=$1 grace=${2:-10} i
  stop_status=gone stop_killed=0
  [ -n "$pid" ] || return 0
  if ! alive "$pid"; then wait "$pid" 2>/dev/null; return 0; fi
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < grace * 10; i++)); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then kill -KILL "$pid" 2>/dev/null; stop_killed=1; fi
  wait "$pid" 2>/dev/null
  stop_status=$?
  return 0
}

# A port is free when nothing listens on it: connections of earlier units left in
# TIME_WAIT do not count (redis-server, ttlguard and tclsh bind with SO_REUSEADDR).
port_free() {
  if command -v ss >/dev/null; then
    [ -z "$(ss -Htln "( sport = :$1 )" 2>/dev/null)" ]
  else
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}
# first free port in [lo, hi) that is not in the exclusion list ($3...)
pick_port() {
  local lo=$1 hi=$2 p x; shift 2
  for ((p = lo; p < hi; p++)); do
    for x in "$@"; do [ "$p" = "$x" ] && continue 2; done
    port_free "$p" && { echo "$p"; return 0; }
  done
  return 1
}

resp_ping() {   # port: 0 when the server answers PONG
  local out
  out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$1"' && printf "PING\r\n" >&3 && head -c 7 <&3' 2>/dev/null) || return 1
  [ "${out%$'\r'}" = "+PONG" ]
}
wait_ping() {   # port pid seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    alive "$2" || return 1
    resp_ping "$1" && return 0
    sleep 0.1
  done
  return 1
}

# ---- one unit -----------------------------------------------------------------------
# Slot s owns ports [B, B+50), B = port_lo + 50*s:
#   B..B+7    redis, ttlguard, ttlguard admin (first free ones); cluster-direct: the node
#             and its cluster bus port; route: 3 nodes, their 3 bus ports, ttlguard, admin
#   B+8..B+39 runtest's own test server (it takes the first free one of baseport-32..)
#   B+40..    runtest --baseport/--portcount (servers it would spawn; none in external mode)

# start_redis DIR LOG PORT [ARGS...]: a redis-server for a unit; its pid in started_pid.
start_redis() {
  local dir=$1 log=$2 port=$3
  shift 3
  mkdir -p "$dir"
  "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --dir "$dir" --daemonize no \
      --save '' --appendonly no --logfile "$log" \
      --enable-debug-command yes --enable-protected-configs yes --enable-module-command yes \
      "$@" </dev/null >"${log%.log}.stdout" 2>&1 &
  started_pid=$!
  echo "$started_pid" >>"$work/pids"
}

rcli() {   # PORT ARGS...: redis-cli's answer (its errors too), 5 s at most
  local port=$1
  shift
  timeout 5 redis-cli -h 127.0.0.1 -p "$port" "$@" </dev/null 2>&1 | tr -d '\r'
}

# cluster_form PORT:BUS...: the nodes become one cluster, the slots split evenly in node
# order, each node with a config epoch of its own (as redis-cli --cluster create does:
# no collision to resolve), met by the first node; then wait (20 s at most) until every
# node says cluster_state:ok and knows every node (a primary that was down says ok 2 s
# after its start at the earliest: CLUSTER_WRITABLE_DELAY). On failure 1, and
# cluster_err says why.
cluster_form() {
  local n=$# i t lo hi out p ok x
  local -a ports=() buses=()
  for x in "$@"; do ports+=("${x%:*}"); buses+=("${x#*:}"); done
  for ((i = 0; i < n; i++)); do
    lo=$((16384 * i / n)) hi=$((16384 * (i + 1) / n - 1))
    out=$(rcli "${ports[$i]}" cluster set-config-epoch $((i + 1)))
    [ "$out" = OK ] || { cluster_err="CLUSTER SET-CONFIG-EPOCH on ${ports[$i]}: $out"; return 1; }
    out=$(rcli "${ports[$i]}" cluster addslotsrange "$lo" "$hi")
    [ "$out" = OK ] || { cluster_err="CLUSTER ADDSLOTSRANGE $lo $hi on ${ports[$i]}: $out"; return 1; }
  done
  for ((i = 1; i < n; i++)); do
    out=$(rcli "${ports[0]}" cluster meet 127.0.0.1 "${ports[$i]}" "${buses[$i]}")
    [ "$out" = OK ] || { cluster_err="CLUSTER MEET 127.0.0.1 ${ports[$i]} ${buses[$i]} on ${ports[0]}: $out"; return 1; }
  done
  for ((t = 0; t < 200; t++)); do
    ok=1
    for p in "${ports[@]}"; do
      out=$(rcli "$p" cluster info)
      if ! grep -qx 'cluster_state:ok' <<<"$out" || ! grep -qx "cluster_known_nodes:$n" <<<"$out"; then
        ok=0
        break
      fi
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  cluster_err="after 20 s node $p says: $(grep -E '^cluster_(state|known_nodes|slots_assigned)' <<<"$out" | tr '\n' ' ')"
  return 1
}

# stop_servers: every redis-server of the unit run_unit is in (its rpids)
stop_servers() { local q; for q in "${rpids[@]}"; do stop_pid "$q" 10; done; }

# run_unit SLOT KIND UNIT: KIND is a mode (direct, ttlguard, mux, cluster-direct, route),
# or excl: the unit straight against redis-server without its exclusions (logs in
# DIRECT/exclusions/UNIT).
run_unit() {
  local slot=$1 kind=$2 unit=$3 mode=$2
  local b=$((port_lo + slot * slot_size))
  local name=${unit//\//__}
  local udir
  if [ "$kind" = excl ]; then
    mode=direct udir=${mwork[direct]}/exclusions/$name
  else
    udir=${mwork[$mode]}/units/$name
  fi
  rm -rf "$udir"; mkdir -p "$udir/data"
  local tport="" aport="" target tpid="" rc fatal="" t0 t1 x i p bus log nodes=1 backend
  local -a rports=() rpids=() used=() cnodes=() cargs=()

  t0=$(date +%s)
  [ "$mode" = route ] && nodes=3
  # The servers: one (direct, ttlguard, mux, cluster-direct) or the cluster's nodes
  # (route), each with a directory of its own.
  for ((i = 0; i < nodes; i++)); do
    p=$(pick_port "$b" $((b + 8)) "${used[@]}") ||
      { stop_servers; finish_unit "$kind" "$unit" "$udir" setup "no free port in $b-$((b + 7))"; return; }
    used+=("$p"); rports+=("$p")
    cargs=()
    if is_cluster "$mode"; then
      bus=$(pick_port "$b" $((b + 8)) "${used[@]}") ||
        { stop_servers; finish_unit "$kind" "$unit" "$udir" setup "no free port in $b-$((b + 7))"; return; }
      used+=("$bus"); cnodes+=("$p:$bus")
      cargs=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-port "$bus")
    fi
    log=$udir/redis.log
    [ "$i" -gt 0 ] && log=$udir/redis-$((i + 1)).log
    start_redis "$udir/data$([ "$nodes" -gt 1 ] && echo "/node$((i + 1))")" "$log" "$p" "${cargs[@]}"
    rpids+=("$started_pid")
  done
  for ((i = 0; i < nodes; i++)); do
    if ! wait_ping "${rports[$i]}" "${rpids[$i]}" 15; then
      log=$udir/redis.log
      [ "$i" -gt 0 ] && log=$udir/redis-$((i + 1)).log
      stop_servers
      finish_unit "$kind" "$unit" "$udir" setup "redis-server did not come up on port ${rports[$i]}: $(tail -n 3 "$log" 2>/dev/null | tr '\n' ' ')"
      return
    fi
  done
  if is_cluster "$mode" && ! cluster_form "${cnodes[@]}"; then
    stop_servers
    finish_unit "$kind" "$unit" "$udir" setup "the cluster did not form: $cluster_err"
    return
  fi
  target=${rports[0]}

  if [ -n "${ref_of[$mode]:-}" ]; then
    tport=$(pick_port "$b" $((b + 8)) "${used[@]}") && aport=$(pick_port "$b" $((b + 8)) "${used[@]}" "$tport") \
      || { stop_servers; finish_unit "$kind" "$unit" "$udir" setup "no free ports in $b-$((b + 7))"; return; }
    backend="127.0.0.1:${rports[0]}"
    # route: the first two nodes as seeds (the topology is read from the first that
    # answers); shared connections, the only kind cluster = route has
    [ "$mode" = route ] && backend+=" 127.0.0.1:${rports[1]}"
    cat >"$udir/ttlguard.ini" <<INI
[proxy]
listen = 127.0.0.1:$tport
backend = $backend
events = $udir/events.jsonl
admin = 127.0.0.1:$aport
multiplex = $([ "$mode" = ttlguard ] && echo off || echo on)
$([ "$mode" = route ] && echo "cluster = route")

[default]
action = allow

; a prefix the suite never uses: ttlguard classifies every command, rewrites nothing
[ttl "ttlguard-suite-never:"]
ttl = 900
action = rewrite
INI
    "$TTLG_BIN" --config "$udir/ttlguard.ini" </dev/null >"$udir/ttlguard.log" 2>&1 &
    tpid=$!
    echo "$tpid" >>"$work/pids"
    if ! wait_ping "$tport" "$tpid" 15; then
      stop_pid "$tpid"; stop_servers
      finish_unit "$kind" "$unit" "$udir" setup "ttlguard did not come up on port $tport: $(tail -n 3 "$udir/ttlguard.log" | tr '\n' ' ')"
      return
    fi
    target=$tport
  fi

  # A fresh copy of the suite per unit: runtest writes under tests/tmp.
  local tree=$work/tree.$slot
  rm -rf "$tree"; mkdir -p "$tree/src"
  cp -a "$src/tests" "$src/runtest" "$tree/"
  local bin
  for bin in redis-server redis-cli redis-benchmark redis-check-aof redis-check-rdb; do
    if [ "$bin" = redis-server ]; then ln -s "$REDIS_SERVER" "$tree/src/$bin"
    elif command -v "$bin" >/dev/null; then ln -s "$(command -v "$bin")" "$tree/src/$bin"; fi
  done
  # runtest checks that port+10000 (a cluster bus port) is free too when it picks the
  # port of its own test server; drop that probe so every port stays in the slot's range.
  sed -i 's/\[catch {set fd2 \[socket -server 127.0.0.1 \[expr \$port+10000\]\]}\]/0/; s/^\( *\)close \$fd2$/\1# close $fd2/' \
    "$tree/tests/support/util.tcl"
  local -a args=(--host 127.0.0.1 --port "$target" --durable --single "$unit" --clients 1
                 --timeout "$noprogress" --baseport $((b + 40)) --portcount 10)
  is_cluster "$mode" && args+=(--cluster-mode)
  [ -n "$tags" ] && args+=(--tags "$tags")
  for x in "${extra_skips[@]}"; do args+=(--skiptest "$x"); done
  local -a extra
  if [ "$kind" != excl ] && [ -n "${skip_args[$unit]:-}" ]; then
    IFS=$'\x1f' read -r -a extra <<<"${skip_args[$unit]%$'\x1f'}"
    args+=("${extra[@]}")
  fi
  if [ "$mode" = route ] && [ -n "${rskip_args[$unit]:-}" ]; then
    IFS=$'\x1f' read -r -a extra <<<"${rskip_args[$unit]%$'\x1f'}"
    args+=("${extra[@]}")
  fi
  printf '%q ' ./runtest "${args[@]}" >"$udir/cmd"; echo >>"$udir/cmd"
  # timeout puts runtest and the test client it spawns in a process group of their own
  # and signals the whole group.
  (cd "$tree" && TERM=dumb exec timeout -k 20 "$unit_timeout" ./runtest "${args[@]}") \
    </dev/null >"$udir/runtest.log" 2>&1
  rc=$?

  # ttlguard must run through the unit and exit 0 on SIGTERM after it: a crash, an exit
  # or a SIGTERM it does not honour fails the unit. So does a redis-server that exited
  # during the unit (nothing the suite runs in external mode stops it).
  if [ -n "$tpid" ]; then
    if ! alive "$tpid"; then
      wait "$tpid" 2>/dev/null; x=$?
      echo "$x" >"$udir/ttlguard.status"
      fatal+="ttlguard exited during the unit, status $x$([ "$x" -gt 128 ] && echo " (signal $((x - 128)))") (see ttlguard.log); "
    else
      stop_pid "$tpid" 10
      echo "$stop_status" >"$udir/ttlguard.status"
      if [ "$stop_killed" = 1 ]; then
        fatal+="ttlguard did not exit within 10 s of SIGTERM and was killed (see ttlguard.log); "
      elif [ "$stop_status" = gone ]; then
        fatal+="ttlguard exited before it was stopped (see ttlguard.log); "
      elif [ "$stop_status" != 0 ]; then
        fatal+="ttlguard exited $stop_status on SIGTERM$([ "$stop_status" -gt 128 ] && echo " (signal $((stop_status - 128)))") (see ttlguard.log); "
      fi
    fi
  fi
  for ((i = 0; i < nodes; i++)); do
    log=redis.log
    [ "$i" -gt 0 ] && log=redis-$((i + 1)).log
    alive "${rpids[$i]}" || fatal+="redis-server on port ${rports[$i]} exited during the unit (see $log); "
  done
  stop_servers
  rm -rf "$tree" "$udir/data"
  t1=$(date +%s)
  echo "$((t1 - t0))" >"$udir/seconds"
  finish_unit "$kind" "$unit" "$udir" "$rc" "" "${fatal%; }"
}

# finish_unit KIND UNIT UDIR RC [NOTE [FATAL]]: parse runtest.log into
# udir/{counts,failed,details,results.tsv} and print the unit's lines. FATAL (a process
# that crashed or exited) is one more failure of the unit, "[unit crashed: FATAL]".
finish_unit() {
  local kind=$1 unit=$2 udir=$3 rc=$4 note=${5:-} fatal=${6:-}
  local log=$udir/runtest.log
  [ -f "$log" ] || : >"$log"
  awk -v unit="$unit" -v rc="$rc" -v note="$note" -v fatal="$fatal" -v tmo="$unit_timeout" \
      -v noprog="$noprogress" -v udir="$udir" '
    function flush_err() { if (cur != "") { details = details cur "\n"; cur = "" } ; inerr = 0 }
    function strip(s) { gsub(/\033\[[0-9;]*m/, "", s); return s }
    {
      line = strip($0)
      if (line ~ /^\[(ok|err|skip|ignore|exception|TIMEOUT)\]: / || line ~ /^\[[0-9]+\/[0-9]+ done\]: / ||
          line ~ /^Testing / || line ~ /^\[ready\]: / || line ~ /^ *The End$/ || line ~ /^Killing still running/ ||
          line ~ /^Execution time of different units:/ || line ~ /^(\*\*\* |!!! WARNING)/) flush_err()
      if (line ~ /^\[ok\]: /) {
        n = line; sub(/^\[ok\]: /, "", n); sub(/ \([0-9]+ ms\)$/, "", n)
        passed++; print unit "\tok\t" n > (udir "/results.tsv")
        for (; pending > 0; pending--) {
          m = n " [error in its nested start_server block]"
          print m > (udir "/failed"); print unit "\terr\t" m > (udir "/results.tsv")
        }
      } else if (line ~ /^\[err\]: / && line !~ / in tests\/[^ ]+\.tcl$/) {
        # an error raised in a nested start_server block outside any test: it belongs to
        # the test whose result comes next
        failed++; anon = substr(line, 8); cur = "--- (error in the nested start_server block of the next test) " anon "\n"; inerr = 1; nl = 0; pending++
      } else if (line ~ /^\[err\]: /) {
        n = line; sub(/^\[err\]: /, "", n); sub(/ in tests\/[^ ]+\.tcl$/, "", n)
        failed++; print n > (udir "/failed"); print unit "\terr\t" n > (udir "/results.tsv")
        for (; pending > 0; pending--) {
          m = n " [error in its nested start_server block]"
          print m > (udir "/failed"); print unit "\terr\t" m > (udir "/results.tsv")
        }
        cur = "--- " n "\n"; inerr = 1; nl = 0
      } else if (line ~ /^\[exception\]: /) {
        failed++; exc = 1; n = "[exception] " substr(line, 14)
        print n > (udir "/failed"); print unit "\terr\t" n > (udir "/results.tsv")
        cur = "--- " n "\n"; inerr = 1; nl = 0
      } else if (line ~ /^\[TIMEOUT\]: /) {
        tmout = 1
      } else if (tmout && line ~ / => \(IN PROGRESS\) /) {
        hung = line; sub(/.* => \(IN PROGRESS\) /, "", hung)
      } else if (line ~ /^\[skip\]: /) {
        skipped++; n = substr(line, 9); print unit "\tskip\t" n > (udir "/results.tsv")
      } else if (line ~ /^\[ignore\]: /) {
        skipped++
      } else if (line ~ ("^\\[[0-9]+/[0-9]+ done\\]: " unit " ")) {
        done = 1
      } else if (inerr && nl < 40) {
        cur = cur "    " line "\n"; nl++
      }
    }
    END {
      flush_err()
      for (; pending > 0; pending--) {
        m = "[error in a nested start_server block after the last test]"
        print m > (udir "/failed"); print unit "\terr\t" m > (udir "/results.tsv")
      }
      reason = ""
      if (rc == "setup") { reason = "setup failed: " note; note = "" }
      else if (tmout) reason = "hung: no progress for " noprog "s" (hung != "" ? " in test \"" hung "\"" : "") ", runtest gave up on the unit (its remaining tests did not run)"
      else if (rc == 124 || rc == 137) reason = "hung: killed after " tmo "s"
      else if (!done && !exc) reason = "aborted: runtest exited " rc " before the unit finished"
      if (reason != "") {
        failed++; n = "[unit " reason "]"
        print n > (udir "/failed"); print unit "\terr\t" n > (udir "/results.tsv")
      }
      if (fatal != "") {
        failed++; n = "[unit crashed: " fatal "]"
        print n > (udir "/failed"); print unit "\terr\t" n > (udir "/results.tsv")
        print fatal > (udir "/fatal")
      }
      printf "%d %d %d\n", passed, failed, skipped > (udir "/counts")
      printf "%s", details > (udir "/details")
      if (reason != "") print reason > (udir "/reason")
      if (note != "") print note > (udir "/note")
    }' "$log"
  touch "$udir/results.tsv" "$udir/failed"
  # Where a unit hung, aborted or crashed: the last test the server saw (runtest logs
  # each test start to the server with DEBUG LOG).
  # (A cluster's nodes each log the tests whose DEBUG LOG reached them: the latest line
  # of any, by its time of day.)
  if { [ -f "$udir/reason" ] || [ -f "$udir/fatal" ]; } && [ -f "$udir/redis.log" ]; then
    local last
    last=$(grep -ah 'DEBUG LOG: ### Starting test' "$udir"/redis*.log | awk '{ print $5 "\t" $0 }' | sort |
           tail -n 1 | sed 's/.*### Starting test //')
    if [ -n "$last" ]; then
      echo "$last" >"$udir/last-test"
      echo "last test started: $last" >>"$udir/reason"
    fi
  fi
  [ "$kind" = excl ] && check_exclusions "$unit" "$udir"
  local p f s label=$unit
  [ "$many" = 1 ] && label="$kind $unit"
  read -r p f s <"$udir/counts"
  {
    flock 9
    if [ "$kind" = excl ]; then
      echo "$label (directly, without its exclusions): $p passed, $f failed$([ "$s" -gt 0 ] && echo " ($s skipped)")"
      sed 's/^ok\t/    exclusion holds: /; s/^fail\t/    ! EXCLUSION DOES NOT HOLD: /' "$udir/exclusions.tsv"
    else
      echo "$label: $p passed, $f failed$([ "$s" -gt 0 ] && echo " ($s skipped)")"
      [ -f "$udir/reason" ] && sed 's/^/    ! /' "$udir/reason"
      [ -f "$udir/note" ] && sed 's/^/    ! /' "$udir/note"
      # (the cluster modes' failures are mostly a cluster's answers, -CROSSSLOT: their
      # names stay in the unit's failed file; route's that count are listed at the end)
      if is_cluster "$kind"; then grep '^\[unit ' "$udir/failed" | sed 's/^/    [err] /'
      else sed 's/^/    [err] /' "$udir/failed"; fi
    fi
  } 9>>"$work/out.lock"
}

# check_exclusions UNIT UDIR: after UNIT ran straight against redis-server without its
# exclusions, one line per exclusion of the unit in UDIR/exclusions.tsv: "ok<TAB>TEXT"
# when the excluded test failed there (an [err] or [exception] of that name, or the
# test the unit hung or crashed in; for "*", any failure of the unit), "fail<TAB>TEXT"
# when it passed or did not run at all.
check_exclusions() {
  local unit=$1 udir=$2 i name ok hit text
  : >"$udir/exclusions.tsv"
  for ((i = 0; i < ${#excl_unit[@]}; i++)); do
    [ "${excl_unit[$i]}" = "$unit" ] || continue
    name=${excl_name[$i]}
    text="$unit | $name"
    if [ "$name" = "*" ]; then
      if [ -s "$udir/failed" ]; then
        printf 'ok\t%s: the unit fails directly (%s)\n' "$text" "$(head -n 1 "$udir/failed")"
      else
        printf 'fail\t%s: the whole unit passes straight against redis-server; remove it from %s\n' "$text" "$excl_file"
      fi >>"$udir/exclusions.tsv"
      continue
    fi
    # runtest takes "/REGEXP" as a regular expression, anything else as the exact name;
    # both reach awk through the environment (-v would expand backslashes)
    local is='function is(n, re) { re = ENVIRON["EXCL_NAME"]; return substr(re, 1, 1) == "/" ? n ~ substr(re, 2) : n == re }'
    ok=$(EXCL_NAME=$name awk -F'\t' "$is"' $2 == "ok" && is($3) { print $3; exit }' "$udir/results.tsv")
    hit=$(EXCL_NAME=$name awk -F'\t' "$is"' $2 == "err" { n = $3; sub(/ \[error in its nested start_server block\]$/, "", n)
                                   sub(/^\[exception\] /, "", n); if (is(n)) { print $3; exit } }' "$udir/results.tsv")
    # the test a unit hung or crashed in ("NAME in tests/unit/x.tcl", from redis.log)
    if [ -z "$hit" ] && [ -f "$udir/last-test" ] &&
       EXCL_NAME=$name awk "$is"' { n = $0; sub(/ in tests\/[^ ]+\.tcl$/, "", n); if (is(n)) f = 1 } END { exit !f }' "$udir/last-test"; then
      hit="the unit hung or crashed in it: $(cat "$udir/reason" "$udir/fatal" 2>/dev/null | head -n 1)"
    fi
    if [ -n "$ok" ]; then
      printf 'fail\t%s: it PASSES straight against redis-server; remove it from %s\n' "$text" "$excl_file"
    elif [ -n "$hit" ]; then
      printf 'ok\t%s: fails straight against redis-server too ([err] %s)\n' "$text" "$(head -c 300 <<<"$hit")"
    else
      printf 'fail\t%s: it did not run straight against redis-server (no such test in %s?)\n' "$text" "$unit"
    fi >>"$udir/exclusions.tsv"
  done
}

worker() {
  local slot=$1 item
  while :; do
    item=$(
      {
        flock 9
        u=$(head -n 1 "$work/queue")
        [ -n "$u" ] && sed -i 1d "$work/queue"
        echo "$u"
      } 9>>"$work/queue.lock"
    )
    [ -n "$item" ] || break
    run_unit "$slot" "${item%%$'\t'*}" "${item#*$'\t'}"
  done
}

cleanup() {
  trap - INT TERM
  local p
  [ -n "${wpids:-}" ] && for p in $wpids; do kill -TERM "$p" 2>/dev/null; done
  if [ -f "$work/pids" ]; then
    while read -r p; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null; done <"$work/pids"
  fi
}
trap 'cleanup; echo "run.sh: interrupted; logs in $work" >&2; exit 130' INT TERM

start=$(date +%s)
wpids=""
for ((s = 0; s < jobs; s++)); do
  worker "$s" &
  wpids+=" $!"
done
for p in $wpids; do wait "$p"; done
wpids=""
elapsed=$(( $(date +%s) - start ))

# ---- summary per mode ---------------------------------------------------------------------
grand_p=0 grand_f=0
declare -A mode_p=() mode_f=() mode_unit_f=()
for m in "${modes[@]}"; do
  mw=${mwork[$m]}
  tot_p=0 tot_f=0 tot_s=0
  : >"$mw/results.tsv"
  {
    echo "mode $m, redis $srv_version, suite $src, ${elapsed}s wall$([ "$many" = 1 ] && echo " (modes ${modes[*]} together)"), $jobs jobs"
    while read -r u; do
      d=$mw/units/${u//\//__}
      if [ -f "$d/counts" ]; then read -r p f s <"$d/counts"; else p=0 f=1 s=0; fi
      tot_p=$((tot_p + p)) tot_f=$((tot_f + f)) tot_s=$((tot_s + s))
      printf '%-45s %5d passed %4d failed %4d skipped %5ss\n' "$u" "$p" "$f" "$s" "$(cat "$d/seconds" 2>/dev/null || echo -)"
      cat "$d/results.tsv" >>"$mw/results.tsv" 2>/dev/null
    done <<<"$(units_of "$m")"
    echo "total: $tot_p passed, $tot_f failed, $tot_s skipped"
  } >"$mw/summary.txt"
  # failures with their messages, one file
  while read -r u; do
    d=$mw/units/${u//\//__}
    if [ -s "$d/failed" ] || [ ! -f "$d/counts" ]; then
      echo "=== $u"
      [ -f "$d/counts" ] || echo "! the unit did not run"
      [ -f "$d/reason" ] && sed 's/^/! /' "$d/reason"
      [ -f "$d/fatal" ] && sed 's/^/! /' "$d/fatal"
      [ -f "$d/note" ] && sed 's/^/! /' "$d/note"
      cat "$d/details" 2>/dev/null
    fi
  done <<<"$(units_of "$m")" >"$mw/failures.txt"
  mode_p[$m]=$tot_p mode_f[$m]=$tot_f
  grand_p=$((grand_p + tot_p))
  # The cluster modes: a failure is what a cluster answers (-CROSSSLOT...), not one of
  # the run; a unit that did not run, hung, aborted or crashed is (route's tests are
  # judged against cluster-direct below).
  if is_cluster "$m"; then
    mode_unit_f[$m]=0
    while read -r u; do
      d=$mw/units/${u//\//__}
      if [ ! -f "$d/counts" ]; then mode_unit_f[$m]=$((mode_unit_f[$m] + 1))
      else mode_unit_f[$m]=$((mode_unit_f[$m] + $(grep -c '^\[unit ' "$d/failed" 2>/dev/null))); fi
    done <<<"$(units_of "$m")"
    grand_f=$((grand_f + mode_unit_f[$m]))
  else
    grand_f=$((grand_f + tot_f))
  fi
  echo "run.sh: mode $m: $tot_s skipped; summary $mw/summary.txt, failures $mw/failures.txt, per unit $mw/units/" >&2
done

# ---- the exclusions' own rule: each excluded test fails straight against redis-server ----
excl_ok=0 excl_bad=0
declare -a excl_lines=()
for u in "${!excl_units[@]}"; do
  t=${mwork[direct]}/exclusions/${u//\//__}/exclusions.tsv
  if [ ! -f "$t" ]; then
    excl_bad=$((excl_bad + 1)); excl_lines+=("  ! $u: its run without the exclusions did not finish")
    continue
  fi
  while IFS=$'\t' read -r st text; do
    if [ "$st" = ok ]; then excl_ok=$((excl_ok + 1)); excl_lines+=("  $text")
    else excl_bad=$((excl_bad + 1)); excl_lines+=("  ! $text"); fi
  done <"$t"
done

# ---- route: its exclusions checked, and every test that passes on cluster-direct ----------
# The names of route's exclusions, "UNIT<TAB>NAME" (NAME exact, or /regexp as runtest
# takes it), for the awk programs below.
rexcl_tsv=$work/exclusions-route.tsv
: >"$rexcl_tsv"
for ((i = 0; i < ${#rexcl_unit[@]}; i++)); do printf '%s\t%s\n' "${rexcl_unit[$i]}" "${rexcl_name[$i]}" >>"$rexcl_tsv"; done
awk_is='function is(n, re) { return substr(re, 1, 1) == "/" ? n ~ substr(re, 2) : n == re }'
rexcl_ok=0 rexcl_bad=0
declare -a rexcl_lines=()
if have_mode route; then
  rw=${mwork[route]} cw=${mwork[cluster-direct]:-}
  for ((i = 0; i < ${#rexcl_unit[@]}; i++)); do
    u=${rexcl_unit[$i]} k=${rexcl_kind[$i]} nm=${rexcl_name[$i]}
    grep -qxF "$u" <<<"$cunits" || continue
    d=$rw/units/${u//\//__}
    text="$k | $u | $nm"
    # route's rows of the tests it names: "STATUS<TAB>NAME"
    rows=$(EXCL_NAME=$nm awk -F'\t' "$awk_is"' { n = $3; sub(/ \[error in its nested start_server block\]$/, "", n)
                                              sub(/^\[exception\] /, "", n); if (is(n, ENVIRON["EXCL_NAME"])) print $2 "\t" $3 }' \
           "$d/results.tsv" 2>/dev/null)
    if [ -z "$rows" ] && [ -f "$d/last-test" ] && EXCL_NAME=$nm awk "$awk_is"' { n = $0; sub(/ in tests\/[^ ]+\.tcl$/, "", n)
                                              if (is(n, ENVIRON["EXCL_NAME"])) f = 1 } END { exit !f }' "$d/last-test"; then
      rows="err	(the unit hung or crashed in it)"
    fi
    bad=""
    if [ ! -f "$d/counts" ]; then bad="the unit did not run through route"
    elif [ "$k" = fails ]; then
      if grep -q '^ok' <<<"$rows"; then bad="it PASSES through route ($(grep -m1 '^ok' <<<"$rows" | cut -f2)): remove it from $rexcl_file"
      elif ! grep -q '^err' <<<"$rows"; then bad="it did not run through route (no such test in $u?)"; fi
    elif ! grep -q '^skip' <<<"$rows"; then bad="no test of that name was skipped through route (no such test in $u?)"
    elif grep -q '^\(ok\|err\)' <<<"$rows"; then bad="a test of that name ran through route all the same"
    fi
    if [ -z "$bad" ] && [ -n "$cw" ] && [ -f "$cw/units/${u//\//__}/results.tsv" ] &&
       ! EXCL_NAME=$nm awk -F'\t' "$awk_is"' $2 == "ok" && is($3, ENVIRON["EXCL_NAME"]) { f = 1 } END { exit !f }' \
           "$cw/units/${u//\//__}/results.tsv"; then
      bad="it does not pass on cluster-direct either: not needed, remove it from $rexcl_file"
    fi
    if [ -z "$bad" ]; then
      rexcl_ok=$((rexcl_ok + 1))
      rexcl_lines+=("  $text: $([ "$k" = fails ] && echo "fails through route" || echo "skipped through route")$([ -n "$cw" ] && echo ", passes on cluster-direct")")
    else
      rexcl_bad=$((rexcl_bad + 1)); rexcl_lines+=("  ! $text: $bad")
    fi
  done
fi

# route_missing UNIT: the tests of UNIT that pass on cluster-direct and do not pass (as
# often) through route, and are not in exclusions-route; "NAME<TAB>what route did". (A
# unit that hung, aborted or crashed through route is a failure of its own, counted
# above; the tests it did not run are listed here.)
route_missing() {
  local u=$1 n=${1//\//__}
  awk -F'\t' -v unit="$u" "$awk_is"'
    FILENAME == ARGV[1] { if ($1 == unit) ex[++ne] = $2; next }
    FILENAME == ARGV[2] { if ($2 == "ok") want[$3]++; next }
    { base = $3; sub(/ \[error in its nested start_server block\]$/, "", base); sub(/^\[exception\] /, "", base)
      if ($2 == "ok") got[$3]++; else if ($2 == "err") what[base] = "fails through route" }
    END {
      for (t in want) {
        if (got[t] >= want[t]) continue
        for (i = 1; i <= ne; i++) if (is(t, ex[i])) break
        if (i <= ne) continue
        w = t in what ? what[t] : "did not run through route"
        if (got[t] > 0) w = w " (passed " got[t] " of " want[t] " times)"
        print t "\t" w
      }
    }' "$rexcl_tsv" "${mwork[cluster-direct]}/units/$n/results.tsv" "${mwork[route]}/units/$n/results.tsv" | sort
}

# ---- each proxied mode against the direct one -----------------------------------------------
cmp_bad=0
declare -a cmp_lines=()
if [ "$compare" = 1 ]; then
  dw=${mwork[direct]:-}
  for m in "${modes[@]}"; do
    { [ "$m" = direct ] || is_cluster "$m"; } && continue
    mw=${mwork[$m]}
    fewer=0
    while read -r u; do
      n=${u//\//__}
      dp=-1 mp=-1
      [ -f "$dw/units/$n/counts" ] && read -r dp _ _ <"$dw/units/$n/counts"
      [ -f "$mw/units/$n/counts" ] && read -r mp _ _ <"$mw/units/$n/counts"
      if [ "$dp" -lt 0 ] || [ "$mp" -lt 0 ]; then
        fewer=$((fewer + 1))
        cmp_lines+=("  ! $m $u: did not finish $([ "$dp" -lt 0 ] && echo directly || echo "through ttlguard")")
      elif [ "$mp" -lt "$dp" ]; then
        fewer=$((fewer + 1))
        cmp_lines+=("  ! $m $u: $mp passed through ttlguard, $dp directly")
      fi
    done <<<"$units"
    cmp_bad=$((cmp_bad + fewer))
    bash "$here/compare.sh" "$dw" "$mw" >"$work/compare-$m.md" 2>&1
    if [ "$fewer" -eq 0 ]; then
      cmp_lines+=("  $m: every unit passed as many tests through ttlguard as directly (${mode_p[$m]} and ${mode_p[direct]} in all)")
    else
      cmp_lines+=("  $m: $fewer units passed fewer tests through ttlguard than directly")
    fi
    if grep -q '^### ' "$work/compare-$m.md"; then
      cmp_lines+=("  $m: tests that pass directly and fail through ttlguard (details in $work/compare-$m.md):")
      while IFS= read -r l; do cmp_lines+=("    $l"); done < <(grep -E '^(### |- `)' "$work/compare-$m.md")
    fi
  done
fi

# route against cluster-direct: each test that passes there must pass through route,
# unless exclusions-route names it; compare.sh adds the failing assertions' text.
if [ "$compare" = 1 ] && have_mode route; then
  rw=${mwork[route]} cw=${mwork[cluster-direct]}
  nmiss=0
  : >"$work/route-missing.tsv"
  while read -r u; do
    d=$rw/units/${u//\//__} c=$cw/units/${u//\//__}
    if [ ! -f "$d/results.tsv" ] || [ ! -f "$c/results.tsv" ]; then
      nmiss=$((nmiss + 1))
      cmp_lines+=("  ! route $u: did not finish $([ -f "$c/results.tsv" ] && echo "through route" || echo "on cluster-direct")")
      continue
    fi
    while IFS=$'\t' read -r t what; do
      [ -n "$t" ] || continue
      nmiss=$((nmiss + 1))
      printf '%s\t%s\t%s\n' "$u" "$t" "$what" >>"$work/route-missing.tsv"
      cmp_lines+=("  ! route $u: $t: $what")
    done < <(route_missing "$u")
  done <<<"$cunits"
  cmp_bad=$((cmp_bad + nmiss))
  bash "$here/compare.sh" "$cw" "$rw" "$rexcl_tsv" >"$work/compare-route.md" 2>&1
  if [ "$nmiss" -eq 0 ]; then
    cmp_lines+=("  route: every test that passes on cluster-direct passes through route, but the ${#rexcl_unit[@]} of exclusions-route (${mode_p[route]} and ${mode_p[cluster-direct]} passed in all)")
  else
    cmp_lines+=("  route: $nmiss tests pass on cluster-direct and not through route, and exclusions-route does not name them (their failures: $work/compare-route.md)")
  fi
fi

echo "run.sh: finished in ${elapsed}s; logs in $work" >&2
echo
echo "Redis's own suite (redis $src_version) against redis-server $srv_version, ${elapsed}s:"
for m in "${modes[@]}"; do
  if [ "$m" = cluster-direct ]; then
    echo "  mode $m: ${mode_p[$m]} passed, ${mode_f[$m]} failed (the reference: a failure is what a cluster answers, not one of the run; units that did not finish: ${mode_unit_f[$m]})"
  elif [ "$m" = route ]; then
    echo "  mode $m: ${mode_p[$m]} passed, ${mode_f[$m]} failed (judged test by test against cluster-direct and exclusions-route; units that did not finish: ${mode_unit_f[$m]})"
  else
    echo "  mode $m: ${mode_p[$m]} passed, ${mode_f[$m]} failed"
  fi
done
if [ ${#excl_units[@]} -gt 0 ]; then
  echo "exclusions, each excluded test run straight against redis-server: $excl_ok fail there as their reason says, $excl_bad do not"
  printf '%s\n' "${excl_lines[@]}"
fi
if [ ${#rexcl_lines[@]} -gt 0 ]; then
  echo "exclusions-route, what cluster = route does not do yet or does differently: $rexcl_ok hold, $rexcl_bad are stale"
  printf '%s\n' "${rexcl_lines[@]}"
fi
if [ "$compare" = 1 ]; then
  echo "the proxied modes against their reference (ttlguard, mux: direct; route: cluster-direct):"
  printf '%s\n' "${cmp_lines[@]}"
fi
all_p=$((grand_p + excl_ok + rexcl_ok))
all_f=$((grand_f + excl_bad + rexcl_bad + cmp_bad))
echo "$all_p passed, $all_f failed"
[ "$all_f" -eq 0 ]
