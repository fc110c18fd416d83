// SPDX-License-Identifier: Apache-2.0
// [local] failures: mismatches, duplicate names, groups, shutdown with pending work, abort.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;
using hvd::test::Contains;

namespace {

// Allreduce Sum of `name` (shape {len}) on every rank, all succeed with the right values.
void sum_round(Cluster& c, const std::string& name, size_t len) {
  std::vector<Tensor<int32_t>> t;
  for (int r = 0; r < c.size(); ++r) t.emplace_back(std::vector<int32_t>(len, r + 1));
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)]));
  for (auto& h : hs) await_ok(h, name);
  const int32_t expect = c.size() * (c.size() + 1) / 2;
  for (int r = 0; r < c.size(); ++r) {
    REQUIRE(t[static_cast<size_t>(r)].out == std::vector<int32_t>(len, expect));
  }
}

// Rank `odd` submits `name` with shape {5}, the others with shape {4}; every handle must fail
// with the message naming the tensor, both rank sets (`others`, e.g. "ranks 0-2") and shapes.
void shape_mismatch_round(Cluster& c, const std::string& name, int odd, const std::string& others) {
  std::vector<Tensor<float>> t;
  for (int r = 0; r < c.size(); ++r) t.emplace_back(std::vector<float>(r == odd ? 5 : 4, 1.0f));
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)]));
  const std::string expect = "allreduce '" + name + "': shape [4] on " + others +
                             " but [5] on rank " + std::to_string(odd);
  for (int r = 0; r < c.size(); ++r) {
    Status s = await(hs[static_cast<size_t>(r)], name + " on rank " + std::to_string(r));
    INFO("rank " << r << ": " << s.to_string());
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE(s.message() == expect);
  }
}

}  // namespace

TEST_CASE("a shape mismatch on one rank fails the tensor on every rank", "[local]") {
  Cluster c(4);
  c.start_all();
  shape_mismatch_round(c, "layer1.weight", 3, "ranks 0-2");
  // The runtime keeps serving later tensors, including the failed name.
  sum_round(c, "layer2.weight", 3);
  sum_round(c, "layer1.weight", 4);
}

TEST_CASE("a shape mismatch on a cached name fails everywhere and later rounds work", "[local]") {
  Cluster c(3);
  c.start_all();
  sum_round(c, "w", 4);
  sum_round(c, "w", 4);  // now served from the cache
  shape_mismatch_round(c, "w", 1, "ranks 0,2");
  sum_round(c, "w", 4);
  sum_round(c, "w", 4);
  sum_round(c, "other", 2);
}

TEST_CASE("a dtype mismatch names both dtypes", "[local]") {
  Cluster c(2);
  c.start_all();
  Tensor<float> a({1.0f});
  Tensor<int32_t> b({1});
  auto h0 = submit(c[0], "d", a);
  auto h1 = submit(c[1], "d", b);
  for (const auto& h : {h0, h1}) {
    Status s = await(h, "d");
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE(s.message() == "allreduce 'd': dtype float32 on rank 0 but int32 on rank 1");
  }
  sum_round(c, "d", 1);
}

TEST_CASE("a duplicate name in flight fails at once while the first completes", "[local]") {
  Cluster c(2);
  c.start_all();
  Tensor<int32_t> first({1, 2}), dup({9, 9}), other({10, 20});
  auto h_first = submit(c[0], "dup", first);
  auto h_dup = submit(c[0], "dup", dup);
  REQUIRE(h_dup.poll());  // failed inside enqueue, no negotiation needed
  Status s = h_dup.wait_status();
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(s.message(), Contains("'dup'"));
  REQUIRE_THAT(s.message(), Contains("already in flight on rank 0"));
  auto h_other = submit(c[1], "dup", other);
  await_ok(h_first, "first 'dup' on rank 0");
  await_ok(h_other, "'dup' on rank 1");
  REQUIRE(first.out == std::vector<int32_t>{11, 22});
  REQUIRE(other.out == first.out);
  REQUIRE(dup.out == std::vector<int32_t>{0, 0});  // the rejected tensor was never touched
}

TEST_CASE("grouped requests complete together", "[local]") {
  Cluster c(2);
  c.start_all();
  std::vector<std::vector<Tensor<float>>> t(2);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) {
      t[static_cast<size_t>(r)].emplace_back(std::vector<float>{float(r + 1), float(k)});
    }
  }
  Opts o;
  o.group = "bucket";
  o.group_size = 3;
  std::vector<Handle> hs;
  for (int k = 0; k < 3; ++k) {
    hs.push_back(submit(c[0], "g" + std::to_string(k), t[0][static_cast<size_t>(k)], o));
  }
  // Rank 1 submits two of the three: g0 and g1 are ready on every rank, but must wait.
  hs.push_back(submit(c[1], "g0", t[1][0], o));
  hs.push_back(submit(c[1], "g1", t[1][1], o));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (auto& h : hs) REQUIRE_FALSE(h.poll());
  REQUIRE(c.executors[0]->batches().empty());
  hs.push_back(submit(c[1], "g2", t[1][2], o));
  for (auto& h : hs) await_ok(h, "grouped allreduce");
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> expect = {3.0f, 2.0f * k};
    REQUIRE(t[0][static_cast<size_t>(k)].out == expect);
    REQUIRE(t[1][static_cast<size_t>(k)].out == expect);
  }
  std::vector<std::string> executed;
  for (const auto& b : c.executors[0]->batches()) {
    executed.insert(executed.end(), b.begin(), b.end());
  }
  REQUIRE(executed == std::vector<std::string>{"g0", "g1", "g2"});
}

TEST_CASE("one failing member fails the whole group", "[local]") {
  Cluster c(2);
  c.start_all();
  std::vector<Tensor<float>> t;
  for (int i = 0; i < 6; ++i) t.emplace_back(std::vector<float>(i == 4 ? 3 : 2, 1.0f));
  Opts o;
  o.group = "bucket";
  o.group_size = 3;
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) {
      hs.push_back(submit(c[r], "g" + std::to_string(k), t[static_cast<size_t>(r * 3 + k)], o));
    }
  }
  const std::string cause = "allreduce 'g1': shape [2] on rank 0 but [3] on rank 1";
  for (size_t i = 0; i < hs.size(); ++i) {
    Status s = await(hs[i], "group member " + std::to_string(i));
    INFO("handle " << i << ": " << s.to_string());
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE_THAT(s.message(), Contains(cause));
  }
  REQUIRE(c.executors[0]->batches().empty());
  sum_round(c, "after", 1);
}

TEST_CASE("a group with a different number of members on one rank fails on every rank", "[local]") {
  Cluster c(3);
  c.start_all();
  std::vector<Tensor<float>> t;
  for (int i = 0; i < 9; ++i) t.emplace_back(std::vector<float>(2, 1.0f));
  std::vector<Handle> hs;
  auto add = [&](int r, int k) {
    Opts o;
    o.group = "bucket";
    o.group_size = r == 1 ? 3 : 2;
    hs.push_back(submit(c[r], "m" + std::to_string(k), t[static_cast<size_t>(r * 3 + k)], o));
  };
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 2; ++k) add(r, k);
  }
  // Rank 1's third member comes late: nothing may fail before it is in (or it would wait for
  // the other ranks' third member forever).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (auto& h : hs) REQUIRE_FALSE(h.poll());
  add(1, 2);
  for (size_t i = 0; i < hs.size(); ++i) {
    Status s = await(hs[i], "member " + std::to_string(i));
    INFO("handle " << i << ": " << s.to_string());
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE(s.message() == "grouped allreduce 'bucket': 2 tensors on ranks 0,2 but 3 on rank 1");
  }
  REQUIRE(c.executors[0]->batches().empty());
  sum_round(c, "after", 1);
}

TEST_CASE("shutdown fails another rank's pending work naming the rank that shut down", "[local]") {
  Cluster c(3);
  c.start_all();
  sum_round(c, "warmup", 1);
  Tensor<int32_t> x({1}), y({2});
  auto hx = submit(c[1], "only.on.rank1", x);
  auto hy = submit(c[2], "only.on.rank2", y);
  REQUIRE(c.shutdown_all({0}));
  for (auto [h, name] : {std::pair{hx, "only.on.rank1"}, std::pair{hy, "only.on.rank2"}}) {
    Status s = await(h, name);
    INFO(s.to_string());
    REQUIRE(s.code() == StatusCode::kAborted);
    REQUIRE_THAT(s.message(), Contains(std::string("'") + name + "'"));
    REQUIRE_THAT(s.message(), Contains("shutdown() called on rank 0"));
  }
  for (int r = 0; r < 3; ++r) REQUIRE(c[r].stopped());
  // Later submissions fail at once with the same cause.
  Tensor<int32_t> z({3});
  auto hz = submit(c[1], "late", z);
  REQUIRE(hz.poll());
  REQUIRE(hz.wait_status().code() == StatusCode::kAborted);
  REQUIRE_THAT(hz.wait_status().message(), Contains("shutdown() called on rank 0"));
  REQUIRE(c.shutdown_all());
}

TEST_CASE("shutdown on every rank completes work all ranks submitted", "[local]") {
  Cluster c(2);
  Tensor<int32_t> a({1}), b({2});
  auto ha = submit(c[0], "t", a);
  auto hb = submit(c[1], "t", b);
  c.start_all();
  REQUIRE(c.shutdown_all());
  await_ok(ha, "rank 0");
  await_ok(hb, "rank 1");
  REQUIRE(a.out[0] == 3);
  REQUIRE(b.out[0] == 3);
}

TEST_CASE("abort fails pending handles and later submissions", "[local]") {
  Cluster c(2);
  c.start_all();
  sum_round(c, "warmup", 1);
  Tensor<int32_t> p({1}), q({2});
  auto hp = submit(c[0], "pending", p);  // rank 1 never submits it
  c[0].abort(peer_failure("rank 1 stopped answering"));
  Status s = await(hp, "pending");
  REQUIRE(s.code() == StatusCode::kPeerFailure);
  REQUIRE(s.message() == "allreduce 'pending': rank 1 stopped answering");
  REQUIRE(c[0].stopped());
  REQUIRE(c[0].stopped_status().code() == StatusCode::kPeerFailure);
  auto hq = submit(c[0], "later", q);
  REQUIRE(hq.poll());
  REQUIRE(hq.wait_status().code() == StatusCode::kPeerFailure);
  REQUIRE_THAT(hq.wait_status().message(), Contains("'later'"));
  // The aborted rank's thread may be blocked in the transport: abort the hubs to release it.
  c.hub->abort();
  c.exec_hub->abort();
  REQUIRE(c.shutdown_all());
}

TEST_CASE("a fatal transport error fails pending work on every rank", "[local]") {
  Cluster c(2);
  c.start_all();
  Tensor<int32_t> p({1});
  auto hp = submit(c[1], "stuck", p);  // rank 1 waits in a round for rank 0
  c.hub->abort();
  Status s = await(hp, "stuck");
  REQUIRE(s.code() == StatusCode::kPeerFailure);
  REQUIRE_THAT(s.message(), Contains("'stuck'"));
  REQUIRE(c.shutdown_all());
  REQUIRE(c[0].stopped());
  REQUIRE(c[1].stopped());
}

TEST_CASE("abort releases a shutdown() waiting on a thread stuck in the transport", "[local]") {
  // Rank 0's thread waits in a round for rank 1, which never joins. shutdown() on rank 0 waits
  // for the loop; abort() must wake it so that it returns after its grace period (10 s) instead
  // of waiting for a transport call that may never return.
  Cluster c(2);
  c.start_all();
  Tensor<int32_t> p({1});
  auto hp = submit(c[0], "pending", p);
  auto done = std::async(std::launch::async, [&] { c[0].shutdown(); });
  REQUIRE(done.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  c[0].abort(peer_failure("rank 1 died"));
  REQUIRE(await(hp, "pending").code() == StatusCode::kPeerFailure);
  const bool returned = done.wait_for(std::chrono::seconds(15)) == std::future_status::ready;
  // Release the background thread if shutdown() gave up on it, before the runtime goes away:
  // it leaves the transport, counts its round and exits the loop (within milliseconds; most
  // often the abort already woke it and it had exited, so its rounds never move).
  const uint64_t rounds = c[0].stats().rounds;
  c.hub->abort();
  c.exec_hub->abort();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (c[0].stats().rounds == rounds && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  REQUIRE(returned);
  REQUIRE(c.shutdown_all());
}
