// SPDX-License-Identifier: Apache-2.0
// Hierarchical allreduce (HVD_HIERARCHICAL_ALLREDUCE=1): NCCL reduce-scatter inside the node,
// MPI allreduce of each rank's slice across nodes (ranks with the same local rank), NCCL
// allgather inside the node. Average is a Sum here; the caller divides on the copy out.
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
  HVD_NCCL_CHECK(ncclReduceScatter(buf, mine, chunk, type, op, d->local, d->stream));
  if (d->cross_size > 1 && chunk > 0) {
    // Growing frees the pinned buffer an earlier response's copy back may still be reading.
    if (chunk * esize > d->host_stage.size) HVD_RETURN_IF_ERROR(d->finish());
    auto h = d->host_stage.get(chunk * esize);
    if (!h.ok()) return h.status();
    HVD_CUDA_CHECK(
        cudaMemcpyAsync(h.value(), mine, chunk * esize, cudaMemcpyDeviceToHost, d->stream));
    HVD_RETURN_IF_ERROR(d->finish());  // the host needs the slice (polls async errors)
    const MPI_Op mop = mpi_op(r.reduce_op);
    const int64_t n = static_cast<int64_t>(chunk);
    if (reduced_as_float(r.dtype)) {  // MPI cannot add halves: go through float
      auto f = d->host_float.get(chunk * 4);
      if (!f.ok()) return f.status();
      auto* fl = static_cast<float*>(f.value());
      widen_to_float(h.value(), r.dtype, n, 1.0, fl);
      HVD_MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, fl, static_cast<int>(n), MPI_FLOAT, mop, d->cross_mpi));
      narrow_from_float(fl, n, 1.0, r.dtype, h.value());
    } else {
      HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h.value(), static_cast<int>(n), mpi_type(r.dtype),
                                  mop, d->cross_mpi));
    }
    HVD_CUDA_CHECK(
        cudaMemcpyAsync(mine, h.value(), chunk * esize, cudaMemcpyHostToDevice, d->stream));
  }
  HVD_NCCL_CHECK(ncclAllGather(mine, buf, chunk, type, d->local, d->stream));
  return Status::OK();
}

}  // namespace hvd::ops::nccl
