// SPDX-License-Identifier: Apache-2.0
// [local] Runtime lifetimes: a background thread left stuck by shutdown() owns its runtime,
// process_set() shares ownership, and collectives racing shutdown() fail cleanly (run under
// TSan and ASan by scripts/run-tests.sh).
#include <condition_variable>
#include <cstring>
#include <future>
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

// The user's buffer of a collective: `freed` is set when its owner lets go of it.
struct Buffer {
  std::vector<float> data;
  std::atomic<bool>* freed;
  Buffer(std::vector<float> d, std::atomic<bool>* f) : data(std::move(d)), freed(f) {}
  ~Buffer() { freed->store(true); }
};

// A one-rank executor that, once the gate opens, writes into the output, noting a write into
// a buffer already freed (`late_writes`): a collective an abort catches half way, its
// executor stuck in a call (to a dead peer) that returns later, or never.
class GatedExecutor : public core::Executor {
 public:
  GatedExecutor(std::shared_ptr<Gate> g, std::atomic<bool>* freed, std::atomic<int>* late)
      : gate_(std::move(g)), freed_(freed), late_(late) {}
  Status execute(const core::Response& /*r*/,
                 const std::vector<core::TensorEntry*>& entries) override {
    ++gate_->entered;
    {
      std::unique_lock<std::mutex> lk(gate_->mu);
      gate_->cv.wait(lk, [&] { return gate_->open; });
    }
    if (freed_->load()) {
      ++*late_;  // the bytes below would land in freed memory
    } else {
      for (auto* e : entries) std::memset(e->output.data, 0, e->output.bytes());
    }
    return Status::OK();
  }
  std::string name() const override { return "gated"; }

 private:
  std::shared_ptr<Gate> gate_;
  std::atomic<bool>* freed_;
  std::atomic<int>* late_;
};

}  // namespace

TEST_CASE(
    "an abort fails a collective at once but its buffers stay in use until the executor "
    "returns",
    "[local]") {
  auto gate = std::make_shared<Gate>();
  std::atomic<bool> freed{false};
  std::atomic<int> late{0};
  core::RuntimeParts parts{std::make_unique<LocalTransport>(std::make_shared<LocalHub>(1), 0),
                           std::make_unique<GatedExecutor>(gate, &freed, &late), nullptr};
  auto rt = std::make_shared<Runtime>(Config{}, std::move(parts));
  rt->start();
  auto buf = std::make_shared<Buffer>(std::vector<float>{1.f, 2.f}, &freed);
  core::TensorEntry e;
  e.request.op = OpType::kAllreduce;
  e.request.name = "x";
  e.request.dtype = DataType::kFloat32;
  e.request.shape = {2};
  e.input = TensorView(buf->data.data(), DataType::kFloat32, {2}, Device::host());
  e.output = e.input;
  Handle h = rt->enqueue(std::move(e));
  REQUIRE(eventually([&] { return gate->entered.load() > 0; }));  // inside the executor

  rt->abort(peer_failure("rank 1 died (test)"));
  Status s = await(h, "x");  // at once: the executor may never return
  CHECK(s.code() == StatusCode::kPeerFailure);
  CHECK_FALSE(h.released());  // ... and still writes into the buffer
  // The user lets go of the buffer now: it must survive until the executor let go.
  core::keep_until_released(h, std::move(buf));
  CHECK_FALSE(freed.load());
  CHECK(core::kept_until_released() >= 1);

  gate->release();  // the stuck call returns
  REQUIRE(eventually([&] { return h.released(); }));
  REQUIRE(eventually([&] { return core::kept_until_released() == 0; }));
  CHECK(freed.load());
  CHECK(late.load() == 0);
  rt->shutdown();
}

TEST_CASE("collectives an abort failed before they ran are released once the loop ended",
          "[local]") {
  auto gate = std::make_shared<Gate>();
  std::atomic<bool> freed{false};
  std::atomic<int> late{0};
  core::RuntimeParts parts{std::make_unique<StuckTransport>(gate),
                           std::make_unique<GatedExecutor>(gate, &freed, &late), nullptr};
  auto rt = std::make_shared<Runtime>(Config{}, std::move(parts));
  rt->start();
  Tensor<float> t({1.f});
  Handle h = submit(*rt, "queued", t);
  REQUIRE(eventually([&] { return gate->entered.load() > 0; }));  // stuck negotiating
  rt->abort(aborted("test abort"));
  CHECK_FALSE(await(h, "queued").ok());
  gate->release();  // the round returns; the loop ends without running it
  rt->shutdown();
  CHECK(h.released());
  CHECK(late.load() == 0);
}

TEST_CASE("a joined handle is released once every part is", "[local]") {
  Cluster c(2);
  c.start_all();
  Tensor<float> a0({1.f}), a1({2.f}), b0({3.f}), b1({4.f});
  Handle j0 = core::join_handles({submit(c[0], "a", a0), submit(c[0], "b", b0)});
  Handle j1 = core::join_handles({submit(c[1], "a", a1), submit(c[1], "b", b1)});
  REQUIRE(await(j0, "joined").ok());
  REQUIRE(await(j1, "joined").ok());
  CHECK(eventually([&] { return j0.released() && j1.released(); }));
  CHECK(a0.out[0] == 3.f);
  CHECK(b1.out[0] == 7.f);
}

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

namespace {
// A global set of one rank whose added process sets negotiate through StuckTransport(gate).
std::shared_ptr<Runtime> runtime_with_stuck_sets(
    const std::shared_ptr<Gate>& gate,
    std::chrono::milliseconds grace = core::RuntimeParts{}.shutdown_grace) {
  core::RuntimeParts parts{std::make_unique<LocalTransport>(std::make_shared<LocalHub>(1), 0),
                           std::make_unique<TestExecutor>(std::make_shared<LocalHub>(1), 0),
                           nullptr};
  parts.shutdown_grace = grace;
  parts.make_process_set = [gate](int32_t /*id*/, const std::vector<int32_t>& /*ranks*/,
                                  core::RuntimeParts* out) {
    out->transport = std::make_unique<StuckTransport>(gate);
    out->host_executor = std::make_unique<TestExecutor>(std::make_shared<LocalHub>(1), 0);
    return Status::OK();
  };
  return std::make_shared<Runtime>(Config{}, std::move(parts));
}

int32_t add_set(Runtime& rt) {
  Handle add = rt.add_process_set({0});
  REQUIRE(await(add, "add_process_set").ok());
  return static_cast<int32_t>(add.state()->result);
}
}  // namespace

TEST_CASE("removing a process set whose runtime is stuck never blocks the global set", "[local]") {
  // Set 1's negotiation never returns (its peers are gone): its shutdown cannot finish. The
  // removal runs on the global set's thread and must not wait for it, with the default grace
  // (10 s) too.
  auto gate = std::make_shared<Gate>();
  auto rt = runtime_with_stuck_sets(gate);
  rt->start();
  const int32_t id = add_set(*rt);
  std::weak_ptr<Runtime> child = rt->process_set(id).value();

  const auto t0 = std::chrono::steady_clock::now();
  Status removed = await(rt->remove_process_set(id), "remove_process_set", 15.0);
  const auto took = std::chrono::steady_clock::now() - t0;
  INFO(removed.to_string());
  CHECK(removed.ok());
  CHECK(took < std::chrono::milliseconds(500));
  CHECK(rt->process_set_ids() == std::vector<int32_t>{0});
  // The global set's thread is free: its collectives still run.
  Tensor<float> t({4.f});
  REQUIRE(await(submit(*rt, "after", t), "after").ok());
  CHECK(t.out[0] == 4.f);
  // Work on the removed set fails at once, naming it.
  if (auto c = child.lock()) {
    Tensor<float> late({1.f});
    Opts o;
    o.process_set = id;
    Status s = await(submit(*c, "late", late, o), "late");
    CHECK(s.message().find("process set " + std::to_string(id)) != std::string::npos);
  }
  gate->release();  // its call returns: its thread ends and lets the runtime go
  CHECK(eventually([&] { return child.expired(); }));
  rt->shutdown();
}

TEST_CASE("shutdown() with a stuck process set returns within the grace", "[local]") {
  // The set's shutdown round never returns. Every rank's global set agreed to shut down, so
  // every rank asked the set to stop: shutdown() gives up on it after the grace, failing its
  // work, instead of waiting for ever. Hard limit 5 s: a hang is a failure.
  auto gate = std::make_shared<Gate>();
  const auto grace = std::chrono::milliseconds(300);
  auto rt = runtime_with_stuck_sets(gate, grace);
  rt->start();
  const int32_t id = add_set(*rt);
  std::shared_ptr<Runtime> child = rt->process_set(id).value();
  Tensor<float> t({1.f});
  Opts o;
  o.process_set = id;
  Handle h = submit(*child, "stuck", t, o);
  REQUIRE(eventually([&] { return gate->entered.load() > 0; }));  // stuck negotiating it

  const auto t0 = std::chrono::steady_clock::now();
  auto done = std::async(std::launch::async, [&] { rt->shutdown(); });
  const bool returned = done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  const auto took = std::chrono::steady_clock::now() - t0;
  gate->release();  // lets a shutdown() that hung return, so that the test ends
  done.wait();
  CHECK(returned);
  CHECK(took >= grace);
  CHECK(took < grace + std::chrono::seconds(1));
  Status s = await(h, "stuck");
  INFO(s.to_string());
  CHECK(s.code() == StatusCode::kAborted);
  CHECK(s.message().find("process set " + std::to_string(id) + " did not stop within") !=
        std::string::npos);
  CHECK(child->stopped());
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
