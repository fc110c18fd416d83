// SPDX-License-Identifier: Apache-2.0
// [local] Failures on the background thread are symmetric: an exception on one rank, or a
// request list rank 0 cannot read, stops every rank with the same error on every pending
// handle; handle callbacks run outside the runtime's lock.
#include <stdexcept>

#include "local_cluster.h"

namespace hvd::test {
namespace {

// Runs the collective, then throws on `rank` for `name` (after the data moved, so the other
// ranks complete it): an exception escaping an executor.
class ThrowingExecutor : public TestExecutor {
 public:
  ThrowingExecutor(std::shared_ptr<LocalHub> hub, int rank, int throw_on, std::string name)
      : TestExecutor(std::move(hub), rank),
        me_(rank),
        throw_on_(throw_on),
        name_(std::move(name)) {}
  Status execute(const Response& r, const std::vector<TensorEntry*>& es) override {
    Status s = TestExecutor::execute(r, es);
    if (me_ == throw_on_ && std::find(r.names.begin(), r.names.end(), name_) != r.names.end()) {
      throw std::runtime_error("injected fault");
    }
    return s;
  }

 private:
  int me_, throw_on_;
  std::string name_;
};

// Rank 0's transport: once armed, the request list gathered from rank 1 arrives truncated.
class CorruptingTransport : public LocalTransport {
 public:
  using LocalTransport::LocalTransport;
  Status gather(const std::vector<uint8_t>& mine,
                std::vector<std::vector<uint8_t>>* at_root) override {
    Status s = LocalTransport::gather(mine, at_root);
    if (s.ok() && armed.load() && rank() == 0 && at_root && at_root->size() > 1) {
      (*at_root)[1].resize(3);
    }
    return s;
  }
  std::atomic<bool> armed{false};
};

struct Ranks {
  std::vector<std::shared_ptr<Runtime>> rt;
  std::vector<std::shared_ptr<LocalHub>> hubs;
  ~Ranks() {
    for (auto& h : hubs) h->abort();  // whatever still waits (a failed test) finishes
    for (auto& r : rt) r->shutdown();
  }
};

bool contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("an exception on one rank's background thread fails every pending handle everywhere",
          "[local][fault]") {
  const int n = GENERATE(2, 3);
  Ranks c;
  auto neg = std::make_shared<LocalHub>(n), ex = std::make_shared<LocalHub>(n);
  c.hubs = {neg, ex};
  for (int r = 0; r < n; ++r) {
    core::RuntimeParts parts{std::make_unique<LocalTransport>(neg, r),
                             std::make_unique<ThrowingExecutor>(ex, r, 1, "boom"), nullptr};
    c.rt.push_back(std::make_shared<Runtime>(Config{}, std::move(parts)));
    c.rt.back()->start();
  }
  // Each rank has one collective no other rank submits: still pending when the fault hits.
  std::vector<Tensor<float>> lone(static_cast<size_t>(n), Tensor<float>({1.f}));
  std::vector<Tensor<float>> boom(static_cast<size_t>(n), Tensor<float>({2.f}));
  std::vector<Handle> pending, booms;
  for (int r = 0; r < n; ++r) {
    pending.push_back(submit(*c.rt[r], "lone." + std::to_string(r), lone[r]));
  }
  for (int r = 0; r < n; ++r) booms.push_back(submit(*c.rt[r], "boom", boom[r]));

  for (int r = 0; r < n; ++r) {
    Status s = await(booms[r], "boom on rank " + std::to_string(r));
    INFO("rank " << r << ": " << s.to_string());
    if (r == 1) {
      CHECK(contains(s, "injected fault"));
      CHECK(contains(s, "allreduce 'boom'"));
    } else {
      CHECK(s.ok());
      CHECK(boom[r].out[0] == 2.f * static_cast<float>(n));
    }
  }
  for (int r = 0; r < n; ++r) {
    Status s = await(pending[r], "lone." + std::to_string(r));
    INFO("rank " << r << ": " << s.to_string());
    CHECK_FALSE(s.ok());
    CHECK(contains(s, "rank 1: allreduce 'boom'"));
    CHECK(contains(s, "injected fault"));
    CHECK(contains(s, "lone." + std::to_string(r)));
  }
  // The runtime stopped for good on every rank: later calls fail with the same cause.
  for (int r = 0; r < n; ++r) {
    Tensor<float> late({1.f});
    Status s = await(submit(*c.rt[r], "late", late), "late");
    CHECK(contains(s, "injected fault"));
  }
}

TEST_CASE("a request list rank 0 cannot read stops every rank with the same error",
          "[local][fault]") {
  const int n = GENERATE(2, 4);
  Ranks c;
  auto neg = std::make_shared<LocalHub>(n), ex = std::make_shared<LocalHub>(n);
  c.hubs = {neg, ex};
  CorruptingTransport* rank0 = nullptr;
  for (int r = 0; r < n; ++r) {
    auto t = std::make_unique<CorruptingTransport>(neg, r);
    if (r == 0) rank0 = t.get();
    core::RuntimeParts parts{std::move(t), std::make_unique<TestExecutor>(ex, r), nullptr};
    c.rt.push_back(std::make_shared<Runtime>(Config{}, std::move(parts)));
    c.rt.back()->start();
  }
  std::vector<Tensor<float>> first(static_cast<size_t>(n), Tensor<float>({1.f}));
  std::vector<Handle> hs;
  for (int r = 0; r < n; ++r) hs.push_back(submit(*c.rt[r], "first", first[r]));
  for (int r = 0; r < n; ++r) await_ok(hs[r], "first");

  rank0->armed = true;
  std::vector<Tensor<float>> second(static_cast<size_t>(n), Tensor<float>({1.f}));
  hs.clear();
  for (int r = 0; r < n; ++r) hs.push_back(submit(*c.rt[r], "second", second[r]));
  for (int r = 0; r < n; ++r) {
    Status s = await(hs[r], "second on rank " + std::to_string(r));
    INFO("rank " << r << ": " << s.to_string());
    CHECK(contains(s, "allreduce 'second'"));
    CHECK(contains(s, "could not read the request list of rank 1"));
  }
}

TEST_CASE("a handle's callback may submit collectives (it runs outside the runtime's lock)",
          "[local]") {
  Cluster c(2);
  c.start_all();
  Tensor<float> a0({1.f}), a1({2.f}), b0({3.f}), b1({4.f});
  Handle first = submit(c[0], "first", a0);
  std::promise<Handle> from_callback;
  std::atomic<bool> ok{false};
  // Set before rank 1 submits, so it runs on rank 0's background thread as "first" completes.
  first.state()->then([&](const Status& s) {
    ok = s.ok();
    from_callback.set_value(submit(c[0], "second", b0));
  });
  Handle first1 = submit(c[1], "first", a1);
  await_ok(first, "first on rank 0");
  await_ok(first1, "first on rank 1");
  auto f = from_callback.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(ok.load());
  Handle second0 = f.get(), second1 = submit(c[1], "second", b1);
  await_ok(second0, "second on rank 0");
  await_ok(second1, "second on rank 1");
  CHECK(b0.out[0] == 7.f);
}

}  // namespace hvd::test
