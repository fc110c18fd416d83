// SPDX-License-Identifier: Apache-2.0
// hvd: the C++ user's entry point. Initialise, ask who you are, run collectives.
//
// clang-format off
//   hvd::init();
//   std::vector<float> grad(n, 1.0f);
//   hvd::TensorView view(grad.data(), hvd::DataType::kFloat32, {n});
//   hvd::Handle h = hvd::allreduce_async(view, "grad");
//   hvd::wait(h);  // throws hvd::Error naming the tensor and ranks if the ranks disagree
//   hvd::shutdown();
// clang-format on
//
// Buffers: the memory a TensorView points to belongs to hvd from the call until the handle's
// released() is true (normally when it completes). After an abort (a rank died) handles fail
// at once while the background thread may still write into an output, perhaps for good: free
// or reuse such memory only once released(), or hand its owner to
// hvd::core::keep_until_released(handle, owner) (see docs/cpp-api.md, Handles).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hvd/config.h"
#include "hvd/core/handle.h"
#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd {

/// A group of ranks that collectives can run on: each set has its own communicators,
/// negotiation (and response cache) and background thread, so work on disjoint sets runs
/// concurrently. A default-constructed ProcessSet is the global set (id 0, every rank).
/// Ranks inside a set are numbered 0..size-1 in the order of the global ranks given to
/// add_process_set (alltoall splits use these numbers; broadcast roots are global ranks).
class ProcessSet {
 public:
  ProcessSet() = default;
  explicit ProcessSet(int32_t id) : id_(id) {}
  int32_t id() const { return id_; }
  /// The global ranks of the set (empty once removed).
  std::vector<int> ranks() const;
  /// True when this rank is a member.
  bool included() const;
  /// This rank's rank within the set, -1 when not a member.
  int rank() const;
  int size() const;
  bool operator==(const ProcessSet& o) const { return id_ == o.id_; }

 private:
  int32_t id_ = 0;
};

/// The set of all ranks.
inline ProcessSet global_process_set() { return ProcessSet(); }

/// Allocates an output whose shape negotiation decides (allgather, alltoall, reducescatter);
/// returns memory for shape_numel(shape) elements of the tensor's dtype that stays valid until
/// the caller is done with it. Without one, hvd owns the output (Handle::output()).
using Allocator = std::function<void*(const std::vector<int64_t>& shape)>;

/// Starts hvd: initialises MPI unless the caller already did (then hvd leaves finalising MPI to
/// the caller), reads the HVD_* configuration and starts the background thread. Without mpirun
/// it runs as a singleton job of size 1. Throws hvd::Error on failure. Calling init() when
/// already initialised is a no-op; init() after shutdown() starts a fresh runtime.
void init();
/// init(), then add_process_set() for each list, in order (ids 1, 2, ...).
void init(const std::vector<std::vector<int>>& process_sets);
/// Finishes or fails (with a clear status) everything in flight, stops the background thread,
/// finalises MPI if hvd initialised it. Idempotent.
void shutdown();
bool is_initialized();

int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();
/// True when MPI runs with MPI_THREAD_MULTIPLE (other MPI users may call MPI concurrently).
bool mpi_threads_supported();

bool mpi_built();
/// True when this process loaded hvd's GPU module (libhvd_nccl.so, with the CUDA runtime and
/// NCCL it needs); it says nothing about devices (gpu_support() does). Same for cuda_built().
bool nccl_built();
/// The version code of the NCCL the GPU module loaded (e.g. 22809 for 2.28.9, as Horovod's
/// nccl_built() returns); 0 when the module is not loaded (see gpu_support()).
int nccl_version();
bool cuda_built();
bool torch_built();

/// GPU support of this process. hvd's NCCL/CUDA executors are a module loaded at run time (at
/// init(), or by the first call of this function) from the directory of libhvd_ops.so, so one
/// package serves CPU and GPU hosts; this says whether it loaded, which NCCL and CUDA runtime
/// it found, how many devices it sees, and otherwise why not (see docs/gpu.md).
struct GpuSupport {
  bool loaded = false;           ///< the GPU module is loaded (nccl_built())
  std::string module;            ///< its path (loaded or looked for); empty: no module built
  int nccl_version = 0;          ///< of the NCCL loaded (e.g. 22809 for 2.28.9); 0: not loaded
  int cuda_runtime_version = 0;  ///< e.g. 13000 for 13.0; 0: not loaded
  int devices = 0;               ///< usable CUDA devices
  std::string reason;            ///< why GPU collectives are unavailable; empty when available
};
GpuSupport gpu_support();

/// Asynchronous collectives. Names identify a collective across ranks and must be unique among
/// this rank's pending operations; an empty name gets a deterministic automatic one (the same
/// sequence of unnamed calls gives the same names on every rank). Problems visible locally (call
/// before init(), null data, root out of range, duplicate name) throw hvd::Error at once;
/// disagreements between ranks fail the handle, and wait() throws.
Handle allreduce_async(const TensorView& tensor, const std::string& name = "",
                       ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                       double postscale_factor = 1.0, const ProcessSet& process_set = {});
/// Out-of-place form: `output` must have the shape and dtype of `input`.
Handle allreduce_async(const TensorView& input, const TensorView& output, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                       double postscale_factor = 1.0, const ProcessSet& process_set = {});
/// All tensors negotiated and executed together (atomically); one handle for the group.
Handle grouped_allreduce_async(const std::vector<TensorView>& tensors, const std::string& name = "",
                               ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                               double postscale_factor = 1.0, const ProcessSet& process_set = {});
/// In place: every rank ends with root_rank's values. root_rank is a global rank (as in
/// Horovod), a member of `process_set`; a root outside the set fails on every member.
Handle broadcast_async(const TensorView& tensor, int root_rank, const std::string& name = "",
                       const ProcessSet& process_set = {});

/// Concatenation along the first dimension of every rank's tensor, in rank order. The first
/// dimension may differ between ranks (zero included); the others must match. The output
/// (Handle::output()) is allocated by hvd, or by `allocator`, once negotiation knows every
/// rank's size. Several allgathers ready together are fused into one MPI_Allgatherv.
Handle allgather_async(const TensorView& tensor, const std::string& name = "",
                       const ProcessSet& process_set = {}, const Allocator& allocator = nullptr);
/// All tensors negotiated and executed together; one handle per tensor (each with its output).
/// `allocators`: empty (hvd owns the outputs) or one per tensor.
std::vector<Handle> grouped_allgather_async(const std::vector<TensorView>& tensors,
                                            const std::string& name = "",
                                            const ProcessSet& process_set = {},
                                            const std::vector<Allocator>& allocators = {});
/// Sends rows of the first dimension to each rank: `splits[j]` rows (consecutive, in rank
/// order) go to rank j; empty splits = an equal split (the first dimension must then divide
/// evenly). The output concatenates what every rank sent here, in rank order;
/// Handle::received_splits() says how many rows came from each rank.
Handle alltoall_async(const TensorView& tensor, const std::vector<int64_t>& splits = {},
                      const std::string& name = "", const ProcessSet& process_set = {},
                      const Allocator& allocator = nullptr);
/// Reduces (Sum or Average, with pre/postscale) across ranks and gives each rank its slice of
/// the first dimension: with R rows over N ranks, ranks 0 .. R%N-1 get R/N+1 rows and the rest
/// R/N rows, in order; with fewer rows than ranks the last ranks get empty slices (first
/// dimension 0). The output (Handle::output()) is allocated by hvd, or by `allocator`.
Handle reducescatter_async(const TensorView& tensor, const std::string& name = "",
                           ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                           double postscale_factor = 1.0, const ProcessSet& process_set = {},
                           const Allocator& allocator = nullptr);
/// `allocators`: empty (hvd owns the outputs) or one per tensor.
std::vector<Handle> grouped_reducescatter_async(
    const std::vector<TensorView>& tensors, const std::string& name = "",
    ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0, double postscale_factor = 1.0,
    const ProcessSet& process_set = {}, const std::vector<Allocator>& allocators = {});

/// Synchronous forms: submit and wait; throw hvd::Error on failure.
void allreduce(const TensorView& tensor, const std::string& name = "",
               ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
               double postscale_factor = 1.0, const ProcessSet& process_set = {});
void grouped_allreduce(const std::vector<TensorView>& tensors, const std::string& name = "",
                       ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                       double postscale_factor = 1.0, const ProcessSet& process_set = {});
void broadcast(const TensorView& tensor, int root_rank, const std::string& name = "",
               const ProcessSet& process_set = {});
/// Synchronous forms of the size-deciding collectives return the completed handle: read
/// Handle::output() (and received_splits()) from it.
Handle allgather(const TensorView& tensor, const std::string& name = "",
                 const ProcessSet& process_set = {});
Handle alltoall(const TensorView& tensor, const std::vector<int64_t>& splits = {},
                const std::string& name = "", const ProcessSet& process_set = {});
Handle reducescatter(const TensorView& tensor, const std::string& name = "",
                     ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                     double postscale_factor = 1.0, const ProcessSet& process_set = {});
/// Returns once every rank of the set has called barrier().
void barrier(const ProcessSet& process_set = {});

/// Declares that this rank has no more work for now (e.g. it ran out of batches) and blocks
/// until every rank of the set has called join(); returns the last rank to join (of those
/// joining in the same negotiation round, the highest). Meanwhile this rank takes part in the
/// other ranks' allreduces (contributing zeros; Average divides by the set size, as in
/// Horovod), allgathers (contributing no rows) and broadcasts (not
/// as root), so they never hang. An alltoall, reducescatter or a broadcast rooted at a joined
/// rank fails on the other ranks with an error naming the joined ranks.
int join(const ProcessSet& process_set = {});

/// Collective over all ranks, each passing the same global ranks (distinct, in range; a rank
/// need not be a member to take part). Returns the new set; throws hvd::Error on invalid or
/// differing lists. The MPI backend needs MPI_THREAD_MULTIPLE (see mpi_threads_supported()).
ProcessSet add_process_set(const std::vector<int>& ranks);
/// Collective over all ranks. Throws when a rank still has collectives in flight on the set.
void remove_process_set(const ProcessSet& process_set);
/// Every existing set, the global one first.
std::vector<ProcessSet> process_sets();

/// Starts writing a Chrome-trace timeline of the executed collectives to `path` (on rank 0;
/// other ranks accept the call and write nothing, unless HVD_TIMELINE_ALL_RANKS=1: then rank N
/// writes `path` with ".rank<N>" before ".json"), replacing HVD_TIMELINE's or an earlier one.
/// `mark_cycles` (or HVD_TIMELINE_MARK_CYCLES=1): also mark the start of every negotiation
/// round (an instant "cycle" event), as Horovod's mark_cycles. Throws hvd::Error when the file
/// cannot be written.
void start_timeline(const std::string& path, bool mark_cycles = false);
/// Closes the timeline file (valid JSON). No-op when none is being written.
void stop_timeline();

/// Counters of the global set's background thread since init(), for diagnosis and benchmarks:
/// negotiation rounds (full = with new names through the coordinator), responses executed and
/// fused batches among them.
struct RuntimeStats {
  uint64_t rounds = 0, full_rounds = 0, responses = 0, fused_batches = 0;
};
RuntimeStats runtime_stats();

/// True once the collective finished. Never blocks.
bool poll(const Handle& h);
/// Blocks until finished; throws hvd::Error if it failed.
void wait(const Handle& h);
/// Same as wait() (Horovod's name).
void synchronize(const Handle& h);

namespace detail {
/// For language bindings: this rank refuses a call before it could describe its tensors (an
/// unsupported dtype or device, an invalid op, an empty group, an argument out of range). The
/// refusal takes the call's place in negotiation (`op`: "allreduce", "broadcast", "allgather",
/// "alltoall" or "reducescatter"; `name`, or the automatic name the call would have taken;
/// `group_size` members of a grouped call, 0 when not grouped), so that every rank's call of it
/// fails with `reason` instead of waiting for this rank. Always throws hvd::Error (the refusal).
[[noreturn]] void refuse_call(const std::string& op, const std::string& name, int group_size,
                              const std::string& reason, const ProcessSet& ps = {});
/// Same for add_process_set: this rank refuses its call (`ranks` as it was given, `reason` what
/// its caller found wrong: a duplicate set, a list it could not read), so that the other ranks'
/// add_process_set fails with `reason` instead of waiting for it. Always throws hvd::Error.
[[noreturn]] void refuse_add_process_set(const std::vector<int>& ranks, const std::string& reason);
/// Same for a call whose process set this rank cannot name (never registered, or removed, in
/// the binding's own objects): `op` and `name` as given, `reason` the binding's error. The
/// other ranks' call that waits for this rank alone fails with it (a refusal notice, see
/// core::Runtime::notice_refusal). Always throws hvd::Error.
[[noreturn]] void refuse_call_without_set(const std::string& op, const std::string& name,
                                          const std::string& reason);
}  // namespace detail

}  // namespace hvd
