#!/usr/bin/env bash
# The whole test suite: installs what it needs (Debian 12, as root or with sudo),
# builds, runs the criterion unit tests and the integration suite against real
# redis-server processes (the harness starts them on free loopback ports) in
# both connection modes, then the integration suite once more per other
# server ttlguard supports -- Redis 8.0, Redis 8.6, Valkey 8.1 and Valkey 9.1, built and
# cached by tests/servers.sh (release build, shared connections, about 6
# minutes each; a server that cannot be fetched or built fails the run; every
# server is built with TLS, so the TLS tests run against each); those
# integration passes run two at a time (integration_start), then Redis's
# own test suite directly and through ttlguard in both connection modes,
# compared unit by unit, and its units of one slot in cluster mode through
# ttlguard's cluster = route in front of a 3-primary cluster, compared with a
# 1-node cluster (tests/redis-suite/run.sh --compare-direct), then real
# client libraries (tests/clients/run.sh: ioredis, node-redis, python3-redis,
# standalone and cluster), then faults under load (tests/chaos/chaos.py, 30 s
# per connection mode), then the deployment kit checked by its own tools
# (tests/deploy/run.sh), then the libFuzzer harnesses over their seed corpora
# and 10 s of fuzzing each (clang), then the unit and integration tests again
# with an ASan+UBSan build. The integration suite includes TLS (test_tls.py, a CA made
# by the test) and Redis Cluster (test_cluster.py, 6-node clusters it starts).
# Every step that runs tests fails when it ran none, and the summary prints
# how many each step ran.
#
#   tests/run.sh               everything
#   tests/run.sh --no-asan     skip the sanitizer pass
#   tests/run.sh --no-suite    skip Redis's own suite
#   tests/run.sh -k EXPR       pass -k EXPR to pytest (both passes)
set -euo pipefail
cd "$(dirname "$0")/.."

asan=1
suite=1
pytest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --no-asan) asan=0 ;;
    --no-suite) suite=0 ;;
    -k) pytest_args+=(-k "$2"); shift ;;
    *) echo "usage: tests/run.sh [--no-asan] [--no-suite] [-k EXPR]" >&2; exit 2 ;;
    esac
    shift
done

packages=(build-essential cmake pkg-config libuv1-dev libhiredis-dev libinih-dev
          libhttp-parser-dev libssl-dev openssl libcriterion-dev redis-server redis-tools python3-redis
          python3-pytest python3-pytest-timeout tcl dpkg-dev chromium python3-pil
          clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# What was installed above is required from here on: the HTML tests fail,
# not skip, without chromium.
export TTLG_CHROMIUM=installed

# Debian starts redis-server as a service on install; the tests use their own.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true

jobs=$(nproc)
failed=0
summary=()

# pytest's skips by reason, from its -rs lines in $1: "  N× reason" each,
# most first ("SKIPPED [3] tests/x.py:12: why" -> 3 for "why").
pytest_skips() {
    sed -n -E 's/^SKIPPED \[([0-9]+)\] [^:]+:[0-9]+: (.*)$/\1\t\2/p' "$1" |
        awk -F'\t' '{ n[$2] += $1 } END { for (r in n) printf "%d\t%s\n", n[r], r }' |
        sort -rn | awk -F'\t' '{ printf "      %d skipped: %s\n", $1, substr($2, 1, 150) }'
}

# pytest's closing counts ("2742 passed, 9 skipped") from its output in $1;
# empty when it printed none.
pytest_counts() {
    { grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$1" || true; } | tail -n 1 |
        sed -E 's/^=+ //; s/ in [0-9.]+s.*//'
}

# One step of tests: its output is shown and kept; the step fails when the
# command fails or when it ran no test. The summary line gets the counts.
# step LABEL KIND COMMAND...   (KIND: pytest, ctest, or plain: a closing
# "N passed, M failed" line)
step() {
    local label=$1 kind=$2 out counts skips="" rc=0 t0=${step_t0:-$SECONDS}
    shift 2
    out=$(mktemp)
    # pipefail (set above): the status is the command's unless tee failed.
    if "$@" 2>&1 | tee "$out"; then rc=0; else rc=$?; fi
    case "$kind" in
    ctest) counts=$({ grep -E 'tests passed, [0-9]+ tests failed' "$out" || true; } | tail -n 1) ;;
    plain) counts=$({ grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" || true; } | tail -n 1) ;;
    *) counts=$(pytest_counts "$out"); skips=$(pytest_skips "$out") ;;
    esac
    case "$counts" in
    "0 passed"* | "0% tests passed"* | "") [ "$rc" -ne 0 ] || counts="" ;;
    esac
    rm -f "$out"
    if [ "$rc" -eq 0 ] && [ -z "$counts" ]; then
        rc=1; counts="ran no test"
    fi
    if [ "$rc" -ne 0 ]; then
        failed=1; summary+=("$label: FAILED (${counts:-exit $rc}, $((SECONDS - t0)) s)")
    else
        summary+=("$label: ok ($counts, $((SECONDS - t0)) s)")
    fi
    [ -z "$skips" ] || summary+=("$skips")
}

# A step whose command ran in the background: its output (file $1) and status ($2).
replay() {
    cat "$1"
    return "$2"
}

# The integration tests, started in the background under a label, with
# environment settings: a backend connection per client
# (TTLG_PROXY_CONF=multiplex=off; the default shares them), or another server
# (TTLG_REDIS_SERVER: the harness starts it instead of redis-server).
# integration_start NAME DIR LABEL [--ignore=FILE ...] [VAR=VALUE ...].
# integration_wait waits for those started, each a step with its output.
# Two passes run at once: a pass mostly waits (on servers, timeouts, its own
# sleeps), so two take about the time of one on 2 cores; each starts its
# servers and proxies on ports of its own (harness.free_port(),
# cluster_util.reserve_port_range()).
bg_pids=()
bg_logs=()
bg_labels=()
bg_t0=()
integration_start() {
    local name=$1 dir=$2 label=$3 ignore=() log
    shift 3
    while [ $# -gt 0 ] && [[ $1 == --ignore=* ]]; do ignore+=("$1"); shift; done
    log=$(mktemp)
    echo "== [$name] integration tests, $label: started"
    env "$@" TTLG_BIN="$PWD/$dir/ttlguard" /usr/bin/python3 -m pytest -q -rs tests/integration \
        "${ignore[@]}" "${pytest_args[@]}" >"$log" 2>&1 &
    bg_pids+=("$!")
    bg_logs+=("$log")
    bg_labels+=("$name integration ($label)")
    bg_t0+=("$SECONDS")
}

integration_wait() {
    local i rc
    for i in "${!bg_pids[@]}"; do
        rc=0
        wait "${bg_pids[$i]}" || rc=$?
        echo "== ${bg_labels[$i]}"
        step_t0=${bg_t0[$i]} step "${bg_labels[$i]}" pytest replay "${bg_logs[$i]}" "$rc"
        rm -f "${bg_logs[$i]}"
    done
    bg_pids=()
    bg_logs=()
    bg_labels=()
    bg_t0=()
}

# Build DIR with the cmake options given and run the unit tests.
build_pass() {
    local name=$1 dir=$2; shift 2
    echo "== [$name] build ($dir)"
    # TTLG_TESTS=ON whatever an earlier configure of $dir said (the README's
    # run command configures build/ without the unit tests).
    cmake -S . -B "$dir" -DTTLG_TESTS=ON "$@" >/dev/null
    cmake --build "$dir" -j "$jobs" >/dev/null
    echo "== [$name] unit tests"
    step "$name unit" ctest ctest --test-dir "$dir" --output-on-failure --no-tests=error
}

redis7=$(redis-server --version | sed -E 's/.* v=([0-9.]+).*/Redis \1/')

# What the other servers' passes leave out: the proxy's own output (its event
# log, /metrics, the HTML report) and its own memory bounds, the same whatever
# server it fronts, and tested against Redis 7.0 in both connection modes and
# with sanitizers.
server_independent=(--ignore=tests/integration/test_events.py
                    --ignore=tests/integration/test_metrics.py
                    --ignore=tests/integration/test_html.py
                    --ignore=tests/integration/test_bounded.py)

# Redis 7.0 in both connection modes at once. test_difffuzz.py fuzzes 30 s
# per mode in the shared pass, 10 s per mode in every other (the 1:1 pass
# only the 1:1 modes); test_auth.py sets multiplex itself, in both modes: the
# shared pass runs it.
build_pass release build -DCMAKE_BUILD_TYPE=RelWithDebInfo
integration_start release build "$redis7"
integration_start release build "$redis7, 1:1" --ignore=tests/integration/test_auth.py \
    TTLG_PROXY_CONF=multiplex=off TTLG_DIFFFUZZ_SECONDS=10
integration_wait
# servers.sh prints "NAME VERSION PATH" per server it has; a server it cannot
# fetch or build makes it exit 1, and the run fails (the others still run).
other_servers=(redis-8.0 redis-8.6 valkey-8.1 valkey-9.1)
echo "== [servers] tests/servers.sh ${other_servers[*]}"
servers_rc=0
t0=$SECONDS
servers=$(bash tests/servers.sh "${other_servers[@]}") || servers_rc=$?
echo "== [servers] ready in $((SECONDS - t0)) s"
mapfile -t server_lines < <(grep . <<<"$servers" || true)
for line in "${server_lines[@]}"; do
    read -r server version path <<<"$line"
    integration_start release build "$server $version" "${server_independent[@]}" \
        TTLG_REDIS_SERVER="$path" TTLG_DIFFFUZZ_SECONDS=10
    [ "${#bg_pids[@]}" -lt 2 ] || integration_wait
done
integration_wait
if [ "$servers_rc" -ne 0 ] || [ "${#server_lines[@]}" -ne "${#other_servers[@]}" ]; then
    echo "== [servers] tests/servers.sh failed (exit $servers_rc): not every server could be fetched or built" >&2
    failed=1
    summary+=("servers (tests/servers.sh): FAILED (exit $servers_rc), ${#server_lines[@]} of ${#other_servers[@]} servers tested")
fi
# Redis's own suite straight against redis-server and through ttlguard in both
# connection modes, and (runtest --cluster-mode, the units of
# tests/redis-suite/units-route) through cluster = route in front of a
# 3-primary cluster and against a 1-node cluster, all in one pool (its units
# mostly wait, so twice as many jobs as cores): a unit in which ttlguard exited
# or crashed fails, and so does one that passed fewer tests through ttlguard
# than directly, and a test that passes on the 1-node cluster and not through
# route unless tests/redis-suite/exclusions-route names it; the excluded tests
# must fail directly too, the route exclusions through route.
if [ "$suite" -eq 1 ]; then
    echo "== [redis suite] Redis's own tests: directly, through ttlguard (1:1, shared, cluster = route), compared"
    step "redis suite (direct, 1:1, shared, route)" plain env TTLG_BIN="$PWD/build/ttlguard" \
        bash tests/redis-suite/run.sh --mode ttlguard,mux,route --compare-direct --jobs "$((2 * jobs))"
fi
# The deployment kit (docker/k8s-sidecar.yaml, config/ttlguard.service,
# Prometheus rules, Grafana dashboard, man pages), each checked by its own
# tool (yamllint, systemd-analyze, promtool, mandoc) and against a live
# ttlguard: tests/deploy/run.sh installs what it needs.
# Real client libraries (npm's ioredis and node-redis, Debian's python3-redis),
# standalone and cluster, each with its own connect sequence, compared with
# the same script straight against Redis: tests/clients/run.sh.
echo "== [clients] tests/clients/run.sh"
step "client libraries" plain env TTLG_BIN="$PWD/build/ttlguard" bash tests/clients/run.sh
# Faults and load at once (tests/chaos/chaos.py): the backend killed, paused,
# dropping clients, out of memory, clients vanishing mid-request, with
# redis-benchmark and checking clients through ttlguard, 30 s per connection
# mode: no reply to the wrong client, no hang, ttlguard alive, descriptors and
# RSS back near their baseline.
echo "== [chaos] tests/chaos/chaos.py --seconds 30"
t0=$SECONDS
if TTLG_BIN="$PWD/build/ttlguard" /usr/bin/python3 tests/chaos/chaos.py --seconds 30; then
    summary+=("chaos: ok ($((SECONDS - t0)) s)")
else
    failed=1; summary+=("chaos: FAILED ($((SECONDS - t0)) s)")
fi
echo "== [deploy] tests/deploy/run.sh"
step "deploy kit" plain env TTLG_BIN="$PWD/build/ttlguard" bash tests/deploy/run.sh
# The libFuzzer harnesses (tests/fuzz/, built with clang): each replays its
# seed corpus (tests/fuzz/corpus/NAME) and fuzzes for 10 s, so a harness that
# no longer builds or a seed that crashes fails the run. The long campaigns
# are run by hand (docs/reliability.md).
echo "== [fuzz] tests/fuzz: seed corpora and 10 s each"
t0=$SECONDS
fuzz_ok=1
if CC=clang cmake -S . -B build-fuzz -DTTLG_FUZZ=ON -DTTLG_TESTS=OFF >/dev/null &&
   cmake --build build-fuzz -j "$jobs" --target fuzz_request fuzz_reply fuzz_policy fuzz_config fuzz_admin \
       fuzz_report >/dev/null; then
    for f in request reply policy config report admin; do
        work=$(mktemp -d)
        if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 build-fuzz/fuzz_$f "$work" -timeout=25 \
                tests/fuzz/corpus/$f -max_total_time=10 -artifact_prefix="$work/" \
                >"$work/log" 2>&1; then
            tail -n 40 "$work/log"; fuzz_ok=0
        fi
        rm -rf "$work"
    done
else
    fuzz_ok=0
fi
if [ "$fuzz_ok" -eq 1 ]; then
    summary+=("fuzz harnesses: ok ($((SECONDS - t0)) s)")
else
    failed=1; summary+=("fuzz harnesses: FAILED ($((SECONDS - t0)) s)")
fi
if [ "$asan" -eq 1 ]; then
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export TTLG_SANITIZED=1 TTLG_DIFFFUZZ_SECONDS=10
    build_pass asan build-asan -DCMAKE_BUILD_TYPE=Debug -DTTLG_SANITIZE=ON
    integration_start asan build-asan "$redis7"
    integration_wait
fi

echo
printf '%s\n' "${summary[@]}"
echo "took $((SECONDS / 60)) min $((SECONDS % 60)) s"
exit $failed
