// SPDX-License-Identifier: Apache-2.0
// [local] Who waits on which runtime's handles (burst settling asks its own runtime), and
// handle states recycled while many threads wait, poll and set callbacks on them (the TSan
// tier runs this file too).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

bool soon(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("a thread waiting on one process set's handle counts for that set's runtime only",
          "[local]") {
  // While a user thread waits, a runtime stops gathering a burst (it would only delay the
  // result waited for). A wait on another runtime's handle must not end this one's bursts.
  Cluster c(2);
  c.start_all();
  Handle a0 = c[0].add_process_set({0, 1}), a1 = c[1].add_process_set({0, 1});
  REQUIRE(await(a0, "add_process_set").ok());
  REQUIRE(await(a1, "add_process_set").ok());
  const auto id = static_cast<int32_t>(a0.state()->result);
  std::shared_ptr<Runtime> set0 = c[0].process_set(id).value();
  std::shared_ptr<Runtime> set1 = c[1].process_set(id).value();
  Opts in_set;
  in_set.process_set = id;

  // Only rank 0 submitted it: unfinished until rank 1 does.
  Tensor<float> g0({1.f}), g1({2.f});
  Handle global = submit(c[0], "global.pending", g0);
  std::thread waiter([&] { (void)global.wait_status(); });
  REQUIRE(soon([&] { return c[0].waiting_users() == 1; }));
  CHECK(set0->waiting_users() == 0);
  CHECK(c[1].waiting_users() == 0);
  CHECK(set1->waiting_users() == 0);

  // A wait on the set's handle counts there.
  Tensor<float> s0({3.f}), s1({4.f});
  Handle in_set0 = submit(*set0, "set.pending", s0, in_set);
  std::thread set_waiter([&] { (void)in_set0.wait_status(); });
  REQUIRE(soon([&] { return set0->waiting_users() == 1; }));
  CHECK(c[0].waiting_users() == 1);

  // A joined handle's wait counts on its parts' runtime.
  Tensor<float> j0({5.f}), j1({6.f});
  Handle joined = core::join_handles({submit(*set0, "set.joined", j0, in_set)});
  std::thread joined_waiter([&] { (void)joined.wait_status(); });
  REQUIRE(soon([&] { return set0->waiting_users() == 2; }));
  CHECK(c[0].waiting_users() == 1);

  Handle global1 = submit(c[1], "global.pending", g1);
  Handle in_set1 = submit(*set1, "set.pending", s1, in_set);
  Handle joined1 = submit(*set1, "set.joined", j1, in_set);
  waiter.join();
  set_waiter.join();
  joined_waiter.join();
  for (const Handle& h : {global, global1, in_set0, in_set1, joined, joined1}) {
    REQUIRE(h.wait_status().ok());
  }
  CHECK(g0.out[0] == 3.f);
  CHECK(g1.out[0] == 3.f);
  CHECK(s0.out[0] == 7.f);
  CHECK(s1.out[0] == 7.f);
  CHECK(j0.out[0] == 11.f);
  CHECK(j1.out[0] == 11.f);
  CHECK(c[0].waiting_users() == 0);
  CHECK(set0->waiting_users() == 0);
}

TEST_CASE("a completed handle state nobody holds is recycled in every build", "[local]") {
  // ThreadSanitizer builds recycle too (an acquire TSan models instead of the fence).
  auto s = core::new_handle_state();
  s->result = 7;
  s->complete(internal_error("failed before"));
  REQUIRE(core::HandleState::recycle(s));
  CHECK_FALSE(s->done());
  CHECK(s->status.ok());
  CHECK(s->result == -1);
}

TEST_CASE("handles recycled while other threads wait, poll and set callbacks on them", "[local]") {
  // Each submitter reuses two names (so their table slots recycle states) and checks the
  // result by wait, then() or poll() in turn; a watcher thread gets a copy of every handle and
  // does the same before dropping it, racing the submitter's next use of the name's slot.
  constexpr int kThreads = 4;
  constexpr int kIters = 300;
  Cluster c(2);
  c.start_all();
  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Handle> q;
    bool closed = false;
  };
  std::vector<Mailbox> boxes(static_cast<size_t>(kThreads * 2));
  std::atomic<int> checked{0}, bad{0};
  auto settle = [&](const Handle& h, int how) {
    Status got;
    if (how == 0) {
      got = h.wait_status();
    } else if (how == 1) {
      std::atomic<bool> fired{false};
      std::mutex mu;
      Status seen;
      h.state()->then([&](const Status& st) {
        std::lock_guard<std::mutex> lk(mu);
        seen = st;
        fired.store(true, std::memory_order_release);
      });
      while (!fired.load(std::memory_order_acquire)) std::this_thread::yield();
      std::lock_guard<std::mutex> lk(mu);
      got = seen;
    } else {
      while (!h.poll()) std::this_thread::yield();
      got = h.wait_status();
    }
    if (!got.ok()) ++bad;
  };
  auto watcher = [&](Mailbox& box, int seed) {
    for (int n = seed;; ++n) {
      Handle h;
      {
        std::unique_lock<std::mutex> lk(box.mu);
        box.cv.wait(lk, [&] { return box.closed || !box.q.empty(); });
        if (box.q.empty()) return;
        h = std::move(box.q.front());
        box.q.pop_front();
      }
      settle(h, n % 3);
      ++checked;
    }
  };
  auto submitter = [&](int rank, int t) {
    Mailbox& box = boxes[static_cast<size_t>(rank * kThreads + t)];
    std::vector<Tensor<int32_t>> ts;
    for (int k = 0; k < 2; ++k) ts.emplace_back(std::vector<int32_t>{0});
    for (int i = 0; i < kIters; ++i) {
      Tensor<int32_t>& x = ts[static_cast<size_t>(i % 2)];
      x.in[0] = i + rank;
      Handle h = submit(c[rank], "s" + std::to_string(t) + "." + std::to_string(i % 2), x);
      {
        std::lock_guard<std::mutex> lk(box.mu);
        box.q.push_back(h);
      }
      box.cv.notify_one();
      settle(h, (i + t) % 3);
      if (x.out[0] != 2 * i + 1) ++bad;
    }
    std::lock_guard<std::mutex> lk(box.mu);
    box.closed = true;
    box.cv.notify_one();
  };
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back(watcher, std::ref(boxes[static_cast<size_t>(rank * kThreads + t)]), t);
      threads.emplace_back(submitter, rank, t);
    }
  }
  for (auto& th : threads) th.join();
  CHECK(bad.load() == 0);
  CHECK(checked.load() == 2 * kThreads * kIters);
}
