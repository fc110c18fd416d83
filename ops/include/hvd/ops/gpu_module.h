// SPDX-License-Identifier: Apache-2.0
// The GPU module: hvd's NCCL/CUDA executors, built as libhvd_nccl.so and loaded at run time, so
// that nothing a CPU-only host installs links CUDA or NCCL (one package serves every host).
//
// The module links the same libhvd_core.so and libhvd_ops.so as the process that loads it (one
// copy of their state), so C++ types cross the boundary; a module of another hvd build is
// refused. Its one exported symbol is `hvd_gpu_module` (extern "C", returning the API below).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "hvd/core/executor.h"
#include "hvd/core/status.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::ops {

/// Changes whenever GpuModuleApi or a type it passes changes.
constexpr int kGpuModuleAbi = 1;

/// What the module offers. Every function may be called from any thread.
struct GpuModuleApi {
  int abi = kGpuModuleAbi;
  const char* hvd_version = nullptr;  ///< HVD_VERSION of the build that made the module
  int nccl_version = 0;               ///< ncclGetVersion() of the NCCL loaded, e.g. 22809
  int cuda_runtime_version = 0;       ///< cudaRuntimeGetVersion(), e.g. 13000
  /// Number of usable CUDA devices, or why there is none (no driver, no device).
  Result<int> (*device_count)() = nullptr;
  /// The NCCL executor over `data` (see nccl::NcclExecutor).
  std::unique_ptr<core::Executor> (*make_executor)(MPI_Comm data,
                                                   const nccl::NcclOptions& opts) = nullptr;
  /// `bytes` (at least 1) of memory on CUDA device `device`; device_free releases it.
  Result<void*> (*device_alloc)(int device, size_t bytes) = nullptr;
  void (*device_free)(void* ptr) = nullptr;
};

/// GPU support of this process.
struct GpuModuleState {
  const GpuModuleApi* api = nullptr;  ///< null: not loaded
  std::string path;                   ///< the module file (loaded or looked for)
  std::string reason;                 ///< why it is not loaded; empty when it is
};

/// Loads the module on the first call (later calls return the same state): libhvd_nccl.so from
/// the directory libhvd_ops.so was loaded from. It is not loaded when this build made no module,
/// the file is not installed (a CPU host), dlopen fails (the CUDA runtime or NCCL is missing:
/// the reason quotes the dynamic loader), or the module is of another hvd build; `reason` says
/// which. A visible device is not needed to load it (device_count says whether there is one).
const GpuModuleState& gpu_module();

}  // namespace hvd::ops
