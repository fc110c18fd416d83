// SPDX-License-Identifier: Apache-2.0
// The GPU module's entry point (libhvd_nccl.so; see hvd/ops/gpu_module.h).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "hvd/config.h"
#include "hvd/ops/gpu_module.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::ops::nccl {
namespace {

std::unique_ptr<core::Executor> make_executor(MPI_Comm data, const NcclOptions& opts) {
  return std::make_unique<NcclExecutor>(data, opts);
}

Result<void*> device_alloc(int device, size_t bytes) {
  HVD_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  HVD_CUDA_CHECK(cudaMalloc(&p, bytes > 0 ? bytes : 1));
  return p;
}

void device_free(void* p) {
  if (p != nullptr) (void)cudaFree(p);
}

GpuModuleApi make_api() {
  GpuModuleApi api;
  api.hvd_version = HVD_VERSION;
  // Versions of the libraries the dynamic loader found (not of the headers built against).
  if (ncclGetVersion(&api.nccl_version) != ncclSuccess) api.nccl_version = 0;
  if (cudaRuntimeGetVersion(&api.cuda_runtime_version) != cudaSuccess) {
    (void)cudaGetLastError();
    api.cuda_runtime_version = 0;
  }
  api.device_count = &usable_device_count;
  api.make_executor = &make_executor;
  api.device_alloc = &device_alloc;
  api.device_free = &device_free;
  return api;
}

}  // namespace
}  // namespace hvd::ops::nccl

extern "C" __attribute__((visibility("default"))) const hvd::ops::GpuModuleApi* hvd_gpu_module() {
  static const hvd::ops::GpuModuleApi api = hvd::ops::nccl::make_api();
  return &api;
}
