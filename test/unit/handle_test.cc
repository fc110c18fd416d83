// SPDX-License-Identifier: Apache-2.0
// Handle states: callbacks (then) and wait groups, without a runtime.
#include "hvd/core/handle.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "finished.h"  // core/src: the runtime's batch completion
#include "hvd_catch.h"

namespace hvd::core {

TEST_CASE("a batch's handles are all settled before the first is woken", "[unit]") {
  // A thread waiting for the handles in turn then sleeps once per batch, not once per handle
  // (1,024 wake-ups per burst of 1,024 small allreduces when each was woken as it completed).
  std::vector<std::shared_ptr<HandleState>> hs;
  for (int i = 0; i < 3; ++i) hs.push_back(new_handle_state());
  std::vector<bool> seen_done;
  hs[0]->then([&](const Status&) {
    for (auto& h : hs) seen_done.push_back(h->done());
  });
  hs[1]->complete(Status::OK());  // completed earlier: the batch leaves it as it is
  detail::Finished batch;
  for (auto& h : hs) batch.add(h, aborted("batch"));
  batch.complete();
  CHECK(seen_done == std::vector<bool>{true, true, true});
  CHECK(hs[0]->status.message() == "batch");
  CHECK(hs[1]->status.ok());
  CHECK(hs[2]->status.message() == "batch");
}

TEST_CASE("a second then() callback runs after the first instead of replacing it", "[unit]") {
  auto hs = new_handle_state();
  std::vector<std::string> ran;
  hs->then([&](const Status& s) { ran.push_back(s.ok() ? "first ok" : "first failed"); });
  hs->then([&](const Status& s) { ran.push_back(s.ok() ? "second ok" : "second failed"); });
  hs->complete(Status::OK());
  CHECK(ran == std::vector<std::string>{"first ok", "second ok"});
  hs->then([&](const Status& s) { ran.push_back(s.ok() ? "late ok" : "late failed"); });
  CHECK(ran == std::vector<std::string>{"first ok", "second ok", "late ok"});
}

TEST_CASE("one handle in two join_handles() completes both joins", "[unit]") {
  auto a = new_handle_state();
  auto b = new_handle_state();
  Handle ha(a), hb(b);
  Handle j1 = join_handles({ha, hb});
  Handle j2 = join_handles({ha});
  CHECK_FALSE(j1.poll());
  CHECK_FALSE(j2.poll());
  a->complete(aborted("a failed"));
  REQUIRE(j2.poll());  // polled first: waiting for a join that never completes would hang
  CHECK(j2.wait_status().message() == "a failed");
  CHECK_FALSE(j1.poll());
  b->complete(Status::OK());
  REQUIRE(j1.poll());
  CHECK(j1.wait_status().message() == "a failed");
}

TEST_CASE("threads waiting at once run the wait group's listener concurrently", "[unit]") {
  // Each call of the listener waits (bounded) until two calls are inside it at once: were the
  // listeners run under one process-wide lock, the second waiter could not enter before the
  // first left, and both would see only one.
  std::mutex mu;
  std::condition_variable cv;
  int inside = 0;
  int most = 0;
  auto group = std::make_shared<WaitGroup>([&] {
    std::unique_lock<std::mutex> lk(mu);
    ++inside;
    most = std::max(most, inside);
    cv.notify_all();
    cv.wait_for(lk, std::chrono::seconds(2), [&] { return most >= 2; });
    --inside;
  });
  auto h1 = new_handle_state();
  auto h2 = new_handle_state();
  h1->waiters = h2->waiters = group;
  std::thread t1([&] { (void)Handle(h1).wait_status(); });
  std::thread t2([&] { (void)Handle(h2).wait_status(); });
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::seconds(5), [&] { return most >= 2; });
  }
  h1->complete(Status::OK());
  h2->complete(Status::OK());
  t1.join();
  t2.join();
  group->close();
  CHECK(most == 2);
  CHECK(group->waiting() == 0);
}

TEST_CASE("WaitGroup::close returns only once no call of its listener runs", "[unit]") {
  std::atomic<bool> entered{false}, left{false};
  auto group = std::make_shared<WaitGroup>([&] {
    entered = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    left = true;
  });
  auto hs = new_handle_state();
  hs->waiters = group;
  std::thread waiter([&] { (void)Handle(hs).wait_status(); });
  while (!entered) std::this_thread::yield();
  group->close();
  CHECK(left.load());
  CHECK(group->waiting() == 1);  // still waiting, counted: close() ends only the listener
  hs->complete(Status::OK());
  waiter.join();
}

}  // namespace hvd::core
