// SPDX-License-Identifier: Apache-2.0
// [unit] The gradient registry's rules (hvd/optim/grad_registry.h) on plain float gradients: a
// frontend whose "reduction" sums this rank's gradient with a fixed contribution of the other
// ranks, completing at once. Each expected gradient is worked out by hand in the test.
#include "hvd/optim/grad_registry.h"

#include <functional>
#include <optional>
#include <utility>

#include "hvd_catch.h"

using hvd::optim::EntryList;
using hvd::optim::GradEntry;
using hvd::optim::GradFrontend;
using hvd::optim::GradParam;
using hvd::optim::GradReduction;
using hvd::optim::GradRegistry;
using hvd::optim::ParamSpec;
using hvd::optim::ReduceSettings;
using hvd::test::Contains;

namespace {

/// One scalar parameter: its gradient (none = std::nullopt), what stash() set aside, the
/// result of its reduction and whether that reduction reads .grad.
struct Scalar : GradParam {
  std::optional<float> grad, base, wired, taken;
  bool on_grad = false;
  std::weak_ptr<GradEntry> entry;
  bool attached = false;
  size_t nbytes() const override { return 4; }
  std::string describe() const override { return "float32[]"; }
  void attach(const std::weak_ptr<GradEntry>& e) override {
    entry = e;
    attached = true;
  }
  void detach() override { attached = false; }
  void stash() override {
    base = grad;
    grad.reset();
  }
  void drop_stash() override { base.reset(); }
  void release() override {
    taken = grad;
    grad.reset();
    on_grad = false;
  }
  void restore(bool released) override {
    if (!grad) grad = released ? taken : base;
    if (!released) base.reset();
  }
  void settle() override {
    if (base) grad = grad.value_or(0.f) + *base;
    base.reset();
  }
  bool untouched() const override { return on_grad; }
};

struct Done : GradReduction {
  int* busy_polls = nullptr;  ///< while > 0, done() says "not yet" (and counts down)
  hvd::Status wait() override { return hvd::Status(); }
  bool done() override {
    if (busy_polls && *busy_polls > 0) {
      --*busy_polls;
      return false;
    }
    return true;
  }
};

/// The other ranks contribute `others` (their sum) to every reduction; `size` ranks in all.
struct Frontend : GradFrontend {
  float others = 0;
  int size = 2;
  int busy_polls = 0;  ///< the next polls of any reduction answer "not done yet"
  std::vector<std::string> names;
  std::function<void()> on_submit;  ///< runs inside the registry's lock (a GC finalizer, say)
  hvd::Result<std::shared_ptr<GradReduction>> submit(const std::vector<GradParam*>& params,
                                                     const std::string& name, bool,
                                                     const ReduceSettings& s, bool zeros) override {
    names.push_back(name);
    if (on_submit) std::exchange(on_submit, nullptr)();
    for (GradParam* p : params) {
      auto* x = static_cast<Scalar*>(p);
      float sum = (zeros ? 0.f : x->grad.value_or(0.f)) + others;
      x->wired = s.op == hvd::ReduceOp::kSum ? sum : sum / size;
      x->on_grad = !zeros;
    }
    auto r = std::make_shared<Done>();
    r->busy_polls = &busy_polls;
    return std::shared_ptr<GradReduction>(r);
  }
  void finish(GradParam& p, GradReduction&, size_t, bool ok, Use use) override {
    auto& x = static_cast<Scalar&>(p);
    if (use == Use::kAside && ok) x.base = x.base.value_or(0.f) + *x.wired;
    if (use != Use::kGrad) return;
    if (ok) x.grad = *x.wired + x.base.value_or(0.f);
    x.base.reset();
    x.on_grad = false;
  }
  /// Every agreement: its name and how many values it exchanged.
  std::vector<std::pair<std::string, size_t>> agreed;
  /// The other ranks' maxima folded into an agreement's values (none: this rank alone).
  std::function<void(const std::string&, std::vector<int64_t>&)> peer;
  /// One rank in the agreement: its own counts, unless `peer` says otherwise.
  hvd::Result<std::vector<int64_t>> agree(const std::string& name, const std::vector<int64_t>& v,
                                          int32_t) override {
    agreed.emplace_back(name, v.size());
    std::vector<int64_t> out = v;
    if (peer) peer(name, out);
    return out;
  }
};

struct Fixture {
  Frontend fe;
  GradRegistry reg{fe, 0};
  std::vector<Scalar*> params;

  EntryList add(int64_t owner, std::vector<std::pair<std::string, uint64_t>> names,
                ReduceSettings s = {}, std::vector<std::vector<size_t>> groups = {}) {
    std::vector<ParamSpec> specs;
    for (auto& [n, key] : names) {
      auto p = std::make_unique<Scalar>();
      params.push_back(p.get());
      specs.push_back({n, key, std::move(p)});
    }
    auto r = reg.add(owner, "opt" + std::to_string(owner), std::move(specs), s, groups);
    REQUIRE(r.ok());
    return r.value();
  }
  /// A backward pass adding `g` to the gradient of `e`'s parameter.
  void pass(const std::shared_ptr<GradEntry>& e, float g) {
    REQUIRE(reg.before_pass(e).ok());
    auto& x = static_cast<Scalar&>(*e->param);
    x.grad = x.grad.value_or(0.f) + g;
    REQUIRE(reg.after_pass(e).ok());
  }
  static float grad(const std::shared_ptr<GradEntry>& e) {
    return static_cast<Scalar&>(*e->param).grad.value_or(-999.f);
  }
};

}  // namespace

TEST_CASE("registry: names colliding across owners are numbered in registration order", "[unit]") {
  Fixture f;
  auto a = f.add(0, {{"main.0.weight", 1}, {"", 2}});
  auto b = f.add(1, {{"main.0.weight", 3}, {"", 4}});
  auto c = f.add(2, {{"main.0.weight", 1}});  // the same tensor as a[0]: one entry
  CHECK(a[0]->wire == "grad.main.0.weight");
  CHECK(a[1]->wire == "grad.param.0");
  CHECK(b[0]->wire == "grad.main.0.weight#2");
  CHECK(b[1]->wire == "grad.param.1");
  CHECK(c[0] == a[0]);
  CHECK(a[0]->owners.size() == 2);
  // Whether b is gone yet (garbage collection differs across ranks) must not change the names
  // that come after: numbers are never given out twice.
  f.reg.remove(1, b);
  auto d = f.add(3, {{"main.0.weight", 5}});
  CHECK(d[0]->wire == "grad.main.0.weight#3");
  // A name that looks like a number of another name gets the next number of its own.
  auto e = f.add(4, {{"main.0.weight#3", 6}, {"x#2", 7}});
  CHECK(e[0]->wire == "grad.main.0.weight#3#2");
  CHECK(e[1]->wire == "grad.x#2");
  auto g = f.add(5, {{"x", 8}, {"x", 8}, {"main.0.weight", 9}});
  auto h = f.add(6, {{"x", 10}});
  CHECK(g[0]->wire == "grad.x");
  CHECK(g[1] == g[0]);
  CHECK(g[2]->wire == "grad.main.0.weight#4");
  CHECK(h[0]->wire == "grad.x#3");  // "x#2" is the other name's
}

TEST_CASE("registry: a tensor registered again keeps the wire name its frontend remembers",
          "[unit]") {
  Fixture f;
  auto a = f.add(0, {{"w", 1}, {"", 2}});
  f.reg.remove(0, a);  // on this rank the old optimizer is gone; elsewhere it may share the entry
  std::vector<ParamSpec> again;
  again.push_back({"w", 1, std::make_unique<Scalar>(), "grad.w"});
  again.push_back({"", 2, std::make_unique<Scalar>(), "grad.param.0"});
  again.push_back({"", 3, std::make_unique<Scalar>()});
  auto r = f.reg.add(1, "opt1", std::move(again), {}, {});
  REQUIRE(r.ok());
  CHECK(r.value()[0]->wire == "grad.w");
  CHECK(r.value()[1]->wire == "grad.param.0");
  CHECK(r.value()[2]->wire == "grad.param.1");  // the automatic count did not move for [1]
  auto other = f.add(2, {{"w", 4}});
  CHECK(other[0]->wire == "grad.w#2");
}

TEST_CASE("registry: one name for two tensors of one owner, and differing settings, fail",
          "[unit]") {
  Fixture f;
  std::vector<ParamSpec> specs;
  specs.push_back({"w", 1, std::make_unique<Scalar>()});
  specs.push_back({"w", 2, std::make_unique<Scalar>()});
  auto r = f.reg.add(0, "opt", std::move(specs), {}, {});
  REQUIRE(!r.ok());
  CHECK_THAT(r.status().message(), Contains("two different tensors") && Contains("'w'"));
  auto a = f.add(1, {{"w", 1}});
  ReduceSettings sum;
  sum.op = hvd::ReduceOp::kSum;
  std::vector<ParamSpec> again;
  again.push_back({"w", 1, std::make_unique<Scalar>()});
  auto s = f.reg.add(2, "other", std::move(again), sum, {});
  REQUIRE(!s.ok());
  CHECK_THAT(s.status().message(), Contains("must reduce it the same way") && Contains("op Sum") &&
                                       Contains("op Average"));
}

TEST_CASE("registry: two passes before a step reduce each pass's increment once (Sum)", "[unit]") {
  Fixture f;
  ReduceSettings sum;
  sum.op = hvd::ReduceOp::kSum;
  auto e = f.add(0, {{"w", 1}}, sum)[0];
  f.fe.others = 10;  // the other rank adds 10 in every reduction
  f.pass(e, 1);      // reduced at once: 1 + 10
  CHECK(f.fe.names.size() == 1);
  f.pass(e, 2);  // the reduced 11 is set aside; 2 + 10 is reduced and 11 added back
  REQUIRE(f.reg.synchronize(0, {e}).ok());
  CHECK(Fixture::grad(e) == 23.f);
  CHECK(f.fe.names.size() == 2);
  f.reg.consume(0, {e});
  // synchronize() again without a new pass: nothing new here, but the other ranks may have had a
  // pass, so zeros are contributed under the same name and the gradient is kept.
  f.fe.others = 0;
  REQUIRE(f.reg.synchronize(0, {e}).ok());
  CHECK(Fixture::grad(e) == 23.f);
  CHECK(f.fe.names.size() == 3);
}

TEST_CASE("registry: a pending owner reuses the reduction; zero_grad() starts afresh", "[unit]") {
  Fixture f;
  auto a = f.add(0, {{"enc", 1}});
  auto b = f.add(1, {{"enc", 1}});
  f.fe.others = 3;
  f.pass(a[0], 1);  // (1 + 3) / 2
  REQUIRE(f.reg.synchronize(0, a).ok());
  f.reg.consume(0, a);
  REQUIRE(f.reg.synchronize(1, b).ok());  // pending for owner 1: no second reduction
  CHECK(f.fe.names.size() == 1);
  CHECK(Fixture::grad(b[0]) == 2.f);
  f.reg.quiesce(a);
  static_cast<Scalar&>(*a[0]->param).grad = 0.f;  // what zero_grad() then does
  CHECK(a[0]->pending.empty());
  f.pass(a[0], 5);  // zeroed: nothing to set aside; (5 + 3) / 2
  REQUIRE(f.reg.synchronize(0, a).ok());
  CHECK(Fixture::grad(a[0]) == 4.f);
}

TEST_CASE("registry: a group is submitted once every member is ready, with its name", "[unit]") {
  Fixture f;
  auto es = f.add(0, {{"x", 1}, {"y", 2}, {"z", 3}}, {}, {{0, 1}});
  f.pass(es[0], 2);
  CHECK(f.fe.names.empty());  // waits for y
  f.pass(es[2], 2);
  CHECK(f.fe.names == std::vector<std::string>{"grad.z"});
  f.pass(es[1], 4);
  CHECK(f.fe.names.back() == "grad.group.x+1");
  REQUIRE(f.reg.synchronize(0, es).ok());
  CHECK(Fixture::grad(es[0]) == 1.f);
  CHECK(Fixture::grad(es[1]) == 2.f);
  CHECK(f.fe.names.size() == 2);
}

TEST_CASE("registry: the agreement exchanges values per unit, not per member", "[unit]") {
  Fixture f;
  std::vector<std::pair<std::string, uint64_t>> names;
  std::vector<size_t> all;
  for (uint64_t i = 0; i < 64; ++i) {
    names.emplace_back("w" + std::to_string(i), i + 1);
    all.push_back(i);
  }
  auto es = f.add(0, names, {}, {all});
  for (const auto& e : es) f.pass(e, 1);
  REQUIRE(f.reg.synchronize(0, es).ok());
  // [count, fingerprint, rounds, most dropped, least dropped, layout] and their flips: 12 values
  // for 64 members (4 x 65 + 2 = 262 before), one exchange.
  REQUIRE(f.fe.agreed.size() == 1);
  CHECK(f.fe.agreed[0].second == 12);
  CHECK(Fixture::grad(es[63]) == 0.5f);
}

TEST_CASE("registry: members of a unit dropped unevenly: a second exchange, per member", "[unit]") {
  Fixture f;
  auto es = f.add(0, {{"x", 1}, {"y", 2}, {"z", 3}}, {}, {{0, 1, 2}});
  for (const auto& e : es) f.pass(e, 1);
  f.reg.quiesce({es[1]});  // y's reduction dropped, x's and z's not: the members differ here
  SECTION("the same on every rank: no error") {
    REQUIRE(f.reg.synchronize(0, es).ok());
    REQUIRE(f.fe.agreed.size() == 2);
    CHECK(f.fe.agreed[1].first == "grad.agree.dropped.grad.x");
    CHECK(f.fe.agreed[1].second == 6);  // per member: most, then the flipped least
  }
  SECTION("another rank dropped more of z: the error names z") {
    f.fe.peer = [](const std::string& name, std::vector<int64_t>& v) {
      if (name == "grad.agree.dropped.grad.x") v[2] = std::max<int64_t>(v[2], 1);
    };
    hvd::Status s = f.reg.synchronize(0, es);
    REQUIRE(s.code() == hvd::StatusCode::kPrecondition);
    CHECK_THAT(s.message(), Contains("gradient of 'z' was zeroed on some ranks after 0") &&
                                Contains("on others after 1"));
  }
  SECTION("the same counts per member but another rank dropped x: the error names x") {
    f.fe.peer = [](const std::string& name, std::vector<int64_t>& v) {
      if (name == "grad.agree.dropped.grad.x") v[0] = std::max<int64_t>(v[0], 1);
    };
    hvd::Status s = f.reg.synchronize(0, es);
    REQUIRE(s.code() == hvd::StatusCode::kPrecondition);
    CHECK_THAT(s.message(), Contains("gradient of 'x' was zeroed"));
  }
}

TEST_CASE("registry: units dropped evenly here but not on another rank fail", "[unit]") {
  Fixture f;
  auto es = f.add(0, {{"x", 1}, {"y", 2}}, {}, {{0, 1}});
  for (const auto& e : es) f.pass(e, 1);
  // Another rank dropped one reduction of each: in the first exchange the unit's most dropped
  // is 1 there, 0 here.
  f.fe.peer = [](const std::string& name, std::vector<int64_t>& v) {
    if (name == "grad.agree.grad.x") v[3] = std::max<int64_t>(v[3], 1);
    if (name == "grad.agree.dropped.grad.x") v[0] = v[1] = 1;
  };
  hvd::Status s = f.reg.synchronize(0, es);
  REQUIRE(s.code() == hvd::StatusCode::kPrecondition);
  CHECK_THAT(s.message(), Contains("gradient of 'x' was zeroed on some ranks after 0"));
  CHECK(f.fe.agreed.size() == 2);
}

TEST_CASE("registry: a unit completed by a later member's poll is not taken as changed", "[unit]") {
  // synchronize() polls each member: the first poll finds the group's reduction running, the
  // second completes it for every mate. The first member is then done, not "changed while in
  // flight" (which would drop its reduction and submit the group again).
  Fixture f;
  auto es = f.add(0, {{"x", 1}, {"y", 2}, {"z", 3}}, {}, {{0, 1, 2}});
  for (const auto& e : es) f.pass(e, 2);
  REQUIRE(f.fe.names.size() == 1);
  f.fe.busy_polls = 1;
  REQUIRE(f.reg.synchronize(0, es).ok());
  CHECK(f.fe.names.size() == 1);                            // no second submission
  for (const auto& e : es) CHECK(Fixture::grad(e) == 1.f);  // (2 + 0) / 2, nothing dropped
  CHECK(f.fe.agreed.size() == 1);
}

TEST_CASE("registry: backward_passes_per_step accumulates locally first", "[unit]") {
  Fixture f;
  ReduceSettings s;
  s.backward_passes_per_step = 2;
  auto e = f.add(0, {{"w", 1}}, s)[0];
  f.pass(e, 1);
  CHECK(f.fe.names.empty());
  f.pass(e, 3);
  CHECK(f.fe.names.size() == 1);
  REQUIRE(f.reg.synchronize(0, {e}).ok());
  CHECK(Fixture::grad(e) == 2.f);  // (1 + 3 + 0) / 2
}

TEST_CASE("registry: the last owner's removal detaches the hooks", "[unit]") {
  Fixture f;
  auto a = f.add(0, {{"w", 1}});
  auto b = f.add(1, {{"w", 1}});
  Scalar* p = f.params.front();
  f.reg.remove(0, a);
  CHECK(p->attached);
  f.reg.remove(1, b);
  CHECK(!p->attached);
  CHECK(!f.reg.has_live_name("w"));
}

TEST_CASE("registry: a removal asked for inside one of its callbacks runs after it", "[unit]") {
  Fixture f;
  auto a = f.add(0, {{"w", 1}});
  auto b = f.add(1, {{"v", 2}});
  Scalar* v = f.params.back();
  // Python's garbage collector may finalize another optimizer while the frontend runs Python
  // code under the registry's lock: the removal must neither deadlock nor run in the middle.
  f.fe.on_submit = [&] {
    f.reg.remove(1, b);
    CHECK(v->attached);  // deferred
  };
  f.pass(a[0], 1);
  CHECK(!v->attached);
  CHECK(!f.reg.has_live_name("v"));
}
