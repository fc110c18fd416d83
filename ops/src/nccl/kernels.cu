// SPDX-License-Identifier: Apache-2.0
// The batched copy kernel: many (src, dst, count) pieces in one launch. blockIdx.y picks the
// piece, blocks along x stride over it (grid: copy_grid in plan.cc; per-thread body:
// copy_body.h); a pure copy moves 16-byte words where aligned.
#include "hvd/ops/nccl/copy_body.h"
#include "hvd/ops/nccl/kernels.h"

namespace hvd::ops::nccl {
namespace {

__global__ void copy_bytes(const CopyDesc* descs, int n, size_t esize) {
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (int p = blockIdx.y; p < n; p += gridDim.y) body::copy_bytes(descs[p], esize, tid, stride);
}

template <typename T>
__global__ void copy_scaled(const CopyDesc* descs, int n, double factor, int64_t divisor) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int p = blockIdx.y; p < n; p += gridDim.y) {
    body::copy_scaled<T>(descs[p], factor, divisor, tid, stride);
  }
}

}  // namespace

cudaError_t launch_batched_copy(const CopyDesc* descs, int n, int64_t max_count, DataType dtype,
                                const Scale& scale, cudaStream_t stream) {
  if (n <= 0 || max_count <= 0) return cudaSuccess;
  const size_t esize = dtype_size(dtype);
  const bool copy = scale.identity();
  const CopyGrid g = copy_grid(n, max_count, esize, copy);
  const dim3 grid(g.x, g.y);
  // Only this launch's error may come back: clear what an earlier call on this thread (a
  // user allocator, a handled failure) left behind.
  (void)cudaGetLastError();
  if (copy) {
    copy_bytes<<<grid, kCopyThreads, 0, stream>>>(descs, n, esize);
    return cudaGetLastError();
  }
  const bool known = body::visit_scaled_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    copy_scaled<T><<<grid, kCopyThreads, 0, stream>>>(descs, n, scale.factor, scale.divisor);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;  // int16, bool: never scaled
}

bool nccl_type(DataType t, ncclDataType_t* out) {
  switch (t) {
    case DataType::kUInt8:
      *out = ncclUint8;
      return true;
    case DataType::kInt8:
      *out = ncclInt8;
      return true;
    case DataType::kInt32:
      *out = ncclInt32;
      return true;
    case DataType::kInt64:
      *out = ncclInt64;
      return true;
    case DataType::kFloat16:
      *out = ncclFloat16;
      return true;
    case DataType::kBFloat16:
      *out = ncclBfloat16;
      return true;
    case DataType::kFloat32:
      *out = ncclFloat32;
      return true;
    case DataType::kFloat64:
      *out = ncclFloat64;
      return true;
    default:
      return false;
  }
}

}  // namespace hvd::ops::nccl
