// SPDX-License-Identifier: Apache-2.0
// Host reducescatter over MPI: each rank gets its slice of the reduced first dimension.
// Timeline phases: float16 / bfloat16 are widened into the fusion buffer ("copy_in") and
// narrowed from the gather buffer into the output ("copy_out"); other dtypes go straight from
// the input into the output ("collective" only), except that a prescale scales a copy of the
// input in the fusion buffer ("copy_in").
#include <algorithm>
#include <climits>
#include <cstring>

#include "hvd/core/timeline.h"
#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

using core::Response;
using core::TensorEntry;

namespace {
constexpr const char* kCall = "MPI_Reduce_scatter";  // the timeline's name of the collective
}  // namespace

int64_t reducescatter_rows(int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

int64_t reducescatter_start(int64_t rows, int size, int rank) {
  return rank * (rows / size) + std::min<int64_t>(rank, rows % size);
}

Status MpiExecutor::reducescatter(const Response& r, const std::vector<TensorEntry*>& es) {
  const DataType dt = r.dtype;
  const size_t esize = dtype_size(dt);
  const double post = r.postscale / (r.reduce_op == ReduceOp::kAverage ? size_ : 1);
  Status failed;  // an output allocator that failed: reported after the collectives
  for (auto* e : es) {
    const int64_t rows = e->input.shape[0];
    const int64_t row = r.numels.empty() ? 0 : r.numels[0];
    if (rows * row > INT_MAX) {
      return invalid_argument("reducescatter '" + e->request.name +
                              "': more than 2^31 - 1 elements in one MPI_Reduce_scatter call");
    }
    std::vector<int> counts(static_cast<size_t>(size_));
    for (int j = 0; j < size_; ++j) {
      counts[static_cast<size_t>(j)] = static_cast<int>(reducescatter_rows(rows, size_, j) * row);
    }
    std::vector<int64_t> shape = e->input.shape;
    shape[0] = reducescatter_rows(rows, size_, rank_);
    HVD_RETURN_IF_ERROR(core::allocate_output_or_own(e, shape, &failed));
    const int64_t total = rows * row, mine = shape[0] * row;
    static uint8_t dummy[8];
    void* out = e->output.data ? e->output.data : dummy;
    if (reduced_as_float(dt)) {  // accumulate float16 / bfloat16 in float32
      auto* buf = reinterpret_cast<float*>(fusion_buffer(static_cast<size_t>(total) * 4 + 4));
      auto* res = reinterpret_cast<float*>(gather_buffer(static_cast<size_t>(mine) * 4 + 4));
      {
        core::PhaseScope copy(core::Phase::kCopyIn);
        widen_to_float(e->input.data, dt, total, r.prescale, buf);
      }
      {
        core::PhaseScope call(core::Phase::kCollective, kCall);
        HVD_MPI_CHECK(MPI_Reduce_scatter(buf, res, counts.data(), MPI_FLOAT, MPI_SUM, comm_));
      }
      core::PhaseScope copy(core::Phase::kCopyOut);
      narrow_from_float(res, mine, post, dt, out);
      continue;
    }
    const void* send = e->input.data ? e->input.data : dummy;
    if (r.prescale != 1.0) {  // scale a copy: the input stays untouched
      core::PhaseScope copy(core::Phase::kCopyIn);
      uint8_t* buf = fusion_buffer(static_cast<size_t>(total) * esize + 1);
      if (total) std::memcpy(buf, e->input.data, static_cast<size_t>(total) * esize);
      scale_in_place(buf, dt, total, r.prescale);
      send = buf;
    }
    core::PhaseScope call(core::Phase::kCollective, kCall);
    HVD_MPI_CHECK(MPI_Reduce_scatter(send, out, counts.data(), mpi_type(dt), MPI_SUM, comm_));
    scale_in_place(out, dt, mine, post);
  }
  return failed;
}

}  // namespace hvd::ops
