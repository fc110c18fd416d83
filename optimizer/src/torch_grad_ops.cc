// SPDX-License-Identifier: Apache-2.0
// The libtorch side of the gradient registry (hvd/optim/grad_registry.h): hooks on a parameter's
// gradient accumulator, staging (16-bit compression, contiguous copies), submission through the
// hvd API and writing the result back into .grad.
#include "torch_grad_ops.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <sstream>

#include "hvd/core/host_buffer.h"
#include "hvd/hvd.h"
#include "hvd/optim/tensor_adapter.h"

namespace hvd::optim::detail {

/// What a gradient `t` goes on the wire as under compression `c`: a float32/float64 tensor cast
/// to 16 bits (kFp16, kBf16), `t` itself otherwise.
torch::Tensor compressed(const torch::Tensor& t, Compression c) {
  const auto st = t.scalar_type();
  if (st != c10::kFloat && st != c10::kDouble) return t;
  if (c == Compression::kFp16) return t.to(c10::kHalf);
  if (c == Compression::kBf16) return t.to(c10::kBFloat16);
  return t;
}

namespace {

/// Fires after autograd has accumulated the parameter's gradient into .grad.
class AfterPassHook : public torch::autograd::FunctionPostHook {
 public:
  explicit AfterPassHook(std::weak_ptr<GradEntry> e) : e_(std::move(e)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto e = e_.lock()) throw_if_error(torch_registry().after_pass(e));
    return outputs;
  }

 private:
  std::weak_ptr<GradEntry> e_;
};

class TorchReduction : public GradReduction {
 public:
  TorchReduction(Handle h, std::vector<torch::Tensor> wires)
      : handle(std::move(h)), wires_(std::move(wires)) {}
  TorchReduction(const TorchReduction&) = delete;
  TorchReduction& operator=(const TorchReduction&) = delete;
  // After an abort the reduction fails while the background thread may still write the wire
  // tensors: they stay alive until it let go (Handle::released()).
  ~TorchReduction() override {
    if (!handle.valid() || handle.released()) return;
    core::keep_until_released(handle,
                              std::make_shared<std::vector<torch::Tensor>>(std::move(wires_)));
  }
  Status wait() override { return handle.wait_status(); }
  bool done() override { return handle.poll(); }
  Handle handle;

 private:
  std::vector<torch::Tensor> wires_;  ///< what the reduction reads and writes
};

/// A bucket's flat buffer: on the CPU in a core::HostBuffer mapping (huge pages: MPI moves
/// it between processes faster than torch's allocator's memory; the tensor's deleter unmaps
/// it), on other devices from torch's allocator. Throws std::bad_alloc or c10::Error.
torch::Tensor bucket_buffer(int64_t numel, const torch::TensorOptions& options) {
  if (!options.device().is_cpu()) return torch::empty({numel}, options);
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  size_t length = 0;
  uint8_t* p = core::HostBuffer::map(bytes, 0, &length);
  try {
    return torch::from_blob(
        p, {numel}, [length](void* q) { core::HostBuffer::free_mapping(q, length); }, options);
  } catch (...) {
    core::HostBuffer::free_mapping(p, length);
    throw;
  }
}

/// A bucket of gradient views (GradFrontend::make_bucket): one flat buffer its members' .grad
/// are views of.
struct TorchBucket {
  torch::Tensor flat;
  /// The reduction of `flat` last started (while it runs, .grad must not become a view again).
  std::weak_ptr<GradReduction> last;
  /// In-place writes finish() made to the views since that submission: the views share one
  /// version counter, so each member's check of its own version allows for them.
  int64_t own_writes = 0;
  bool busy() const {
    auto r = last.lock();
    return r && !r->done();
  }
};

class TorchGradParam : public GradParam {
 public:
  TorchGradParam(torch::Tensor p, Compression c) : param_(std::move(p)), compression_(c) {}

  size_t nbytes() const override { return param_.numel() * param_.element_size(); }
  std::string describe() const override {
    std::ostringstream os;
    os << c10::toString(param_.scalar_type()) << shape_str(param_.sizes().vec()) << " at "
       << static_cast<const void*>(param_.unsafeGetTensorImpl());
    return os.str();
  }
  void attach(const std::weak_ptr<GradEntry>& e) override {
    accumulator_ = torch::autograd::impl::grad_accumulator(param_);
    post_key_ = accumulator_->add_post_hook(std::make_unique<AfterPassHook>(e));
    pre_key_ = param_.register_hook([e](const torch::Tensor& g) {
      if (auto entry = e.lock()) throw_if_error(torch_registry().before_pass(entry));
      return g;
    });
  }
  void detach() override {
    param_.remove_hook(pre_key_);
    accumulator_->del_post_hook(post_key_);
  }
  void stash() override {
    if (!param_.grad().defined()) return;
    if (bucket_ && param_.grad().is_same(view_) && !bucket_->busy()) {
      // The view stays .grad, emptied: the pass accumulates into it.
      torch::NoGradGuard no_grad;
      base_ = view_.clone();
      view_.zero_();
      stashed_version_ = view_._version();
      return;
    }
    base_ = param_.grad();
    param_.mutable_grad() = torch::Tensor();
  }
  void drop_stash() override { base_ = torch::Tensor(); }
  void release() override {
    if (!param_.grad().defined() || !param_.grad().is_same(wired_grad())) return;
    taken_ = param_.grad();
    param_.mutable_grad() = torch::Tensor();
  }
  void restore(bool released) override {
    const torch::Tensor& g = param_.grad();
    if (!released && bucket_ && g.defined() && g.is_same(view_)) {
      // The view was emptied for the pass (stash() or reattach()) and nothing accumulated.
      if (g._version() == stashed_version_) {
        torch::NoGradGuard no_grad;
        if (base_.defined()) {
          view_.copy_(base_);
        } else if (was_empty_) {
          param_.mutable_grad() = torch::Tensor();
        }
      }
      base_ = taken_ = torch::Tensor();
      return;
    }
    if (!param_.grad().defined()) {
      param_.mutable_grad() = released ? taken_ : base_;
      if (!released) base_ = torch::Tensor();
    }
    taken_ = torch::Tensor();
  }
  void settle() override {
    if (!base_.defined()) return;
    torch::NoGradGuard no_grad;
    if (param_.grad().defined()) {
      param_.mutable_grad().add_(base_);
    } else {
      param_.mutable_grad() = base_;
    }
    base_ = torch::Tensor();
  }
  bool untouched() const override {
    const torch::Tensor& g = param_.grad();
    return g.defined() && g.is_same(wired_grad()) && g._version() == wired_version_;
  }

  std::string bucket_kind() const override {
    if (param_.layout() != c10::kStrided) return {};
    return std::string(c10::toString(param_.scalar_type())) + "/" +
           c10::DeviceTypeName(param_.device().type(), true);
  }
  void reattach() override {
    if (bucket_ && !bucket_->busy()) attach_view();
  }
  void leave_bucket() override {
    hold_wire();  // a reduction in flight keeps its view
    bucket_.reset();
    view_ = torch::Tensor();
  }
  /// Joins bucket `b` at `offset` (elements) of its flat buffer, .grad's value copied in.
  void join_bucket(const std::shared_ptr<TorchBucket>& b, int64_t offset) {
    hold_wire();
    bucket_ = b;
    view_ = b->flat.narrow(0, offset, param_.numel()).view(param_.sizes());
    attach_view();
  }
  const std::shared_ptr<TorchBucket>& bucket() const { return bucket_; }
  /// Bucket submission, first: .grad becomes the view (copied in where it is not).
  void attach_for_submit() { attach_view(); }
  const torch::Tensor& view() const { return view_; }
  /// Bucket submission, then: the reduction works on the view itself (`in_place`, not `zeros`),
  /// or on `wire` (its slice of a 16-bit or zero flat buffer).
  void wire_bucket(torch::Tensor wire, bool in_place, bool zeros) {
    wired_in_place_ = in_place && !zeros;
    wire_ = wired_in_place_ ? torch::Tensor() : std::move(wire);
    wired_grad_ = zeros || wired_in_place_ ? torch::Tensor() : view_;
    wired_version_ = view_._version();
  }
  /// The end of an in-place bucket reduction whose result is .grad as it is (finish_all()'s
  /// check): what finish() would leave, without a write.
  /// The bucket's in-place reduction in flight still works on .grad (untouched(), at bucket
  /// cost): .grad is the view and the views' shared version is `bucket_version` as at submission.
  bool in_flight_in_place(int64_t bucket_version) const {
    if (!wired_in_place_ || bucket_version != wired_version_) return false;
    const torch::Tensor& g = param_.grad();
    return g.defined() && g.is_same(view_);
  }
  bool finished_in_place(int64_t bucket_version) {
    if (!wired_in_place_ || base_.defined() || bucket_version != wired_version_) return false;
    const torch::Tensor& g = param_.grad();
    return g.defined() && g.is_same(view_);
  }
  void unwire() {
    wired_in_place_ = false;
    taken_ = torch::Tensor();
  }

  int64_t numel() const { return param_.numel(); }
  c10::TensorOptions options() const { return param_.options().requires_grad(false); }
  c10::IntArrayRef sizes() const { return param_.sizes(); }
  Compression compression() const { return compression_; }

  /// The tensor the allreduce works on: .grad itself, or a contiguous / 16-bit staging copy.
  const torch::Tensor& wire() const { return wired_in_place_ ? view_ : wire_; }
  Result<TensorView> make_wire(const std::string& name, bool zeros) {
    torch::NoGradGuard no_grad;
    if (!zeros && !param_.grad().defined()) param_.mutable_grad() = torch::zeros_like(param_);
    torch::Tensor g = zeros ? torch::zeros_like(param_) : param_.grad();
    if (g.layout() != c10::kStrided) {
      return invalid_argument("DistributedOptimizer: gradient of '" + name +
                              "' is sparse; sparse gradients are not supported by the C++ "
                              "DistributedOptimizer (use a dense embedding)");
    }
    if (!zeros && !g.unsafeGetTensorImpl()->version_counter().unique()) {
      // .grad shares its version counter with other tensors: autograd took it from a gradient
      // that other parameters' gradients came from too (through torch.cat, for one), so their
      // accumulations, or results written into them, would look like in-place changes of this
      // one while it is reduced (and drop it). variable_data() is the same memory with a counter
      // of its own (no copy); it is .grad from then on.
      g = g.variable_data();
      param_.mutable_grad() = g;
    }
    wired_in_place_ = false;
    wire_ = compressed(g, compression_);
    if (wire_.is_same(g) && !g.is_contiguous()) wire_ = g.contiguous();
    wired_grad_ = zeros ? torch::Tensor() : g;
    wired_version_ = g._version();
    try {
      return to_view(wire_, "gradient of '" + name + "'");
    } catch (const Error& e) {
      return Status(e.code(), e.what());
    }
  }

  void finish(bool ok, GradFrontend::Use use) {
    torch::NoGradGuard no_grad;
    hold_wire();
    if (use != GradFrontend::Use::kGrad) {
      if (ok && use == GradFrontend::Use::kAside) {
        // The result of a reduction whose gradient a later pass released (or of zeros): it
        // joins what stash() set aside.
        torch::Tensor val =
            wire_.scalar_type() == param_.scalar_type() ? wire_ : wire_.to(param_.scalar_type());
        // A slice of a flat buffer is reused by the next reduction: kept as a copy.
        if (!base_.defined() && bucket_ && val.is_alias_of(wire_)) val = val.clone();
        base_ = base_.defined() ? base_ + val : val;
      }
      wire_ = wired_grad_ = taken_ = torch::Tensor();
      return;
    }
    torch::Tensor g = param_.grad();
    const bool same = g.defined() && g.is_same(wired_grad_);
    // Bucket views share one version counter: the writes of this finish() to mates count too.
    int64_t* writes = bucket_ && same ? &bucket_->own_writes : nullptr;
    const int64_t expected = wired_version_ + (writes ? *writes : 0);
    if (ok && same && g._version() == expected) {
      if (!wire_.is_same(g)) g.copy_(wire_);
      if (base_.defined()) g.add_(base_);
      if (writes) *writes += g._version() - expected;
    } else if (ok && same && wire_.is_same(g)) {
      // Changed in place (zeroed) while the reduction wrote into it: keep the user's zeros.
      g.zero_();
      if (writes) ++*writes;
    }
    base_ = wire_ = wired_grad_ = taken_ = torch::Tensor();
  }

 private:
  torch::Tensor param_;
  Compression compression_;
  std::shared_ptr<torch::autograd::Node> accumulator_;  ///< kept alive, or the hook is lost
  uintptr_t post_key_ = 0;
  unsigned pre_key_ = 0;
  torch::Tensor base_;         ///< set aside by stash(), plus results set aside
  torch::Tensor taken_;        ///< what release() took from .grad
  torch::Tensor wire_;         ///< what the allreduce reads and writes
  torch::Tensor wired_grad_;   ///< .grad when the reduction started
  int64_t wired_version_ = 0;  ///< and its version counter then
  /// A bucket reduced in place: wire_ and wired_grad_ are view_ (not held: a bucket of 1,024
  /// members would take and drop 2,048 references per step for nothing).
  bool wired_in_place_ = false;
  std::shared_ptr<TorchBucket> bucket_;  ///< bucket views: the bucket, else null
  torch::Tensor view_;                   ///< ... and this parameter's view into its buffer
  int64_t stashed_version_ = -1;         ///< the view's version once emptied for a pass
  bool was_empty_ = false;               ///< .grad was empty when the view became .grad

  const torch::Tensor& wired_grad() const { return wired_in_place_ ? view_ : wired_grad_; }
  /// wire_ and wired_grad_ hold the view they stand for (before the view changes or a finish()).
  void hold_wire() {
    if (!wired_in_place_) return;
    wire_ = wired_grad_ = view_;
    wired_in_place_ = false;
  }

  /// .grad becomes the view, holding .grad's value (zeros when empty).
  void attach_view() {
    const torch::Tensor& g = param_.grad();
    if (g.defined() && g.is_same(view_)) return;
    torch::NoGradGuard no_grad;
    was_empty_ = !g.defined();
    if (was_empty_) {
      view_.zero_();
    } else {
      view_.copy_(g);
    }
    stashed_version_ = view_._version();
    param_.mutable_grad() = view_;
  }
};

class TorchFrontend : public GradFrontend {
 public:
  Result<std::shared_ptr<GradReduction>> submit(const std::vector<GradParam*>& params,
                                                const std::string& name, bool grouped,
                                                const ReduceSettings& s, bool zeros) override {
    std::vector<TensorView> views;
    std::vector<torch::Tensor> wires;
    for (GradParam* p : params) {
      auto* tp = static_cast<TorchGradParam*>(p);
      Result<TensorView> v = tp->make_wire(name, zeros);
      if (!v.ok()) return v.status();
      views.push_back(v.value());
      wires.push_back(tp->wire());
    }
    return start(name, grouped, views, std::move(wires), s);
  }
  /// One allreduce (grouped: of several tensors) of `views` under `name`; `wires` keeps them.
  Result<std::shared_ptr<GradReduction>> start(const std::string& name, bool grouped,
                                               const std::vector<TensorView>& views,
                                               std::vector<torch::Tensor> wires,
                                               const ReduceSettings& s) {
    const double pre = 1.0 / s.predivide, post = s.predivide;
    const ProcessSet set(s.process_set);
    Handle h;
    try {
      h = grouped ? hvd::grouped_allreduce_async(views, name, s.op, pre, post, set)
                  : hvd::allreduce_async(views.front(), name, s.op, pre, post, set);
    } catch (const Error& e) {
      return Status(e.code(), e.what());
    }
    std::function<void(const std::string&, const Handle&)> observer;
    {
      std::lock_guard<std::mutex> lk(observer_mu);
      observer = this->observer;
    }
    if (observer) observer(name, h);
    return std::shared_ptr<GradReduction>(std::make_shared<TorchReduction>(h, std::move(wires)));
  }
  Status make_bucket(const std::vector<GradParam*>& members, const std::string& name,
                     const ReduceSettings&) override {
    if (members.empty()) return Status();
    auto* first = static_cast<TorchGradParam*>(members.front());
    int64_t total = 0;
    for (GradParam* p : members) total += static_cast<TorchGradParam*>(p)->numel();
    auto b = std::make_shared<TorchBucket>();
    auto refused = [&](const std::string& why) {
      return internal_error("DistributedOptimizer: bucket '" + name + "' of " +
                            std::to_string(total) + " elements could not be allocated (" + why +
                            "); use a smaller bucket or turn gradient_as_bucket_view off");
    };
    try {
      b->flat = bucket_buffer(total, first->options());
    } catch (const c10::Error& e) {
      return refused(e.what_without_backtrace());
    } catch (const std::bad_alloc&) {
      return refused("out of memory");
    }
    int64_t offset = 0;
    for (GradParam* p : members) {
      auto* tp = static_cast<TorchGradParam*>(p);
      tp->join_bucket(b, offset);
      offset += tp->numel();
    }
    return Status();
  }
  Result<std::shared_ptr<GradReduction>> submit_bucket(const std::vector<GradParam*>& members,
                                                       const std::string& name,
                                                       const ReduceSettings& s,
                                                       bool zeros) override {
    auto* first = static_cast<TorchGradParam*>(members.front());
    std::shared_ptr<TorchBucket> b = first->bucket();
    int64_t total = 0;
    for (GradParam* p : members) {
      auto* tp = static_cast<TorchGradParam*>(p);
      if (tp->bucket() != b) {
        return internal_error("DistributedOptimizer: bucket '" + name +
                              "' was submitted with a member of another bucket (" + tp->describe() +
                              "); report this as a bug of hvd");
      }
      total += tp->numel();
    }
    if (!b || total != b->flat.numel()) {
      return internal_error("DistributedOptimizer: bucket '" + name +
                            "' was submitted without its full membership; report this as a "
                            "bug of hvd");
    }
    torch::NoGradGuard no_grad;
    torch::Tensor wire = zeros ? torch::zeros_like(b->flat) : b->flat;
    if (!zeros) {
      // Members whose .grad is not their view (replaced, emptied, released) are copied in first.
      for (GradParam* p : members) static_cast<TorchGradParam*>(p)->attach_for_submit();
    }
    wire = compressed(wire, first->compression());
    const bool in_place = wire.is_same(b->flat);  // each member's wire is its view
    int64_t offset = 0;
    for (GradParam* p : members) {
      auto* tp = static_cast<TorchGradParam*>(p);
      tp->wire_bucket(
          in_place ? torch::Tensor() : wire.narrow(0, offset, tp->numel()).view(tp->sizes()),
          in_place, zeros);
      offset += tp->numel();
    }
    if (!zeros) b->own_writes = 0;
    std::vector<TensorView> views;
    try {
      views.push_back(to_view(wire, "bucket '" + name + "'"));
    } catch (const Error& e) {
      return Status(e.code(), e.what());
    }
    auto r = start(name, false, views, {wire}, s);
    if (r.ok() && !zeros) b->last = r.value();
    return r;
  }
  void finish(GradParam& p, GradReduction&, size_t, bool ok, Use use) override {
    static_cast<TorchGradParam&>(p).finish(ok, use);
  }
  void finish_all(const std::vector<GradParam*>& params, GradReduction& r,
                  const std::vector<size_t>& index, bool ok,
                  const std::vector<Use>& uses) override {
    // A bucket reduced in place whose every member's .grad is still its view, unwritten since
    // (the views share the flat buffer's version counter: one read for all): the result is
    // where it belongs, nothing is copied or added.
    if (ok && std::all_of(uses.begin(), uses.end(), [](Use u) { return u == Use::kGrad; }) &&
        finish_bucket(params)) {
      return;
    }
    GradFrontend::finish_all(params, r, index, ok, uses);
  }
  bool bucket_untouched(const std::vector<GradParam*>& members) override {
    if (members.size() < 2) return false;
    const std::shared_ptr<TorchBucket>& b = static_cast<TorchGradParam*>(members[0])->bucket();
    if (!b) return false;
    const int64_t version = b->flat._version();
    return std::all_of(members.begin(), members.end(), [&b, version](GradParam* p) {
      auto* tp = static_cast<TorchGradParam*>(p);
      return tp->bucket() == b && tp->in_flight_in_place(version);
    });
  }
  bool finish_bucket(const std::vector<GradParam*>& members) override {
    // Every member's .grad still its view, unwritten since (the views share the flat buffer's
    // version counter: one read for all), nothing set aside: the result is where it belongs,
    // nothing is copied or added.
    if (!in_place_result(members)) return false;
    for (GradParam* p : members) static_cast<TorchGradParam*>(p)->unwire();
    return true;
  }
  Result<std::vector<int64_t>> agree(const std::string& name, const std::vector<int64_t>& values,
                                     int32_t process_set) override {
    std::vector<int64_t> buf = values;
    try {
      const TensorView v(buf.data(), DataType::kInt64, {static_cast<int64_t>(buf.size())});
      Handle h = hvd::allreduce_async(v, name, ReduceOp::kMax, 1.0, 1.0, ProcessSet(process_set));
      if (Status s = h.wait_status(); !s.ok()) return s;
    } catch (const Error& e) {
      return Status(e.code(), e.what());
    }
    return buf;
  }
  bool defer_to_end_of_pass() override {
    // The pass may raise before its callbacks run: the callback's last copy going away unrun
    // tells the registry, so that the next pass asks again.
    struct Token {
      bool ran = false;
      ~Token() {
        if (!ran) torch_registry().pass_abandoned();
      }
    };
    auto token = std::make_shared<Token>();
    try {
      torch::autograd::Engine::get_default_engine().queue_callback([token] {
        token->ran = true;
        throw_if_error(torch_registry().end_of_pass());
      });
      return true;
    } catch (const c10::Error&) {
      token->ran = true;
      return false;  // not inside a backward pass
    }
  }

  std::mutex observer_mu;
  std::function<void(const std::string&, const Handle&)> observer;

 private:
  /// A bucket reduced in place (each of `params` reduced for its .grad) whose result is every
  /// member's .grad as it is.
  static bool in_place_result(const std::vector<GradParam*>& params) {
    if (params.size() < 2) return false;
    const std::shared_ptr<TorchBucket>& b = static_cast<TorchGradParam*>(params[0])->bucket();
    if (!b) return false;
    const int64_t version = b->flat._version() - b->own_writes;
    return std::all_of(params.begin(), params.end(), [&b, version](GradParam* p) {
      auto* tp = static_cast<TorchGradParam*>(p);
      return tp->bucket() == b && tp->finished_in_place(version);
    });
  }
};

TorchFrontend& torch_frontend() {
  static auto* fe = new TorchFrontend();  // never destroyed: hooks may outlive statics
  return *fe;
}

}  // namespace

GradRegistry& torch_registry() {
  // Each ready gradient is submitted at once (bucket 0): the runtime fuses what is ready together.
  static auto* r = new GradRegistry(torch_frontend(), 0);
  return *r;
}

std::unique_ptr<GradParam> make_torch_param(const torch::Tensor& p, Compression c) {
  return std::make_unique<TorchGradParam>(p, c);
}

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

void set_submit_observer(std::function<void(const std::string& name, const Handle& handle)> fn) {
  std::lock_guard<std::mutex> lk(torch_frontend().observer_mu);
  torch_frontend().observer = std::move(fn);
}

}  // namespace hvd::optim::detail
