#!/usr/bin/env bash
# debsrc.sh SUITE PACKAGE
#
# Fetch and unpack the Debian source package PACKAGE from SUITE (bookworm-security,
# trixie, unstable, ...) and print the unpacked source directory on stdout.
#
# The machine's apt configuration is left untouched: apt runs with a private sources
# list holding one deb-src line, private list and cache directories
# (-o Dir::Etc::SourceList=FILE -o Dir::Etc::SourceParts=/dev/null
#  -o Dir::State::Lists=DIR ...). The archive URI is taken from the machine's own apt
# sources: for a *-security suite the URI of the security archive it already uses,
# otherwise the URI of its main archive (the entry for the release it runs).
#
# Result: ${TTLG_CACHE:-/var/cache/ttlguard}/src/PACKAGE-SUITE/<source-dir>, reused
# when present (delete that directory to fetch again). Progress goes to stderr.
# Needs root (or write access to the cache) and dpkg-dev (installed when missing).
set -euo pipefail

die() { echo "debsrc.sh: $*" >&2; exit 1; }
log() { echo "debsrc.sh: $*" >&2; }

[ $# -eq 2 ] || die "usage: debsrc.sh SUITE PACKAGE   (e.g. debsrc.sh bookworm-security redis)"
suite=$1 pkg=$2
[[ $suite =~ ^[A-Za-z0-9][A-Za-z0-9._/-]*$ ]] || die "bad suite name '$suite'"
[[ $pkg =~ ^[a-z0-9][a-z0-9.+-]*$ ]] || die "bad package name '$pkg'"

cache=${TTLG_CACHE:-/var/cache/ttlguard}
sname=${suite//\//_}
dest=$cache/src/$pkg-$sname
aptdir=$cache/apt/$sname

# ---- reuse --------------------------------------------------------------------------
cached_dir() {
  local d
  [ -f "$dest/.debsrc-dir" ] || return 1
  d=$(cat "$dest/.debsrc-dir")
  [ -n "$d" ] && [ -d "$dest/$d" ] || return 1
  echo "$dest/$d"
}
if out=$(cached_dir); then echo "$out"; exit 0; fi

mkdir -p "$cache/src" "$aptdir" || die "cannot create $cache (set TTLG_CACHE to a writable directory)"
# One fetch at a time per PACKAGE-SUITE.
exec 9>"$cache/src/.$pkg-$sname.lock"
flock -w 900 9 || die "timed out waiting for another debsrc.sh fetching $pkg from $suite"
if out=$(cached_dir); then echo "$out"; exit 0; fi

# ---- tools --------------------------------------------------------------------------
command -v apt-get >/dev/null || die "apt-get not found: this needs a Debian-like system"
if ! command -v dpkg-source >/dev/null; then
  [ "$(id -u)" -eq 0 ] || die "dpkg-source is missing (apt-get install dpkg-dev, as root)"
  log "installing dpkg-dev"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends dpkg-dev >&2; then
    apt-get update -q >&2 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends dpkg-dev >&2 \
      || die "could not install dpkg-dev"
  fi
fi

# ---- archive URI from the machine's apt sources -------------------------------------
# Emits "URI<TAB>SUITE<TAB>SIGNED-BY" for every enabled deb/deb-src entry, in the order
# apt reads them: sources.list, then sources.list.d/*.list and *.sources.
list_entries() {
  local f files=()
  [ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
  for f in /etc/apt/sources.list.d/*.list; do [ -f "$f" ] && files+=("$f"); done
  for f in "${files[@]}"; do
    awk '
      { sub(/#.*/, "") }
      $1 == "deb" || $1 == "deb-src" {
        i = 2; sb = ""
        if ($2 ~ /^\[/) {           # [ options ]
          opts = ""
          for (; i <= NF; i++) { opts = opts " " $i; if ($i ~ /\]$/) { i++; break } }
          if (match(opts, /signed-by=[^] ]+/)) sb = substr(opts, RSTART + 10, RLENGTH - 10)
        }
        if (i + 1 <= NF) printf "%s\t%s\t%s\n", $i, $(i + 1), sb
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      function flush(   n, m, a, b, j, k) {
        if (types ~ /(^| )deb(-src)?( |$)/ && tolower(enabled) != "no") {
          n = split(uris, a, /[ \t]+/); m = split(suites, b, /[ \t]+/)
          for (j = 1; j <= n; j++) for (k = 1; k <= m; k++)
            if (a[j] != "" && b[k] != "") printf "%s\t%s\t%s\n", a[j], b[k], sb
        }
        types = uris = suites = sb = enabled = ""; last = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/   { if (last == "signed-by") sb = ""; next }   # inline key block: not a path
      {
        key = tolower(substr($0, 1, index($0, ":") - 1)); val = substr($0, index($0, ":") + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", val); last = key
        if (key == "types") types = val; else if (key == "uris") uris = val
        else if (key == "suites") suites = val; else if (key == "enabled") enabled = val
        else if (key == "signed-by") sb = (val ~ /^\//) ? val : ""
      }
      END { flush() }' "$f"
  done
}

entries=$(list_entries | awk -F'\t' '$1 ~ /^(https?|ftp|file|mirror[+a-z]*|tor[+a-z]*):/' || true)
[ -n "$entries" ] || die "no usable deb/deb-src entry in /etc/apt/sources.list or /etc/apt/sources.list.d/*.{list,sources}"
codename=$( (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || true)

pick() { awk -F'\t' -v want="$1" '$2 == want { print; exit }' <<<"$entries"; }
entry=$(pick "$suite")                        # the machine already knows this suite
if [ -z "$entry" ]; then
  if [[ $suite == *-security || $suite == */updates ]]; then
    entry=$(awk -F'\t' '$2 ~ /-security$|\/updates$/ { print; exit }' <<<"$entries")
    [ -n "$entry" ] || die "no security archive in the machine's apt sources (no *-security suite) to fetch $suite from"
  else
    [ -n "$codename" ] && entry=$(pick "$codename")
    [ -n "$entry" ] || entry=$(awk -F'\t' '$2 !~ /-(security|updates|backports|proposed-updates)$|\/updates$/ { print; exit }' <<<"$entries")
    [ -n "$entry" ] || die "no main archive in the machine's apt sources to fetch $suite from"
  fi
fi
uri=$(cut -f1 <<<"$entry")
signedby=$(cut -f3 <<<"$entry")
opt=""
[ -n "$signedby" ] && [ -r "$signedby" ] && opt="[signed-by=$signedby] "
log "fetching source package $pkg from $uri $suite (main)"

# ---- private apt state --------------------------------------------------------------
mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial"
printf 'deb-src %s%s %s main\n' "$opt" "$uri" "$suite" >"$aptdir/sources.list"
APTOPTS=(
  -o "Dir::Etc::SourceList=$aptdir/sources.list"
  -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$aptdir/lists"
  -o "Dir::Cache=$aptdir/cache"
  -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
  -o "APT::Get::List-Cleanup=false"
)
if id _apt >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  chown -R _apt "$aptdir/lists/partial" "$aptdir/cache/archives/partial" 2>/dev/null || true
fi

timeout 600 apt-get -q "${APTOPTS[@]}" update >&2 \
  || die "apt-get update failed for '$(cat "$aptdir/sources.list")' (see the messages above)"

tmp=$(mktemp -d "$cache/src/.$pkg-$sname.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if id _apt >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then chown _apt "$tmp" 2>/dev/null || true; fi
if (cd "$tmp" && timeout 900 apt-get -q "${APTOPTS[@]}" source --download-only "$pkg" >&2); then
  dsc=$(ls "$tmp"/*.dsc 2>/dev/null | head -n1)
  [ -n "$dsc" ] || die "apt-get source left no .dsc in $tmp"
  (cd "$tmp" && dpkg-source -x "$(basename "$dsc")" >&2) || die "dpkg-source -x $(basename "$dsc") failed"
  from=$(basename "$dsc")
else
  # A mirror can lag its own index by one upload: the .dsc and the Debian diff of the
  # listed version are missing while the upstream tarball (shared by every upload of
  # that upstream version) is there. apt has checked the tarball against the index's
  # checksums; unpack it alone, without Debian's patches.
  orig=$(ls "$tmp"/*.orig.tar.* 2>/dev/null | head -n1)
  [ -n "$orig" ] || die "apt-get source --download-only $pkg failed (suite $suite at $uri)"
  log "the mirror lacks the Debian packaging of $pkg in $suite; using the upstream tarball $(basename "$orig") (checksum verified by apt) without Debian's patches"
  mkdir "$tmp/orig"
  tar -xf "$orig" -C "$tmp/orig" || die "cannot unpack $(basename "$orig")"
  top=$(find "$tmp/orig" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | head -n1)
  [ -n "$top" ] || die "$(basename "$orig") holds no directory"
  mv "$tmp/orig/$top" "$tmp/$top" && rmdir "$tmp/orig"
  from=$(basename "$orig")
fi
srcdir=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | head -n1)
[ -n "$srcdir" ] || die "unpacking $from produced no directory"
echo "$srcdir" >"$tmp/.debsrc-dir"
echo "$from" >"$tmp/.debsrc-dsc"
chown -R 0:0 "$tmp" 2>/dev/null || true
chmod 755 "$tmp"

rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "unpacked $(cat "$dest/.debsrc-dsc") into $dest/$srcdir"
echo "$dest/$srcdir"
