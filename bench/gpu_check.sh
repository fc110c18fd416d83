#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One visit to a GPU machine that has hvd's build dependencies (Open MPI, Catch2, CUDA, NCCL)
# (< 8 min): build the NCCL executors, run the [gpu] tests and the device routing test, then
# the GPU benchmark (hvd vs raw ncclAllReduce). Output goes to stdout and to $OUT_DIR (default:
# build-gpu-check/gpu-check) for the README.
#   bench/gpu_check.sh            # from the repository root
# The lent device machine has no Open MPI or Catch2 and cannot install them: there, run the
# same steps from a bundle built here instead (scripts/gpu_bundle.sh, then
# `bash .gpu-bundle/run.sh` with the device tool, carry [".gpu-bundle"]).
# Environment: BUILD_DIR, OUT_DIR, CUDA_HOME / NCCL_HOME (default /usr/local/cuda), JOBS.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu-check}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/gpu-check}
JOBS=${JOBS:-$(nproc)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT_DIR"
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step "device"
{ date -u; nvidia-smi -L || echo "nvidia-smi failed"; } 2>&1 | tee "$OUT_DIR/device.txt"

step "configure + build (HVD_WITH_NCCL=ON)"
timeout 300 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DHVD_WITH_NCCL=ON \
  -DHVD_WITH_TORCH=OFF -DHVD_WITH_PYTHON=OFF -DHVD_BUILD_EXAMPLES=OFF >"$OUT_DIR/build.log" 2>&1 &&
timeout 300 cmake --build "$BUILD_DIR" -j"$JOBS" \
  --target hvd_gpu_tests hvd_device_select_test hvd_gpu_bench >>"$OUT_DIR/build.log" 2>&1
rc=$?
tail -5 "$OUT_DIR/build.log"
if [ $rc -ne 0 ]; then echo "BUILD FAILED (see $OUT_DIR/build.log)"; exit 1; fi

step "[gpu] tests + device routing"
(cd "$BUILD_DIR" && timeout 240 ctest -R '^(gpu\.|mpi\.device_select\.np1)' --output-on-failure) \
  2>&1 | tee "$OUT_DIR/tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# The details of the collectives run (which cases ran, or "skipped: no CUDA device").
timeout 120 mpiexec -np 1 --bind-to none "$BUILD_DIR/test/gpu/hvd_gpu_tests" -d yes \
  >"$OUT_DIR/gpu_tests_detail.txt" 2>&1 || status=1
grep -c "skipped: no CUDA device" "$OUT_DIR/gpu_tests_detail.txt" >/dev/null &&
  echo "WARNING: the [gpu] tests skipped: no CUDA device" && status=1

step "benchmark: hvd_gpu_bench --device cuda (np = 1)"
timeout 240 mpiexec -np 1 --bind-to none "$BUILD_DIR/bench/hvd_gpu_bench" --device cuda \
  2>&1 | tee "$OUT_DIR/bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "done: status $status (outputs in $OUT_DIR)"
exit $status
