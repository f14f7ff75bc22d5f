#!/usr/bin/env bash
# compare.sh DIRECT_WORK OTHER_WORK [EXCLUDED]
#
# From two run.sh work directories (--mode direct, and --mode ttlguard or mux; or
# cluster-direct and route), print in Markdown every test that fails in OTHER_WORK but
# passes in DIRECT_WORK, grouped by unit, with the failing assertion / error text from
# the runner's log, and every unit of OTHER_WORK that hung, aborted or crashed. Exit
# status 1 when there is any. EXCLUDED: a file of "UNIT<TAB>TEST" lines (TEST as runtest
# takes it: a name, or /regexp) whose failures are left out (run.sh writes route's, from
# exclusions-route). run.sh --compare-direct runs it for each proxied mode (its
# WORK/REFERENCE and WORK/MODE) and also fails a unit that passed fewer tests through
# the proxy than directly (ttlguard, mux), or each test that passes on cluster-direct
# and not through route and that exclusions-route does not name.
set -uo pipefail
[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: compare.sh DIRECT_WORK OTHER_WORK [EXCLUDED] (run.sh --work directories)" >&2; exit 2; }
direct=$1 other=$2 excluded=${3:-/dev/null}
for d in "$direct" "$other"; do
  [ -f "$d/results.tsv" ] || { echo "compare.sh: $d/results.tsv missing (not a finished run.sh work directory)" >&2; exit 2; }
done

found=0
for udir in "$other"/units/*/; do
  udir=${udir%/}
  [ -s "$udir/failed" ] || continue
  unit=$(head -n 1 "$udir/results.tsv" | cut -f1)
  [ -n "$unit" ] || unit=$(basename "$udir" | sed 's#__#/#g')
  out=$(awk -F'\t' -v unit="$unit" -v details="$udir/details" -v excluded="$excluded" '
    function is(n, re) { return substr(re, 1, 1) == "/" ? n ~ substr(re, 2) : n == re }
    BEGIN { while ((getline l < excluded) > 0) { split(l, f, "\t"); if (f[1] == unit) ex[++ne] = f[2] } }
    FNR == 1 { file++ }
    file == 1 { if ($1 == unit && $2 == "ok") okd[$3]++; next }         # direct results
    file == 2 {                                                           # details blocks
      if ($0 ~ /^--- /) { name = substr($0, 5); k = ++nb[name]; blk[name, k] = ""; cur = name SUBSEP k; next }
      if (cur != "") blk[cur] = blk[cur] $0 "\n"
      next
    }
    {                                                                     # failed names
      n = $0; seen[n]++
      base = n; sub(/ \[error in its nested start_server block\]$/, "", base)
      synthetic = (n ~ /^\[/)
      if (!synthetic && !(base in okd)) next        # fails directly too (or not run there)
      for (i = 1; i <= ne; i++) if (!synthetic && is(base, ex[i])) break
      if (i <= ne) next                              # excluded
      printf "- `%s`\n", n
      if ((n, seen[n]) in blk) text = blk[n, seen[n]]
      else if (base != n) {                          # nested start_server error: its text
        text = ""; for (key in blk) { split(key, p, SUBSEP); if (p[1] ~ /^\(error in the nested start_server block/) text = text p[1] "\n" blk[key] }
      } else text = ""
      if (text != "") { gsub(/\n+$/, "", text); printf "  ```\n%s\n  ```\n", text }
    }' "$direct/results.tsv" "$udir/details" "$udir/failed")
  [ -n "$out" ] || continue
  found=1
  echo "### $unit"
  [ -f "$udir/reason" ] && sed 's/^/**unit: /; s/$/**/' "$udir/reason"
  echo "$out"
  echo
done
[ "$found" = 1 ] || echo "No test fails in $other that passes in $direct."
[ "$found" = 0 ]
