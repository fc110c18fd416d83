// SPDX-License-Identifier: Apache-2.0
// [local] Device work that finishes after launch (Executor::launch + Completion): handles poll
// it themselves, the background thread goes on, errors and aborts reach the handles.
#include <thread>

#include "hvd_catch.h"
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::core;
using namespace hvd::test;

namespace {

// Waits (bounded) until `gate` has seen `n` launches.
void await_launches(const DeviceGate& gate, int n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (gate.launches.load() < n && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(gate.launches.load() >= n);
}

Opts on_device() {
  Opts o;
  o.device = Device::cuda(0);
  return o;
}

}  // namespace

TEST_CASE("handles of device work finish when the device does, not at launch", "[local]") {
  auto gate = std::make_shared<DeviceGate>();
  Cluster c(2, Config{}, false, gate);
  c.start_all();
  Tensor<float> a0({1.0f, 2.0f}), a1({3.0f, 4.0f});
  Handle h0 = submit(c[0], "a", a0, on_device()), h1 = submit(c[1], "a", a1, on_device());
  await_launches(*gate, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE_FALSE(h0.poll());
  REQUIRE_FALSE(h1.poll());
  REQUIRE(gate->queries.load() > 0);  // the handles asked the device themselves
  // The background thread is not waiting for the device: host work and another collective of
  // the same name run meanwhile.
  Tensor<int32_t> b0({1}), b1({2});
  run_both(c, "b", b0, b1);  // host work while device work runs
  REQUIRE(b0.out == std::vector<int32_t>{3});
  Tensor<float> again0({1.0f}), again1({1.0f});
  Handle k0 = submit(c[0], "a", again0, on_device()), k1 = submit(c[1], "a", again1, on_device());
  await_launches(*gate, 4);
  REQUIRE_FALSE(k0.poll());
  gate->open = true;
  for (Handle* h : {&h0, &h1, &k0, &k1}) await_ok(*h, "device work done");
  REQUIRE(a0.out == std::vector<float>{4.0f, 6.0f});
  REQUIRE(again1.out == std::vector<float>{2.0f});
}

TEST_CASE("an error of device work after launch fails its handles", "[local]") {
  auto gate = std::make_shared<DeviceGate>();
  gate->error = internal_error("cudaEventQuery: an illegal memory access was encountered");
  Cluster c(2, Config{}, false, gate);
  c.start_all();
  Tensor<float> a0({1.0f}), a1({1.0f});
  Handle h0 = submit(c[0], "a", a0, on_device()), h1 = submit(c[1], "a", a1, on_device());
  await_launches(*gate, 2);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    gate->open = true;
  });
  for (Handle* h : {&h0, &h1}) {
    Status s = h->wait_status();  // blocks until the device work reports
    REQUIRE(s.code() == StatusCode::kInternal);
    REQUIRE_THAT(s.message(), hvd::test::Contains("illegal memory access"));
  }
  opener.join();
}

TEST_CASE("an abort fails handles whose device work never finishes", "[local]") {
  auto gate = std::make_shared<DeviceGate>();  // never opens
  Cluster c(2, Config{}, false, gate);
  c.start_all();
  Tensor<float> a0({1.0f}), a1({1.0f});
  Handle h0 = submit(c[0], "a", a0, on_device()), h1 = submit(c[1], "a", a1, on_device());
  await_launches(*gate, 2);
  REQUIRE_FALSE(h0.poll());
  for (int r = 0; r < 2; ++r) c[r].abort(peer_failure("rank 1 died"));
  for (Handle* h : {&h0, &h1}) {
    Status s = await(*h, "aborted device work");
    REQUIRE(s.code() == StatusCode::kPeerFailure);
    REQUIRE_THAT(s.message(), hvd::test::Contains("rank 1 died"));
  }
}

TEST_CASE("device work an abort failed keeps its buffers until it stopped", "[local]") {
  auto gate = std::make_shared<DeviceGate>();
  Cluster c(2, Config{}, false, gate);
  c.start_all();
  Tensor<float> a0({1.0f}), a1({1.0f});
  Handle h0 = submit(c[0], "a", a0, on_device()), h1 = submit(c[1], "a", a1, on_device());
  await_launches(*gate, 2);
  for (int r = 0; r < 2; ++r) c[r].abort(peer_failure("rank 1 died"));
  for (Handle* h : {&h0, &h1}) {
    REQUIRE(await(*h, "aborted device work").code() == StatusCode::kPeerFailure);
    CHECK_FALSE(h->released());  // the kernels may still write the tensors
  }
  gate->open = true;  // the device work stops (an aborted communicator ends it)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(h0.released() && h1.released()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(h0.released());
  CHECK(h1.released());
}

TEST_CASE("join_handles waits for every part's device work and keeps the first error", "[local]") {
  auto gate = std::make_shared<DeviceGate>();
  struct Pending : Completion {
    std::shared_ptr<DeviceGate> g;
    bool query(Status* s) override {
      if (!g->open.load()) return false;
      *s = g->error;
      return true;
    }
  };
  auto pending = std::make_shared<Pending>();
  pending->g = gate;
  auto a = new_handle_state(), b = new_handle_state();
  Handle joined = join_handles({Handle(a), Handle(b)});
  a->complete_after(Status::OK(), pending);
  REQUIRE_FALSE(joined.poll());
  b->complete(Status::OK());
  REQUIRE_FALSE(joined.poll());  // both launched, the device work still runs
  gate->open = true;
  REQUIRE(joined.poll());
  REQUIRE(joined.wait_status().ok());
  // A part that failed at launch fails the whole, device work or not.
  auto c = new_handle_state(), d = new_handle_state();
  c->complete(invalid_argument("bad part"));
  Handle j2 = join_handles({Handle(c), Handle(d)});
  d->complete_after(Status::OK(), pending);
  REQUIRE(j2.wait_status().message() == "bad part");
  REQUIRE(join_handles({}).poll());
}

TEST_CASE("device inputs are prepared on the submitting thread, before the response runs",
          "[local]") {
  Cluster c(2, Config{}, /*device_executor=*/true);
  c.start_all();
  const auto me = std::this_thread::get_id();
  Tensor<float> a0({1.0f, 2.0f}), a1({3.0f, 4.0f});
  Tensor<float> h0({1.0f}), h1({2.0f});
  Handle d0 = submit(c[0], "dev", a0, on_device()), d1 = submit(c[1], "dev", a1, on_device());
  Handle k0 = submit(c[0], "host", h0), k1 = submit(c[1], "host", h1);
  for (Handle* h : {&d0, &d1, &k0, &k1}) await_ok(*h, "prepared collectives");
  REQUIRE(a0.out == std::vector<float>{4.0f, 6.0f});
  for (int r = 0; r < 2; ++r) {
    // Once per device submission (host tensors are not the device executor's), on this thread,
    // and the event it set is what the executor saw when the response ran.
    REQUIRE(c.device_executors[r]->prepared_on() == std::vector<std::thread::id>{me});
    REQUIRE(c.device_executors[r]->marked() == 1);
  }
  // A refusal fails the submission at once with the executor's message; nothing is queued.
  c.device_executors[0]->refuse_prepare(invalid_argument("allreduce 'bad': stream is gone"));
  Tensor<float> b0({1.0f});
  Handle bad = submit(c[0], "bad", b0, on_device());
  Status s = await(bad, "refused submission");
  REQUIRE(s.message().find("stream is gone") != std::string::npos);
  REQUIRE(bad.state()->refused.load());  // the API throws for these, not for later failures
  REQUIRE_FALSE(d0.state()->refused.load());
  c.device_executors[0]->refuse_prepare(Status::OK());
  Tensor<float> e0({5.0f}), e1({6.0f});
  run_both(c, "dev", e0, e1, on_device());  // after a refusal
  REQUIRE(e1.out == std::vector<float>{11.0f});
  REQUIRE(c.device_executors[0]->marked() == 2);
}
