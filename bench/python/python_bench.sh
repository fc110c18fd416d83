#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One run of the Python benchmark at np = 2: hvd_bench (the C++ API's figures) then
# python_bench.py, which prints training samples/s against DDP and the allreduce cases against
# the C++ API and gloo.   Usage: bench/python/python_bench.sh [BUILD] [python_bench.py args]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${HVD_PYTHON:-/usr/bin/python3}
# The Python ranks run with MPI's waits yielding the core, as hvdrun starts them (docs/hvdrun.md).
cpp=$(mktemp)
trap 'rm -f "$cpp"' EXIT
mpirun -np 2 --bind-to none "$BUILD/bench/hvd_bench" >"$cpp"
PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" \
  mpirun -np 2 --bind-to none --mca mpi_yield_when_idle 1 -x PYTHONPATH "$PY" bench/python/python_bench.py --cpp "$cpp" "$@"
