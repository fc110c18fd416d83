// SPDX-License-Identifier: Apache-2.0
// Per-device state of the NCCL executor: stream, events, communicators, buffers. Private.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm_init.h"
#include "hvd/core/executor.h"
#include "hvd/ops/nccl/adasum_nodes.h"
#include "hvd/ops/nccl/kernels.h"

namespace hvd::ops::nccl {

/// Device memory that grows (never shrinks) on demand, stream-ordered: a grown buffer is
/// allocated and the old one freed on the owning stream (cudaMallocAsync / cudaFreeAsync), so
/// growth never waits for the device (cudaFree would wait for every stream of the device,
/// other process sets' NCCL kernels included) and work queued before it still sees the old
/// memory. Falls back to cudaMalloc / cudaFree where memory pools are not supported.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;  // set by DeviceState::create
  bool async = true;
  ~DeviceBuffer();
  /// At least `bytes` (growing by 2 MiB steps and at least a quarter); the old contents are
  /// not kept.
  Result<void*> get(size_t bytes);
};

/// Pinned host memory that grows on demand. Outgrown buffers are kept until destruction
/// (cudaFreeHost would wait for the device; work queued earlier may still read them).
struct PinnedBuffer {
  void* ptr = nullptr;
  size_t size = 0;
  std::vector<void*> retired;
  ~PinnedBuffer();
  Result<void*> get(size_t bytes);
};

/// What user threads polling a response's completion share with the background thread: the
/// communicators (mirrored, to ask ncclCommGetAsyncError; changed only under `mu`), an
/// asynchronous error seen by anyone, and completion events to reuse.
class DeviceCompletion;
struct DeviceHealth {
  std::mutex mu;
  int device = -1;
  ncclComm_t comm = nullptr, local = nullptr;
  Status error;
  std::vector<cudaEvent_t> free_events;
  /// Completions handed out and not yet destroyed: an abort settles them first (see abort()).
  std::vector<DeviceCompletion*> live;
  ~DeviceHealth();
};

/// A response's GPU work, polled by its handles: its event, then the communicators' async
/// errors (every 64 polls). Never blocks.
class DeviceCompletion : public core::Completion {
 public:
  /// Registers itself in `h->live`; call with h->mu NOT held.
  DeviceCompletion(std::shared_ptr<DeviceHealth> h, cudaEvent_t ev);
  ~DeviceCompletion() override;
  /// Under health->mu, before the communicators are aborted: work not finished by now is cut
  /// short by the abort, so its event firing later must not read as success.
  void doom_if_unfinished();

 protected:
  bool query(Status* s) override;
  /// The event alone: a doomed or failed response's kernels may still run until it fires
  /// (after an abort, the communicator's abort ends them).
  bool work_stopped() override;

 private:
  std::shared_ptr<DeviceHealth> health_;
  cudaEvent_t event_;
  int polls_ = 0;
  bool doomed_ = false;  // guarded by health_->mu
};

/// Everything the executor keeps for one device of one process set. Used only from the
/// background thread. Responses are launched back to back on one stream; their handles poll
/// their completions (finish_async()). Descriptor areas rotate so a response never overwrites
/// descriptors an earlier one has not consumed yet.
struct DeviceState {
  int device = -1;
  MPI_Comm mpi = MPI_COMM_NULL;  // the set's data communicator (not owned)
  int rank = 0, size = 1;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> input_events;  // recorded on producers' streams
  ncclComm_t comm = nullptr;              // all ranks of the set (NcclExecutor creates it)
  Status broken;                          // set once a communicator was aborted
  CommSpec spec;  // how communicators are created (timeout, abort check, test fault)

  // Hierarchical allreduce: node-local NCCL communicator, cross-node MPI communicator.
  // hier_ok: set up, every node holds the same number of ranks and (unless forced for tests)
  // there is more than one node.
  bool hier_setup = false, hier_ok = false;
  MPI_Comm local_mpi = MPI_COMM_NULL, cross_mpi = MPI_COMM_NULL;
  ncclComm_t local = nullptr;
  int local_rank = 0, local_size = 1, cross_size = 1;
  int nodes = 1;  // the set's nodes (the largest cross size: nodes may differ in size)

  // Adasum on GPU tensors (nccl_adasum.cc): communicators across nodes, made by the first
  // Adasum response on every rank, and the agreed outcome of making them.
  std::unique_ptr<AdasumNodeComms> adasum_nodes;
  Status adasum_setup;

  DeviceBuffer fusion, gather, scratch;
  PinnedBuffer host_stage, host_float;
  struct DescArea {
    DeviceBuffer dev;
    PinnedBuffer host;
    cudaEvent_t done = nullptr;  // recorded after the last response that used this area
    bool used = false;
  };
  static constexpr size_t kDescAreas = 4;
  DescArea areas[kDescAreas];
  size_t area = 0;        // the current response's area
  size_t descs_used = 0;  // descriptors uploaded during the current response
  std::shared_ptr<DeviceHealth> health = std::make_shared<DeviceHealth>();

  DeviceState() = default;
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;
  ~DeviceState();

  /// Stream and events on `device` (no collective call, no communicator: see
  /// NcclExecutor::device_for, which creates it with create_comm()).
  static Result<std::unique_ptr<DeviceState>> create(int device, MPI_Comm mpi);
  /// The node-local communicators: collective over `mpi` the first time, agreed over `mpi`
  /// (every rank goes hierarchical, or every rank fails). A failure breaks the device for good
  /// (a retry on one rank alone would wait for its peers). `force`: hierarchical even on one
  /// node (tests).
  Status ensure_hierarchical(bool force);
  Status setup_hierarchical(bool force);
  /// Starts a response: makes the device current, resets the descriptor area to hold `n`.
  Status begin(size_t max_descs);
  /// Makes the stream wait for every device input: its ready_event (the caller's, or the
  /// one NcclExecutor::prepare_input recorded at submission), or, for an entry that never went
  /// through prepare_input, an event recorded on its stream now. Device-side waits only.
  Status wait_inputs(const std::vector<core::TensorEntry*>& es);
  /// Uploads `d` and launches ONE batched copy kernel on the stream.
  Status copy(const std::vector<CopyDesc>& d, DataType dtype, const Scale& s);
  /// Records completion and waits for it, checking the communicators for asynchronous
  /// errors; on one, aborts them (see abort()) and returns the cause. Used after a failed
  /// launch, before the buffers are reused.
  Status finish();
  /// Records completion and hands it to the handles: *pending polls it (no waiting here).
  Status finish_async(std::shared_ptr<core::Completion>* pending);
  /// Aborts the communicators; every later response on this device fails with `why`.
  void abort(const Status& why);
  /// For a failure after the response was agreed that keeps this rank out of its NCCL call
  /// (no memory for a buffer): aborts the communicators so that this rank fails every later
  /// response at once instead of calling NCCL out of step with its peers; returns `why`.
  Status fail_response(const Status& why);
};

/// Checks that `p` (`bytes` long) is device memory on `device`. Errors name the entry's
/// operation and tensor and `which` ("input" / "output"); nothing is formatted on success.
Status check_device_pointer(const void* p, size_t bytes, int device, const core::TensorEntry& e,
                            const char* which);

}  // namespace hvd::ops::nccl
