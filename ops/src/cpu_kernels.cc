// SPDX-License-Identifier: Apache-2.0
// CPU kernels for host collectives. Built with -O3 (ops/CMakeLists.txt): GCC's -O2 leaves
// these loops scalar.
#include "hvd/ops/cpu_kernels.h"

#include <cmath>

namespace hvd::ops {
namespace {

template <typename T>
void scale_int(T* p, int64_t n, double factor) {
  double inv = 1.0 / factor;
  double r = std::round(inv);
  if (factor < 1.0 && r >= 2.0 && std::fabs(inv - r) < 1e-9) {
    T d = static_cast<T>(r);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
    return;
  }
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<double>(p[i]) * factor);
}

template <typename T>
void scale_float(T* p, int64_t n, double factor) {
  T f = static_cast<T>(factor);
  for (int64_t i = 0; i < n; ++i) p[i] *= f;
}

template <typename T>
void copy_scaled_as(const T* src, int64_t n, double factor, T* dst) {
  const T f = static_cast<T>(factor);
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * f;
}

template <typename T>
void sum_scaled_as(const T* in, int64_t n, double factor, T* inout) {
  const T f = static_cast<T>(factor);
  for (int64_t i = 0; i < n; ++i) inout[i] = (inout[i] + in[i]) * f;
}

}  // namespace

void copy_scaled(const void* src, DataType dtype, int64_t n, double factor, void* dst) {
  if (dtype == DataType::kFloat64) {
    copy_scaled_as(static_cast<const double*>(src), n, factor, static_cast<double*>(dst));
  } else {
    copy_scaled_as(static_cast<const float*>(src), n, factor, static_cast<float*>(dst));
  }
}

void sum_scaled(const void* in, DataType dtype, int64_t n, double factor, void* inout) {
  if (dtype == DataType::kFloat64) {
    sum_scaled_as(static_cast<const double*>(in), n, factor, static_cast<double*>(inout));
  } else {
    sum_scaled_as(static_cast<const float*>(in), n, factor, static_cast<float*>(inout));
  }
}

void scale_in_place(void* data, DataType dtype, int64_t n, double factor) {
  if (factor == 1.0 || n == 0) return;
  switch (dtype) {
    case DataType::kUInt8:
      scale_int(static_cast<uint8_t*>(data), n, factor);
      break;
    case DataType::kInt8:
      scale_int(static_cast<int8_t*>(data), n, factor);
      break;
    case DataType::kInt16:
      scale_int(static_cast<int16_t*>(data), n, factor);
      break;
    case DataType::kInt32:
      scale_int(static_cast<int32_t*>(data), n, factor);
      break;
    case DataType::kInt64:
      scale_int(static_cast<int64_t*>(data), n, factor);
      break;
    case DataType::kFloat32:
      scale_float(static_cast<float*>(data), n, factor);
      break;
    case DataType::kFloat64:
      scale_float(static_cast<double*>(data), n, factor);
      break;
    case DataType::kFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) {
        p[i] = float_to_half(static_cast<float>(half_to_float(p[i]) * factor));
      }
      break;
    }
    case DataType::kBFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) {
        p[i] = float_to_bf16(static_cast<float>(bf16_to_float(p[i]) * factor));
      }
      break;
    }
    case DataType::kBool:
      break;
  }
}

void widen_to_float(const void* src, DataType dtype, int64_t n, double factor, float* dst) {
  const auto* p = static_cast<const uint16_t*>(src);
  const float f = static_cast<float>(factor);
  if (dtype == DataType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(p[i]) * f;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(p[i]) * f;
  }
}

void narrow_from_float(const float* src, int64_t n, double factor, DataType dtype, void* dst) {
  auto* p = static_cast<uint16_t*>(dst);
  const float f = static_cast<float>(factor);
  if (dtype == DataType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) p[i] = float_to_half(src[i] * f);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(src[i] * f);
  }
}

}  // namespace hvd::ops
