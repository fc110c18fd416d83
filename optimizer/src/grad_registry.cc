// SPDX-License-Identifier: Apache-2.0
// The gradient registry: hooks, rounds, submission and completion (see grad_registry.h).
#include "grad_registry.h"

#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <sstream>

#include "hvd/core/status.h"
#include "hvd/hvd.h"
#include "hvd/optim/tensor_adapter.h"

namespace hvd::optim::detail {
namespace {

using State = GradEntry::State;

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kFp16:
      return "fp16";
    case Compression::kBf16:
      return "bf16";
  }
  return "?";
}

std::string describe(const torch::Tensor& t) {
  std::ostringstream os;
  os << c10::toString(t.scalar_type()) << shape_str(t.sizes().vec()) << " at "
     << static_cast<const void*>(t.unsafeGetTensorImpl());
  return os.str();
}

/// Fires after autograd has accumulated the parameter's gradient into .grad.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::weak_ptr<GradEntry> e) : e_(std::move(e)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto e = e_.lock()) GradRegistry::instance().on_grad_ready(e);
    return outputs;
  }

 private:
  std::weak_ptr<GradEntry> e_;
};

/// The tensor the allreduce works on: .grad itself, or a contiguous / 16-bit staging copy.
torch::Tensor make_wire(GradEntry& e) {
  torch::NoGradGuard no_grad;
  if (!e.param.grad().defined()) e.param.mutable_grad() = torch::zeros_like(e.param);
  torch::Tensor g = e.param.grad();
  if (g.layout() != c10::kStrided) {
    throw Error(invalid_argument("DistributedOptimizer: gradient of '" + e.name +
                                 "' is sparse; sparse gradients are not supported (use a dense "
                                 "embedding or convert the gradient)"));
  }
  const auto st = g.scalar_type();
  const bool wide_float = st == c10::kFloat || st == c10::kDouble;
  if (wide_float && e.settings.compression == Compression::kFp16) return g.to(c10::kHalf);
  if (wide_float && e.settings.compression == Compression::kBf16) return g.to(c10::kBFloat16);
  return g.is_contiguous() ? g : g.contiguous();
}

/// Copies a finished reduction back into .grad when it ran on a staging copy.
void finish(GradEntry& e, bool ok) {
  if (ok && e.wire.defined() && !e.wire.is_same(e.param.grad())) {
    torch::NoGradGuard no_grad;
    e.param.mutable_grad().copy_(e.wire);
  }
  e.wire = torch::Tensor();
  e.passes = 0;
  e.state = ok ? State::kReduced : State::kIdle;
  if (!ok) e.pending.clear();
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::string ReduceSettings::str() const {
  std::ostringstream os;
  os << "op " << reduce_op_name(op) << ", compression " << compression_name(compression)
     << ", backward_passes_per_step " << backward_passes_per_step << ", gradient_predivide_factor "
     << predivide;
  return os.str();
}

std::string GradEntry::owner_labels() const {
  std::string s;
  for (const auto& o : owners) s += (s.empty() ? "'" : ", '") + o.second + "'";
  return s;
}

GradRegistry& GradRegistry::instance() {
  static GradRegistry* r = new GradRegistry();  // never destroyed: hooks may outlive statics
  return *r;
}

void GradRegistry::set_observer(std::function<void(const std::string&, const Handle&)> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  observer_ = std::move(fn);
}

EntryList GradRegistry::add(int owner, const std::string& label,
                            const std::vector<ParamSpec>& params, const ReduceSettings& settings,
                            const std::vector<std::vector<size_t>>& groups) {
  std::lock_guard<std::mutex> lk(mu_);
  // Validate everything before changing anything.
  std::unordered_map<std::string, const ParamSpec*> new_names;
  for (const auto& p : params) {
    c10::TensorImpl* impl = p.tensor.unsafeGetTensorImpl();
    auto existing = by_tensor_.find(impl);
    if (existing != by_tensor_.end() && !(existing->second->settings == settings)) {
      throw Error(invalid_argument("DistributedOptimizer: parameter '" + existing->second->name +
                                   "' is shared by " + existing->second->owner_labels() + " (" +
                                   existing->second->settings.str() + ") and '" + label + "' (" +
                                   settings.str() +
                                   "); optimizers sharing a parameter must reduce it "
                                   "the same way"));
    }
    if (!p.tensor.is_leaf()) {
      throw Error(invalid_argument("DistributedOptimizer '" + label + "': parameter '" + p.name +
                                   "' (" + describe(p.tensor) + ") is not a leaf tensor"));
    }
    if (p.name.empty()) continue;
    auto by_name = by_name_.find(p.name);
    if (by_name != by_name_.end() && by_name->second->param.unsafeGetTensorImpl() != impl) {
      throw Error(invalid_argument(
          "DistributedOptimizer: two different tensors are registered under the name '" + p.name +
          "': " + describe(by_name->second->param) + " held by " + by_name->second->owner_labels() +
          ", and " + describe(p.tensor) + " given to '" + label +
          "'; names must identify one tensor on every rank (rename one, e.g. with "
          "hvd::optim::prefixed(\"model.\", model->named_parameters()))"));
    }
    auto mine = new_names.emplace(p.name, &p);
    if (!mine.second && mine.first->second->tensor.unsafeGetTensorImpl() != impl) {
      throw Error(invalid_argument(
          "DistributedOptimizer: two different tensors are registered under the name '" + p.name +
          "': " + describe(mine.first->second->tensor) + " and " + describe(p.tensor) +
          ", both given to '" + label + "'; names must identify one tensor on every rank"));
    }
  }
  for (const auto& g : groups) {
    bool any_new = false, same = true;
    std::shared_ptr<GradGroup> first;
    for (size_t k = 0; k < g.size(); ++k) {
      auto it = by_tensor_.find(params[g[k]].tensor.unsafeGetTensorImpl());
      std::shared_ptr<GradGroup> cur = it == by_tensor_.end() ? nullptr : it->second->group;
      any_new = any_new || it == by_tensor_.end();
      if (k == 0) first = cur;
      same = same && cur && cur == first;
    }
    if (!any_new && same && first->members.size() == g.size()) continue;  // identical group
    bool all_new = true;
    for (size_t i : g)
      all_new = all_new && !by_tensor_.count(params[i].tensor.unsafeGetTensorImpl());
    if (!all_new) {
      throw Error(invalid_argument(
          "DistributedOptimizer '" + label + "': the fusion group starting with parameter '" +
          params[g.front()].name +
          "' contains a parameter that another optimizer already "
          "reduces with a different grouping; give shared parameters identical groups"));
    }
  }

  // Register.
  EntryList out;
  out.reserve(params.size());
  for (const auto& p : params) {
    c10::TensorImpl* impl = p.tensor.unsafeGetTensorImpl();
    auto it = by_tensor_.find(impl);
    std::shared_ptr<GradEntry> e;
    if (it != by_tensor_.end()) {
      e = it->second;
      if (!p.name.empty() && p.name != e->name &&
          std::find(e->aliases.begin(), e->aliases.end(), p.name) == e->aliases.end()) {
        e->aliases.push_back(p.name);
        by_name_[p.name] = e;
      }
    } else {
      e = std::make_shared<GradEntry>();
      e->param = p.tensor;
      e->name = p.name.empty() ? "param." + std::to_string(auto_names_++) : p.name;
      e->settings = settings;
      e->accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
      e->hook_key = e->accumulator->add_post_hook(std::make_unique<GradReadyHook>(e));
      by_tensor_[impl] = e;
      by_name_[e->name] = e;
    }
    if (std::none_of(e->owners.begin(), e->owners.end(),
                     [owner](const auto& o) { return o.first == owner; })) {
      e->owners.emplace_back(owner, label);
    }
    out.push_back(e);
  }
  for (const auto& g : groups) {
    if (out[g.front()]->group) continue;  // validated: identical existing group
    auto grp = std::make_shared<GradGroup>();
    grp->name = "grad.group." + out[g.front()]->name + "+" + std::to_string(g.size() - 1);
    for (size_t i : g) {
      grp->members.push_back(out[i]);
      out[i]->group = grp;
    }
  }
  return out;
}

void GradRegistry::remove(int owner, const EntryList& entries) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries) {
    auto& o = e->owners;
    o.erase(std::remove_if(o.begin(), o.end(), [owner](const auto& x) { return x.first == owner; }),
            o.end());
    e->pending.erase(std::remove(e->pending.begin(), e->pending.end(), owner), e->pending.end());
    if (!o.empty()) continue;
    if (e->state == State::kInFlight) (void)e->handle.wait_status();  // wire must outlive it
    e->accumulator->del_post_hook(e->hook_key);
    if (e->group) {
      for (auto& m : e->group->members) {
        if (m != e) m->group.reset();  // the group dissolves with its first departing member
      }
      e->group.reset();
    }
    by_tensor_.erase(e->param.unsafeGetTensorImpl());
    by_name_.erase(e->name);
    for (const auto& a : e->aliases) by_name_.erase(a);
  }
}

void GradRegistry::start_round(GradEntry& e) {
  e.state = State::kIdle;
  e.passes = 0;
  e.pending.clear();
}

bool GradRegistry::group_ready(const GradGroup& g) const {
  return std::all_of(g.members.begin(), g.members.end(), [](const auto& m) {
    return m->state == State::kAccumulating && m->passes >= m->settings.backward_passes_per_step;
  });
}

void GradRegistry::submit_locked(const EntryList& entries, const std::string& group_name) {
  std::vector<TensorView> views;
  try {
    for (const auto& e : entries) {
      e->wire = make_wire(*e);
      views.push_back(to_view(e->wire, "gradient of '" + e->name + "'"));
    }
    const ReduceSettings& s = entries.front()->settings;
    const double pre = 1.0 / s.predivide, post = s.predivide;
    Handle h =
        group_name.empty()
            ? hvd::allreduce_async(views.front(), "grad." + entries.front()->name, s.op, pre, post)
            : hvd::grouped_allreduce_async(views, group_name, s.op, pre, post);
    for (const auto& e : entries) {
      e->handle = h;
      e->state = State::kInFlight;
      e->pending.clear();
      for (const auto& o : e->owners) e->pending.push_back(o.first);
    }
    if (observer_) observer_(group_name.empty() ? "grad." + entries.front()->name : group_name, h);
  } catch (...) {
    for (const auto& e : entries) finish(*e, false);
    throw;
  }
}

void GradRegistry::on_grad_ready(const std::shared_ptr<GradEntry>& e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (e->state == State::kInFlight) {
    throw Error(
        precondition("DistributedOptimizer: the gradient of '" + e->name +
                     "' was computed again while its "
                     "allreduce is still in flight: more than backward_passes_per_step=" +
                     std::to_string(e->settings.backward_passes_per_step) +
                     " backward passes before step() "
                     "or synchronize() of " +
                     e->owner_labels() +
                     "; raise backward_passes_per_step to "
                     "accumulate gradients locally, or call step() (or zero_grad(), to discard "
                     "the gradient) between backward passes"));
  }
  if (e->state == State::kReduced) start_round(*e);
  ++e->passes;
  e->state = State::kAccumulating;
  if (e->passes < e->settings.backward_passes_per_step) return;
  if (!e->group) {
    submit_locked({e}, "");
  } else if (group_ready(*e->group)) {
    submit_locked(e->group->members, e->group->name);
  }
}

void GradRegistry::synchronize(int owner, const EntryList& entries) {
  Waits waits;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<std::shared_ptr<GradGroup>> groups;
    for (const auto& e : entries) {
      if (e->state == State::kInFlight) continue;
      if (e->state == State::kReduced && contains(e->pending, owner)) continue;
      if (e->state == State::kReduced) start_round(*e);
      if (!e->group) {
        submit_locked({e}, "");
      } else if (std::find(groups.begin(), groups.end(), e->group) == groups.end()) {
        groups.push_back(e->group);
      }
    }
    for (const auto& g : groups) {
      for (const auto& m : g->members) {
        if (m->state != State::kAccumulating) start_round(*m);
      }
      submit_locked(g->members, g->name);
    }
    waits = in_flight_locked(entries);
  }
  throw_if_error(wait_and_finish(waits));
}

GradRegistry::Waits GradRegistry::in_flight_locked(const EntryList& entries) const {
  Waits waits;
  for (const auto& e : entries) {
    // Group mates this owner does not hold complete with the group.
    const EntryList self{e};
    for (const auto& m : e->group ? e->group->members : self) {
      const bool listed =
          std::any_of(waits.begin(), waits.end(), [&m](const auto& w) { return w.first == m; });
      if (m->state == State::kInFlight && !listed) waits.emplace_back(m, m->handle);
    }
  }
  return waits;
}

Status GradRegistry::wait_and_finish(const Waits& waits) {
  Status first_error;
  std::vector<bool> ok(waits.size(), true);
  for (size_t i = 0; i < waits.size(); ++i) {
    Status s = waits[i].second.wait_status();
    if (!s.ok()) {
      ok[i] = false;
      if (first_error.ok()) first_error = s;
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < waits.size(); ++i) {
    GradEntry& e = *waits[i].first;
    if (e.state == State::kInFlight && e.handle.state() == waits[i].second.state()) {
      finish(e, ok[i]);
    }
  }
  return first_error;
}

void GradRegistry::consume(int owner, const EntryList& entries) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries) {
    e->pending.erase(std::remove(e->pending.begin(), e->pending.end(), owner), e->pending.end());
  }
}

void GradRegistry::quiesce(const EntryList& entries) {
  Waits waits;
  {
    std::lock_guard<std::mutex> lk(mu_);
    waits = in_flight_locked(entries);
  }
  (void)wait_and_finish(waits);  // a failed reduction is discarded like a finished one
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries) {
    if (e->state != State::kInFlight) start_round(*e);  // kInFlight: resubmitted meanwhile
  }
}

void GradRegistry::check_synchronized(const EntryList& entries, const std::string& what) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries) {
    if (e->state == State::kInFlight) {
      throw Error(precondition(what + " while the allreduce of the gradient of '" + e->name +
                               "' is in flight (it started during backward()); call "
                               "synchronize() before this step() (skip_synchronize() skips only "
                               "the wait inside step())"));
    }
  }
}

}  // namespace hvd::optim::detail
