#!/usr/bin/env bash
# Run Redis's own test suite (the tcl suite of the redis source package matching the
# backend's version) in external mode against redis-server directly, or through ttlguard.
#
#   tests/redis-suite/run.sh [--mode direct|ttlguard|mux] [--units LIST] [--jobs N]
#                            [--unit-timeout SEC] [--suite SUITE] [--work DIR]
#                            [--no-exclusions] [--list]
#
#   --mode direct     the runner talks to redis-server (default)
#          ttlguard   the runner talks to a ttlguard in front of that redis-server
#          mux        the same with [proxy] multiplex = on
#   --units LIST      comma/space separated units (unit/type/list, integration/aof, ...);
#                     default: every unit of test_helper.tcl's all_tests
#   --jobs N          units run in parallel, each with its own redis (and ttlguard) on
#                     distinct ports (default: nproc)
#   --unit-timeout S  hard limit per unit; a unit killed by it counts as failed (600)
#   --suite SUITE     Debian suite to take the redis source from (bookworm-security)
#   --work DIR        where logs go (default ${TTLG_CACHE:-/var/cache/ttlguard}/redis-suite/MODE-TIME)
#   --no-exclusions   ignore tests/redis-suite/exclusions
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
# directory (and a fresh ttlguard), both stopped after the unit. Per unit it prints
# "UNIT: P passed, F failed" and the failing tests; last, "N passed, M failed".
# Exit status 1 when anything failed, 2 on a setup error.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

mode=direct units_arg="" jobs=$(nproc 2>/dev/null || echo 2) unit_timeout=600
suite=bookworm-security work="" use_excl=1 list_only=0 tags=""
declare -a extra_skips=()
noprogress=300          # runtest --timeout: seconds without any progress message

die() { echo "run.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --mode) mode=${2:?}; shift 2 ;;
    --mode=*) mode=${1#*=}; shift ;;
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
case $mode in direct|ttlguard|mux) ;; *) die "--mode must be direct, ttlguard or mux (got '$mode')" ;; esac
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer"
[[ $unit_timeout =~ ^[1-9][0-9]*$ ]] || die "--unit-timeout must be a positive integer"

REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
TTLG_BIN=${TTLG_BIN:-$root/build/ttlguard}
cache=${TTLG_CACHE:-/var/cache/ttlguard}
ports=${TTLG_SUITE_PORTS:-21000-21999}
port_lo=${ports%-*} port_hi=${ports#*-}
[[ $port_lo =~ ^[0-9]+$ && $port_hi =~ ^[0-9]+$ && $port_lo -lt $port_hi ]] || die "TTLG_SUITE_PORTS must be LOW-HIGH"
slot_size=50            # ports per parallel job: see slot_ports
max_slots=$(( (port_hi - port_lo + 1) / slot_size ))
[ "$max_slots" -ge 1 ] || die "TTLG_SUITE_PORTS range is smaller than $slot_size ports"
[ "$jobs" -le "$max_slots" ] || { echo "run.sh: --jobs $jobs lowered to $max_slots (port range $ports)" >&2; jobs=$max_slots; }

for t in tclsh timeout flock awk; do command -v $t >/dev/null || die "$t is missing (apt-get install tcl coreutils util-linux gawk)"; done
[ -x "$REDIS_SERVER" ] || die "redis-server not found at $REDIS_SERVER (set REDIS_SERVER)"
if [ "$mode" != direct ]; then
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
[ -n "$all_units" ] || die "no all_tests list in $src/tests/test_helper.tcl"
if [ -n "$units_arg" ]; then
  units=$(tr ', ' '\n\n' <<<"$units_arg" | sed '/^$/d; s/\.tcl$//; s#^tests/##')
  while read -r u; do
    [ -f "$src/tests/$u.tcl" ] || die "no unit '$u' (no $src/tests/$u.tcl; --list shows them)"
  done <<<"$units"
else
  units=$all_units
fi
if [ "$list_only" = 1 ]; then echo "$units"; exit 0; fi

# ---- exclusions: "UNIT | REASON | TEST NAME" (TEST = * for the whole unit) -------------
excl_file=$here/exclusions
declare -A skip_args=()
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
  done <"$excl_file"
fi

# ---- work dir -------------------------------------------------------------------------
[ -n "$work" ] || work=$cache/redis-suite/$mode-$(date +%Y%m%d-%H%M%S)
mkdir -p "$work/units" || die "cannot create $work"
work=$(cd "$work" && pwd)
case $work/ in "$root"/*) die "--work must be outside the git tree ($root)" ;; esac
echo "run.sh: mode $mode, redis $srv_version ($REDIS_SERVER), suite $src, $(wc -l <<<"$units") units, $jobs jobs" >&2
[ "$mode" != direct ] && echo "run.sh: ttlguard $TTLG_BIN" >&2
echo "run.sh: logs in $work" >&2
printf '%s\n' "$units" >"$work/queue"
: >"$work/queue.lock"
: >"$work/out.lock"
: >"$work/pids"

# ---- processes: started here, stopped by pid ---------------------------------------------
stop_pid() {   # pid [grace seconds]
  local pid=$1 grace=${2:-10} i
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < grace * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
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
    kill -0 "$2" 2>/dev/null || return 1
    resp_ping "$1" && return 0
    sleep 0.1
  done
  return 1
}

# ---- one unit -----------------------------------------------------------------------
# Slot s owns ports [B, B+50), B = port_lo + 50*s:
#   B..B+7    redis, ttlguard, ttlguard admin (first free ones)
#   B+8..B+39 runtest's own test server (it takes the first free one of baseport-32..)
#   B+40..    runtest --baseport/--portcount (servers it would spawn; none in external mode)
run_unit() {
  local slot=$1 unit=$2
  local b=$((port_lo + slot * slot_size))
  local name=${unit//\//__}
  local udir=$work/units/$name
  rm -rf "$udir"; mkdir -p "$udir/data"
  local rport tport="" aport="" target rpid="" tpid="" rc note="" t0 t1

  t0=$(date +%s)
  rport=$(pick_port "$b" $((b + 8))) || { finish_unit "$unit" "$udir" setup "no free port in $b-$((b + 7))"; return; }
  "$REDIS_SERVER" --port "$rport" --bind 127.0.0.1 --dir "$udir/data" --daemonize no \
      --save '' --appendonly no --logfile "$udir/redis.log" \
      --enable-debug-command yes --enable-protected-configs yes --enable-module-command yes \
      </dev/null >"$udir/redis.stdout" 2>&1 &
  rpid=$!
  echo "$rpid" >>"$work/pids"
  if ! wait_ping "$rport" "$rpid" 15; then
    stop_pid "$rpid"
    finish_unit "$unit" "$udir" setup "redis-server did not come up on port $rport: $(tail -n 3 "$udir/redis.log" 2>/dev/null | tr '\n' ' ')"
    return
  fi
  target=$rport

  if [ "$mode" != direct ]; then
    tport=$(pick_port "$b" $((b + 8)) "$rport") && aport=$(pick_port "$b" $((b + 8)) "$rport" "$tport") \
      || { stop_pid "$rpid"; finish_unit "$unit" "$udir" setup "no free ports in $b-$((b + 7))"; return; }
    cat >"$udir/ttlguard.ini" <<EOF
[proxy]
listen = 127.0.0.1:$tport
backend = 127.0.0.1:$rport
events = $udir/events.jsonl
admin = 127.0.0.1:$aport
multiplex = $([ "$mode" = mux ] && echo on || echo off)

[default]
action = allow

; a prefix the suite never uses: ttlguard classifies every command, rewrites nothing
[ttl "ttlguard-suite-never:"]
ttl = 900
action = rewrite
EOF
    "$TTLG_BIN" --config "$udir/ttlguard.ini" </dev/null >"$udir/ttlguard.log" 2>&1 &
    tpid=$!
    echo "$tpid" >>"$work/pids"
    if ! wait_ping "$tport" "$tpid" 15; then
      stop_pid "$tpid"; stop_pid "$rpid"
      finish_unit "$unit" "$udir" setup "ttlguard did not come up on port $tport: $(tail -n 3 "$udir/ttlguard.log" | tr '\n' ' ')"
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
  [ -n "$tags" ] && args+=(--tags "$tags")
  local x
  for x in "${extra_skips[@]}"; do args+=(--skiptest "$x"); done
  if [ -n "${skip_args[$unit]:-}" ]; then
    local -a extra
    IFS=$'\x1f' read -r -a extra <<<"${skip_args[$unit]%$'\x1f'}"
    args+=("${extra[@]}")
  fi
  printf '%q ' ./runtest "${args[@]}" >"$udir/cmd"; echo >>"$udir/cmd"
  # timeout puts runtest and the test client it spawns in a process group of their own
  # and signals the whole group.
  (cd "$tree" && TERM=dumb exec timeout -k 20 "$unit_timeout" ./runtest "${args[@]}") \
    </dev/null >"$udir/runtest.log" 2>&1
  rc=$?

  if [ -n "$tpid" ]; then
    kill -0 "$tpid" 2>/dev/null || { wait "$tpid"; note+="ttlguard exited during the unit (status $?; see ttlguard.log). "; tpid=""; }
    stop_pid "$tpid" 10
  fi
  kill -0 "$rpid" 2>/dev/null || note+="redis-server exited during the unit (see redis.log). "
  stop_pid "$rpid" 10
  rm -rf "$tree" "$udir/data"
  t1=$(date +%s)
  echo "$((t1 - t0))" >"$udir/seconds"
  finish_unit "$unit" "$udir" "$rc" "$note"
}

# Parse runtest.log into udir/{counts,failed,details,results.tsv} and print the unit's lines.
finish_unit() {
  local unit=$1 udir=$2 rc=$3 note=${4:-}
  local log=$udir/runtest.log
  [ -f "$log" ] || : >"$log"
  awk -v unit="$unit" -v rc="$rc" -v note="$note" -v tmo="$unit_timeout" -v noprog="$noprogress" -v udir="$udir" '
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
      } else if (line ~ /^\[(skip|ignore)\]: /) {
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
      printf "%d %d %d\n", passed, failed, skipped > (udir "/counts")
      printf "%s", details > (udir "/details")
      if (reason != "") print reason > (udir "/reason")
      if (note != "") print note > (udir "/note")
    }' "$log"
  touch "$udir/results.tsv" "$udir/failed"
  # Where a unit hung or aborted: the last test the server saw (runtest logs each test
  # start to the server with DEBUG LOG).
  if [ -f "$udir/reason" ] && [ -f "$udir/redis.log" ]; then
    local last
    last=$(grep -a 'DEBUG LOG: ### Starting test' "$udir/redis.log" | tail -n 1 | sed 's/.*### Starting test //')
    [ -n "$last" ] && echo "last test started: $last" >>"$udir/reason"
  fi
  local p f s
  read -r p f s <"$udir/counts"
  {
    flock 9
    echo "$unit: $p passed, $f failed$([ "$s" -gt 0 ] && echo " ($s skipped)")"
    [ -f "$udir/reason" ] && sed 's/^/    ! /' "$udir/reason"
    [ -f "$udir/note" ] && sed 's/^/    ! /' "$udir/note"
    sed 's/^/    [err] /' "$udir/failed"
  } 9>>"$work/out.lock"
}

worker() {
  local slot=$1 unit
  while :; do
    unit=$(
      {
        flock 9
        u=$(head -n 1 "$work/queue")
        [ -n "$u" ] && sed -i 1d "$work/queue"
        echo "$u"
      } 9>>"$work/queue.lock"
    )
    [ -n "$unit" ] || break
    run_unit "$slot" "$unit"
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

# ---- summary --------------------------------------------------------------------------
tot_p=0 tot_f=0 tot_s=0
: >"$work/results.tsv"
{
  echo "mode $mode, redis $srv_version, suite $src, ${elapsed}s wall, $jobs jobs"
  while read -r u; do
    d=$work/units/${u//\//__}
    if [ -f "$d/counts" ]; then read -r p f s <"$d/counts"; else p=0 f=1 s=0; fi
    tot_p=$((tot_p + p)) tot_f=$((tot_f + f)) tot_s=$((tot_s + s))
    printf '%-45s %5d passed %4d failed %4d skipped %5ss\n' "$u" "$p" "$f" "$s" "$(cat "$d/seconds" 2>/dev/null || echo -)"
    cat "$d/results.tsv" >>"$work/results.tsv" 2>/dev/null
  done <<<"$units"
  echo "total: $tot_p passed, $tot_f failed, $tot_s skipped"
} >"$work/summary.txt"
# failures with their messages, one file
while read -r u; do
  d=$work/units/${u//\//__}
  if [ -s "$d/failed" ]; then
    echo "=== $u"
    [ -f "$d/reason" ] && sed 's/^/! /' "$d/reason"
    [ -f "$d/note" ] && sed 's/^/! /' "$d/note"
    cat "$d/details"
  fi
done <<<"$units" >"$work/failures.txt"

echo "run.sh: mode $mode finished in ${elapsed}s; $tot_s skipped; summary $work/summary.txt, failures $work/failures.txt, per unit $work/units/" >&2
echo "$tot_p passed, $tot_f failed"
[ "$tot_f" -eq 0 ]
