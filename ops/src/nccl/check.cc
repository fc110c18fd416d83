// SPDX-License-Identifier: Apache-2.0
// CUDA/NCCL error statuses and the device probe.
#include "hvd/ops/nccl/check.h"

#include <chrono>
#include <thread>

namespace hvd::ops::nccl {
namespace {

std::string call_name(const char* call) {
  std::string c(call);
  return c.substr(0, c.find('('));
}

}  // namespace

Status cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  // Handled here: clear it, or the next kernel launch's cudaGetLastError() would report it
  // (sticky errors, a broken context, stay regardless).
  cudaGetLastError();
  return internal_error(call_name(call) + " failed: " + cudaGetErrorString(code) + " (" +
                        cudaGetErrorName(code) + ") at " + file + ":" + std::to_string(line));
}

Status nccl_error(ncclResult_t code, const char* call, const char* file, int line) {
  std::string msg = call_name(call) + " failed: " + ncclGetErrorString(code);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) msg += std::string(" (") + last + ")";
  return internal_error(msg + " at " + file + ":" + std::to_string(line));
}

Status nccl_settle(ncclComm_t comm, ncclResult_t code, const char* call, const char* file,
                   int line) {
  while (code == ncclInProgress) {
    // Connection set-up of a first collective, typically: short. A failure ends it with an
    // error (which the caller's response reports), an abort of `comm` too.
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    code = rc != ncclSuccess ? rc : state;
  }
  if (code == ncclSuccess) return Status::OK();
  return nccl_error(code, call, file, line);
}

Result<int> usable_device_count() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: a failed probe must not poison later calls
    return precondition(
        std::string("no usable CUDA device was found (cudaGetDeviceCount failed: ") +
        cudaGetErrorString(e) + ")");
  }
  if (n == 0) return precondition("no usable CUDA device was found (the CUDA runtime sees none)");
  return n;
}

}  // namespace hvd::ops::nccl
