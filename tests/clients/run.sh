#!/bin/bash
# Client compatibility check for ttlguard: ioredis, node-redis and python3-redis,
# each with its own connect sequence, against ttlguard and straight against Redis,
# standalone and Redis Cluster. See README.md in this directory.
#
#   tests/clients/run.sh            (TTLG_BIN=... to test another binary)
#
# Installs what is missing (Debian packages nodejs, npm, python3-redis,
# python3-pytest, redis-server; then `npm ci` here, skipped while node_modules matches the lock),
# then runs runner.py: one line per check, `N passed, M failed` last, exit 1 on
# any failure.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

say() { echo "   # $*"; }

apt_updated=
apt_install() {
    if [ -z "$apt_updated" ]; then
        timeout 300 apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need=()
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
/usr/bin/python3 -c 'import redis.cluster' >/dev/null 2>&1 || need+=(python3-redis)
# (runner.py makes its TLS certificates with tests/integration/tls_util.py, which imports pytest)
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need+=(python3-pytest)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]} (apt)"
    apt_install "${need[@]}"
fi

# node-redis 5 needs Node.js >= 18.19 (Debian 12 has 18.20)
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 18 || (a === 18 && b >= 19) ? 0 : 1)'; then
    echo "FAIL  setup  node $(node --version) is older than 18.19 (node-redis 5 needs 18.19+)"
    echo "0 passed, 1 failed"
    exit 1
fi

# npm ci, unless node_modules was installed from this very lock by this node major.
stamp_want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)-node$(node -p 'process.versions.node.split(".")[0]')
stamp=node_modules/.ttlguard-clients-stamp
(
    # one install at a time in this tree (other runs wait, bounded)
    flock -w 600 9
    if [ "$(cat "$stamp" 2>/dev/null)" != "$stamp_want" ] || [ ! -d node_modules/ioredis ] || [ ! -d node_modules/redis ]; then
        say "npm ci ($(npm --version))"
        timeout 600 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
        echo "$stamp_want" > "$stamp"
    fi
) 9>"/tmp/ttlguard-clients-npm.$(echo "$here" | sha256sum | cut -c1-12).lock"

exec timeout --kill-after=10 300 /usr/bin/python3 "$here/runner.py"
