#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Training through hvd.torch with gradient_as_bucket_view on and off (this tree) against another
# tree's build (usually main), np = 2, in alternating rounds: each round runs BASE's
# python_bench.py (hvd, DDP, no-comm) and this tree's (hvd, hvd-bv, DDP, no-comm), the order
# reversed every other round, and prints each run's CPU time per step and no-comm / hvd.
#   Usage: bench/python/bucket_view_bench.sh BASE_SRC BASE_BUILD [ROUNDS] [python_bench.py args]
#   e.g.   bench/python/bucket_view_bench.sh /tmp/base/src /tmp/base/build 6 \
#              --models cnn,mlp,resnet18 --steps 20
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE_SRC=$1
BASE_BUILD=$2
ROUNDS=${3:-6}
shift 3 || shift $#
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${HVD_PYTHON:-/usr/bin/python3}
BUILD=${BUILD:-build}

run() {  # run LABEL SRC BUILD [args]: one round of python_bench.py's training
  local label=$1 src=$2 build=$3
  shift 3
  echo "== $label"
  PYTHONPATH="$build/python" mpirun -np 2 --bind-to none --mca mpi_yield_when_idle 1 \
    -x PYTHONPATH "$PY" "$src/bench/python/python_bench.py" --only train --rounds 1 "$@" |
    sed -n '/^CPU time per step/,/^$/p'
}

for ((r = 0; r < ROUNDS; r++)); do
  echo "### round $((r + 1)) of $ROUNDS, load average $(cut -d' ' -f1 /proc/loadavg)"
  if ((r % 2 == 0)); then
    run base "$BASE_SRC" "$BASE_BUILD" "$@"
    run this . "$BUILD" --bucket-view both "$@"
  else
    run this . "$BUILD" --bucket-view both "$@"
    run base "$BASE_SRC" "$BASE_BUILD" "$@"
  fi
done
