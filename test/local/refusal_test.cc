// SPDX-License-Identifier: Apache-2.0
// [local] A call refused on one rank only (bad input there) fails on every rank with that
// rank's reason, instead of leaving the other ranks waiting for it; the next collective runs.
#include <chrono>
#include <limits>
#include <thread>

#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;
using hvd::test::Contains;

namespace {

// An allreduce of {r + 1} on every rank, checked: the job goes on after a refusal.
void check_next_allreduce(Cluster& c, const std::string& name) {
  std::vector<Tensor<float>> t;
  for (int r = 0; r < c.size(); ++r)
    t.emplace_back(std::vector<float>{1.0f + static_cast<float>(r)});
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)]));
  for (auto& h : hs) await_ok(h, name);
  const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
  for (auto& x : t) CHECK(x.out == std::vector<float>{want});
}

}  // namespace

TEST_CASE("a broadcast root out of range on one rank fails on every rank, naming that rank",
          "[local]") {
  Cluster c(3);
  c.start_all();
  std::vector<Tensor<float>> t;
  for (int r = 0; r < 3; ++r) t.emplace_back(std::vector<float>{1.0f, 2.0f});
  std::vector<Handle> hs;
  for (int r = 0; r < 3; ++r) {
    Opts o;
    o.op = OpType::kBroadcast;
    o.root = r == 1 ? 7 : 0;  // rank 1's bug
    hs.push_back(submit(c[r], "bc", t[static_cast<size_t>(r)], o));
  }
  // Rank 1's own call fails at once (the C++ API throws it from the call).
  REQUIRE(hs[1].poll());
  CHECK(hs[1].state()->refused.load());
  CHECK_THAT(hs[1].wait_status().message(), Contains("root rank 7 is out of range"));
  for (int r : {0, 2}) {
    Status s = await(hs[static_cast<size_t>(r)], "broadcast beside a refusal");
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Contains("broadcast 'bc'"));
    CHECK_THAT(s.message(), Contains("root rank 7 is out of range"));
    CHECK_THAT(s.message(), Contains("refused on rank 1"));
  }
  check_next_allreduce(c, "after.bc");
  // The name is free again on every rank: the same broadcast, now right, runs.
  std::vector<Handle> again;
  for (int r = 0; r < 3; ++r) {
    Opts o;
    o.op = OpType::kBroadcast;
    t[static_cast<size_t>(r)].in = {10.0f * static_cast<float>(r + 1), 1.0f};
    again.push_back(submit(c[r], "bc", t[static_cast<size_t>(r)], o));
  }
  for (auto& h : again) await_ok(h, "broadcast again");
  for (auto& x : t) CHECK(x.out == std::vector<float>{10.0f, 1.0f});
  REQUIRE(c.shutdown_all());
}

TEST_CASE("a group member refused on one rank fails the whole group on every rank", "[local]") {
  Cluster c(2);
  c.start_all();
  // Each rank: a group of two allreduces; on rank 0 the second has a non-finite prescale.
  std::vector<std::vector<Tensor<float>>> t(2);
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 2; ++i) {
      t[static_cast<size_t>(r)].emplace_back(std::vector<float>{1.0f});
      Opts o;
      o.group = "g";
      o.group_size = 2;
      if (r == 0 && i == 1) o.prescale = std::numeric_limits<double>::infinity();
      hs.push_back(submit(c[r], core::member_name("g", static_cast<size_t>(i)),
                          t[static_cast<size_t>(r)][static_cast<size_t>(i)], o));
    }
  }
  CHECK(hs[1].state()->refused.load());
  for (size_t k : {size_t{0}, size_t{2}, size_t{3}}) {
    Status s = await(hs[k], "group member beside a refusal");
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Contains("scale factors must be finite"));
    CHECK_THAT(s.message(), Contains("refused on rank 0"));
  }
  for (auto& v : t) {
    for (auto& x : v) CHECK(x.out == std::vector<float>{0.0f});  // nothing ran
  }
  check_next_allreduce(c, "after.group");
  REQUIRE(c.shutdown_all());
}

TEST_CASE("a call refused on every rank fails everywhere and frees the name", "[local]") {
  Cluster c(2);
  c.start_all();
  std::vector<Tensor<uint8_t>> t;
  for (int r = 0; r < 2; ++r) t.emplace_back(std::vector<uint8_t>{1});
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) {
    hs.push_back(submit(c[r], "neg", t[static_cast<size_t>(r)], [] {
      Opts o;
      o.shape = {-1};
      return o;
    }()));
  }
  for (auto& h : hs) {
    Status s = await(h, "refused everywhere");
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Contains("negative dimension"));
  }
  check_next_allreduce(c, "after.neg");
  check_next_allreduce(c, "neg");  // the name is free again on both ranks
  REQUIRE(c.shutdown_all());
}

TEST_CASE("a refusal notice fails the call the others wait for from that rank alone", "[local]") {
  Cluster c(3);
  c.start_all();
  std::vector<Tensor<float>> t;
  for (int r = 0; r < 3; ++r) t.emplace_back(std::vector<float>{1.0f});
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  // Rank 2 refuses its call before naming it, then goes on at once to "went.on".
  std::vector<Handle> hs;
  for (int r : {0, 1}) hs.push_back(submit(c[r], "n", t[static_cast<size_t>(r)]));
  c[2].notice_refusal(0, "allreduce '@n': reserved");
  Handle next2 = submit(c[2], "went.on", t[2]);
  for (auto& h : hs) {
    Status s = await(h, "the call rank 2 refused");
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(
        s.message(),
        Contains("allreduce 'n': rank 2 refused its call locally (allreduce '@n': reserved)"));
  }
  CHECK(elapsed_ms() < core::Controller::kNoticeGrace.count());  // it went on: no grace
  std::vector<Handle> next;
  for (int r : {0, 1}) next.push_back(submit(c[r], "went.on", t[static_cast<size_t>(r)]));
  for (auto& h : next) await_ok(h, "went.on");
  await_ok(next2, "went.on on rank 2");
  // A rank that does nothing after its notice: the others' call fails after the grace.
  const auto t1 = std::chrono::steady_clock::now();
  hs.clear();
  c[1].notice_refusal(0, "allreduce '@idle': reserved");
  for (int r : {0, 2}) hs.push_back(submit(c[r], "idle", t[static_cast<size_t>(r)]));
  for (auto& h : hs) {
    Status s = await(h, "the call rank 1 refused");
    CHECK_THAT(s.message(), Contains("rank 1 refused its call locally"));
  }
  const double waited =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  CHECK(waited >= core::Controller::kNoticeGrace.count() * 0.9);
  CHECK(waited < 2000);
  check_next_allreduce(c, "after.idle");
  // Every rank makes the same mistake: nothing is left over, a late rank's next call runs.
  for (int r = 0; r < 3; ++r) c[r].notice_refusal(0, "allreduce '@all': reserved");
  hs.clear();
  for (int r : {0, 1}) hs.push_back(submit(c[r], "late", t[static_cast<size_t>(r)]));
  std::this_thread::sleep_for(core::Controller::kNoticeGrace * 2);
  hs.push_back(submit(c[2], "late", t[2]));
  for (auto& h : hs) await_ok(h, "a call after a mistake every rank made");
  REQUIRE(c.shutdown_all());
}
