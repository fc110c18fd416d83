// SPDX-License-Identifier: Apache-2.0
// Hierarchical allreduce (HVD_HIERARCHICAL_ALLREDUCE=1): NCCL reduce-scatter inside the node,
// MPI allreduce of each rank's slice across nodes (ranks with the same local rank), NCCL
// allgather inside the node. Average is a Sum here; the caller divides on the copy out.
#include <algorithm>
#include <vector>

#include "device_state.h"
#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/mpi_util.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::ops::nccl {

Status NcclExecutor::hierarchical_allreduce(DeviceState* d, void* data, int64_t count,
                                            const core::Response& r) {
  ncclDataType_t type;
  if (!nccl_type(r.dtype, &type)) return invalid_argument("hierarchical allreduce: bad dtype");
  const ncclRedOp_t op = nccl_base_op(r.reduce_op);
  const size_t esize = dtype_size(r.dtype);
  const size_t chunk = static_cast<size_t>(count / d->local_size);  // count is padded
  auto* buf = static_cast<uint8_t*>(data);
  uint8_t* mine = buf + static_cast<size_t>(d->local_rank) * chunk * esize;
  HVD_NCCL_ENQUEUE(d->local, ncclReduceScatter(buf, mine, chunk, type, op, d->local, d->stream));
  if (d->cross_size > 1 && chunk > 0) {
    auto h = d->host_stage.get(chunk * esize);
    if (!h.ok()) return d->fail_response(h.status());
    HVD_CUDA_CHECK(
        cudaMemcpyAsync(h.value(), mine, chunk * esize, cudaMemcpyDeviceToHost, d->stream));
    HVD_RETURN_IF_ERROR(d->finish());  // the host needs the slice (polls async errors)
    const MPI_Op mop = mpi_op(r.reduce_op);
    const int64_t n = static_cast<int64_t>(chunk);
    // MPI counts are ints: pieces of at most 2^30 elements.
    auto cross_allreduce = [&](void* p, MPI_Datatype t, size_t tsize) -> Status {
      constexpr int64_t kPiece = int64_t{1} << 30;
      for (int64_t at = 0; at < n; at += kPiece) {
        HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, static_cast<uint8_t*>(p) + at * tsize,
                                    static_cast<int>(std::min(kPiece, n - at)), t, mop,
                                    d->cross_mpi));
      }
      return Status::OK();
    };
    if (reduced_as_float(r.dtype)) {  // MPI cannot add halves: go through float
      auto f = d->host_float.get(chunk * 4);
      if (!f.ok()) return d->fail_response(f.status());
      auto* fl = static_cast<float*>(f.value());
      widen_to_float(h.value(), r.dtype, n, 1.0, fl);
      HVD_RETURN_IF_ERROR(cross_allreduce(fl, MPI_FLOAT, 4));
      narrow_from_float(fl, n, 1.0, r.dtype, h.value());
    } else {
      HVD_RETURN_IF_ERROR(cross_allreduce(h.value(), mpi_type(r.dtype), esize));
    }
    HVD_CUDA_CHECK(
        cudaMemcpyAsync(mine, h.value(), chunk * esize, cudaMemcpyHostToDevice, d->stream));
  }
  HVD_NCCL_ENQUEUE(d->local, ncclAllGather(mine, buf, chunk, type, d->local, d->stream));
  return Status::OK();
}

}  // namespace hvd::ops::nccl
