// SPDX-License-Identifier: Apache-2.0
// The one CUDA and the one NCCL check macro: a failed call becomes a Status naming the call,
// the CUDA/NCCL message and where it failed. Also the "is there a usable device" probe.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "hvd/core/status.h"

namespace hvd::ops::nccl {

/// "cudaMalloc(&p, n) failed: out of memory (cudaErrorMemoryAllocation) at file.cc:12". Clears
/// the thread's last CUDA error (the caller handles this one).
Status cuda_error(cudaError_t code, const char* call, const char* file, int line);
/// "ncclAllReduce(...) failed: unhandled cuda error (...; last error: ...) at file.cc:12".
Status nccl_error(ncclResult_t code, const char* call, const char* file, int line);

/// For a call on a non-blocking communicator (hvd creates them so: see comm_init.h): NCCL may
/// answer ncclInProgress, and the call then goes on in the background; nothing else may be
/// called on `comm` or enqueued on its stream until it is done. Waits for that (polling
/// ncclCommGetAsyncError) and returns its outcome; any other `code` as nccl_error().
Status nccl_settle(ncclComm_t comm, ncclResult_t code, const char* call, const char* file,
                   int line);

/// Number of usable CUDA devices, or an error saying why there is none. Without a GPU or
/// driver the CUDA runtime fails device queries ("CUDA driver version is insufficient for CUDA
/// runtime version", "no CUDA-capable device is detected"): that is "no device", never a crash.
Result<int> usable_device_count();

}  // namespace hvd::ops::nccl

#define HVD_CUDA_CHECK(call)                                                        \
  do {                                                                              \
    cudaError_t hvd_cuda_rc_ = (call);                                              \
    if (hvd_cuda_rc_ != cudaSuccess) {                                              \
      return ::hvd::ops::nccl::cuda_error(hvd_cuda_rc_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

#define HVD_NCCL_CHECK(call)                                                        \
  do {                                                                              \
    ncclResult_t hvd_nccl_rc_ = (call);                                             \
    if (hvd_nccl_rc_ != ncclSuccess) {                                              \
      return ::hvd::ops::nccl::nccl_error(hvd_nccl_rc_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

/// HVD_NCCL_CHECK for a call on communicator `comm` (a collective, ncclGroupEnd), which may
/// answer ncclInProgress (non-blocking communicators): waits until the call is done.
#define HVD_NCCL_ENQUEUE(comm, call)                                                      \
  do {                                                                                    \
    ncclResult_t hvd_nccl_rc_ = (call);                                                   \
    if (hvd_nccl_rc_ != ncclSuccess) {                                                    \
      ::hvd::Status hvd_nccl_s_ =                                                         \
          ::hvd::ops::nccl::nccl_settle((comm), hvd_nccl_rc_, #call, __FILE__, __LINE__); \
      if (!hvd_nccl_s_.ok()) return hvd_nccl_s_;                                          \
    }                                                                                     \
  } while (0)
