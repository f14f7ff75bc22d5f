#!/usr/bin/env bash
# Checks of the deployment kit (docs/deploy.md): the Kubernetes sidecar example, the
# systemd unit, the Prometheus rules, the Grafana dashboard, the man pages and the
# CMake install. From the repo root, with a built ttlguard:
#
#   TTLG_BIN=build/ttlguard bash tests/deploy/run.sh
#
# Installs what it needs when missing (Debian 12: yamllint python3-yaml prometheus
# mandoc systemd strace redis-server), then prints one line per check, "ok" or "FAIL"
# (with what failed below it), and last "N passed, M failed". Exit 1 on any failure.
# Servers it starts (redis-server, ttlguard) listen on 127.0.0.1, ports 7800-7899,
# and are stopped by PID. The install check re-runs cmake's configure step on the
# build directory of TTLG_BIN when its install script predates CMakeLists.txt.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

BIN=${TTLG_BIN:-build/ttlguard}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
export TTLG_BIN=$BIN
PY=/usr/bin/python3                     # Debian's, where python3-yaml lives
T=tests/deploy/test_deploy.py

# ---- packages ------------------------------------------------------------------
# promtool comes with Debian's prometheus package. On a host run by systemd its
# postinst starts prometheus.service (Debian's default); in a container without an
# init system (or with a policy-rc.d that says no) it starts nothing.
packages=(yamllint python3-yaml prometheus mandoc systemd strace redis-server cmake)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    for p in "${missing[@]}"; do
        if ! apt-cache policy "$p" 2>/dev/null | grep -q "Candidate: [^(]"; then
            echo "== $p unknown to apt: apt-get update"
            $sudo apt-get update -qq
            break
        fi
    done
    echo "== installing: ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
            -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null; then
        echo "apt-get install ${missing[*]} failed" >&2
        exit 1
    fi
fi
if [ ! -x "$BIN" ]; then
    echo "TTLG_BIN=$BIN: no such executable (build first: cmake --build build)" >&2
    exit 1
fi

# ---- harness -------------------------------------------------------------------
tmp=$(mktemp -d /tmp/ttlguard-deploy.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# check NAME COMMAND...: runs COMMAND; "ok NAME: <its last line>" or "FAIL NAME" and
# its output, indented.
check() {
    local name=$1; shift
    local out="$tmp/out.$passed.$failed" rc
    "$@" >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        printf 'ok   %-28s %s\n' "$name" "$(grep -v '^[[:space:]]*$' "$out" | tail -n 1 | sed 's/^ *//')"
    else
        failed=$((failed + 1))
        printf 'FAIL %-28s (exit %d)\n' "$name" "$rc"
        head -n 60 "$out" | sed 's/^/       /'
    fi
}

# ---- the checks ----------------------------------------------------------------
yaml_strict='{extends: default}'
yaml_tests='{extends: default, rules: {line-length: {max: 150}}}'

lint_yaml() {
    yamllint -s -d "$yaml_strict" docker/k8s-sidecar.yaml config/prometheus-rules.yml &&
    yamllint -s -d "$yaml_tests" config/prometheus-rules.test.yml &&
    echo "yamllint -s: docker/k8s-sidecar.yaml, config/prometheus-rules{,.test}.yml clean"
}

builddir=$(dirname "$BIN")
prefix=$tmp/prefix
install_prefix() {
    if [ ! -f "$builddir/CMakeCache.txt" ]; then
        echo "$builddir (from TTLG_BIN) is not a CMake build directory"
        return 1
    fi
    if ! grep -q 'ttlguard.ini.5' "$builddir/cmake_install.cmake" 2>/dev/null ||
       [ CMakeLists.txt -nt "$builddir/cmake_install.cmake" ]; then
        cmake -S . -B "$builddir" >/dev/null || return 1
    fi
    cmake --install "$builddir" --prefix "$prefix" >/dev/null &&
    $PY $T install "$prefix"
}

# The unit as cmake --install puts it in /usr/local, in a scratch root that has the
# installed binary and man pages, systemd's own units (the targets it names) and
# /bin/kill (ExecReload): verify checks every Exec path and Documentation= page there.
root=$tmp/root
stage_root() {
    [ -d "$root/usr/local/bin" ] && return 0
    DESTDIR=$root cmake --install "$builddir" --prefix /usr/local >/dev/null || return 1
    mkdir -p "$root/usr/lib/systemd" "$root/usr/bin" &&
    cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/" &&
    cp -L /bin/kill "$root/usr/bin/kill" &&
    ln -s usr/bin "$root/bin"
}
verify_unit() {
    stage_root || return 1
    local unit=$root/usr/local/lib/systemd/system/ttlguard.service out rc
    if ! cmp config/ttlguard.service "$unit"; then
        echo "the installed unit differs from config/ttlguard.service"
        return 1
    fi
    out=$(MANPATH=$root/usr/local/share/man systemd-analyze verify --root="$root" \
          /usr/local/lib/systemd/system/ttlguard.service 2>&1)
    rc=$?
    # verify exits 0 on directives it ignores ("Unknown key", "Failed to parse"):
    # any output at all is a failure.
    if [ $rc -ne 0 ] || [ -n "$out" ]; then
        echo "systemd-analyze verify (exit $rc):"
        echo "$out"
        return 1
    fi
    echo "systemd-analyze verify: silent, exit 0 (Exec* /usr/local/bin/ttlguard, man pages, targets)"
}
security_unit() {
    stage_root || return 1
    local out rc score
    out=$(systemd-analyze security --offline=yes --root="$root" --threshold=20 \
          ttlguard.service 2>&1)
    rc=$?
    score=$(grep -o 'Overall exposure level for ttlguard.service: .*' <<<"$out" | sed 's/ *$//')
    if [ $rc -ne 0 ] || [ -z "$score" ]; then
        echo "$out" | grep -E '✗|Overall' | head -n 30
        echo "systemd-analyze security: exit $rc (threshold 2.0)"
        return 1
    fi
    echo "${score#Overall } (threshold 2.0)"
}

rules_check() {
    promtool check rules config/prometheus-rules.yml &&
    echo "promtool check rules: $(promtool check rules config/prometheus-rules.yml 2>&1 | grep -o 'SUCCESS.*')"
}
rules_test() {
    (cd config && promtool test rules prometheus-rules.test.yml) &&
    echo "promtool test rules: $(grep -c 'alertname:' config/prometheus-rules.test.yml) alert cases pass"
}

metrics=$tmp/metrics.txt
metrics_lint() {
    if [ ! -s "$metrics" ]; then
        echo "no live /metrics output (the live check failed)"
        return 1
    fi
    local out rc
    out=$(promtool check metrics <"$metrics" 2>&1)
    rc=$?
    # promtool exits 0 on lint findings too: any output is a finding.
    if [ $rc -ne 0 ] || [ -n "$out" ]; then
        echo "promtool check metrics (exit $rc):"
        echo "$out"
        return 1
    fi
    echo "promtool check metrics: no findings on $(grep -c '^# TYPE' "$metrics") live families"
}

# mandoc -T lint at every level (style included), with both pages on MANPATH so
# that their Xr references resolve. mandoc's notes about its own outdated
# whatis database ("outdated mandoc.db lacks ... entry") are not lint messages.
mandir=$tmp/man
man_lint() {
    local page=$1 out rc
    mkdir -p "$mandir/man1" "$mandir/man5"
    cp docs/man/ttlguard.1 "$mandir/man1/" && cp docs/man/ttlguard.ini.5 "$mandir/man5/"
    out=$(MANPATH=$mandir:/usr/share/man mandoc -T lint -W style "$page" 2>&1)
    rc=$?
    out=$(grep -v 'outdated mandoc.db' <<<"$out")
    if [ $rc -ne 0 ] || [ -n "$out" ]; then
        echo "mandoc -T lint -W style $page (exit $rc):"
        echo "$out"
        return 1
    fi
    echo "mandoc -T lint -W style: no messages"
}

check "yamllint"                   lint_yaml
check "k8s manifest"               $PY $T k8s
check "k8s probes on live ini"     $PY $T k8s-live
check "systemd unit directives"    $PY $T unit
check "cmake --install"            install_prefix
check "systemd-analyze verify"     verify_unit
check "systemd-analyze security"   security_unit
check "sandbox under strace"       $PY $T sandbox
check "promtool check rules"       rules_check
check "promtool test rules"        rules_test
check "rules use documented metrics" $PY $T rules-metrics
check "live /metrics"              $PY $T live "$metrics"
check "promtool check metrics"     metrics_lint
check "grafana dashboard"          $PY $T grafana "$metrics"
check "mandoc lint ttlguard.1"     man_lint docs/man/ttlguard.1
check "mandoc lint ttlguard.ini.5" man_lint docs/man/ttlguard.ini.5
check "man pages cover options"    $PY $T man-coverage

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
