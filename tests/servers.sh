#!/usr/bin/env bash
# servers.sh [NAME ...]
#
# Build (once) and print the servers ttlguard is tested against, one line per
# server: "NAME VERSION PATH". NAME is one of
#
#   redis-7.0     Debian 12's /usr/bin/redis-server (installed, not built)
#   redis-8.0     Debian unstable's source package redis
#   valkey-8.1    Debian 13 (trixie)'s source package valkey
#   valkey-9.1    Debian unstable's source package valkey
#   redis-8.6     Debian experimental's source package redis
#
# Without NAME: all of them. Sources come from tests/debsrc.sh (the machine's apt
# configuration untouched); binaries are built with
# `make MALLOC=libc BUILD_WITH_MODULES=no BUILD_TLS=yes` (TLS, so the TLS tests run
# against every server) and cached under ${TTLG_CACHE:-/var/cache/ttlguard}/servers/NAME/,
# outside the tree, reused across runs while the build flags are the same (the
# flags are kept beside the binary; delete that directory to build again). A server that cannot be fetched or
# built is an error: this prints nothing for it and exits 1.
#
# A Debian suite moves on: when its package is a newer release than NAME's series
# (unstable's redis at 8.2 rather than 8.0, say), that release is built and tested
# in its place, with a note on stderr, rather than failing the run. ttlguard's
# command table is verified up to the series above; a newer release is protected
# by the rule option `unknown = protect` (docs/config.md) until the table catches
# up. An older release than the series is still an error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TTLG_CACHE:-/var/cache/ttlguard}

die() { echo "servers.sh: $*" >&2; exit 1; }
log() { echo "servers.sh: $*" >&2; }

ALL=(redis-7.0 redis-8.0 valkey-8.1 valkey-9.1 redis-8.6)
MAKE_FLAGS="MALLOC=libc BUILD_WITH_MODULES=no BUILD_TLS=yes"

# NAME -> "SUITE PACKAGE BINARY" for the built ones.
source_of() {
  case "$1" in
    redis-8.0) echo "unstable redis redis-server" ;;
    valkey-8.1) echo "trixie valkey valkey-server" ;;
    valkey-9.1) echo "unstable valkey valkey-server" ;;
    redis-8.6) echo "experimental redis redis-server" ;;
    *) return 1 ;;
  esac
}

version_of() {
  "$1" --version | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p'
}

# The version must be NAME's series or a newer one (the suite moved on: said,
# and tested); an older one is a server nobody asked for.
check_series() {
  local name=$1 version=$2 series=${1#*-}
  case "$version" in
    "$series" | "$series".*) return ;;
  esac
  local newest
  newest=$(printf '%s\n%s\n' "$series" "$version" | sort -V | tail -n 1)
  [ "$newest" = "$version" ] || die "$name: the source package built version $version, older than $series.x"
  log "$name: the suite moved on to $version; testing it in place of $series.x (a release newer than the verified table is covered by unknown = protect)"
}

# A binary built with the current flags is there.
cached() {
  [ -x "$1/$2" ] && [ "$(cat "$1/make-flags" 2>/dev/null)" = "$MAKE_FLAGS" ]
}

build_one() {
  local name=$1 suite pkg bin src dest
  read -r suite pkg bin <<<"$(source_of "$name")"
  dest=$cache/servers/$name
  if cached "$dest" "$bin"; then echo "$dest/$bin"; return; fi
  mkdir -p "$cache/servers"
  exec 8>"$cache/servers/.$name.lock"
  flock -w 1800 8 || die "timed out waiting for another build of $name"
  if cached "$dest" "$bin"; then echo "$dest/$bin"; return; fi
  src=$(bash "$root/tests/debsrc.sh" "$suite" "$pkg") || die "could not fetch $pkg from $suite"
  log "building $name from $src (about two minutes)"
  local tmp
  tmp=$(mktemp -d "$cache/servers/.$name.XXXXXX")
  # Build in a copy: the unpacked source stays pristine for other uses.
  cp -a "$src/." "$tmp/src"
  # shellcheck disable=SC2086 # MAKE_FLAGS is a list of words
  if ! (cd "$tmp/src" && make -j "$(nproc)" $MAKE_FLAGS "$bin" >"$tmp/build.log" 2>&1); then
    tail -n 30 "$tmp/build.log" >&2
    rm -rf "$tmp"
    die "building $name failed"
  fi
  mkdir -p "$tmp/out"
  cp "$tmp/src/src/$bin" "$tmp/out/$bin"
  rm -rf "$tmp/src"
  mv "$tmp/build.log" "$tmp/out/"
  echo "$MAKE_FLAGS" >"$tmp/out/make-flags"
  rm -rf "$dest"
  mv "$tmp/out" "$dest"
  rmdir "$tmp"
  exec 8>&-
  echo "$dest/$bin"
}

[ $# -gt 0 ] || set -- "${ALL[@]}"
for name in "$@"; do
  case "$name" in
    redis-7.0)
      path=/usr/bin/redis-server
      [ -x "$path" ] || die "redis-7.0: $path is missing (apt-get install redis-server)"
      ;;
    redis-8.0 | valkey-8.1 | valkey-9.1 | redis-8.6)
      command -v make >/dev/null && command -v cc >/dev/null || die "$name: needs make and a C compiler"
      path=$(build_one "$name")
      ;;
    *) die "unknown server '$name' (one of: ${ALL[*]})" ;;
  esac
  version=$(version_of "$path")
  [ -n "$version" ] || die "$name: cannot read the version of $path"
  check_series "$name" "$version"
  echo "$name $version $path"
done
