#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One visit to a GPU machine that has hvd's build dependencies (Open MPI, Catch2, CUDA, NCCL)
# (< 10 min): configure with the NCCL executors, build the GPU targets, then run the GPU check
# itself — the [gpu] tests, the device routing test, the GPU benchmark (hvd vs raw
# ncclAllReduce) — through the same bundle runner the lent device machine uses
# (scripts/gpu_bundle.sh, .gpu-bundle/run.sh), so the list of checks exists once. Output goes
# to stdout and to $OUT_DIR (default: build-gpu-check/gpu-check) for the README.
#   bench/gpu_check.sh            # from the repository root
# The lent device machine has no Open MPI or Catch2 and cannot install them: there, build the
# bundle here and run only `bash .gpu-bundle/run.sh` (device tool: carry [".gpu-bundle"]).
# Environment: BUILD_DIR, OUT_DIR, CUDA_HOME / NCCL_HOME (default /usr/local/cuda).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu-check}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/gpu-check}
mkdir -p "$OUT_DIR"

echo "=== configure + build (HVD_WITH_NCCL=ON) ($(date -u +%H:%M:%S))"
timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DHVD_WITH_NCCL=ON \
  -DHVD_WITH_TORCH=OFF -DHVD_WITH_PYTHON=OFF -DHVD_BUILD_EXAMPLES=OFF >"$OUT_DIR/build.log" 2>&1 &&
  timeout 300 scripts/gpu_bundle.sh "$BUILD_DIR" >>"$OUT_DIR/build.log" 2>&1
rc=$?
tail -5 "$OUT_DIR/build.log"
if [ $rc -ne 0 ]; then echo "BUILD FAILED (see $OUT_DIR/build.log)"; exit 1; fi

OUT=$OUT_DIR bash .gpu-bundle/run.sh
