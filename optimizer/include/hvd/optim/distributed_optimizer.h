// SPDX-License-Identifier: Apache-2.0
// DistributedOptimizer: wraps any torch::optim::Optimizer so that step() applies gradients
// averaged (or summed) over all ranks.
//
//   torch::optim::SGD sgd(model->parameters(), 0.01);
//   hvd::DistributedOptimizer opt(sgd, model->named_parameters());
//   for (...) { opt.zero_grad(); loss(model, batch).backward(); opt.step(); }
//
// Each parameter's allreduce starts during backward(), as soon as autograd has accumulated its
// gradient (a post-hook on the parameter's gradient accumulator), so communication overlaps the
// rest of backward. step() waits for the reductions of its own parameters, then steps.
//
// Parameters are tracked in one process-wide registry keyed by tensor identity
// (hvd/optim/grad_registry.h, shared with the Python binding): several optimizers holding the
// same parameter share one hook and one reduction per backward pass, and each of them applies the
// same reduced gradient — no renaming, no synchronize() rituals. Gradients accumulate as in plain
// libtorch: several backward passes before step(), a second loss through a shared module, or
// zeroing through the module all give the gradients one process would compute. Two models whose
// parameter names collide are reduced under distinct names on the wire automatically.
//
// With op kAdasum (Horovod's Adasum optimizer) the ranks combine steps, not gradients: each rank
// steps the wrapped optimizer on its own gradients (per parameter, during backward, once
// backward_passes_per_step passes reached it) and the parameter deltas are Adasum-reduced;
// step() sets every parameter to its old value plus the reduced delta. The learning rate is not
// scaled by the number of ranks.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hvd/core/handle.h"
#include "hvd/core/types.h"
#include "hvd/hvd.h"

namespace hvd::optim {

/// How gradients travel: as they are, or converted to 16-bit floats for the allreduce and back
/// (floating-point gradients only).
enum class Compression { kNone, kFp16, kBf16 };

/// Options of a DistributedOptimizer, builder style: `DistributedOptimizerOptions().op(...)`.
struct DistributedOptimizerOptions {
  /// kAverage (default), kSum, or kAdasum: each rank steps locally and the parameter deltas are
  /// Adasum-reduced (the process set must hold a power-of-two number of ranks; num_groups and
  /// groups change nothing, gradient_predivide_factor and gradient_as_bucket_view are refused;
  /// see step(), zero_grad() and skip_synchronize() for the differences).
  ReduceOp op_ = ReduceOp::kAverage;
  Compression compression_ = Compression::kNone;
  /// Backward passes accumulated locally (summed into .grad) before the allreduce starts.
  int backward_passes_per_step_ = 1;
  /// Average only: gradients are multiplied by 1/f before the sum and by f/size after it.
  double gradient_predivide_factor_ = 1.0;
  /// >0: split the parameters (in optimizer order) into this many fusion groups, each reduced
  /// as one grouped allreduce once all its gradients are ready.
  int num_groups_ = 0;
  /// Explicit fusion groups by parameter name (exclusive with num_groups); parameters not listed
  /// are reduced one by one.
  std::vector<std::vector<std::string>> groups_;
  /// Shown in error messages; default "DistributedOptimizer#<n>" in construction order.
  std::string label_;
  /// The ranks gradients are reduced over. On a rank outside it the optimizer communicates
  /// nothing and steps on its local gradients (as Horovod).
  ProcessSet process_set_;
  /// Gradients as views into flat per-bucket buffers (PyTorch DDP's gradient_as_bucket_view):
  /// from the first step() on, each dense parameter's .grad is a view of a bucket laid out in the
  /// order backward produces the gradients, and a ready bucket is reduced by one in-place
  /// allreduce (no copies). Parameters shared with another optimizer and those in `groups` /
  /// `num_groups` are reduced as without it. Results are those without it (bucketing only
  /// changes which gradients travel together). Keep no reference to a .grad across steps: the
  /// buckets may be laid out again (a new tensor) when the order changes.
  bool gradient_as_bucket_view_ = false;
  /// Bucket capacity in bytes for gradient_as_bucket_view.
  size_t bucket_view_bytes_ = size_t{4} << 20;

  DistributedOptimizerOptions& op(ReduceOp v) {
    op_ = v;
    return *this;
  }
  DistributedOptimizerOptions& compression(Compression v) {
    compression_ = v;
    return *this;
  }
  DistributedOptimizerOptions& backward_passes_per_step(int v) {
    backward_passes_per_step_ = v;
    return *this;
  }
  DistributedOptimizerOptions& gradient_predivide_factor(double v) {
    gradient_predivide_factor_ = v;
    return *this;
  }
  DistributedOptimizerOptions& num_groups(int v) {
    num_groups_ = v;
    return *this;
  }
  DistributedOptimizerOptions& groups(std::vector<std::vector<std::string>> v) {
    groups_ = std::move(v);
    return *this;
  }
  DistributedOptimizerOptions& label(std::string v) {
    label_ = std::move(v);
    return *this;
  }
  DistributedOptimizerOptions& process_set(ProcessSet v) {
    process_set_ = v;
    return *this;
  }
  DistributedOptimizerOptions& gradient_as_bucket_view(bool v) {
    gradient_as_bucket_view_ = v;
    return *this;
  }
  DistributedOptimizerOptions& bucket_view_bytes(size_t v) {
    bucket_view_bytes_ = v;
    return *this;
  }
};

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

/// `named` with every name prefixed, e.g. prefixed("generator.", generator->named_parameters())
/// for two models whose parameter names would otherwise collide.
inline NamedParameters prefixed(const std::string& prefix,
                                const torch::OrderedDict<std::string, torch::Tensor>& named) {
  NamedParameters out;
  out.reserve(named.size());
  for (const auto& item : named) out.emplace_back(prefix + item.key(), item.value());
  return out;
}

class DistributedOptimizer;

/// While alive, step() of its optimizer does not synchronize (see skip_synchronize()).
class SkipSynchronizeGuard {
 public:
  explicit SkipSynchronizeGuard(DistributedOptimizer& opt);
  ~SkipSynchronizeGuard();
  SkipSynchronizeGuard(const SkipSynchronizeGuard&) = delete;
  SkipSynchronizeGuard& operator=(const SkipSynchronizeGuard&) = delete;

 private:
  DistributedOptimizer& opt_;
  bool previous_;
};

class DistributedOptimizer {
 public:
  /// Wraps `optimizer` (not owned: it must outlive this object). `named_parameters` gives the
  /// parameters' names, which identify reductions across ranks and must be identical on every
  /// rank; entries for tensors the optimizer does not hold are ignored. Names another live
  /// optimizer already uses for other tensors are made unique on the wire (a suffix "#2", ...),
  /// identically on every rank. When it is empty, the
  /// optimizer's parameters get deterministic names "param.<n>" (n counts distinct tensors in
  /// registration order, so construct optimizers in the same order on every rank). Parameters
  /// that do not require grad are not reduced. Throws hvd::Error when two different tensors of
  /// this optimizer get one name (naming both), when the optimizer holds a parameter missing
  /// from a non-empty named_parameters, when options are invalid, or when an optimizer sharing a
  /// parameter uses different reduction options.
  DistributedOptimizer(torch::optim::Optimizer& optimizer, NamedParameters named_parameters = {},
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(torch::optim::Optimizer& optimizer,
                       const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                       DistributedOptimizerOptions options = {});
  /// Waits for this optimizer's in-flight reductions, then unregisters its parameters (their
  /// hooks go when no optimizer holds them any more).
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  /// Unless inside skip_synchronize(): synchronize(). Then the wrapped optimizer's step. Inside
  /// skip_synchronize(), throws hvd::Error (naming a parameter) when a reduction of this
  /// optimizer is still in flight: call synchronize() before. With a
  /// closure (LBFGS), every evaluation of the closure is followed by synchronize() and the
  /// returned loss is averaged over ranks, so all ranks take the same decisions. kAdasum: the
  /// closure (if any) is evaluated once, then synchronize() completes the update (the wrapped
  /// optimizer is stepped without a closure, per parameter); returns the closure's loss.
  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr);
  /// Waits until every parameter of this optimizer holds its reduced gradient: reductions not
  /// yet started (no gradient on this rank this step, or fewer than backward_passes_per_step
  /// passes) start now, contributing the current .grad (zeros when it is undefined); the ranks
  /// agree (one small allreduce) on how many reductions each parameter had, and those with fewer
  /// contribute zeros, whatever passes reached it where. Throws hvd::Error on every rank when a
  /// gradient was zeroed after uneven passes (see zero_grad()). kAdasum: every parameter
  /// becomes its old value plus the Adasum of the ranks' local steps (parameters not stepped yet
  /// step locally now); step() adds nothing after it.
  void synchronize();
  /// Zeroes the gradients via the wrapped optimizer, as a single-process zero_grad() does: the
  /// reductions of this optimizer's gradients still in flight (a backward pass since its last
  /// step(), e.g. through another optimizer's loss) are discarded, never waited for, and passes
  /// accumulated towards backward_passes_per_step are dropped. Never throws. Zeroing after
  /// passes that reached a parameter on some ranks only would pair a discarded gradient with a
  /// kept one: the next step() or synchronize() then throws on every rank (step first).
  /// kAdasum (as Horovod): throws hvd::Error while a reduction is in flight (a completed pass
  /// already stepped locally: call step() first).
  void zero_grad();
  /// `{ auto g = opt.skip_synchronize(); opt.step(); }` after an explicit synchronize() (e.g. to
  /// clip gradients in between). kAdasum: throws hvd::Error (the local step happens during
  /// backward, so nothing done to gradients before step() would count), as Horovod.
  SkipSynchronizeGuard skip_synchronize() { return SkipSynchronizeGuard(*this); }

  torch::optim::Optimizer& optimizer() { return optimizer_; }
  /// The names of this optimizer's parameters' reductions on the wire ("grad.<name>", with a
  /// suffix "#k" where another live tensor had the name first; kAdasum: "adasum.<name>" or
  /// "adasum.param.<n>", with a suffix "#k" on the k-th Adasum optimizer of this process using
  /// the name: given out in registration order, never reused), in optimizer order.
  std::vector<std::string> parameter_names() const;
  const std::string& label() const { return label_; }
  /// gradient_as_bucket_view: the bucket of each parameter (wire names "hvd.bucket.<g>.<k>"),
  /// in optimizer order, "" where a parameter is in none (before the first step, shared, ...).
  std::vector<std::string> bucket_names() const;

 private:
  friend class SkipSynchronizeGuard;
  struct Impl;
  torch::optim::Optimizer& optimizer_;
  std::string label_;
  bool skip_sync_ = false;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
/// Called on the thread that submits each gradient reduction (usually autograd's, during
/// backward), right after submission, with the reduction's name and handle. For tests and
/// tracing; pass nullptr to remove. Must not call back into the optimizer.
void set_submit_observer(std::function<void(const std::string& name, const Handle& handle)> fn);
}  // namespace detail

}  // namespace hvd::optim
