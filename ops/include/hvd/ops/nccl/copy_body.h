// SPDX-License-Identifier: Apache-2.0
// One thread's share of a batched-copy piece: the body of the NCCL executor's copy kernels
// (kernels.cu), written once for the device and the host so that the [unit] tests replay a whole
// launch grid on the CPU (alignment, tails, zero fill, scaling of every dtype).
// Thread `tid` of `stride` threads working on piece `d` handles elements tid, tid + stride, ...
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hvd/core/types.h"
#include "hvd/ops/nccl/plan.h"

#ifdef __CUDACC__
#define HVD_HOST_DEVICE __host__ __device__
#else
#define HVD_HOST_DEVICE
#endif

namespace hvd::ops::nccl::body {

/// Copies (or zeroes, when `src` is null) the first whole words of W; returns their bytes.
template <typename W>
HVD_HOST_DEVICE inline size_t copy_words(const unsigned char* src, unsigned char* dst, size_t bytes,
                                         size_t tid, size_t stride) {
  const size_t words = bytes / sizeof(W);
  auto* d = reinterpret_cast<W*>(dst);
  if (src == nullptr) {
    for (size_t i = tid; i < words; i += stride) d[i] = W{};
  } else {
    const auto* s = reinterpret_cast<const W*>(src);
    for (size_t i = tid; i < words; i += stride) d[i] = s[i];
  }
  return words * sizeof(W);
}

/// A pure copy (or zero fill when d.src is null) in the widest words both pointers' alignment
/// allows (16, 8, 4 or 2 bytes), then the tail byte by byte.
HVD_HOST_DEVICE inline void copy_bytes(const CopyDesc& d, size_t esize, size_t tid, size_t stride) {
  const size_t bytes = static_cast<size_t>(d.count) * esize;
  auto* dst = static_cast<unsigned char*>(d.dst);
  const auto* src = static_cast<const unsigned char*>(d.src);
  const uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  size_t done = 0;
  if ((align & 15) == 0) {
    done = copy_words<uint4>(src, dst, bytes, tid, stride);
  } else if ((align & 7) == 0) {
    done = copy_words<uint2>(src, dst, bytes, tid, stride);
  } else if ((align & 3) == 0) {
    done = copy_words<unsigned int>(src, dst, bytes, tid, stride);
  } else if ((align & 1) == 0) {
    done = copy_words<unsigned short>(src, dst, bytes, tid, stride);
  }
  for (size_t i = done + tid; i < bytes; i += stride) dst[i] = src ? src[i] : 0;
}

template <typename T>
struct Conv {
  HVD_HOST_DEVICE static float to(T x) { return static_cast<float>(x); }
  HVD_HOST_DEVICE static T from(float x) { return static_cast<T>(x); }
};
template <>
struct Conv<__half> {
  HVD_HOST_DEVICE static float to(__half x) { return __half2float(x); }
  HVD_HOST_DEVICE static __half from(float x) { return __float2half_rn(x); }
};
template <>
struct Conv<__nv_bfloat16> {
  HVD_HOST_DEVICE static float to(__nv_bfloat16 x) { return __bfloat162float(x); }
  HVD_HOST_DEVICE static __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};

/// x scaled as the host executor scales: double in double, float / float16 / bfloat16 in
/// float, integers divided exactly by `divisor` (> 1, an average) or multiplied in double and
/// truncated.
template <typename T>
HVD_HOST_DEVICE inline T scale_one(T x, double factor, int64_t divisor) {
  if constexpr (std::is_same_v<T, double>) {
    return x * factor;
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __half> ||
                       std::is_same_v<T, __nv_bfloat16>) {
    return Conv<T>::from(Conv<T>::to(x) * static_cast<float>(factor));
  } else {
    if (divisor > 1) return static_cast<T>(static_cast<int64_t>(x) / divisor);
    return static_cast<T>(static_cast<double>(x) * factor);
  }
}

/// A scaled copy element by element (zeros when d.src is null).
template <typename T>
HVD_HOST_DEVICE inline void copy_scaled(const CopyDesc& d, double factor, int64_t divisor,
                                        int64_t tid, int64_t stride) {
  auto* dst = static_cast<T*>(d.dst);
  const auto* src = static_cast<const T*>(d.src);
  for (int64_t i = tid; i < d.count; i += stride) {
    dst[i] = src ? scale_one<T>(src[i], factor, divisor) : Conv<T>::from(0.0f);
  }
}

/// Calls `f(T{})` with the element type of `t` for the 8 dtypes the device scales (uint8, int8,
/// int32, int64, float16, bfloat16, float32, float64); returns false for any other (int16,
/// bool: never scaled on the device). The one dtype switch of the kernels and their replay.
template <typename F>
bool visit_scaled_type(DataType t, F&& f) {
  switch (t) {
    case DataType::kUInt8:
      f(uint8_t{});
      return true;
    case DataType::kInt8:
      f(int8_t{});
      return true;
    case DataType::kInt32:
      f(int32_t{});
      return true;
    case DataType::kInt64:
      f(int64_t{});
      return true;
    case DataType::kFloat16:
      f(__half{});
      return true;
    case DataType::kBFloat16:
      f(__nv_bfloat16{});
      return true;
    case DataType::kFloat32:
      f(float{});
      return true;
    case DataType::kFloat64:
      f(double{});
      return true;
    default:
      return false;
  }
}

}  // namespace hvd::ops::nccl::body
