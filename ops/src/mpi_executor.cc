// SPDX-License-Identifier: Apache-2.0
// Host collectives over MPI.
#include "hvd/ops/mpi_executor.h"

#include <algorithm>
#include <cstring>

#include "hvd/core/timeline.h"
#include "hvd/ops/adasum.h"
#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

using core::OpType;
using core::Response;
using core::TensorEntry;

// kFusedSlice: a fused slice and its copies stay in L2 (measured: 64 KiB 2.5x, 128 KiB 2.2x,
// 256 KiB 2.0x, unsliced 2.8x the raw call on 64 x 16 Ki floats).

MpiExecutor::MpiExecutor(MPI_Comm comm, std::chrono::milliseconds quiet,
                         std::function<Status()> should_abort)
    : comm_(comm), quiet_(quiet), should_abort_(std::move(should_abort)) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

namespace {

// The buffers of requests released unfinished: they fail at once but never let go.
class AbandonedTransfers : public core::Completion {
 public:
  explicit AbandonedTransfers(Status why) : why_(std::move(why)) {}

 protected:
  bool query(Status* s) override {
    *s = why_;
    return true;
  }
  bool work_stopped() override { return false; }

 private:
  Status why_;
};

}  // namespace

Status MpiExecutor::launch(const Response& r, const std::vector<TensorEntry*>& entries,
                           std::shared_ptr<core::Completion>* pending) {
  abandoned_ = false;
  Status s = execute(r, entries);
  if (abandoned_) {
    abandoned_ = false;
    for (auto* b : {&fusion_, &gather_}) {
      keep_forever(std::make_shared<core::HostBuffer>(std::move(*b)));
    }
    *pending = std::make_shared<AbandonedTransfers>(
        s.ok() ? internal_error(std::string(core::op_name(r.op)) +
                                ": MPI requests were released unfinished")
               : s);
  }
  return s;
}

uint8_t* MpiExecutor::fusion_buffer(size_t bytes) {
  if (bytes > kKeptBytes) last_large_ = std::chrono::steady_clock::now();
  fusion_.grow(bytes, kKeptBytes);
  return fusion_.data();
}

uint8_t* MpiExecutor::gather_buffer(size_t bytes) {
  if (bytes > kKeptBytes) last_large_ = std::chrono::steady_clock::now();
  gather_.grow(bytes, kKeptBytes);
  return gather_.data();
}

void MpiExecutor::release_if_quiet() {
  if (fusion_.size() <= kKeptBytes && gather_.size() <= kKeptBytes) return;
  if (std::chrono::steady_clock::now() - last_large_ < quiet_) return;
  for (auto* b : {&fusion_, &gather_}) {
    if (b->size() > kKeptBytes) b->reset();
  }
}

Status MpiExecutor::execute(const Response& r, const std::vector<TensorEntry*>& entries) {
  release_if_quiet();
  switch (r.op) {
    case OpType::kAllreduce:
      return allreduce(r, entries);
    case OpType::kBroadcast:
      return broadcast(r, entries);
    case OpType::kAllgather:
      return allgather(r, entries);
    case OpType::kAlltoall:
      return alltoall(r, entries);
    case OpType::kReducescatter:
      return reducescatter(r, entries);
    default:
      return invalid_argument(std::string(core::op_name(r.op)) +
                              " is not supported by the MPI executor yet");
  }
}

Status MpiExecutor::reduce_buffer(void* data, int64_t count, MPI_Datatype type, MPI_Op op) {
  int tsize = 0;
  MPI_Type_size(type, &tsize);
  auto* p = static_cast<uint8_t*>(data);
  core::PhaseScope call(core::Phase::kCollective, "MPI_Allreduce");
  for (int64_t off = 0; off < count; off += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, count - off));
    HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + off * tsize, n, type, op, comm_));
  }
  return Status::OK();
}

Status MpiExecutor::adasum(const Response& r, const std::vector<TensorEntry*>& entries) {
  const DataType dt = r.dtype;
  const size_t es = dtype_size(dt);
  std::vector<int64_t> counts;
  counts.reserve(entries.size());
  size_t total = 0;
  for (auto* e : entries) {
    counts.push_back(e->input.numel());
    total += e->input.bytes();
  }
  // One tensor in its output; several laid end to end in the fusion buffer (the dot products
  // need each whole tensor at once, so the batch is not sliced).
  const bool fused = entries.size() > 1;
  uint8_t* buf = fused ? fusion_buffer(total) : static_cast<uint8_t*>(entries[0]->output.data);
  {
    core::PhaseScope copy(core::Phase::kCopyIn);
    size_t off = 0;
    for (auto* e : entries) {
      const size_t b = e->input.bytes();
      if (buf + off != e->input.data && b) std::memcpy(buf + off, e->input.data, b);
      scale_in_place(buf + off, dt, e->input.numel(), r.prescale);
      off += b;
    }
  }
  {
    core::PhaseScope call(core::Phase::kCollective, "Adasum (MPI_Isend/MPI_Irecv)");
    HVD_RETURN_IF_ERROR(adasum_allreduce(buf, counts, dt, comm_, should_abort_, &abandoned_));
  }
  core::PhaseScope copy(core::Phase::kCopyOut);
  size_t off = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    if (fused && counts[i]) {
      std::memcpy(e->output.data, buf + off, static_cast<size_t>(counts[i]) * es);
    }
    scale_in_place(e->output.data, dt, counts[i], r.postscale);
    off += static_cast<size_t>(counts[i]) * es;
  }
  return Status::OK();
}

Status MpiExecutor::allreduce(const Response& r, const std::vector<TensorEntry*>& entries) {
  if (r.reduce_op == ReduceOp::kAdasum) return adasum(r, entries);
  const DataType dt = r.dtype;
  // Average divides by the set size, as Horovod: joined ranks contribute zeros.
  const double post = r.postscale / (r.reduce_op == ReduceOp::kAverage ? size_ : 1);
  const MPI_Op op = mpi_op(r.reduce_op);

  // Walks [start, start + len) of the tensors laid end to end (sizes_ in any unit):
  // f(tensor, offset in it, offset in the slice, count).
  auto walk = [&](size_t* first, size_t* first_off, size_t len, auto&& f) {
    size_t i = *first, off = *first_off, pos = 0;
    while (pos < len) {
      while (sizes_[i] == off) {  // skip finished and empty tensors
        ++i;
        off = 0;
      }
      const size_t n = std::min(len - pos, sizes_[i] - off);
      f(i, off, pos, n);
      pos += n;
      off += n;
    }
    *first = i;
    *first_off = off;
  };

  if (reduced_as_float(dt)) {
    // float16/bfloat16 through float32, in slices of kFusedSlice bytes of float: widened in,
    // reduced and narrowed out while in cache, and the buffer stays one slice however large
    // the tensors (a whole 1 GiB float16 tensor would need 2 GiB).
    sizes_.clear();
    size_t total = 0;
    for (auto* e : entries) {
      sizes_.push_back(static_cast<size_t>(e->input.numel()));
      total += sizes_.back();
    }
    const size_t es = dtype_size(dt);
    const size_t slice = std::min(total, kFusedSlice / sizeof(float));
    auto* buf = reinterpret_cast<float*>(fusion_buffer(slice * sizeof(float)));
    size_t in_i = 0, in_off = 0, out_i = 0, out_off = 0;
    for (size_t start = 0; start < total; start += slice) {
      const size_t len = std::min(slice, total - start);
      {
        core::PhaseScope copy(core::Phase::kCopyIn);
        walk(&in_i, &in_off, len, [&](size_t i, size_t off, size_t pos, size_t n) {
          widen_to_float(static_cast<const uint8_t*>(entries[i]->input.data) + off * es, dt,
                         static_cast<int64_t>(n), r.prescale, buf + pos);
        });
      }
      HVD_RETURN_IF_ERROR(reduce_buffer(buf, static_cast<int64_t>(len), MPI_FLOAT, op));
      core::PhaseScope copy(core::Phase::kCopyOut);
      walk(&out_i, &out_off, len, [&](size_t i, size_t off, size_t pos, size_t n) {
        narrow_from_float(buf + pos, static_cast<int64_t>(n), post, dt,
                          static_cast<uint8_t*>(entries[i]->output.data) + off * es);
      });
    }
    return Status::OK();
  }

  const MPI_Datatype type = mpi_type(dt);
  const size_t esize = dtype_size(dt);
  size_t total = 0, large = 0;
  sizes_.clear();
  for (auto* e : entries) {
    const size_t b = e->input.bytes();
    sizes_.push_back(b);
    total += b;
    if (b >= kRingDirectBytes) large += b;
  }
  // The ring saves the copies of tensors that travel as their own messages; small ones are
  // copied either way, and then one MPI_Allreduce beats the ring's extra calls.
  const bool ring = size_ > 1 && total >= kRingMinBytes && 2 * large >= total &&
                    total / esize <= static_cast<size_t>(kMaxCount);
  // One tensor is reduced in place by MPI_Allreduce (no fusion-buffer copy), unless the ring
  // can take it and divide as it reduces (an Average: one pass over the tensor instead of two).
  if (entries.size() == 1 && !(ring && ring_divides(op, dt, post))) {
    TensorEntry* e = entries[0];
    if (e->output.data != e->input.data && e->input.bytes()) {
      std::memcpy(e->output.data, e->input.data, e->input.bytes());
    }
    scale_in_place(e->output.data, dt, e->output.numel(), r.prescale);
    HVD_RETURN_IF_ERROR(reduce_buffer(e->output.data, e->output.numel(), type, op));
    scale_in_place(e->output.data, dt, e->output.numel(), post);
    return Status::OK();
  }
  if (ring) return ring_allreduce(r, entries, type, op, post);
  // Fused: the tensors are laid end to end in a virtual buffer that is reduced in slices of
  // kFusedSlice bytes, each copied in, reduced and copied out while it is still in cache (one
  // big copy in, reduce and copy out costs more in memory traffic than the reduction itself).
  const size_t slice = std::min(total, kFusedSlice - kFusedSlice % esize);
  uint8_t* buf = fusion_buffer(slice);
  const bool prescale = r.prescale != 1.0;
  // An Average's division joins the copy out (float32/float64), else a pass of its own.
  const bool fold_post = post != 1.0 && folds_scale(dt);
  size_t in_i = 0, in_off = 0, out_i = 0, out_off = 0;
  for (size_t start = 0; start < total; start += slice) {
    const size_t len = std::min(slice, total - start);
    {
      core::PhaseScope copy(core::Phase::kCopyIn);
      walk(&in_i, &in_off, len, [&](size_t i, size_t off, size_t pos, size_t n) {
        std::memcpy(buf + pos, static_cast<const uint8_t*>(entries[i]->input.data) + off, n);
        if (prescale) scale_in_place(buf + pos, dt, static_cast<int64_t>(n / esize), r.prescale);
      });
    }
    HVD_RETURN_IF_ERROR(reduce_buffer(buf, static_cast<int64_t>(len / esize), type, op));
    if (!fold_post) scale_in_place(buf, dt, static_cast<int64_t>(len / esize), post);
    core::PhaseScope copy(core::Phase::kCopyOut);
    walk(&out_i, &out_off, len, [&](size_t i, size_t off, size_t pos, size_t n) {
      void* dst = static_cast<uint8_t*>(entries[i]->output.data) + off;
      if (fold_post) {
        copy_scaled(buf + pos, dt, static_cast<int64_t>(n / esize), post, dst);
      } else {
        std::memcpy(dst, buf + pos, n);
      }
    });
  }
  return Status::OK();
}

Status MpiExecutor::broadcast(const Response& r, const std::vector<TensorEntry*>& entries) {
  for (auto* e : entries) {
    if (rank_ == r.root && e->output.data != e->input.data) {
      if (e->input.bytes()) std::memcpy(e->output.data, e->input.data, e->input.bytes());
    }
    auto* p = static_cast<uint8_t*>(e->output.data);
    int64_t bytes = static_cast<int64_t>(e->output.bytes());
    core::PhaseScope call(core::Phase::kCollective, "MPI_Bcast");
    for (int64_t off = 0; off < bytes; off += kMaxCount) {
      int n = static_cast<int>(std::min(kMaxCount, bytes - off));
      HVD_MPI_CHECK(MPI_Bcast(p + off, n, MPI_BYTE, r.root, comm_));
    }
  }
  return Status::OK();
}

}  // namespace hvd::ops
