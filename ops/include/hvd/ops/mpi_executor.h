// SPDX-License-Identifier: Apache-2.0
// Host-memory collectives over MPI, with the persistent fusion buffer.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <vector>

#include "hvd/core/executor.h"
#include "hvd/core/host_buffer.h"

namespace hvd::ops {

/// Runs negotiated responses on host tensors with MPI on a communicator dedicated to data (so
/// data never interleaves with negotiation). Fused allreduces are copied into one persistent
/// buffer (prescale applied on the way in, postscale and averaging on the way out), reduced
/// once, and copied back; a single tensor is reduced in place. float16 and bfloat16 are reduced
/// through float32 so the accumulation is in float.
///
/// allgather: one MPI_Allgatherv; a single tensor goes straight from its input into the output,
/// fused tensors through a send buffer laid out tensor after tensor and a receive buffer laid out
/// rank after rank (each rank's block holding its rows of every tensor in name order).
/// alltoall: MPI_Alltoallv with the split matrix negotiation already agreed (no count exchange).
/// reducescatter: MPI_Reduce_scatter; rank i gets rows [start_i, start_i + rows_i) of the
/// reduced tensor, where the first `rows % size` ranks get `rows / size + 1` rows and the rest
/// `rows / size` (so with fewer rows than ranks the last ranks get empty slices).
/// Joined ranks (Response::joined) are not counted when averaging.
///
/// Adasum (ReduceOp::kAdasum): adasum_allreduce (adasum.h) on the output of a single tensor, or
/// on the whole fused batch laid out tensor after tensor in the fusion buffer (each tensor with
/// its own dot products), prescale applied before and postscale after, as for Sum.
///
/// Buffers: a fused allreduce (float16/bfloat16 through float32 too) uses one slice of
/// kFusedSlice bytes, however large its tensors; the ring stages at most its largest chunk and
/// fused allgathers their whole output. Both buffers are core::HostBuffer (huge pages): one
/// 2 MiB page each in steady use (kKeptBytes); a buffer grown past that is released by the
/// first response after `quiet` passed without one needing that much.
class MpiExecutor : public core::Executor {
 public:
  /// `should_abort` (null: never): asked while the ring waits for its peers; an error ends the
  /// ring's wait (a dead peer, the runtime aborting) and fails the response with it.
  explicit MpiExecutor(MPI_Comm comm, std::chrono::milliseconds quiet = kBufferQuiet,
                       std::function<Status()> should_abort = {});
  Status execute(const core::Response& r, const std::vector<core::TensorEntry*>& entries) override;
  /// execute(); when the ring gave up on requests MPI had not finished (a dead peer, an abort:
  /// RequestBatch), MPI may still read or write the tensors and this executor's buffers
  /// through them: `*pending` is then work that never lets go, so the handles never report
  /// their buffers released (the bindings keep them until the process exits), and this
  /// executor's buffers are kept until then too. A deliberate leak, bounded by what one failed
  /// collective holds (the runtime stops after it).
  Status launch(const core::Response& r, const std::vector<core::TensorEntry*>& entries,
                std::shared_ptr<core::Completion>* pending) override;
  std::string name() const override { return "mpi"; }
  /// Bytes held by the persistent buffers (capacity).
  size_t buffer_bytes() const { return fusion_.size() + gather_.size(); }

  /// Bytes of one fused slice (what a fused allreduce uses of the fusion buffer).
  static constexpr size_t kFusedSlice = 256 << 10;
  /// Bytes each buffer keeps in steady use: one whole huge page (a smaller buffer would not get
  /// one), which holds a fused slice.
  static constexpr size_t kKeptBytes = core::HostBuffer::kHugePage;
  /// Default time after which buffers grown past kKeptBytes are released.
  static constexpr std::chrono::milliseconds kBufferQuiet{10000};

 private:
  Status allreduce(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  Status broadcast(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  Status allgather(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  Status alltoall(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  Status reducescatter(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  Status adasum(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  /// Fused allreduce of native dtypes by ring reduce-scatter + allgather over point-to-point
  /// messages straight between the tensors (mpi_ring.cc): no copy into a fusion buffer.
  Status ring_allreduce(const core::Response& r, const std::vector<core::TensorEntry*>& entries,
                        MPI_Datatype type, MPI_Op op, double post);
  /// True when ring_allreduce's last reduction also applies `post` (an Average's division),
  /// one pass instead of two: a sum of float32 or float64 with a factor other than 1.
  static bool ring_divides(MPI_Op op, DataType dtype, double post);
  /// MPI_Allreduce in place, split into calls of at most 2^30 elements.
  Status reduce_buffer(void* data, int64_t count, MPI_Datatype type, MPI_Op op);
  uint8_t* fusion_buffer(size_t bytes);
  /// Releases buffers grown past kKeptBytes when none needed that much for `quiet_`.
  void release_if_quiet();
  /// A second persistent buffer (fused allgather receives here while sending from fusion_).
  uint8_t* gather_buffer(size_t bytes);

  /// Elements per MPI call at most.
  static constexpr int64_t kMaxCount = 1LL << 30;
  /// Ring pieces of at least this many bytes travel as their own message (zero copy).
  static constexpr size_t kRingDirectBytes = 32 << 10;
  /// Fused batches of at least this many bytes, at least half of it in tensors of
  /// kRingDirectBytes or more, take the ring.
  static constexpr size_t kRingMinBytes = 256 << 10;

  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  core::HostBuffer fusion_, gather_;
  std::vector<size_t> sizes_;  // bytes (elements: float16/bfloat16) of each fused tensor
  std::chrono::milliseconds quiet_;
  std::function<Status()> should_abort_;
  std::chrono::steady_clock::time_point last_large_{};  // a buffer last needed > kKeptBytes
  bool abandoned_ = false;  // the ring released requests MPI had not finished (launch())
};

/// Rows of dim 0 that rank `rank` of `size` gets from reducescatter of `rows` rows.
int64_t reducescatter_rows(int64_t rows, int size, int rank);
/// First row of that slice.
int64_t reducescatter_start(int64_t rows, int size, int rank);

}  // namespace hvd::ops
