// SPDX-License-Identifier: Apache-2.0
// [local] join: ranks that joined early take part with zeros / no rows; the last to join is
// returned; ops a joined rank cannot take part in fail naming the joined ranks.
//
// Stepped clusters (no background threads) make the round in which each rank joins exact.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;
using hvd::test::Contains;

namespace {

// Steps every rank until all of `hs` completed; false after 50 rounds.
bool run_until_done(Cluster& c, const std::vector<Handle>& hs) {
  for (int i = 0; i < 50; ++i) {
    bool all = true;
    for (const auto& h : hs) all = all && h.poll();
    if (all) return true;
    if (!c.step_all()) return false;
  }
  return false;
}

/// A stall clock that moves only when the test moves it: join()'s "last caller" is decided by
/// it, so a test orders the calls exactly.
struct TestClock {
  std::shared_ptr<std::atomic<int64_t>> ms = std::make_shared<std::atomic<int64_t>>(0);
  core::StallClock fn() const {
    return [m = ms] {
      return std::chrono::steady_clock::time_point{} + std::chrono::hours(1) +
             std::chrono::milliseconds(m->load());
    };
  }
  void advance() { *ms += 1000; }
};

/// Submits join() on `first` (one round, so rank 0 has them), then a second later by the test
/// clock on `last`, and steps until every join in `joins` completed.
bool join_in_order(Cluster& c, TestClock& clock, std::vector<Handle>& joins,
                   const std::vector<int>& first, int last) {
  for (int r : first) joins[static_cast<size_t>(r)] = submit_join(c[r]);
  if (!c.step_all()) return false;
  clock.advance();
  joins[static_cast<size_t>(last)] = submit_join(c[last]);
  return run_until_done(c, joins);
}

}  // namespace

TEST_CASE("join with 1..N-1 ranks joined early: allreduce, allgather, broadcast", "[local]") {
  const int n = 4;
  for (int k = 1; k < n; ++k) {
    const int active = n - k;  // ranks 0 .. active-1 keep working, the others joined
    TestClock clock;
    Cluster c(n, Config{}, false, nullptr, clock.fn());
    std::vector<Handle> joins(n);
    for (int r = active; r < n; ++r) joins[static_cast<size_t>(r)] = submit_join(c[r]);
    for (int it = 0; it < 2; ++it) {  // repeated: the cache must not bypass the joined ranks
      const std::string tag = "k" + std::to_string(k) + "." + std::to_string(it) + ".";
      std::vector<Tensor<float>> sum, avg, ag;
      std::vector<Tensor<int64_t>> bc;
      std::vector<Handle> hs;
      for (int r = 0; r < active; ++r) {
        sum.emplace_back(std::vector<float>(3, float(r + 1)));
        avg.emplace_back(std::vector<float>(3, float(r + 1)));
        ag.emplace_back(std::vector<float>(static_cast<size_t>(r), float(r)));
        bc.emplace_back(std::vector<int64_t>(2, r == 0 ? 42 : -1));
      }
      for (int r = 0; r < active; ++r) {
        const size_t i = static_cast<size_t>(r);
        Opts o;
        hs.push_back(submit(c[r], tag + "sum", sum[i], o));
        o.reduce = ReduceOp::kAverage;
        hs.push_back(submit(c[r], tag + "avg", avg[i], o));
        Opts g;
        g.op = OpType::kAllgather;
        g.shape = std::vector<int64_t>{r, 1};
        hs.push_back(submit(c[r], tag + "ag", ag[i], g));
        Opts b;
        b.op = OpType::kBroadcast;
        hs.push_back(submit(c[r], tag + "bc", bc[i], b));
      }
      REQUIRE(run_until_done(c, hs));
      const float total = static_cast<float>(active * (active + 1) / 2);
      std::vector<float> gathered;
      for (int r = 0; r < active; ++r)
        gathered.insert(gathered.end(), static_cast<size_t>(r), float(r));
      for (int r = 0; r < active; ++r) {
        const size_t i = static_cast<size_t>(r);
        INFO("k " << k << " rank " << r << " iteration " << it);
        for (const auto& h : hs) REQUIRE(h.wait_status().ok());
        REQUIRE(sum[i].out == std::vector<float>(3, total));
        // Average divides by the set size (as Horovod): the joined ranks added zeros.
        for (float x : avg[i].out) REQUIRE(x == Approx(total / n));
        REQUIRE(output_of<float>(hs[i * 4 + 2]) == gathered);
        REQUIRE(bc[i].out == std::vector<int64_t>(2, 42));
      }
      for (int r = active; r < n; ++r) REQUIRE_FALSE(joins[static_cast<size_t>(r)].poll());
    }
    // The active ranks join, `last` a second after the others (the test clock): it is every
    // rank's result, whichever rank it is (rank 0 for k 1 and 3, not the highest active rank).
    const int last = (k - 1) % active;
    std::vector<int> first;
    for (int r = 0; r < active; ++r) {
      if (r != last) first.push_back(r);
    }
    REQUIRE(join_in_order(c, clock, joins, first, last));
    for (int r = 0; r < n; ++r) {
      REQUIRE(joins[static_cast<size_t>(r)].wait_status().ok());
      REQUIRE(joins[static_cast<size_t>(r)].state()->result == last);
    }
  }
}

TEST_CASE("join returns the rank that joined last, not the highest", "[local]") {
  Cluster c(3);
  std::vector<Handle> joins(3);
  joins[1] = submit_join(c[1]);
  joins[2] = submit_join(c[2]);
  Tensor<int32_t> t(std::vector<int32_t>{5});
  Handle h = submit(c[0], "alone", t);
  REQUIRE(run_until_done(c, {h}));
  REQUIRE(t.out == std::vector<int32_t>{5});  // the joined ranks added zeros
  joins[0] = submit_join(c[0]);
  REQUIRE(run_until_done(c, joins));
  for (auto& j : joins) REQUIRE(j.state()->result == 0);
  // After the join completes, every rank takes part normally again.
  std::vector<Tensor<int32_t>> v;
  std::vector<Handle> hs;
  for (int r = 0; r < 3; ++r) v.emplace_back(std::vector<int32_t>{r});
  for (int r = 0; r < 3; ++r) hs.push_back(submit(c[r], "after", v[static_cast<size_t>(r)]));
  REQUIRE(run_until_done(c, hs));
  for (auto& x : v) REQUIRE(x.out == std::vector<int32_t>{3});
}

TEST_CASE("alltoall, reducescatter and a broadcast from a joined root fail naming the ranks",
          "[local]") {
  TestClock clock;
  Cluster c(3, Config{}, false, nullptr, clock.fn());
  std::vector<Handle> joins(3);
  joins[2] = submit_join(c[2]);
  std::vector<Tensor<float>> a, s, b;
  std::vector<Handle> ha, hs, hb;
  for (int r = 0; r < 2; ++r) {
    a.emplace_back(std::vector<float>(3, 1.0f));
    s.emplace_back(std::vector<float>(3, 1.0f));
    b.emplace_back(std::vector<float>(3, 1.0f));
  }
  for (int r = 0; r < 2; ++r) {
    Opts o;
    o.op = OpType::kAlltoall;
    ha.push_back(submit(c[r], "j.a2a", a[static_cast<size_t>(r)], o));
    o.op = OpType::kReducescatter;
    hs.push_back(submit(c[r], "j.rs", s[static_cast<size_t>(r)], o));
    o.op = OpType::kBroadcast;
    o.root = 2;
    hb.push_back(submit(c[r], "j.bc", b[static_cast<size_t>(r)], o));
  }
  std::vector<Handle> all = ha;
  all.insert(all.end(), hs.begin(), hs.end());
  all.insert(all.end(), hb.begin(), hb.end());
  REQUIRE(run_until_done(c, all));
  for (int r = 0; r < 2; ++r) {
    const size_t i = static_cast<size_t>(r);
    Status sa = ha[i].wait_status(), ss = hs[i].wait_status(), sb = hb[i].wait_status();
    REQUIRE(sa.code() == StatusCode::kMismatch);
    REQUIRE_THAT(sa.message(), Contains("alltoall 'j.a2a': cannot run while rank 2 has joined"));
    REQUIRE_THAT(ss.message(),
                 Contains("reducescatter 'j.rs': cannot run while rank 2 has joined"));
    REQUIRE_THAT(sb.message(),
                 Contains("broadcast 'j.bc': root rank 2 has joined and has no tensor to send"));
  }
  REQUIRE_FALSE(joins[2].poll());  // the joined rank is untouched by the others' failures
  // Rank 1 joins, then rank 0 a second later by the test clock: rank 0 is every rank's result.
  REQUIRE(join_in_order(c, clock, joins, {1}, 0));
  for (auto& j : joins) REQUIRE(j.state()->result == 0);
}
