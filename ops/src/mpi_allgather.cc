// SPDX-License-Identifier: Apache-2.0
// Host allgather over MPI: ragged first dimension, fused or straight into the output.
// Timeline phases: one tensor goes straight from its input into its output ("collective"
// only); fused tensors are copied into the fusion buffer ("copy_in"), gathered into the gather
// buffer and copied out of it into their outputs ("copy_out").
#include <climits>
#include <cstring>

#include "hvd/core/timeline.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

using core::Response;
using core::TensorEntry;

namespace {

std::vector<int64_t> with_rows(int64_t rows, const std::vector<int64_t>& shape) {
  std::vector<int64_t> s = {rows};
  s.insert(s.end(), shape.begin() + 1, shape.end());
  return s;
}

}  // namespace

Status MpiExecutor::allgather(const Response& r, const std::vector<TensorEntry*>& es) {
  const size_t n = static_cast<size_t>(size_), k = es.size();
  if (r.rank_rows.size() != n * k || r.numels.size() != k) {
    return internal_error("allgather '" + r.names.front() + "': malformed response (" +
                          std::to_string(r.rank_rows.size()) + " row counts for " +
                          std::to_string(k) + " tensors x " + std::to_string(n) + " ranks)");
  }
  auto rows = [&](size_t i, size_t j) { return r.rank_rows[i * n + j]; };
  // Counts in elements of the dtype (so 2^31 elements, not bytes, is the per-call limit).
  std::vector<int64_t> counts(n, 0);
  Status failed;  // an output allocator that failed: reported after the collective
  for (size_t i = 0; i < k; ++i) {
    const TensorEntry* e = es[i];
    if (e->input.shape.empty() || e->input.shape[0] != rows(i, static_cast<size_t>(rank_))) {
      return internal_error("allgather '" + r.names[i] + "': input shape " +
                            shape_str(e->input.shape) + " does not match the negotiated " +
                            std::to_string(rows(i, static_cast<size_t>(rank_))) + " rows");
    }
    int64_t total = 0;
    for (size_t j = 0; j < n; ++j) {
      total += rows(i, j);
      counts[j] += rows(i, j) * r.numels[i];
    }
    HVD_RETURN_IF_ERROR(
        core::allocate_output_or_own(es[i], with_rows(total, e->input.shape), &failed));
  }
  std::vector<int> icounts(n), idispls(n);
  int64_t all = 0;
  for (size_t j = 0; j < n; ++j) all += counts[j];
  int64_t off = 0;
  for (size_t j = 0; j < n; ++j) {
    // MPI counts and displacements are ints: each rank's part, and where it starts in the
    // output, must stay below 2^31 elements.
    if (counts[j] > INT_MAX || off > INT_MAX) {
      return invalid_argument(core::describe(r.op, r.names.front()) + ": the gathered output has " +
                              std::to_string(all) + " elements (rank " + std::to_string(j) +
                              " sends " + std::to_string(counts[j]) + " from element " +
                              std::to_string(off) +
                              "); one MPI_Allgatherv call takes at most 2^31 - 1 elements per "
                              "rank and offsets below 2^31: split the tensor");
    }
    icounts[j] = static_cast<int>(counts[j]);
    idispls[j] = static_cast<int>(off);
    off += counts[j];
  }
  const MPI_Datatype type = mpi_type(r.dtype);
  const size_t esize = dtype_size(r.dtype);
  const int mine = icounts[static_cast<size_t>(rank_)];
  if (k == 1) {  // straight from the input into the output: no copies
    static uint8_t dummy[8];
    void* out = es[0]->output.data ? es[0]->output.data : dummy;
    const void* in = es[0]->input.data ? es[0]->input.data : dummy;
    core::PhaseScope call(core::Phase::kCollective, "MPI_Allgatherv");
    HVD_MPI_CHECK(MPI_Allgatherv(in, mine, type, out, icounts.data(), idispls.data(), type, comm_));
    return failed;
  }
  uint8_t* send = fusion_buffer(static_cast<size_t>(mine) * esize + 1);
  uint8_t* recv = gather_buffer(static_cast<size_t>(off) * esize + 1);
  std::vector<size_t> out_off(k, 0);
  size_t pos = 0;
  {
    core::PhaseScope copy(core::Phase::kCopyIn);
    for (auto* e : es) {
      if (e->input.bytes()) std::memcpy(send + pos, e->input.data, e->input.bytes());
      pos += e->input.bytes();
    }
  }
  {
    core::PhaseScope call(core::Phase::kCollective, "MPI_Allgatherv");
    HVD_MPI_CHECK(
        MPI_Allgatherv(send, mine, type, recv, icounts.data(), idispls.data(), type, comm_));
  }
  // Rank j's block holds its rows of tensor 0, then of tensor 1, ...
  core::PhaseScope copy(core::Phase::kCopyOut);
  pos = 0;
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) {
      const size_t b = static_cast<size_t>(rows(i, j) * r.numels[i]) * esize;
      if (b) std::memcpy(static_cast<uint8_t*>(es[i]->output.data) + out_off[i], recv + pos, b);
      out_off[i] += b;
      pos += b;
    }
  }
  return failed;
}

}  // namespace hvd::ops
