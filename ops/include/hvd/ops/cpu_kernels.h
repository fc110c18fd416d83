// SPDX-License-Identifier: Apache-2.0
// CPU kernels: scaling and float16/bfloat16 <-> float32 conversion for host collectives.
#pragma once

#include <cstdint>

#include "hvd/core/types.h"

namespace hvd::ops {

/// data[i] *= factor, for every dtype except bool. Integers are scaled in double and truncated
/// toward zero, except that an exact 1/n factor divides (so Average of ints truncates).
void scale_in_place(void* data, DataType dtype, int64_t n, double factor);
/// dst[i] = float(src[i]) * factor, for float16 / bfloat16 sources.
void widen_to_float(const void* src, DataType dtype, int64_t n, double factor, float* dst);
/// dst[i] = narrow(src[i] * factor), for float16 / bfloat16 destinations.
void narrow_from_float(const float* src, int64_t n, double factor, DataType dtype, void* dst);
/// True for the dtypes of copy_scaled and sum_scaled: float32 and float64.
inline bool folds_scale(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; }
/// dst[i] = src[i] * factor in one pass (a copy out and an Average's division together).
/// folds_scale(dtype) only.
void copy_scaled(const void* src, DataType dtype, int64_t n, double factor, void* dst);
/// inout[i] = (inout[i] + in[i]) * factor in one pass (a sum's last reduction and an Average's
/// division together, the same arithmetic as the two passes). folds_scale(dtype) only.
void sum_scaled(const void* in, DataType dtype, int64_t n, double factor, void* inout);
/// True for the dtypes reduced through a float32 buffer.
inline bool reduced_as_float(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16;
}

}  // namespace hvd::ops
