// SPDX-License-Identifier: Apache-2.0
// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021) on
// host buffers over MPI, and the pairwise rule it applies, for tests.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd::ops {

/// The two coefficients of Adasum's combination of vectors a and b:
/// adasum(a, b) = a_coef * a + b_coef * b, with a_coef = 1 - dot / (2 |a|^2) and
/// b_coef = 1 - dot / (2 |b|^2), from dot = a.b, aa = |a|^2 and bb = |b|^2. A zero norm gives
/// that side the coefficient 1 (the side is zero: the result is the other vector), never NaN.
struct AdasumCoefficients {
  double a_coef = 1.0;
  double b_coef = 1.0;
};
AdasumCoefficients adasum_coefficients(double dot, double aa, double bb);

/// b = adasum(a, b) for `n` elements of `dtype` (float16, bfloat16, float32 or float64): the
/// dot product and norms accumulated in float64, float16/bfloat16 combined in float32. The
/// pairwise rule of adasum_allreduce on one tensor, with no communication.
void adasum_pair(const void* a, void* b, int64_t n, DataType dtype);

/// True for the dtypes Adasum reduces: float16, bfloat16, float32 and float64.
bool adasum_dtype_supported(DataType dtype);

/// Adasum-reduces, in place, `counts.size()` tensors laid out one after another at `data`
/// (tensor i has counts[i] elements of `dtype`: float16, bfloat16, float32 or float64) across
/// the ranks of `comm` (size a power of two), each tensor with its own dot products and norms,
/// accumulated in float64. `should_abort` (may be empty) is polled while waiting for peers.
///
/// Collective over `comm`: every rank calls it with the same counts and dtype. The recursion is
/// vector halving and distance doubling: at level k a rank trades half of its segment with rank
/// ^ (1 << k), and the dot products and norms of the pair's vectors are summed over the 2^(k+1)
/// ranks that hold pieces of them (one sub-communicator per level, created on the first call
/// and kept with `comm` until it is freed); the halves are then gathered back in reverse.
/// A size that is not a power of two, an unsupported dtype or a negative count is an
/// invalid_argument on every rank, before any communication. When a wait gave up on requests
/// MPI had not finished (should_abort or a dead peer), `*abandoned` (if given) is set: MPI may
/// still write into `data`, which the caller must then keep (see RequestBatch).
Status adasum_allreduce(void* data, const std::vector<int64_t>& counts, DataType dtype,
                        MPI_Comm comm, const std::function<Status()>& should_abort,
                        bool* abandoned = nullptr);

}  // namespace hvd::ops
