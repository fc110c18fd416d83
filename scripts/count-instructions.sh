#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions and cache misses per collective on hvd's hot path, under valgrind (callgrind):
# repeatable to a few percent on a quiet machine (timed waits poll a varying number of times
# under valgrind, and more under load: compare interleaved runs of both builds), where this
# VM's wall and CPU times drift by more than most changes.
# Runs `hvd_bench --case CASE --hvd-only` at np 1 twice (20 and 120 iterations, so start-up
# cancels out) and prints (counts of the long run - of the short run) / (100 x tensors per
# iteration): Ir = instructions of both threads (caller and background thread), D1mr/D1mw =
# L1 read/write misses, DLmr/DLmw = last-level misses in a cache of LL_BYTES (default 2 MiB:
# this VM's L2 per core, which a burst's working set exceeds).
#
#   scripts/count-instructions.sh [BUILD (build)] [CASE (1024x256)]
#   Environment: LL_BYTES (2097152). Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CASE=${2:-1024x256}
LL=${LL_BYTES:-2097152}
command -v valgrind >/dev/null || { echo "count-instructions: needs valgrind" >&2; exit 2; }
[[ -x $BUILD/bench/hvd_bench ]] || { echo "count-instructions: no $BUILD/bench/hvd_bench" >&2; exit 2; }
k=${CASE%%x*}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 20 120; do
  valgrind --tool=callgrind --cache-sim=yes --LL="$LL",16,64 --callgrind-out-file="$tmp/cg.$n" \
    "$BUILD/bench/hvd_bench" --iters "$n" --case "$CASE" --hvd-only >/dev/null 2>&1
done
/usr/bin/python3 - "$tmp/cg.20" "$tmp/cg.120" "$k" "$CASE" <<'PY'
import re, subprocess, sys
def totals(path):
    out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True).stdout
    line = next(l for l in out.splitlines() if "PROGRAM TOTALS" in l)
    return [int(x.replace(",", "")) for x in re.findall(r"([\d,]+) \(", line)]
short, long_ = totals(sys.argv[1]), totals(sys.argv[2])
names = "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw".split()
per = {n: (b - a) / (100 * int(sys.argv[3])) for n, a, b in zip(names, short, long_)}
print(f"{sys.argv[4]}: per collective, np 1: " +
      "  ".join(f"{n} {per[n]:.1f}" for n in ("Ir", "D1mr", "D1mw", "DLmr", "DLmw")))
PY
