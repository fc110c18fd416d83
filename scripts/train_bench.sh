#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Training-throughput benchmark: hvd_train_bench at np = 1 (writes the no-communication
# baseline) and then np = 2 (reads it and prints the scaling efficiency).
#
#   scripts/train_bench.sh [BUILD_DIR] [extra hvd_train_bench flags, e.g. --threads 1 --batch 64]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
prog="$BUILD/bench/hvd_train_bench"
[[ -x "$prog" ]] || { echo "train_bench: $prog not built (needs libtorch)" >&2; exit 1; }
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
base=$(mktemp /tmp/hvd_train_bench.XXXXXX)
trap 'rm -f "$base"' EXIT
# The ranks' MPI waits yield the core, as hvdrun starts them (docs/hvdrun.md), unless the
# environment says otherwise (OMPI_MCA_mpi_yield_when_idle).
yield=(--mca mpi_yield_when_idle 1)
[[ -n "${OMPI_MCA_mpi_yield_when_idle:-}" ]] && yield=()
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)  ($(nproc) cores)"
echo "== np=1"
mpirun -np 1 --bind-to none "${yield[@]}" "$prog" --baseline-file "$base" --write-baseline "$@"
echo "== np=2"
mpirun -np 2 --bind-to none --oversubscribe "${yield[@]}" "$prog" --baseline-file "$base" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
