#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes a per-collective regression visible before it lands: builds hvd_bench (and, for Python
# cases, the binding) of REV in a temporary directory, then interleaves runs of REV and of the
# working tree at np = 2 and prints, per case, both medians and their ratio, plus the CPU time
# per collective of hvd's background thread ("loop") and of the submitting thread ("caller").
#
#   scripts/bench-compare.sh REV [CASE...]
#     CASE: 1x1Mi 64x16Ki 16x1Mi 1024x256 1x1Mi:avg 16x1Mi:avg (hvd_bench --case; Sum, :avg
#     Average) or py:LABEL (python_bench.py --case LABEL, through hvd.torch), opt:LABEL and
#     optstep:LABEL (python_bench.py --only optpath --opt-case LABEL, gradient_as_bucket_view on:
#     synchronize() of ready gradients; a training step, its ratio (step - no-comm) / raw),
#     optred:LABEL (the same step's step() alone, after its backward: (step() - no-comm's) /
#     (a raw call then no-comm's step() - no-comm's), both after the same backward, so the
#     ranks' skew hits both: the reduction backward did not hide); LABEL 1024x1KiB or 64x16KiB;
#     REV must have the option; default: the four C++ Sum cases.
#   Environment: RUNS (5) runs per side, ITERS (100) iterations per run, NP (2),
#   BUILD (build) the working tree's build directory (NO_BUILD=1: use it as it is), HVD_COMPARE_CACHE (/tmp/hvd-bench-compare)
#   where REV's builds are kept, one per commit, so a second comparison against it starts at
#   once. ccache is used when installed.
#
# Both sides run the working tree's bench/hvd_bench.cc and bench/python/python_bench.py (the
# same measurement; REV's own hvd_bench.cc only if the current one does not compile against
# REV's API). Runs alternate REV, tree, tree, REV, ... so drift in machine load hits both.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[[ $# -ge 1 ]] || { sed -n "3,21p" "$0"; exit 2; }
REV=$1
shift
CASES=("$@")
[[ ${#CASES[@]} -gt 0 ]] || CASES=(1x1Mi 64x16Ki 16x1Mi 1024x256)
RUNS=${RUNS:-5}
ITERS=${ITERS:-100}
NP=${NP:-2}
BUILD=${BUILD:-build}
PY=${HVD_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

sha=$(git rev-parse --verify "$REV^{commit}")
want_py=0
for c in "${CASES[@]}"; do [[ $c == py:* || $c =~ ^opt(step|red)?: ]] && want_py=1; done

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

# REV: sources from git archive, only what the benchmarks need.
CACHE=${HVD_COMPARE_CACHE:-/tmp/hvd-bench-compare}
rev_dir=$CACHE/$sha
if [[ ! -x $rev_dir/build/bench/hvd_bench ]] || { [[ $want_py == 1 ]] &&
  [[ -f $rev_dir/src/bindings/CMakeLists.txt ]] && ! ls "$rev_dir"/build/python/hvd/_core*.so >/dev/null 2>&1; }; then
  echo "building $REV (${sha:0:9}) in $rev_dir" >&2
  rm -rf "$rev_dir"
  mkdir -p "$rev_dir/src"
  git archive "$sha" | tar -x -C "$rev_dir/src"
  cp bench/bench_util.h bench/hvd_bench.cc "$rev_dir/src/bench/"
  py_opt=OFF
  [[ $want_py == 1 && -f $rev_dir/src/bindings/CMakeLists.txt ]] && py_opt=ON
  cmake -S "$rev_dir/src" -B "$rev_dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
    -DHVD_WITH_TORCH=OFF -DHVD_WITH_NCCL=OFF -DHVD_WITH_PYTHON=$py_opt -DHVD_BUILD_TESTS=OFF \
    -DHVD_BUILD_EXAMPLES=OFF >"$rev_dir/configure.log" 2>&1 ||
    { cat "$rev_dir/configure.log" >&2; exit 1; }
  if ! cmake --build "$rev_dir/build" --target hvd_bench -j2 >"$rev_dir/build.log" 2>&1; then
    echo "the current hvd_bench.cc does not build against $REV: using $REV's own" >&2
    git show "$sha:bench/hvd_bench.cc" >"$rev_dir/src/bench/hvd_bench.cc"
    git show "$sha:bench/bench_util.h" >"$rev_dir/src/bench/bench_util.h"
    cmake --build "$rev_dir/build" --target hvd_bench -j2 >"$rev_dir/build.log" 2>&1 ||
      { tail -30 "$rev_dir/build.log" >&2; exit 1; }
  fi
  if [[ $py_opt == ON ]]; then
    cmake --build "$rev_dir/build" --target hvd_python_core -j2 >>"$rev_dir/build.log" 2>&1 ||
      { tail -30 "$rev_dir/build.log" >&2; exit 1; }
  fi
fi

# The working tree (NO_BUILD=1: as $BUILD holds it).
if [[ ${NO_BUILD:-0} != 1 ]]; then
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S . -B "$BUILD" --preset release "${launcher[@]}" >/dev/null
  cmake --build "$BUILD" --target hvd_bench -j2 >/dev/null
  if [[ $want_py == 1 ]]; then cmake --build "$BUILD" --target hvd_python_core -j2 >/dev/null; fi
fi

# A Python case's stderr, shown when it fails: a file of our own (mktemp), not a fixed name in
# the shared cache directory.
errlog=$(mktemp)
trap 'rm -f "$errlog"' EXIT

# One run of CASE on build directory $1: "ms ratio loop_us caller_us" (ratio, CPU: - if absent).
run_case() {
  local build=$1 c=$2
  if [[ $c =~ ^opt(step|red)?: ]]; then
    local label=${c#*:} kind=${c%%:*}
    if ! ls "$build"/python/hvd/_core*.so >/dev/null 2>&1; then echo "- - - -"; return; fi
    # A port of its own for gloo (python_bench's DDP side) each run; stderr kept for a failure.
    PYTHONPATH="$build/python" MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun -np "$NP" \
      --bind-to none --mca mpi_yield_when_idle 1 -x PYTHONPATH -x MASTER_PORT "$PY" \
      bench/python/python_bench.py --only optpath --opt-case "$label" --iters "$ITERS" \
      --rounds 1 2>"$errlog" |
      awk -v l="$label" -v k="$kind" '$1 == "optpath" && $2 == l {
        for (i = 3; i < NF; i += 2) v[$i] = $(i + 1)
        if (k == "opt") printf "%s %.2f - -\n", v["sync_on"], v["sync_on"] / v["raw"]
        else if (k == "optred") printf "%s %.2f - -\n", v["red_on"], (v["red_on"] - v["red_none"]) / (v["red_raw"] - v["red_none"])
        else printf "%s %.2f - -\n", v["step_on"], (v["step_on"] - v["step_none"]) / v["raw"]
        exit }' || { echo "bench-compare: $c failed on $build:" >&2
        grep -v -i warn "$errlog" | tail -20 >&2; }
  elif [[ $c == py:* ]]; then
    local label=${c#py:}
    if ! ls "$build"/python/hvd/_core*.so >/dev/null 2>&1; then echo "- - - -"; return; fi
    PYTHONPATH="$build/python" mpirun -np "$NP" --bind-to none -x PYTHONPATH "$PY" \
      bench/python/python_bench.py --case "$label" --iters "$ITERS" 2>/dev/null |
      awk -v l="$label" '$1 == l { print $4, "-", "-", $6; exit }'
  else
    mpirun -np "$NP" --bind-to none "$build/bench/hvd_bench" --iters "$ITERS" --case "$c" |
      awk -v l="$c" '$1 == l { print $3, $6, ($8 == "" ? "-" : $8), ($9 == "" ? "-" : $9); exit }'
  fi
}

declare -A res
echo "bench-compare: $REV (${sha:0:9}) vs working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +changes)), np=$NP, $RUNS runs x $ITERS iterations; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 0; i < RUNS; ++i)); do
  order=(rev tree)
  ((i % 2)) && order=(tree rev)
  for side in "${order[@]}"; do
    dir=$BUILD
    [[ $side == rev ]] && dir=$rev_dir/build
    for c in "${CASES[@]}"; do
      res[$side,$c]+="$(run_case "$dir" "$c")"$'\n'
    done
  done
done

# Medians per column (ms, ratio to raw MPI, loop us, caller us); "-" where a side has none.
median_col() {
  awk -v k="$2" 'NF && $k != "-" { print $k }' <<<"$1" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
         else printf "%.4g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
printf '%-12s %10s %10s %8s %8s %8s %9s %9s %9s %9s\n' case "rev ms" "tree ms" tree/rev \
  "rev/raw" "tree/raw" "rev loop" "tree loop" "rev call" "tree call"
for c in "${CASES[@]}"; do
  r=${res[rev,$c]}
  t=${res[tree,$c]}
  rm_=$(median_col "$r" 1)
  tm=$(median_col "$t" 1)
  q=-
  [[ $rm_ != - && $tm != - ]] && q=$(awk -v a="$tm" -v b="$rm_" 'BEGIN { printf "%.2fx", a / b }')
  printf '%-12s %10s %10s %8s %8s %8s %9s %9s %9s %9s\n' "$c" "$rm_" "$tm" "$q" \
    "$(median_col "$r" 2)" "$(median_col "$t" 2)" "$(median_col "$r" 3)" "$(median_col "$t" 3)" \
    "$(median_col "$r" 4)" "$(median_col "$t" 4)"
done
echo "(ms: median of the runs' medians, slowest rank; x/raw: hvd over the best raw MPI in the same run;"
echo " loop/call: CPU us per collective of hvd's background thread / the caller, mean over ranks;"
echo " load average at end: $(cut -d' ' -f1-3 /proc/loadavg))"
