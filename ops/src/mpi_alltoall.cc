// SPDX-License-Identifier: Apache-2.0
// Host alltoall over MPI: rows of the first dimension to each rank, by the negotiated splits,
// straight from the input into the output (timeline: "collective" only, no copies).
#include <climits>

#include "hvd/core/timeline.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

using core::Response;
using core::TensorEntry;

Status MpiExecutor::alltoall(const Response& r, const std::vector<TensorEntry*>& es) {
  const size_t n = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  if (r.rank_rows.size() != n * n || r.numels.size() != es.size()) {
    return internal_error("alltoall '" + r.names.front() + "': malformed response");
  }
  // rank_rows[i * n + j]: rows rank i sends to rank j (one matrix: alltoall is never fused).
  const int64_t row = r.numels[0];
  Status failed;  // an output allocator that failed: reported after the collectives
  for (auto* e : es) {
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    int64_t soff = 0, roff = 0;
    std::vector<int64_t> received(n);
    for (size_t j = 0; j < n; ++j) {
      const int64_t s = r.rank_rows[me * n + j] * row, q = r.rank_rows[j * n + me] * row;
      if (soff + s > INT_MAX || roff + q > INT_MAX) {
        return invalid_argument("alltoall '" + e->request.name +
                                "': more than 2^31 - 1 elements in one MPI_Alltoallv call");
      }
      sc[j] = static_cast<int>(s);
      sd[j] = static_cast<int>(soff);
      rc[j] = static_cast<int>(q);
      rd[j] = static_cast<int>(roff);
      soff += s;
      roff += q;
      received[j] = r.rank_rows[j * n + me];
    }
    std::vector<int64_t> shape = e->input.shape;
    shape[0] = 0;
    for (int64_t x : received) shape[0] += x;
    HVD_RETURN_IF_ERROR(core::allocate_output_or_own(e, shape, &failed));
    static uint8_t dummy[8];
    const void* in = e->input.data ? e->input.data : dummy;
    void* out = e->output.data ? e->output.data : dummy;
    const MPI_Datatype type = mpi_type(r.dtype);
    core::PhaseScope call(core::Phase::kCollective, "MPI_Alltoallv");
    HVD_MPI_CHECK(
        MPI_Alltoallv(in, sc.data(), sd.data(), type, out, rc.data(), rd.data(), type, comm_));
    e->handle->extra().received_splits = std::move(received);
  }
  return failed;
}

}  // namespace hvd::ops
