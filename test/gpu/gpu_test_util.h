// SPDX-License-Identifier: Apache-2.0
// Helpers for the [gpu] tier: device probe and skip, device buffers, dtype encoding, and a
// harness that runs responses straight through an NcclExecutor over MPI_COMM_WORLD.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "hvd/core/executor.h"
#include "hvd/ops/gpu_module.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::gputest {

/// True when a CUDA device is usable; a failed probe (no driver) counts as "no device".
inline bool have_gpu() {
  static const bool ok = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      cudaGetLastError();
      return false;
    }
    return true;
  }();
  return ok;
}

/// Test cases that returned at HVD_GPU_OR_SKIP() (no device). gpu_main.cc then exits with
/// kSkipExitCode (CTest's SKIP_RETURN_CODE) unless something failed: a skipped case is
/// reported as skipped, never as passed.
int& skipped_cases();
inline constexpr int kSkipExitCode = 77;

/// First line of a test case that needs a CUDA device (tag it [device]).
#define HVD_GPU_OR_SKIP()                       \
  do {                                          \
    if (!::hvd::gputest::have_gpu()) {          \
      std::printf("skipped: no CUDA device\n"); \
      ++::hvd::gputest::skipped_cases();        \
      return;                                   \
    }                                           \
  } while (0)

/// cudaMalloc'd bytes, freed on destruction.
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) {
    if (cudaMalloc(&p, n ? n : 16) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

/// Host values <-> the bytes of dtype `t` (float16/bfloat16 through hvd's conversions).
std::vector<uint8_t> encode(DataType t, const std::vector<double>& v);
std::vector<double> decode(DataType t, const void* bytes, size_t n);

/// Copies host values of dtype `t` into a new device buffer.
std::unique_ptr<DevBuf> upload(DataType t, const std::vector<double>& v);
std::vector<double> download(DataType t, const void* dev, size_t n);

/// Entries plus the executor: build entries, then run(response). Harnesses with the same
/// options share one executor (one NCCL communicator for the whole test binary).
struct Harness {
  explicit Harness(ops::nccl::NcclOptions o = {});
  /// An entry over device buffer `in` (and `out`, or in place), request name `name`.
  core::TensorEntry& add(const std::string& name, DataType t, std::vector<int64_t> shape, void* in,
                         void* out = nullptr);
  /// Gives every entry an allocator that cudaMallocs (kept alive by the harness).
  void device_allocators();
  Status run(const core::Response& r);
  /// Launches `r` without waiting: *done finishes when the device has run it.
  Status launch(const core::Response& r, std::shared_ptr<core::Completion>* done);

  std::shared_ptr<core::Executor> ex;  ///< made by the GPU module
  std::vector<std::unique_ptr<core::TensorEntry>> entries;
  std::vector<std::unique_ptr<DevBuf>> allocated;
};

/// A response for the harness's entries (np = 1, device cuda:0).
core::Response response(core::OpType op, DataType t, const std::vector<std::string>& names,
                        const std::vector<int64_t>& numels);

/// Launches a kernel on `stream` that spins for about `ms` milliseconds, then writes `value`
/// to every float of `p` (n of them): a producer the collective must wait for.
void launch_slow_fill(float* p, int n, float value, int ms, cudaStream_t stream);

}  // namespace hvd::gputest
