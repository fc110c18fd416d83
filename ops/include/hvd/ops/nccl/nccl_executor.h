// SPDX-License-Identifier: Apache-2.0
// Device-memory collectives over NCCL.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hvd/core/executor.h"

namespace hvd::ops::nccl {

struct DeviceState;  // per-device stream, communicators, buffers (src/nccl/device_state.h)
/// Test-only fault injection (src/nccl/comm_init.h).
struct TestFault {
  enum class Point { kNone, kInit, kInitStuck };
  Point point = Point::kNone;
  int rank = -1;
  std::string spec;  // as given, for messages
  bool at(Point p, int r) const { return point == p && rank == r; }
};

struct NcclOptions {
  /// Allreduce as NCCL reduce-scatter in the node, MPI allreduce across nodes, NCCL allgather
  /// in the node (HVD_HIERARCHICAL_ALLREDUCE). Flat when the job has one node or nodes have
  /// different numbers of ranks in this set.
  bool hierarchical_allreduce = false;
  /// Tests: the hierarchical path even when the job has one node.
  bool force_hierarchical = false;
  /// The device a rank uses when a response holds no device tensor of its own (a joined rank)
  /// before it has run any device collective: local rank % device count, as in Horovod's
  /// one-GPU-per-rank setup (add_device_executor sets it).
  int default_device = 0;
  /// Asked while communicators are being created (null: never): an error (a dead peer, the
  /// runtime aborting) ends the creation on this rank, which then fails on every rank.
  std::function<Status()> should_abort;
  /// How long ncclCommInitRankConfig may take before this rank gives it up (aborts it), which
  /// fails the creation on every rank.
  std::chrono::milliseconds init_timeout{kDefaultInitTimeout};
  static constexpr std::chrono::milliseconds kDefaultInitTimeout{300000};
  /// Test-only fault injection (see comm_init.h); empty: HVD_TEST_FAULT, read once.
  std::string test_fault;
};

/// Runs negotiated responses on CUDA tensors with NCCL.
///
/// Communicators: one per local device used by this process set (the device set is "each
/// rank's device for this tensor"), created lazily by the first response that needs it, as an
/// agreed collective over `comm` (the set's MPI data communicator, which only the background
/// thread uses, in the agreed order of responses: see comm_init.h). Every rank learns whether
/// every rank succeeded; a failure on any rank (no device, cudaSetDevice, ncclCommInitRank, a
/// deadline) fails the response on every rank with a message naming the failed ranks and why,
/// and every later device response fails at once. Every rank executes the same responses in
/// the same order, so every rank creates it at the same response — provided each rank's
/// tensors of a response live on the device it used before (one GPU per rank, Horovod's model;
/// a rank that changes device alone would wait in communicator creation for its peers).
///
/// Streams and events: hvd owns one non-blocking stream per device. Before launching, that
/// stream waits (cudaStreamWaitEvent, on the device) for each input's `ready_event`: the
/// caller's, or the one hvd recorded on the input's `stream` when it was submitted
/// (prepare_input) — never a device-wide synchronisation, and never for work the producer
/// queued after the submission. Completion
/// is an event recorded after the last kernel and handed to the handles (launch() sets
/// *pending): Handle::poll()/wait() query it and, every 64 queries, ncclCommGetAsyncError, so
/// the background thread never waits for the GPU and goes on to the next response; an
/// asynchronous NCCL error fails the handles instead of hanging, the communicator is aborted
/// at the next response, and every later response on it fails with the same cause. A launch
/// that fails part-way waits for what it launched before failing.
///
/// Allreduce: a single tensor is reduced in place (input -> output); several are copied into
/// the device fusion buffer by ONE batched-copy kernel (prescale applied on the way), reduced
/// by one ncclAllReduce, and copied out by one kernel (postscale, integer averaging). Average
/// uses ncclAvg for floating types when no rank joined, else Sum and a division. Adasum
/// averages inside each node and combines the node averages by Adasum across nodes on host
/// shards (nccl_adasum.cc); on one node it is the average, as in Horovod.
/// allgather: ncclAllGather when every rank has the same count, else grouped send/recv.
/// broadcast: one ncclBroadcast per tensor in one group. alltoall: grouped ncclSend/ncclRecv.
/// reducescatter: the hvd split (first rows % size ranks get one more row) padded to equal
/// blocks by one copy kernel, then ncclReduceScatter.
///
/// Inputs and outputs are checked with cudaPointerGetAttributes before anything is launched:
/// a host or invalid pointer fails the response with a status naming the tensor. Outputs whose
/// size negotiation decides (allgather, alltoall, reducescatter) need an allocator that returns
/// device memory.
class NcclExecutor : public core::Executor {
 public:
  NcclExecutor(MPI_Comm comm, NcclOptions opts);
  ~NcclExecutor() override;
  /// launch(), then waiting for the device.
  Status execute(const core::Response& r, const std::vector<core::TensorEntry*>& entries) override;
  Status launch(const core::Response& r, const std::vector<core::TensorEntry*>& entries,
                std::shared_ptr<core::Completion>* pending) override;
  /// At submission, on the user's thread: records the entry's event (one per tensor name,
  /// created on the tensor's device the first time) on the input's `stream` and makes it the
  /// input's ready_event, unless the caller passed a ready_event of its own.
  Status prepare_input(core::TensorEntry* e) override;
  std::string name() const override { return "nccl"; }

 private:
  Status record_submit_event(core::TensorEntry* e, int dev);
  Result<DeviceState*> device_for(const core::Response& r,
                                  const std::vector<core::TensorEntry*>& es);
  /// The first use of `dev`: its state and communicator, created collectively (create_comm)
  /// with this rank's `prepared` outcome so far. A failure sets setup_failed_ on every rank.
  Result<std::unique_ptr<DeviceState>> create_device(int dev, Status prepared);
  Status allreduce(DeviceState* d, const core::Response& r,
                   const std::vector<core::TensorEntry*>& es);
  Status hierarchical_allreduce(DeviceState* d, void* buf, int64_t count, const core::Response& r);
  /// ReduceOp::kAdasum (nccl_adasum.cc): average inside each node, Adasum across nodes.
  Status adasum_allreduce(DeviceState* d, const core::Response& r,
                          const std::vector<core::TensorEntry*>& es);
  Status broadcast(DeviceState* d, const core::Response& r,
                   const std::vector<core::TensorEntry*>& es);
  Status allgather(DeviceState* d, const core::Response& r,
                   const std::vector<core::TensorEntry*>& es);
  Status alltoall(DeviceState* d, const core::Response& r,
                  const std::vector<core::TensorEntry*>& es);
  Status reducescatter(DeviceState* d, const core::Response& r,
                       const std::vector<core::TensorEntry*>& es);

  MPI_Comm comm_;
  NcclOptions opts_;
  int size_ = 1, rank_ = 0;
  int last_device_ = -1;
  std::map<int, std::unique_ptr<DeviceState>> devices_;
  /// Set when the agreed creation of a communicator failed (the same on every rank): every
  /// later device response fails with it.
  Status setup_failed_;
  TestFault fault_;
};

}  // namespace hvd::ops::nccl
