// SPDX-License-Identifier: Apache-2.0
// The batched copy kernel: many (src, dst, count) pieces in one launch. blockIdx.y picks the
// piece, blocks along x stride over it; a pure copy moves 16-byte words where aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "hvd/ops/nccl/kernels.h"

namespace hvd::ops::nccl {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksY = 65535;
constexpr int64_t kMaxBlocksTotal = 1 << 16;

__global__ void copy_bytes(const CopyDesc* descs, int n, size_t esize) {
  for (int p = blockIdx.y; p < n; p += gridDim.y) {
    const CopyDesc d = descs[p];
    const size_t bytes = static_cast<size_t>(d.count) * esize;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    auto* dst = static_cast<unsigned char*>(d.dst);
    if (d.src == nullptr) {
      for (size_t i = tid; i < bytes; i += stride) dst[i] = 0;
      continue;
    }
    const auto* src = static_cast<const unsigned char*>(d.src);
    const bool aligned =
        ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0;
    size_t done = 0;
    if (aligned) {
      const size_t words = bytes / 16;
      const auto* s4 = reinterpret_cast<const uint4*>(src);
      auto* d4 = reinterpret_cast<uint4*>(dst);
      for (size_t i = tid; i < words; i += stride) d4[i] = s4[i];
      done = words * 16;
    }
    for (size_t i = done + tid; i < bytes; i += stride) dst[i] = src[i];
  }
}

template <typename T>
struct Conv {
  __device__ static float to(T x) { return static_cast<float>(x); }
  __device__ static T from(float x) { return static_cast<T>(x); }
};
template <>
struct Conv<__half> {
  __device__ static float to(__half x) { return __half2float(x); }
  __device__ static __half from(float x) { return __float2half_rn(x); }
};
template <>
struct Conv<__nv_bfloat16> {
  __device__ static float to(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};

template <typename T>
__device__ T scale_one(T x, double factor, int64_t divisor) {
  if constexpr (std::is_same_v<T, double>) {
    return x * factor;
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half> ||
                       std::is_same_v<T, __nv_bfloat16>) {
    return Conv<T>::from(Conv<T>::to(x) * static_cast<float>(factor));
  } else {  // integers: exact division for averages, else scale in double and truncate
    if (divisor > 1) return static_cast<T>(x / static_cast<T>(divisor));
    return static_cast<T>(static_cast<double>(x) * factor);
  }
}

template <typename T>
__global__ void copy_scaled(const CopyDesc* descs, int n, double factor, int64_t divisor) {
  for (int p = blockIdx.y; p < n; p += gridDim.y) {
    const CopyDesc d = descs[p];
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    auto* dst = static_cast<T*>(d.dst);
    const auto* src = static_cast<const T*>(d.src);
    for (int64_t i = tid; i < d.count; i += stride) {
      dst[i] = src ? scale_one<T>(src[i], factor, divisor) : Conv<T>::from(0.0f);
    }
  }
}

template <typename T>
cudaError_t launch_scaled(const CopyDesc* descs, int n, dim3 grid, const Scale& s,
                          cudaStream_t stream) {
  copy_scaled<T><<<grid, kThreads, 0, stream>>>(descs, n, s.factor, s.divisor);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_batched_copy(const CopyDesc* descs, int n, int64_t max_count, DataType dtype,
                                const Scale& scale, cudaStream_t stream) {
  if (n <= 0 || max_count <= 0) return cudaSuccess;
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const bool copy = scale.identity();
  // Threads along x cover the largest piece (16 bytes per thread for copies), capped so that
  // the whole grid stays around 64Ki blocks; blocks then stride.
  const int64_t per_thread = copy ? 16 : esize;
  const int64_t want_x = (max_count * esize + kThreads * per_thread - 1) / (kThreads * per_thread);
  const int y = std::min(n, kMaxBlocksY);
  const int64_t cap_x = std::max<int64_t>(1, kMaxBlocksTotal / y);
  dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min(want_x, cap_x))),
            static_cast<unsigned>(y));
  if (copy) {
    copy_bytes<<<grid, kThreads, 0, stream>>>(descs, n, static_cast<size_t>(esize));
    return cudaGetLastError();
  }
  switch (dtype) {
    case DataType::kUInt8:
      return launch_scaled<uint8_t>(descs, n, grid, scale, stream);
    case DataType::kInt8:
      return launch_scaled<int8_t>(descs, n, grid, scale, stream);
    case DataType::kInt32:
      return launch_scaled<int32_t>(descs, n, grid, scale, stream);
    case DataType::kInt64:
      return launch_scaled<int64_t>(descs, n, grid, scale, stream);
    case DataType::kFloat16:
      return launch_scaled<__half>(descs, n, grid, scale, stream);
    case DataType::kBFloat16:
      return launch_scaled<__nv_bfloat16>(descs, n, grid, scale, stream);
    case DataType::kFloat32:
      return launch_scaled<float>(descs, n, grid, scale, stream);
    case DataType::kFloat64:
      return launch_scaled<double>(descs, n, grid, scale, stream);
    default:
      return cudaErrorInvalidValue;  // int16, bool: never scaled on the device
  }
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
