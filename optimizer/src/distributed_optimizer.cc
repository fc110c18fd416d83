// SPDX-License-Identifier: Apache-2.0
// DistributedOptimizer: option checks, parameter naming and grouping, step/synchronize/zero_grad
// on top of the gradient registry.
#include "hvd/optim/distributed_optimizer.h"

#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "adasum_optimizer.h"
#include "hvd/core/status.h"
#include "hvd/optim/collectives.h"
#include "torch_grad_ops.h"

namespace hvd::optim {
namespace {

std::atomic<int> g_owners{0};

/// The wire name each parameter had when it was last registered (while it lives), so that a
/// parameter registered again after its optimizer is gone keeps its name: on a rank where the old
/// optimizer is still alive it shares the old entry, and that name.
class RememberedWires {
 public:
  /// Forgets the parameters that are gone.
  void prune() {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = wires_.begin(); it != wires_.end();) {
      it = it->second.first.expired() ? wires_.erase(it) : std::next(it);
    }
  }
  /// The wire name `p` had, or "" (its address may be a gone parameter's: prune() first).
  std::string get(const torch::Tensor& p) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = wires_.find(p.unsafeGetTensorImpl());
    return it == wires_.end() ? std::string() : it->second.second;
  }
  void set(const torch::Tensor& p, const std::string& wire) {
    std::lock_guard<std::mutex> lk(mu_);
    auto value =
        std::make_pair(c10::weak_intrusive_ptr<c10::TensorImpl>(p.getIntrusivePtr()), wire);
    auto [it, added] = wires_.emplace(p.unsafeGetTensorImpl(), value);
    if (!added) it->second = std::move(value);
  }

 private:
  std::mutex mu_;
  std::unordered_map<c10::TensorImpl*,
                     std::pair<c10::weak_intrusive_ptr<c10::TensorImpl>, std::string>>
      wires_;
};

RememberedWires& remembered_wires() {
  static auto* w = new RememberedWires();  // never destroyed: optimizers may outlive statics
  return *w;
}

std::string tensor_str(const torch::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + shape_str(t.sizes().vec());
}

ReduceSettings check_options(const DistributedOptimizerOptions& o, const std::string& label) {
  auto fail = [&label](const std::string& m) {
    throw Error(invalid_argument("DistributedOptimizer '" + label + "': " + m));
  };
  if (o.backward_passes_per_step_ < 1) {
    fail("backward_passes_per_step must be >= 1, got " +
         std::to_string(o.backward_passes_per_step_));
  }
  if (o.op_ != ReduceOp::kAverage && o.op_ != ReduceOp::kSum && o.op_ != ReduceOp::kAdasum) {
    fail(std::string("op must be Average, Sum or Adasum, got ") + reduce_op_name(o.op_));
  }
  if (o.op_ == ReduceOp::kAdasum) {
    const int n = o.process_set_.size();
    if (n < 1 || (n & (n - 1)) != 0) {
      std::string ranks;
      for (int r : o.process_set_.ranks()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      fail("op Adasum needs a power-of-two number of ranks in the process set; it has " +
           std::to_string(n) + " (ranks " + ranks + "); use a set of 1, 2, 4, 8, ... ranks");
    }
    if (o.gradient_as_bucket_view_) {
      fail(
          "gradient_as_bucket_view is not supported with op Adasum (the reduced tensors are "
          "parameter deltas, not gradients)");
    }
  }
  if (!(o.gradient_predivide_factor_ > 0)) {
    fail("gradient_predivide_factor must be > 0, got " +
         std::to_string(o.gradient_predivide_factor_));
  }
  if (o.gradient_predivide_factor_ != 1.0 && o.op_ != ReduceOp::kAverage) {
    fail("gradient_predivide_factor is only supported with op Average");
  }
  if (o.num_groups_ < 0) fail("num_groups must be >= 0, got " + std::to_string(o.num_groups_));
  if (o.num_groups_ > 0 && !o.groups_.empty()) fail("give num_groups or groups, not both");
  ReduceSettings s;
  s.op = o.op_;
  s.compression = detail::compression_name(o.compression_);
  s.process_set = o.process_set_.id();
  s.backward_passes_per_step = o.backward_passes_per_step_;
  s.predivide = o.gradient_predivide_factor_;
  if (o.gradient_as_bucket_view_ && o.bucket_view_bytes_ == 0) {
    fail("bucket_view_bytes must be > 0 with gradient_as_bucket_view");
  }
  s.bucket_view = o.gradient_as_bucket_view_;
  s.bucket_view_bytes = o.bucket_view_bytes_;
  return s;
}

std::vector<std::vector<size_t>> make_groups(const DistributedOptimizerOptions& o,
                                             const std::vector<ParamSpec>& specs,
                                             const std::string& label) {
  std::vector<std::vector<size_t>> groups;
  const size_t n = specs.size();
  if (o.num_groups_ > 0 && n > 0) {
    const size_t k = std::min(n, static_cast<size_t>(o.num_groups_));
    const size_t per = (n + k - 1) / k;
    for (size_t start = 0; start < n; start += per) {
      groups.emplace_back();
      for (size_t i = start; i < std::min(n, start + per); ++i) groups.back().push_back(i);
    }
    return groups;
  }
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) {
    if (!specs[i].name.empty()) index.emplace(specs[i].name, i);
  }
  std::unordered_set<size_t> used;
  for (const auto& g : o.groups_) {
    if (g.empty()) continue;
    groups.emplace_back();
    for (const auto& name : g) {
      auto it = index.find(name);
      if (it == index.end()) {
        throw Error(invalid_argument("DistributedOptimizer '" + label + "': group member '" + name +
                                     "' is not a named parameter of this optimizer"));
      }
      if (!used.insert(it->second).second) {
        throw Error(invalid_argument("DistributedOptimizer '" + label + "': parameter '" + name +
                                     "' appears in more than one group"));
      }
      groups.back().push_back(it->second);
    }
  }
  return groups;
}

}  // namespace

struct DistributedOptimizer::Impl {
  int owner = 0;
  bool local = false;  ///< not a member of the process set: steps locally, communicates nothing
  bool bucket_view = false;  ///< gradient_as_bucket_view
  EntryList entries;
  std::unique_ptr<detail::AdasumUpdate> adasum;  ///< op kAdasum: replaces the registry's path
};

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           NamedParameters named_parameters,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), impl_(std::make_unique<Impl>()) {
  impl_->owner = g_owners++;
  label_ = options.label_.empty() ? "DistributedOptimizer#" + std::to_string(impl_->owner)
                                  : options.label_;
  const ReduceSettings settings = check_options(options, label_);
  impl_->local = !options.process_set_.included();
  impl_->bucket_view = options.gradient_as_bucket_view_;

  std::unordered_map<c10::TensorImpl*, std::string> names;
  for (const auto& [name, t] : named_parameters) {
    if (t.defined()) names.emplace(t.unsafeGetTensorImpl(), name);
  }
  std::vector<ParamSpec> specs;
  std::vector<torch::Tensor> tensors;  // of specs
  remembered_wires().prune();
  std::unordered_set<c10::TensorImpl*> seen;
  size_t index = 0;
  for (const auto& group : optimizer_.param_groups()) {
    for (const auto& p : group.params()) {
      const size_t i = index++;
      if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      auto it = names.find(p.unsafeGetTensorImpl());
      if (it == names.end() && !named_parameters.empty()) {
        throw Error(invalid_argument("DistributedOptimizer '" + label_ + "': parameter #" +
                                     std::to_string(i) + " of the optimizer (" + tensor_str(p) +
                                     ") is not in named_parameters; pass the "
                                     "names of all the optimizer's parameters, or none"));
      }
      if (!p.is_leaf()) {
        throw Error(invalid_argument("DistributedOptimizer '" + label_ + "': parameter #" +
                                     std::to_string(i) + " (" + tensor_str(p) +
                                     ") is not a leaf tensor"));
      }
      specs.push_back({it == names.end() ? std::string() : it->second,
                       reinterpret_cast<uint64_t>(p.unsafeGetTensorImpl()),
                       detail::make_torch_param(p, options.compression_),
                       remembered_wires().get(p)});
      tensors.push_back(p);
    }
  }
  if (options.op_ == ReduceOp::kAdasum) {
    std::vector<std::pair<std::string, torch::Tensor>> params;
    params.reserve(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) params.emplace_back(specs[i].name, tensors[i]);
    const bool passive = impl_->local || options.process_set_.size() == 1;
    impl_->adasum =
        std::make_unique<detail::AdasumUpdate>(optimizer_, params, options, label_, passive);
    return;
  }
  if (impl_->local) return;
  auto groups = make_groups(options, specs, label_);
  Result<EntryList> added =
      detail::torch_registry().add(impl_->owner, label_, std::move(specs), settings, groups);
  throw_if_error(added.status());
  impl_->entries = std::move(added).value();
  for (size_t i = 0; i < tensors.size(); ++i)
    remembered_wires().set(tensors[i], impl_->entries[i]->wire);
}

DistributedOptimizer::DistributedOptimizer(
    torch::optim::Optimizer& optimizer,
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
    DistributedOptimizerOptions options)
    : DistributedOptimizer(optimizer, named_parameters.pairs(), std::move(options)) {}

DistributedOptimizer::~DistributedOptimizer() {
  detail::torch_registry().remove(impl_->owner, impl_->entries);
}

void DistributedOptimizer::synchronize() {
  if (impl_->adasum) {
    impl_->adasum->synchronize();
    return;
  }
  throw_if_error(detail::torch_registry().synchronize(impl_->owner, impl_->entries));
}

torch::Tensor DistributedOptimizer::step(torch::optim::Optimizer::LossClosure closure) {
  if (impl_->adasum) return impl_->adasum->step(closure);
  auto& reg = detail::torch_registry();
  if (skip_sync_) {
    if (auto busy = reg.first_in_flight(impl_->entries)) {
      throw Error(precondition("step() of '" + label_ +
                               "' was called inside skip_synchronize() while the allreduce of the "
                               "gradient of '" +
                               busy->name +
                               "' is in flight (it started during backward()); call "
                               "synchronize() before this step() (skip_synchronize() skips only "
                               "the wait inside step())"));
    }
  } else {
    synchronize();
  }
  torch::Tensor loss;
  if (closure) {
    loss = optimizer_.step([this, &closure]() {
      torch::Tensor l = closure();
      synchronize();
      if (impl_->local) return l;
      return allreduce(l.detach(), label_ + ".closure_loss", ReduceOp::kAverage);
    });
  } else {
    loss = optimizer_.step();
  }
  reg.consume(impl_->owner, impl_->entries);
  return loss;
}

void DistributedOptimizer::zero_grad() {
  if (impl_->adasum) {
    impl_->adasum->before_zero_grad();
    optimizer_.zero_grad();
    return;
  }
  detail::torch_registry().quiesce(impl_->entries);
  if (!impl_->bucket_view) {
    optimizer_.zero_grad();
    return;
  }
  // The wrapped zero_grad() of torch 1.x detaches each .grad in place, which a bucket view
  // refuses: zero as that version does, views in place; torch 2's default empties .grad (the
  // next pass's pre-hook re-attaches the view, zeroed).
  for (auto& group : optimizer_.param_groups()) {
    for (auto& p : group.params()) {
      torch::Tensor& g = p.mutable_grad();
      if (!g.defined()) continue;
#if TORCH_VERSION_MAJOR >= 2
      g = torch::Tensor();
#else
      if (!g.is_view()) g.detach_();
      g.zero_();
#endif
    }
  }
}

std::vector<std::string> DistributedOptimizer::parameter_names() const {
  if (impl_->adasum) return impl_->adasum->wire_names();
  std::vector<std::string> out;
  out.reserve(impl_->entries.size());
  for (const auto& e : impl_->entries) out.push_back(e->wire);
  return out;
}

std::vector<std::string> DistributedOptimizer::bucket_names() const {
  return detail::torch_registry().bucket_names(impl_->entries);
}

SkipSynchronizeGuard::SkipSynchronizeGuard(DistributedOptimizer& opt)
    : opt_(opt), previous_(opt.skip_sync_) {
  if (opt_.impl_->adasum) {
    throw Error(precondition("DistributedOptimizer '" + opt_.label_ +
                             "' (op Adasum): skip_synchronize() is not supported: the local step "
                             "happens during backward(), before gradients could be changed; call "
                             "step() (it synchronizes) without it"));
  }
  opt_.skip_sync_ = true;
}

SkipSynchronizeGuard::~SkipSynchronizeGuard() { opt_.skip_sync_ = previous_; }

}  // namespace hvd::optim
