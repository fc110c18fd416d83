// SPDX-License-Identifier: Apache-2.0
// Host collectives over MPI.
#include "hvd/ops/mpi_executor.h"

#include <algorithm>
#include <cstring>

#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

using core::OpType;
using core::Response;
using core::TensorEntry;

namespace {
constexpr int64_t kMaxCount = 1LL << 30;
}

MpiExecutor::MpiExecutor(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

uint8_t* MpiExecutor::fusion_buffer(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

uint8_t* MpiExecutor::gather_buffer(size_t bytes) {
  if (gather_.size() < bytes) gather_.resize(bytes);
  return gather_.data();
}

Status MpiExecutor::execute(const Response& r, const std::vector<TensorEntry*>& entries) {
  switch (r.op) {
    case OpType::kAllreduce: return allreduce(r, entries);
    case OpType::kBroadcast: return broadcast(r, entries);
    case OpType::kAllgather: return allgather(r, entries);
    case OpType::kAlltoall: return alltoall(r, entries);
    case OpType::kReducescatter: return reducescatter(r, entries);
    default:
      return invalid_argument(std::string(core::op_name(r.op)) +
                              " is not supported by the MPI executor yet");
  }
}

Status MpiExecutor::reduce_buffer(void* data, int64_t count, MPI_Datatype type, MPI_Op op) {
  int tsize = 0;
  MPI_Type_size(type, &tsize);
  auto* p = static_cast<uint8_t*>(data);
  for (int64_t off = 0; off < count; off += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, count - off));
    HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * tsize, n, type, op, comm_));
  }
  return Status::OK();
}

Status MpiExecutor::allreduce(const Response& r, const std::vector<TensorEntry*>& entries) {
  const DataType dt = r.dtype;
  // Average divides by the ranks that contributed data: joined ranks only add zeros.
  const int contributors = size_ - static_cast<int>(r.joined.size());
  const double post = r.postscale / (r.reduce_op == ReduceOp::kAverage ? contributors : 1);
  const MPI_Op op = mpi_op(r.reduce_op);

  if (reduced_as_float(dt)) {
    int64_t total = 0;
    for (auto* e : entries) total += e->input.numel();
    auto* buf = reinterpret_cast<float*>(fusion_buffer(static_cast<size_t>(total) * 4));
    int64_t off = 0;
    for (auto* e : entries) {
      widen_to_float(e->input.data, dt, e->input.numel(), r.prescale, buf + off);
      off += e->input.numel();
    }
    HVD_RETURN_IF_ERROR(reduce_buffer(buf, total, MPI_FLOAT, op));
    off = 0;
    for (auto* e : entries) {
      narrow_from_float(buf + off, e->output.numel(), post, dt, e->output.data);
      off += e->output.numel();
    }
    return Status::OK();
  }

  const MPI_Datatype type = mpi_type(dt);
  const size_t esize = dtype_size(dt);
  if (entries.size() == 1) {  // in place, no fusion-buffer copy
    TensorEntry* e = entries[0];
    if (e->output.data != e->input.data) std::memcpy(e->output.data, e->input.data, e->input.bytes());
    scale_in_place(e->output.data, dt, e->output.numel(), r.prescale);
    HVD_RETURN_IF_ERROR(reduce_buffer(e->output.data, e->output.numel(), type, op));
    scale_in_place(e->output.data, dt, e->output.numel(), post);
    return Status::OK();
  }
  size_t total = 0;
  for (auto* e : entries) total += e->input.bytes();
  uint8_t* buf = fusion_buffer(total);
  size_t off = 0;
  for (auto* e : entries) {
    std::memcpy(buf + off, e->input.data, e->input.bytes());
    scale_in_place(buf + off, dt, e->input.numel(), r.prescale);
    off += e->input.bytes();
  }
  HVD_RETURN_IF_ERROR(reduce_buffer(buf, static_cast<int64_t>(total / esize), type, op));
  off = 0;
  for (auto* e : entries) {
    scale_in_place(buf + off, dt, e->output.numel(), post);
    std::memcpy(e->output.data, buf + off, e->output.bytes());
    off += e->output.bytes();
  }
  return Status::OK();
}

Status MpiExecutor::broadcast(const Response& r, const std::vector<TensorEntry*>& entries) {
  for (auto* e : entries) {
    if (rank_ == r.root && e->output.data != e->input.data) {
      std::memcpy(e->output.data, e->input.data, e->input.bytes());
    }
    auto* p = static_cast<uint8_t*>(e->output.data);
    int64_t bytes = static_cast<int64_t>(e->output.bytes());
    for (int64_t off = 0; off < bytes; off += kMaxCount) {
      int n = static_cast<int>(std::min(kMaxCount, bytes - off));
      HVD_MPI_CHECK(MPI_Bcast(p + off, n, MPI_BYTE, r.root, comm_));
    }
  }
  return Status::OK();
}

}  // namespace hvd::ops
