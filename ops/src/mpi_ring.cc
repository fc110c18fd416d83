// SPDX-License-Identifier: Apache-2.0
// Fused host allreduce without a fusion buffer: a ring reduce-scatter then a ring allgather
// over the tensors laid end to end, moving data straight between the tensors of neighbours.
// Timeline phases: pieces too small for their own message are packed into the gather buffer
// before a send ("copy_in") and, in the allgather phase, unpacked from the staging buffer into
// the tensors ("copy_out"); the rest of the ring, the staged reductions included, is the
// collective. Only large pieces: no copies, no copy phases.
#include <cstring>

#include "hvd/core/timeline.h"
#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/mpi_util.h"
#include "hvd/ops/ring_plan.h"

namespace hvd::ops {

using core::Response;
using core::TensorEntry;

namespace {
constexpr int kTagReduce = 0x6876;  // the data communicator carries no other point-to-point
constexpr int kTagGather = 0x6877;
// The timeline's name of the collective: point-to-point messages around the ring.
constexpr const char* kRingCall = "ring allreduce (MPI_Isend/MPI_Irecv)";
}  // namespace

bool MpiExecutor::ring_divides(MPI_Op op, DataType dtype, double post) {
  return post != 1.0 && op == MPI_SUM && folds_scale(dtype);
}

Status MpiExecutor::ring_allreduce(const Response& r, const std::vector<TensorEntry*>& entries,
                                   MPI_Datatype type, MPI_Op op, double post) {
  const DataType dt = r.dtype;
  const size_t es = dtype_size(dt);
  const int n = size_;
  std::vector<int64_t> numels(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    numels[i] = e->output.numel();
    // Everything happens in the outputs: each rank's contribution, prescaled, starts there.
    if (e->output.data != e->input.data && e->input.bytes()) {
      std::memcpy(e->output.data, e->input.data, e->input.bytes());
    }
    scale_in_place(e->output.data, dt, numels[i], r.prescale);
  }
  const int64_t direct = static_cast<int64_t>(kRingDirectBytes / es);
  std::vector<RingChunk> chunks;
  chunks.reserve(static_cast<size_t>(n));
  int64_t most = 0, most_packed = 0;
  for (int c = 0; c < n; ++c) {
    chunks.push_back(plan_ring_chunk(numels, n, c, direct, kMaxCount));
    most = std::max(most, chunks.back().elems);
    most_packed = std::max(most_packed, chunks.back().packed_elems);
  }
  uint8_t* staged = fusion_buffer(static_cast<size_t>(most) * es);         // what arrives
  uint8_t* packed = gather_buffer(static_cast<size_t>(most_packed) * es);  // small pieces out
  auto at = [&](const RingPiece& p) {
    return static_cast<uint8_t*>(entries[p.tensor]->output.data) + p.offset * es;
  };
  const int right = (rank_ + 1) % n, left = (rank_ + n - 1) % n;

  // One step: receive chunk `rc` from the left (direct pieces into `direct_to(piece)`, the pack
  // into staged at its offset), send chunk `sc` to the right from the tensors. The step waits
  // by polling, so a dead peer (should_abort_) ends it; an early return settles what is
  // outstanding (RequestBatch: receives cancelled, sends never).
  auto step = [&](const RingChunk& rc, const RingChunk& sc, int tag, bool direct_in_place) {
    RequestBatch batch(rc.pieces.size() + sc.pieces.size() + 2, &should_abort_, &abandoned_);
    for (size_t k = 0; k < rc.pieces.size(); ++k) {
      if (!rc.direct[k]) continue;
      void* dst = direct_in_place ? at(rc.pieces[k]) : staged + rc.staged_offset[k] * es;
      HVD_MPI_CHECK(MPI_Irecv(dst, static_cast<int>(rc.pieces[k].count), type, left, tag, comm_,
                              batch.add_recv()));
    }
    if (rc.packed_elems) {
      HVD_MPI_CHECK(MPI_Irecv(staged + (rc.elems - rc.packed_elems) * es,
                              static_cast<int>(rc.packed_elems), type, left, tag, comm_,
                              batch.add_recv()));
    }
    for (size_t k = 0; k < sc.pieces.size(); ++k) {
      if (!sc.direct[k]) continue;
      const RingPiece& p = sc.pieces[k];
      HVD_MPI_CHECK(MPI_Isend(at(p), static_cast<int>(p.count), type, right, tag, comm_,
                              batch.add_send(right)));
    }
    if (sc.packed_elems) {  // the small pieces, packed in order, as one message after them
      const int64_t pack_base = sc.elems - sc.packed_elems;
      {
        core::PhaseScope copy(core::Phase::kCopyIn);
        for (size_t k = 0; k < sc.pieces.size(); ++k) {
          if (sc.direct[k]) continue;
          std::memcpy(packed + (sc.staged_offset[k] - pack_base) * es, at(sc.pieces[k]),
                      static_cast<size_t>(sc.pieces[k].count) * es);
        }
      }
      HVD_MPI_CHECK(MPI_Isend(packed, static_cast<int>(sc.packed_elems), type, right, tag, comm_,
                              batch.add_send(right)));
    }
    return batch.wait();
  };

  // A sum's last reduction also divides for an Average: one pass over this rank's chunk.
  const bool fold_post = ring_divides(op, dt, post);
  core::PhaseScope call(core::Phase::kCollective, kRingCall);
  // Reduce-scatter: after n-1 steps this rank holds the reduction of chunk (rank + 1) % n.
  for (int s = 0; s < n - 1; ++s) {
    const RingChunk& rc = chunks[static_cast<size_t>((rank_ + 2 * n - s - 1) % n)];
    HVD_RETURN_IF_ERROR(
        step(rc, chunks[static_cast<size_t>((rank_ + n - s) % n)], kTagReduce, false));
    const bool last = s == n - 2;
    for (size_t k = 0; k < rc.pieces.size(); ++k) {
      const uint8_t* in = staged + rc.staged_offset[k] * es;
      if (last && fold_post) {
        sum_scaled(in, dt, rc.pieces[k].count, post, at(rc.pieces[k]));
      } else {
        HVD_MPI_CHECK(
            MPI_Reduce_local(in, at(rc.pieces[k]), static_cast<int>(rc.pieces[k].count), type, op));
      }
    }
  }
  if (!fold_post) {
    for (const RingPiece& p : chunks[static_cast<size_t>((rank_ + 1) % n)].pieces) {
      scale_in_place(at(p), dt, p.count, post);
    }
  }
  // Allgather: pass the reduced chunks around the ring, large pieces straight into the tensors.
  for (int s = 0; s < n - 1; ++s) {
    const RingChunk& rc = chunks[static_cast<size_t>((rank_ + n - s) % n)];
    HVD_RETURN_IF_ERROR(
        step(rc, chunks[static_cast<size_t>((rank_ + 1 + n - s) % n)], kTagGather, true));
    if (!rc.packed_elems) continue;  // every piece arrived in place
    core::PhaseScope copy(core::Phase::kCopyOut);
    for (size_t k = 0; k < rc.pieces.size(); ++k) {
      if (rc.direct[k]) continue;
      std::memcpy(at(rc.pieces[k]), staged + rc.staged_offset[k] * es,
                  static_cast<size_t>(rc.pieces[k].count) * es);
    }
  }
  return Status::OK();
}

}  // namespace hvd::ops
