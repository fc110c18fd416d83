// SPDX-License-Identifier: Apache-2.0
// DistributedOptimizer(op=kAdasum): local steps, their deltas Adasum-reduced (see the header).
#include "adasum_optimizer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_map>

#include "hvd/core/handle.h"
#include "hvd/core/status.h"
#include "hvd/optim/tensor_adapter.h"
#include "torch_grad_ops.h"

namespace hvd::optim::detail {
namespace {

/// Wire names of the Adasum optimizers' parameters: a name's first use in this process is the
/// name, later ones `name#2`, `name#3`, ... in the order optimizers register them, never
/// reused. Ranks that build their optimizers in the same order agree on every name, whatever
/// each keeps alive: a suffix freed when an optimizer is destroyed would depend on when each
/// rank destroys it (a reference held on one rank only), and the ranks' names would differ.
class WireNames {
 public:
  std::string assign(const std::string& name) {
    std::lock_guard<std::mutex> lk(mu_);
    const int k = ++uses_[name];
    return k == 1 ? name : name + "#" + std::to_string(k);
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, int> uses_;
};

WireNames& wire_name_table() {
  static auto* w = new WireNames();  // never destroyed: optimizers may outlive statics
  return *w;
}

}  // namespace

struct AdasumUpdate::Slot {
  torch::Tensor param;
  std::string wire_name;
  size_t group = 0;    ///< the index of the param group holding it
  int passes = 0;      ///< backward passes that reached it since its last reduction
  Handle handle;       ///< the reduction in flight (invalid when none)
  torch::Tensor old;   ///< the value before the local step, while in flight
  torch::Tensor wire;  ///< the delta on the wire, while in flight
  std::shared_ptr<torch::autograd::Node> accumulator;  ///< kept alive, or the hook is lost
  uintptr_t hook_key = 0;
};

/// Fires after autograd has accumulated the parameter's gradient into .grad.
class AdasumUpdate::Hook : public torch::autograd::FunctionPostHook {
 public:
  Hook(AdasumUpdate* owner, std::weak_ptr<Slot> slot) : owner_(owner), slot_(std::move(slot)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto s = slot_.lock()) owner_->after_pass(*s);
    return outputs;
  }

 private:
  AdasumUpdate* owner_;  ///< outlives the hook: its destructor removes it
  std::weak_ptr<Slot> slot_;
};

AdasumUpdate::AdasumUpdate(torch::optim::Optimizer& optimizer,
                           const std::vector<std::pair<std::string, torch::Tensor>>& params,
                           const DistributedOptimizerOptions& options, std::string label,
                           bool passive)
    : optimizer_(optimizer),
      label_(std::move(label)),
      compression_(options.compression_),
      passes_per_step_(options.backward_passes_per_step_),
      process_set_(options.process_set_),
      passive_(passive) {
  std::unordered_map<c10::TensorImpl*, size_t> group_of;
  const auto& groups = optimizer_.param_groups();
  for (size_t g = groups.size(); g-- > 0;) {
    for (const auto& p : groups[g].params()) group_of[p.unsafeGetTensorImpl()] = g;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    auto s = std::make_shared<Slot>();
    s->param = params[i].second;
    s->group = group_of[s->param.unsafeGetTensorImpl()];
    const std::string& name = params[i].first;
    s->wire_name =
        wire_name_table().assign("adasum." + (name.empty() ? "param." + std::to_string(i) : name));
    slots_.push_back(s);
  }
  if (passive_) return;
  for (auto& s : slots_) {
    s->accumulator = torch::autograd::impl::grad_accumulator(s->param);
    s->hook_key = s->accumulator->add_post_hook(std::make_unique<Hook>(this, s));
  }
}

AdasumUpdate::~AdasumUpdate() {
  for (auto& s : slots_) {
    if (s->accumulator) s->accumulator->del_post_hook(s->hook_key);
    if (s->handle.valid()) (void)s->handle.wait_status();
  }
}

void AdasumUpdate::after_pass(Slot& s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (s.handle.valid()) {
    throw Error(precondition(
        "DistributedOptimizer '" + label_ + "' (op Adasum): the gradient of '" + s.wire_name +
        "' was computed more than backward_passes_per_step (" + std::to_string(passes_per_step_) +
        ") times before step(); raise backward_passes_per_step to accumulate gradients locally, "
        "or call step() after each pass"));
  }
  if (++s.passes >= passes_per_step_) start(s);
}

void AdasumUpdate::start(Slot& s) {
  torch::NoGradGuard no_grad;
  torch::Tensor p = s.param.detach();
  torch::Tensor old = p.clone();
  // The wrapped optimizer steps this parameter alone: its group holds it, the others nothing.
  auto& groups = optimizer_.param_groups();
  std::vector<std::vector<torch::Tensor>> saved;
  saved.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    saved.push_back(std::move(groups[g].params()));
    groups[g].params() =
        g == s.group ? std::vector<torch::Tensor>{s.param} : std::vector<torch::Tensor>{};
  }
  auto restore = [&] {
    for (size_t i = 0; i < groups.size(); ++i) groups[i].params() = std::move(saved[i]);
  };
  try {
    optimizer_.step();
  } catch (...) {
    restore();
    p.copy_(old);
    throw;
  }
  restore();
  torch::Tensor wire = compressed(p - old, compression_).contiguous();
  p.copy_(old);
  s.handle = hvd::allreduce_async(to_view(wire, s.wire_name), s.wire_name, ReduceOp::kAdasum, 1.0,
                                  1.0, process_set_);
  s.old = std::move(old);
  s.wire = std::move(wire);
}

torch::Tensor AdasumUpdate::step(const torch::optim::Optimizer::LossClosure& closure) {
  if (passive_) return closure ? optimizer_.step(closure) : optimizer_.step();
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  synchronize();
  return loss;
}

void AdasumUpdate::synchronize() {
  if (passive_) return;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& s : slots_) {
    if (!s->handle.valid()) start(*s);
  }
  Status first = Status::OK();
  for (auto& s : slots_) {
    Handle h = std::move(s->handle);
    s->handle = Handle();
    s->passes = 0;
    const Status st = h.wait_status();
    if (st.ok()) {
      torch::NoGradGuard no_grad;
      s->param.detach().copy_(s->old.add_(s->wire.to(s->old.scalar_type())));
    } else {
      if (first.ok()) first = st;
      // After an abort the runtime may still write into the wire: keep it until released.
      if (!h.released()) core::keep_until_released(h, std::make_shared<torch::Tensor>(s->wire));
    }
    s->old = s->wire = torch::Tensor();
  }
  throw_if_error(first);
}

void AdasumUpdate::before_zero_grad() {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& s : slots_) {
    if (s->handle.valid()) {
      throw Error(precondition("DistributedOptimizer '" + label_ +
                               "' (op Adasum): zero_grad() was called after backward() started "
                               "the reduction of '" +
                               s->wire_name + "' and before step(); call step() first"));
    }
  }
  for (auto& s : slots_) s->passes = 0;
}

std::vector<std::string> AdasumUpdate::wire_names() const {
  std::vector<std::string> out;
  out.reserve(slots_.size());
  for (const auto& s : slots_) out.push_back(s->wire_name);
  return out;
}

}  // namespace hvd::optim::detail
