#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions and cache misses per collective on hvd's hot path, under valgrind (callgrind):
# repeatable where this VM's wall and CPU times drift by more than most changes. The caller's
# count repeats to well under 1%; the background thread's moves by a few percent from run to
# run (its rounds are cut by timed waits, and under valgrind a burst of submissions outlasts
# them at a varying point: a burst split in two rounds costs more), more under load.
# Runs `hvd_bench --case CASE --hvd-only` at np 1 twice (ITERS, default 20 and 120 iterations,
# so that start-up cancels out) and prints (counts of the long run - of the short run) /
# ((long - short) x tensors per iteration): Ir = instructions of both threads, then of the
# submitting thread (caller) and of the others (loop: hvd's background thread; MPI's own
# threads count next to nothing); D1mr/D1mw = L1 read/write misses, DLmr/DLmw = last-level
# misses in a cache of LL_BYTES (default 2 MiB: this VM's L2 per core, which a burst's working
# set exceeds). CACHE_SIM=no counts instructions alone (faster; test/perf/perf_tier.sh).
#
#   scripts/count-instructions.sh [BUILD (build)] [CASE (1024x256)]
#   Environment: LL_BYTES (2097152), ITERS ("20 120"), CACHE_SIM (yes).
#   Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CASE=${2:-1024x256}
LL=${LL_BYTES:-2097152}
read -r short long <<<"${ITERS:-20 120}"
command -v valgrind >/dev/null || { echo "count-instructions: needs valgrind" >&2; exit 2; }
[[ -x $BUILD/bench/hvd_bench ]] || { echo "count-instructions: no $BUILD/bench/hvd_bench" >&2; exit 2; }
[[ $short =~ ^[0-9]+$ && $long =~ ^[0-9]+$ && $long -gt $short ]] ||
  { echo "count-instructions: ITERS='${ITERS:-}' must be two counts, the second larger" >&2; exit 2; }
k=${CASE%%x*}
cache=()
[[ ${CACHE_SIM:-yes} == no ]] || cache=(--cache-sim=yes "--LL=$LL,16,64")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in "$short" "$long"; do
  valgrind --tool=callgrind --separate-threads=yes "${cache[@]}" \
    --callgrind-out-file="$tmp/cg.$n" \
    "$BUILD/bench/hvd_bench" --iters "$n" --case "$CASE" --hvd-only >"$tmp/out.$n" 2>&1 ||
    { tail -20 "$tmp/out.$n" >&2; echo "count-instructions: hvd_bench --case $CASE failed" >&2; exit 1; }
done
/usr/bin/python3 - "$tmp" "$short" "$long" "$k" "$CASE" <<'PY'
import glob, sys
tmp, short, long_, k, case = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

def threads(n):
    """{thread number: {event: count}} of one run (one callgrind file per thread)."""
    out = {}
    for path in glob.glob(f"{tmp}/cg.{n}-*"):
        events = totals = None
        with open(path) as f:
            for line in f:
                if line.startswith("events:"):
                    events = line.split()[1:]
                elif line.startswith("totals:") or line.startswith("summary:"):
                    totals = [int(x) for x in line.split()[1:]]
        if events is None or totals is None:
            sys.exit(f"count-instructions: no totals in {path}")
        out[int(path.rsplit("-", 1)[1])] = dict(zip(events, totals))
    if 1 not in out:
        sys.exit(f"count-instructions: no callgrind output of the main thread ({tmp}/cg.{n}-01)")
    return out

def per(a, b, event, which):
    pick = lambda run: sum(c.get(event, 0) for t, c in run.items() if which(t))
    return (pick(b) - pick(a)) / ((long_ - short) * k)

a, b = threads(short), threads(long_)
fields = [f"Ir {per(a, b, 'Ir', lambda t: True):.1f}",
          f"(caller {per(a, b, 'Ir', lambda t: t == 1):.1f},",
          f"loop {per(a, b, 'Ir', lambda t: t != 1):.1f})"]
for event in ("D1mr", "D1mw", "DLmr", "DLmw"):
    if event in b[1]:
        fields.append(f"{event} {per(a, b, event, lambda t: True):.1f}")
print(f"{case}: per collective, np 1: " + "  ".join(fields))
PY
