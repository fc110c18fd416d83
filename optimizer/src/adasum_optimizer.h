// SPDX-License-Identifier: Apache-2.0
// The op=kAdasum path of the libtorch DistributedOptimizer (private to hvd_optimizer): Horovod's
// Adasum optimizer. Each rank steps the wrapped optimizer on its own gradients; the ranks
// combine the steps, not the gradients.
//
//   after the k-th backward pass (k = backward_passes_per_step) reached parameter p:
//       old = p;  wrapped.step() on p alone;  delta = p - old;  p = old
//       allreduce_async(delta, op=Adasum)            // overlaps the rest of backward
//   synchronize() (step() calls it):
//       parameters not reached yet: the same local step and allreduce, now
//       wait for every allreduce;  p = old + adasum(delta)
//
// A parameter keeps its old value until synchronize(). With one rank in the process set, or on
// a rank outside it, the update is the wrapped optimizer's, without communication.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hvd/optim/distributed_optimizer.h"

namespace hvd::optim::detail {

class AdasumUpdate {
 public:
  /// Tracks `params` ((name, tensor), name "" for unnamed ones, each a trainable leaf) of
  /// `optimizer` (not owned) and, unless `passive`, hooks their gradient accumulators. Wire
  /// names are "adasum.<name>" ("adasum.param.<n>" for unnamed ones, n in order), with a
  /// suffix "#k" where another live Adasum optimizer uses the name.
  AdasumUpdate(torch::optim::Optimizer& optimizer,
               const std::vector<std::pair<std::string, torch::Tensor>>& params,
               const DistributedOptimizerOptions& options, std::string label, bool passive);
  /// Removes the hooks and waits for reductions in flight (their results are dropped).
  ~AdasumUpdate();
  AdasumUpdate(const AdasumUpdate&) = delete;
  AdasumUpdate& operator=(const AdasumUpdate&) = delete;

  /// Passive: the wrapped step(closure). Otherwise evaluates the closure (if any), then
  /// synchronize(); returns the closure's loss (undefined without one).
  torch::Tensor step(const torch::optim::Optimizer::LossClosure& closure);
  /// Every parameter becomes old + adasum(delta): reductions not started (fewer passes than
  /// backward_passes_per_step, no gradient on this rank) step locally and start now. Waits for
  /// all, then throws hvd::Error for the first that failed.
  void synchronize();
  /// Throws hvd::Error (naming the parameter) while a reduction is in flight; else drops the
  /// passes counted towards backward_passes_per_step.
  void before_zero_grad();
  /// The wire names, in optimizer order.
  std::vector<std::string> wire_names() const;

 private:
  struct Slot;
  class Hook;
  void after_pass(Slot& s);
  void start(Slot& s);

  torch::optim::Optimizer& optimizer_;
  std::string label_;
  Compression compression_;
  int passes_per_step_;
  ProcessSet process_set_;
  bool passive_;
  mutable std::mutex mu_;  ///< slots_' pass counts and reductions (hooks may run on autograd's
                           ///< device threads)
  std::vector<std::shared_ptr<Slot>> slots_;
};

}  // namespace hvd::optim::detail
