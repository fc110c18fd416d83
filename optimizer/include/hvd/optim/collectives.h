// SPDX-License-Identifier: Apache-2.0
// Collectives on torch::Tensor, named like horovod.torch: `allreduce` returns a new tensor,
// `allreduce_` works in place; the `_async` forms return a TorchHandle that keeps every tensor
// involved alive until the collective has finished.
//
//   auto h = hvd::optim::allreduce_async_(grad, "layer1.grad");   // starts now
//   ...                                                           // overlap other work
//   hvd::optim::synchronize(h);                                   // grad now holds the average
//
// dtype, shape and device come from the tensor. Non-contiguous inputs are copied to contiguous
// buffers (and, in place, copied back when the handle is waited on). Errors: problems visible
// locally throw hvd::Error at once; disagreements between ranks throw from wait()/synchronize().
// Every collective takes a trailing ProcessSet (default: the global set, every rank); only the
// set's members call it, and broadcast roots are global ranks.
// allgather, alltoall and reducescatter on torch tensors are in hvd/optim/sized_collectives.h.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "hvd/core/handle.h"
#include "hvd/core/types.h"
#include "hvd/hvd.h"

namespace hvd::optim {

namespace detail {
struct TorchHandleState;
}

/// An asynchronous collective on torch tensors. Copyable; copies share the completion.
class TorchHandle {
 public:
  TorchHandle() = default;
  explicit TorchHandle(std::shared_ptr<detail::TorchHandleState> s) : s_(std::move(s)) {}
  bool valid() const { return s_ != nullptr; }
  /// True once the collective finished (successfully or not). Never blocks.
  bool poll() const;
  /// Blocks until finished, copies results back into non-contiguous in-place targets, and
  /// returns the first output tensor. Throws hvd::Error if the collective failed.
  torch::Tensor wait() const;
  /// As wait(), returning every output (grouped collectives).
  std::vector<torch::Tensor> wait_all() const;
  /// alltoall: waits, then returns how many rows came from each rank (empty for the others).
  std::vector<int64_t> received_splits() const;
  /// The underlying core handle.
  const Handle& handle() const;

 private:
  std::shared_ptr<detail::TorchHandleState> s_;
};

/// Out of place: a new tensor holding the reduction of `tensor` over the ranks of
/// `process_set` (default: every rank). Only the set's members call it.
TorchHandle allreduce_async(const torch::Tensor& tensor, const std::string& name = "",
                            ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                            double postscale_factor = 1.0, const ProcessSet& process_set = {});
/// In place: `tensor` receives the reduction.
TorchHandle allreduce_async_(const torch::Tensor& tensor, const std::string& name = "",
                             ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                             double postscale_factor = 1.0, const ProcessSet& process_set = {});
torch::Tensor allreduce(const torch::Tensor& tensor, const std::string& name = "",
                        ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                        double postscale_factor = 1.0, const ProcessSet& process_set = {});
void allreduce_(const torch::Tensor& tensor, const std::string& name = "",
                ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                double postscale_factor = 1.0, const ProcessSet& process_set = {});

/// All tensors negotiated and reduced together; one handle for the group. Tensors may differ
/// in dtype and shape.
TorchHandle grouped_allreduce_async(const std::vector<torch::Tensor>& tensors,
                                    const std::string& name = "", ReduceOp op = ReduceOp::kAverage,
                                    double prescale_factor = 1.0, double postscale_factor = 1.0,
                                    const ProcessSet& process_set = {});
TorchHandle grouped_allreduce_async_(const std::vector<torch::Tensor>& tensors,
                                     const std::string& name = "", ReduceOp op = ReduceOp::kAverage,
                                     double prescale_factor = 1.0, double postscale_factor = 1.0,
                                     const ProcessSet& process_set = {});
std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const std::string& name = "",
                                             ReduceOp op = ReduceOp::kAverage,
                                             double prescale_factor = 1.0,
                                             double postscale_factor = 1.0,
                                             const ProcessSet& process_set = {});
void grouped_allreduce_(const std::vector<torch::Tensor>& tensors, const std::string& name = "",
                        ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                        double postscale_factor = 1.0, const ProcessSet& process_set = {});

/// Out of place: a new tensor holding root_rank's values on every member of `process_set`.
/// root_rank is a global rank (as in Horovod) and must be a member of the set: a root outside
/// it fails the call on every member, naming the root and the set.
TorchHandle broadcast_async(const torch::Tensor& tensor, int root_rank,
                            const std::string& name = "", const ProcessSet& process_set = {});
/// In place: `tensor` is overwritten with root_rank's values.
TorchHandle broadcast_async_(const torch::Tensor& tensor, int root_rank,
                             const std::string& name = "", const ProcessSet& process_set = {});
torch::Tensor broadcast(const torch::Tensor& tensor, int root_rank, const std::string& name = "",
                        const ProcessSet& process_set = {});
void broadcast_(const torch::Tensor& tensor, int root_rank, const std::string& name = "",
                const ProcessSet& process_set = {});

/// Horovod's names: poll() never blocks; synchronize() is TorchHandle::wait().
bool poll(const TorchHandle& handle);
torch::Tensor synchronize(const TorchHandle& handle);

}  // namespace hvd::optim
