// SPDX-License-Identifier: Apache-2.0
// The process-wide gradient registry behind DistributedOptimizer (private).
//
// One entry per parameter tensor (keyed by TensorImpl*), whatever number of optimizers hold it.
// Each entry owns one post-hook on the parameter's gradient accumulator and walks a small state
// machine once per backward pass ("round"):
//
//   kIdle --hook--> kAccumulating (passes < backward_passes_per_step, or waiting for group mates)
//         --last pass / synchronize()--> kInFlight (allreduce submitted, .grad or a staging copy
//         on the wire) --synchronize() waits--> kReduced (.grad holds the reduced gradient).
//
// A kReduced entry keeps a set of owners that have not stepped on it yet; while an owner is in
// that set, its synchronize() reuses the reduction instead of starting another. The next hook
// firing (a new backward pass) or a synchronize() by an owner that already consumed it starts a
// new round. synchronize() starts the reductions that did not start during backward (no gradient
// on this rank: the current .grad, zeros if undefined, is contributed), so every rank submits the
// same names and nobody hangs. zero_grad() quiesces its entries first: it waits for those in
// flight (their results are discarded; failures too) and starts a new round for each, dropping
// partial accumulations, as a single-process zero_grad() discards whatever .grad holds.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvd/core/handle.h"
#include "hvd/core/status.h"
#include "hvd/optim/distributed_optimizer.h"

namespace hvd::optim::detail {

/// How a parameter is reduced; optimizers sharing a parameter must agree.
struct ReduceSettings {
  ReduceOp op = ReduceOp::kAverage;
  Compression compression = Compression::kNone;
  int backward_passes_per_step = 1;
  double predivide = 1.0;
  bool operator==(const ReduceSettings& o) const {
    return op == o.op && compression == o.compression &&
           backward_passes_per_step == o.backward_passes_per_step && predivide == o.predivide;
  }
  std::string str() const;
};

struct GradGroup;

struct GradEntry {
  enum class State { kIdle, kAccumulating, kInFlight, kReduced };
  torch::Tensor param;
  std::string name;                                    ///< the reduction is named "grad.<name>"
  std::vector<std::string> aliases;                    ///< other names given for the same tensor
  std::shared_ptr<torch::autograd::Node> accumulator;  ///< kept alive, or the hook is lost
  uintptr_t hook_key = 0;
  std::vector<std::pair<int, std::string>> owners;  ///< (owner id, label)
  ReduceSettings settings;
  std::shared_ptr<GradGroup> group;
  State state = State::kIdle;
  int passes = 0;
  Handle handle;
  torch::Tensor wire;        ///< what the allreduce reads and writes
  std::vector<int> pending;  ///< owners that have not stepped on the reduced gradient
  std::string owner_labels() const;
};

struct GradGroup {
  std::string name;
  std::vector<std::shared_ptr<GradEntry>> members;
};

/// A parameter as DistributedOptimizer hands it over; empty name = automatic.
struct ParamSpec {
  std::string name;
  torch::Tensor tensor;
};

using EntryList = std::vector<std::shared_ptr<GradEntry>>;

class GradRegistry {
 public:
  static GradRegistry& instance();

  /// Registers `params` for `owner`; `groups` are index lists into `params`. Validates first
  /// (names, shared settings, groups) and throws hvd::Error without changing anything.
  EntryList add(int owner, const std::string& label, const std::vector<ParamSpec>& params,
                const ReduceSettings& settings, const std::vector<std::vector<size_t>>& groups);
  /// Drops `owner`; entries nobody holds lose their hook (after any in-flight reduction ends).
  void remove(int owner, const EntryList& entries);

  /// The hook: a backward pass has accumulated e's gradient.
  void on_grad_ready(const std::shared_ptr<GradEntry>& e);
  /// Starts what has not started for `entries` and waits until all are reduced.
  void synchronize(int owner, const EntryList& entries);
  /// `owner` has applied the reduced gradients of `entries`.
  void consume(int owner, const EntryList& entries);
  /// Before zero_grad(): waits for the reductions of `entries` (and their group mates) in
  /// flight, ignoring failures (the results are about to be discarded), then starts a new round
  /// for each of `entries`: accumulated passes and unconsumed reductions are dropped.
  void quiesce(const EntryList& entries);
  /// Throws when `entries` have reductions in flight, naming the first such parameter and `what`
  /// was attempted (step() inside skip_synchronize() without synchronize() before it).
  void check_synchronized(const EntryList& entries, const std::string& what);

  void set_observer(std::function<void(const std::string&, const Handle&)> fn);

 private:
  void start_round(GradEntry& e);
  void submit_locked(const EntryList& entries, const std::string& group_name);
  bool group_ready(const GradGroup& g) const;
  using Waits = std::vector<std::pair<std::shared_ptr<GradEntry>, Handle>>;
  /// The in-flight reductions of `entries` and their group mates (lock held).
  Waits in_flight_locked(const EntryList& entries) const;
  /// Waits for `waits` (lock not held), completes them, returns the first failure.
  Status wait_and_finish(const Waits& waits);

  std::mutex mu_;
  std::unordered_map<c10::TensorImpl*, std::shared_ptr<GradEntry>> by_tensor_;
  std::unordered_map<std::string, std::shared_ptr<GradEntry>> by_name_;  ///< names and aliases
  uint64_t auto_names_ = 0;
  std::function<void(const std::string&, const Handle&)> observer_;
};

}  // namespace hvd::optim::detail
