// SPDX-License-Identifier: Apache-2.0
// The executor seam: backends (MPI, NCCL, test) implement how a negotiated response runs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hvd/core/handle.h"
#include "hvd/core/message.h"
#include "hvd/core/output_pool.h"

namespace hvd::core {

/// A submitted collective waiting in this rank's tensor table.
struct TensorEntry {
  Request request;
  TensorView input;
  TensorView output;
  std::shared_ptr<HandleState> handle;
  /// Allocates the output of allgather/alltoall once its shape is known; null = hvd allocates.
  std::function<void*(const std::vector<int64_t>& shape)> allocator;
  /// Where hvd takes the output from when there is no allocator (null: a fresh allocation).
  /// The runtime sets it on enqueue.
  std::shared_ptr<OutputPool> pool;
  /// Negotiation's hint: the response-cache bit this tensor's name had last time (-1: none).
  /// Kept across collectives of the same name, so a cached name is found without hashing.
  int64_t cache_hint = -1;
  /// The response-cache entry (its stamp, ResponseCache::stamp) that this slot's request last
  /// hit, and whether the request now is the one that hit it (set at every submission: a
  /// refill that changed nothing, Runtime::enqueue_refill). Both true: negotiation counts it a
  /// hit without comparing the parameters again.
  uint64_t cache_stamp = 0;
  bool request_unchanged = false;
  /// The device executor's per-name event (a cudaEvent_t with its deleter), recorded on the
  /// producer's stream at submission (Executor::prepare_input), and its device. Kept across
  /// collectives of the same name: one event per name, re-recorded each time.
  std::shared_ptr<void> submit_event;
  int submit_event_device = -1;
  /// When enqueue() accepted it (steady clock): the start of its "wait" phase in the timeline.
  std::chrono::steady_clock::time_point submitted{};
};

/// Resets every field of `e` to its default but keeps the capacity of its strings and vectors
/// (and its pool and cache hint), so filling it again allocates nothing.
void reset_for_reuse(TensorEntry* e);
/// `*dst = src`, without rewriting what is equal already (a shape the same as last time):
/// a refill of a table slot (Runtime::enqueue_refill) writes only the buffers' addresses.
inline void assign_view(TensorView* dst, const TensorView& src) {
  dst->data = src.data;
  dst->dtype = src.dtype;
  if (dst->shape != src.shape) dst->shape = src.shape;
  dst->device = src.device;
  dst->stream = src.stream;
  dst->ready_event = src.ready_event;
}

/// Gives `e` an output of `shape` (allgather, alltoall, reducescatter: sizes negotiation
/// decided): through `e->allocator` when set, else in `e->handle->owned_output` (from
/// `e->pool` when set). Sets
/// `e->output`, `e->handle->output` and `e->handle->output_shape`. Errors when the allocator
/// returns null for a non-empty shape or throws.
Status allocate_output(TensorEntry* e, const std::vector<int64_t>& shape);

/// allocate_output(), except that when the caller's allocator fails (null or throws) the
/// output is hvd's own memory instead, so that this rank still takes part in the collective
/// its peers are already in; the first such failure is kept in `*failed` for the executor to
/// return once the collective is done (the whole response fails on this rank). Returns an
/// error only when there is no output at all (hvd's own allocation failed too): the executor
/// must then stop. Host outputs only (hvd's memory is host memory).
Status allocate_output_or_own(TensorEntry* e, const std::vector<int64_t>& shape, Status* failed);

/// Runs responses of one device kind. Called only from the background thread.
class Executor {
 public:
  virtual ~Executor() = default;
  /// Runs `r` (possibly fused: several names) on this rank's entries, given in the response's
  /// name order. Must be called by every rank of the process set for the same response.
  virtual Status execute(const Response& r, const std::vector<TensorEntry*>& entries) = 0;
  /// Like execute(), but may return while the work still runs on a device: then it sets
  /// `*pending`, and the handles of `r` finish when that does (the handles poll it; the
  /// background thread goes on). The entries' buffers must not be reused by the executor until
  /// then. Default: execute(), nothing pending.
  virtual Status launch(const Response& r, const std::vector<TensorEntry*>& entries,
                        std::shared_ptr<Completion>* pending) {
    (void)pending;
    return execute(r, entries);
  }
  /// Called on the submitting thread, before `e` is queued, for entries whose input is on
  /// this executor's device kind: lets a device executor capture what the producer has queued
  /// so far (an event recorded on the input's stream now, not when the response runs, so
  /// later work on that stream is not waited for). Called under the runtime's table lock
  /// (Runtime::mu_: the per-name event lives in the table's slot, and is recorded in the
  /// caller's stream order as the submission is accepted): it must not block on the device or
  /// on another rank and takes no lock of hvd's (recording an event only enqueues it; see
  /// docs/internals.md, "The lock contract"). An error refuses the submission. Default:
  /// nothing.
  virtual Status prepare_input(TensorEntry* e) {
    (void)e;
    return Status::OK();
  }
  /// Human-readable backend name for logs ("mpi", "nccl").
  virtual std::string name() const = 0;
};

}  // namespace hvd::core
