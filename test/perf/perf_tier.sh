#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# [perf] the instruction-count tripwire: what one collective costs on hvd's hot path, counted
# by scripts/count-instructions.sh (callgrind, hvd_bench --hvd-only at np 1, long run - short
# run), against the budgets in test/perf/budgets.txt for this compiler and build type. Fails
# when a count exceeds its budget by more than the row's tolerance; a count over its limit is
# measured once more and the lower of the two counts (the noise only adds: a burst that a timed
# wait cuts into two rounds costs more, never less). Exits 77 (skipped, saying why) where
# valgrind is missing or the budgets hold no row for this compiler.
#
#   test/perf/perf_tier.sh BUILD_DIR KEY [BUDGETS]
#   KEY: compiler id-major version-build type, as CMake passes it (GNU-12-RelWithDebInfo).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
key=$2
budgets=${3:-$here/budgets.txt}

if ! command -v valgrind >/dev/null; then
  echo "perf: SKIPPED: valgrind is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
[[ -x $build/bench/hvd_bench ]] || { echo "perf: FAIL: no $build/bench/hvd_bench (build it)" >&2; exit 1; }
[[ -f $budgets ]] || { echo "perf: FAIL: no budgets file $budgets" >&2; exit 1; }

# The user's hvd settings would change what is counted.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(HVD|HOROVOD)_' || true)

rows=$(awk -v key="$key" '!/^[[:space:]]*(#|$)/ && $1 == key' "$budgets")
if [[ -z $rows ]]; then
  echo "perf: SKIPPED: $budgets has no budget for $key (only for:" \
    "$(awk '!/^[[:space:]]*(#|$)/ {print $1}' "$budgets" | sort -u | paste -sd' ')): counts" \
    "differ between compilers and build types; add rows for $key in a commit of their own"
  exit 77
fi
bad=$(awk 'NF != 6 || $3 !~ /^[0-9]+,[0-9]+$/ || $5 !~ /^[0-9.]+$/ || $6 !~ /^[0-9.]+%$/' <<<"$rows")
if [[ -n $bad ]]; then
  echo "perf: FAIL: malformed rows in $budgets (key case short,long metric budget N%):" >&2
  echo "$bad" >&2
  exit 1
fi

# measure CASE ITERS -> "Ir caller loop" per collective
measure() {
  local line
  line=$(CACHE_SIM=no ITERS="${2/,/ }" "$src/scripts/count-instructions.sh" "$build" "$1") || return 1
  echo "$line" >&2
  sed -E 's/.*Ir ([0-9.]+) +\(caller ([0-9.]+), +loop ([0-9.]+)\).*/\1 \2 \3/' <<<"$line"
}
# pick METRIC "Ir caller loop"
pick() {
  local ir caller loop
  read -r ir caller loop <<<"$2"
  case $1 in
    Ir) echo "$ir" ;;
    Ir.caller) echo "$caller" ;;
    Ir.loop) echo "$loop" ;;
    *) echo "perf: FAIL: unknown metric '$1' in $budgets (Ir, Ir.caller, Ir.loop)" >&2; return 1 ;;
  esac
}

t0=$(date +%s)
fail=0
declare -A counts=()
mapfile -t cases < <(awk '{print $2}' <<<"$rows" | awk '!seen[$0]++')
for c in "${cases[@]}"; do
  iters=$(awk -v c="$c" '$2 == c {print $3; exit}' <<<"$rows")
  counts[$c]=$(measure "$c" "$iters") || { echo "perf: FAIL: counting $c failed" >&2; exit 1; }
  over=0
  while read -r _ _ _ metric budget tol; do
    n=$(pick "$metric" "${counts[$c]}") || exit 1
    awk -v n="$n" -v b="$budget" -v t="${tol%\%}" 'BEGIN {exit !(n > b * (1 + t / 100))}' && over=1
  done < <(awk -v c="$c" '$2 == c' <<<"$rows")
  if [[ $over -eq 1 ]]; then
    echo "perf: $c: a count is over its limit: measured once more, the lower counts"
    again=$(measure "$c" "$iters") || { echo "perf: FAIL: counting $c failed" >&2; exit 1; }
    counts[$c]=$(paste -d' ' <(tr ' ' '\n' <<<"${counts[$c]}") <(tr ' ' '\n' <<<"$again") |
      awk '{printf "%s%s", (NR > 1 ? " " : ""), ($1 < $2 ? $1 : $2)}')
  fi
  while read -r _ _ _ metric budget tol; do
    n=$(pick "$metric" "${counts[$c]}") || exit 1
    verdict=$(awk -v n="$n" -v b="$budget" -v t="${tol%\%}" 'BEGIN {
      d = (n / b - 1) * 100
      printf "%s %+.1f%% of the budget %s (limit +%s%%)", (n > b * (1 + t / 100) ? "FAIL" : "ok"), d, b, t }')
    echo "perf: $c $metric = $n per collective: $verdict"
    if [[ $verdict == FAIL* ]]; then
      fail=1
    fi
  done < <(awk -v c="$c" '$2 == c' <<<"$rows")
done
echo "perf: $key, $(($(date +%s) - t0)) s"
if [[ $fail -ne 0 ]]; then
  cat >&2 <<EOF
perf: FAIL: a collective costs more instructions than its budget allows. Count it again with
  scripts/count-instructions.sh $build CASE
and see where they go with callgrind_annotate on
  valgrind --tool=callgrind $build/bench/hvd_bench --case CASE --hvd-only
next to the last revision that passed. If the cost is meant, raise the budget in
test/perf/budgets.txt in a commit of its own that says why (docs/performance.md).
EOF
  exit 1
fi
echo "perf: PASS"
