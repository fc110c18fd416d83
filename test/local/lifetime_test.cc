// SPDX-License-Identifier: Apache-2.0
// [local] Runtime lifetimes: a background thread left stuck by shutdown() owns its runtime,
// process_set() shares ownership, and collectives racing shutdown() fail cleanly (run under
// TSan and ASan by scripts/run-tests.sh).
#include <condition_variable>
#include <thread>

#include "local_cluster.h"

namespace hvd::test {
namespace {

// A one-rank transport whose allreduce blocks until the test opens the gate: a background
// thread stuck in a call that an abort cannot interrupt.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> entered{0};
  void release() {
    std::lock_guard<std::mutex> lk(mu);
    open = true;
    cv.notify_all();
  }
};

class StuckTransport : public core::Transport {
 public:
  explicit StuckTransport(std::shared_ptr<Gate> g) : gate_(std::move(g)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status allreduce_and(std::vector<uint64_t>* /*words*/) override {
    ++gate_->entered;
    std::unique_lock<std::mutex> lk(gate_->mu);
    gate_->cv.wait(lk, [&] { return gate_->open; });
    return aborted("released by the test");
  }
  Status gather(const std::vector<uint8_t>& mine,
                std::vector<std::vector<uint8_t>>* at_root) override {
    if (at_root) *at_root = {mine};
    return Status::OK();
  }
  Status broadcast(std::vector<uint8_t>* /*bytes*/) override { return Status::OK(); }

 private:
  std::shared_ptr<Gate> gate_;
};

// Polls `done` for up to 10 s.
bool eventually(const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::shared_ptr<Runtime> make_runtime(std::shared_ptr<LocalHub> neg, std::shared_ptr<LocalHub> ex,
                                      int rank) {
  core::RuntimeParts parts{std::make_unique<LocalTransport>(neg, rank),
                           std::make_unique<TestExecutor>(ex, rank), nullptr};
  return std::make_shared<Runtime>(Config{}, std::move(parts));
}

}  // namespace

TEST_CASE("a background thread left stuck by shutdown() keeps its runtime alive", "[local]") {
  auto gate = std::make_shared<Gate>();
  core::RuntimeParts parts{std::make_unique<StuckTransport>(gate),
                           std::make_unique<TestExecutor>(std::make_shared<LocalHub>(1), 0),
                           nullptr};
  parts.shutdown_grace = std::chrono::milliseconds(50);
  auto rt = std::make_shared<Runtime>(Config{}, std::move(parts));
  rt->start();
  Tensor<float> t({1.f, 2.f});
  Handle h = submit(*rt, "x", t);
  REQUIRE(eventually([&] { return gate->entered.load() > 0; }));  // stuck in the round

  rt->abort(aborted("peer 1 is gone (test)"));
  Status s = await(h, "x");
  CHECK(s.message().find("peer 1 is gone") != std::string::npos);
  rt->shutdown();  // gives up on the stuck thread after the grace period
  std::weak_ptr<Runtime> weak = rt;
  rt.reset();
  REQUIRE_FALSE(weak.expired());  // the stuck thread still owns what it will touch

  gate->release();  // the call returns: the thread ends and destroys the runtime
  REQUIRE(eventually([&] { return weak.expired(); }));
}

TEST_CASE("process_set() of the runtime's own set shares ownership", "[local]") {
  auto rt = make_runtime(std::make_shared<LocalHub>(1), std::make_shared<LocalHub>(1), 0);
  rt->start();
  std::shared_ptr<Runtime> ps = rt->process_set(0).value();
  std::weak_ptr<Runtime> weak = rt;
  rt->shutdown();
  rt.reset();
  REQUIRE_FALSE(weak.expired());  // the caller's pointer keeps it alive

  Tensor<float> t({1.f});
  Status s = await(submit(*ps, "late", t), "late");
  INFO(s.to_string());
  CHECK(s.code() == StatusCode::kAborted);
  CHECK(s.message().find("shut down") != std::string::npos);
  ps.reset();
  CHECK(weak.expired());
}

TEST_CASE("collectives racing shutdown() fail with the shutdown error, never freed memory",
          "[local]") {
  // The free-function API's pattern: user threads copy the published runtime pointer under a
  // lock, look up the set and submit; another thread unpublishes and shuts down.
  constexpr int kRanks = 2, kThreads = 3;
  auto neg = std::make_shared<LocalHub>(kRanks), ex = std::make_shared<LocalHub>(kRanks);
  std::mutex mu;
  std::vector<std::shared_ptr<Runtime>> published;
  for (int r = 0; r < kRanks; ++r) published.push_back(make_runtime(neg, ex, r));
  for (auto& r : published) r->start();

  std::mutex err_mu;
  std::vector<std::string> errors;
  std::atomic<int> ok{0}, refused{0}, gone{0};
  auto user = [&](int rank, int k) {
    for (int i = 0; i < 100000; ++i) {
      std::shared_ptr<Runtime> rt;
      {
        std::lock_guard<std::mutex> lk(mu);
        rt = published[static_cast<size_t>(rank)];
      }
      if (!rt) {
        ++gone;  // the API throws "called after hvd::shutdown()" here
        return;
      }
      std::shared_ptr<Runtime> ps = rt->process_set(0).value();
      rt.reset();
      Tensor<float> t({static_cast<float>(rank + 1)});
      Handle h = submit(*ps, "t" + std::to_string(k) + "." + std::to_string(i), t);
      Status s = h.wait_status();
      if (s.ok() && t.out[0] == 3.f) {
        ++ok;
      } else if (!s.ok() && s.code() == StatusCode::kAborted &&
                 s.message().find("shut") != std::string::npos) {
        ++refused;
      } else {
        std::lock_guard<std::mutex> lk(err_mu);
        errors.push_back("rank " + std::to_string(rank) + ": " + s.to_string() +
                         " (out = " + std::to_string(t.out[0]) + ")");
      }
    }
  };
  std::vector<std::thread> users;
  for (int r = 0; r < kRanks; ++r) {
    for (int k = 0; k < kThreads; ++k) users.emplace_back(user, r, k);
  }
  REQUIRE(eventually([&] { return ok.load() >= 20; }));
  std::vector<std::thread> closers;
  for (int r = 0; r < kRanks; ++r) {
    closers.emplace_back([&, r] {
      std::shared_ptr<Runtime> rt;
      {
        std::lock_guard<std::mutex> lk(mu);
        rt = published[static_cast<size_t>(r)];
      }
      rt->shutdown();  // still published: racing calls are refused by the runtime
      std::lock_guard<std::mutex> lk(mu);
      published[static_cast<size_t>(r)].reset();
    });
  }
  for (auto& c : closers) c.join();
  for (auto& u : users) u.join();
  INFO(ok.load() << " ok, " << refused.load() << " refused");
  for (const auto& e : errors) UNSCOPED_INFO(e);
  CHECK(errors.empty());
  CHECK(gone.load() == kRanks * kThreads);
}

}  // namespace hvd::test
