#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The benchmarks of the README at np = 2 on this machine (run on a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() { echo "\$ mpirun -np 2 --bind-to none $*"; mpirun -np 2 --bind-to none "$@"; echo; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
run "$BUILD/bench/hvd_bench"
run "$BUILD/bench/hvd_idle_cost"
run "$BUILD/bench/hvd_bench_gather"
if [[ -x "$BUILD/bench/hvd_train_bench" ]]; then
  scripts/train_bench.sh "$BUILD"
fi
