// SPDX-License-Identifier: Apache-2.0
// [local] the tensor table: a slot per name reused between collectives, idle slots dropped when
// the table is full (at a cost that does not grow with the names in flight), stale
// response-cache hints.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

// `names` on every rank at once (rank r contributes r + 1 + i for element i), then checked.
void sum_batch(Cluster& c, const std::vector<std::string>& names, size_t len) {
  const int n = c.size();
  std::vector<std::vector<Tensor<int32_t>>> t(static_cast<size_t>(n));
  std::vector<Handle> hs;
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      std::vector<int32_t> v(len);
      for (size_t i = 0; i < len; ++i) v[i] = r + 1 + static_cast<int32_t>(i + k);
      t[static_cast<size_t>(r)].emplace_back(v);
    }
  }
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      hs.push_back(submit(c[r], names[k], t[static_cast<size_t>(r)][k]));
    }
  }
  for (auto& h : hs) await_ok(h, "batch");
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      for (size_t i = 0; i < len; ++i) {
        const int32_t want = n * (n + 1) / 2 + n * static_cast<int32_t>(i + k);
        if (t[static_cast<size_t>(r)][k].out[i] != want) {
          FAIL(names[k] << " element " << i << " on rank " << r << ": "
                        << t[static_cast<size_t>(r)][k].out[i] << " != " << want);
        }
      }
    }
  }
}

std::vector<std::string> numbered(const std::string& prefix, int from, int count) {
  std::vector<std::string> out;
  for (int i = from; i < from + count; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

}  // namespace

TEST_CASE("a name's slot serves later collectives of other shapes, dtypes and ops", "[local]") {
  Cluster c(2);
  c.start_all();
  sum_batch(c, {"w"}, 4);
  sum_batch(c, {"w"}, 4);   // cached
  sum_batch(c, {"w"}, 40);  // new shape: renegotiated in the same slot
  Tensor<float> f0({1.5f, 2.5f}), f1({0.5f, 0.5f});
  run_both(c, "w", f0, f1);
  REQUIRE(f0.out == std::vector<float>{2.0f, 3.0f});
  Opts b;
  b.op = OpType::kBroadcast;
  b.root = 1;
  Tensor<int32_t> b0({0, 0, 0}), b1({7, 8, 9});
  run_both(c, "w", b0, b1, b);
  REQUIRE(b0.out == std::vector<int32_t>{7, 8, 9});
  sum_batch(c, {"w"}, 4);
}

TEST_CASE("more names than the table keeps: idle slots are dropped, nothing is lost", "[local]") {
  Cluster c(2);
  c.start_all();
  // 12,000 distinct names (the table keeps 8,192 idle) in batches, then the first names again.
  for (int from = 0; from < 12000; from += 1500) sum_batch(c, numbered("n.", from, 1500), 3);
  sum_batch(c, numbered("n.", 0, 100), 3);
  for (int r = 0; r < c.size(); ++r) REQUIRE(c[r].stats().slot_sweep_visits > 0);
}

TEST_CASE("20,000 names in flight: all complete, and idle-slot sweeps stay linear", "[local]") {
  Cluster c(2);
  c.start_all();
  constexpr int kInFlight = 20000;
  sum_batch(c, numbered("f.", 0, kInFlight), 2);
  sum_batch(c, numbered("g.", 0, kInFlight), 2);  // new names over 20,000 idle slots
  sum_batch(c, numbered("f.", 0, kInFlight), 2);  // the first names again, their slots gone
  // Sweeping the table at every new name past 8,192 in flight would visit ~10^8 slots here;
  // amortized sweeps visit each slot about once (40,000 with the two sweeps above).
  for (int r = 0; r < c.size(); ++r) {
    const uint64_t visits = c[r].stats().slot_sweep_visits;
    INFO("rank " << r << ": " << visits << " slot visits for " << 3 * kInFlight << " names");
    REQUIRE(visits <= 2 * 3 * kInFlight);
  }
}

TEST_CASE("stale cache hints after evictions still find the right entries", "[local]") {
  Config cfg;
  cfg.cache_capacity = 3;  // five names cycling through three bits
  Cluster c(3, cfg);
  c.start_all();
  for (int round = 0; round < 4; ++round) {
    for (int k = 0; k < 5; ++k)
      sum_batch(c, {"h." + std::to_string(k)}, 2 + static_cast<size_t>(k));
    sum_batch(c, numbered("h.", 0, 5), 2);  // renegotiated: the shapes changed
  }
}

TEST_CASE("a steady order of names is followed; new orders and swept slots are not mistaken",
          "[local]") {
  // The table predicts each name's slot from the order of the last submissions: every order
  // change, insertion and sweep must still give each name its own slot and result.
  Cluster c(2);
  c.start_all();
  std::vector<std::string> steady = numbered("s.", 0, 40);
  for (int step = 0; step < 3; ++step) sum_batch(c, steady, 3);
  std::vector<std::string> reversed(steady.rbegin(), steady.rend());
  sum_batch(c, reversed, 3);
  std::vector<std::string> inserted = steady;
  inserted.insert(inserted.begin() + 20, "s.new");
  inserted.erase(inserted.begin() + 5);
  sum_batch(c, inserted, 4);
  sum_batch(c, steady, 3);
  // Past 8,192 idle names the idle slots are erased, those of `steady` among them.
  for (int from = 0; from < 12000; from += 1500) sum_batch(c, numbered("t.", from, 1500), 2);
  for (int r = 0; r < c.size(); ++r) REQUIRE(c[r].stats().slot_sweep_visits > 0);
  for (int step = 0; step < 2; ++step) sum_batch(c, steady, 5);
}

TEST_CASE("a name's handle states are recycled only once nothing else refers to them", "[local]") {
  Cluster c(2);
  c.start_all();
  auto both = [&](const std::string& name, std::vector<int32_t> v0, std::vector<int32_t> v1) {
    Tensor<int32_t> t0(std::move(v0)), t1(std::move(v1));
    Handle h0 = submit(c[0], name, t0), h1 = submit(c[1], name, t1);
    (void)await(h0, name);
    (void)await(h1, name);
    return std::make_pair(h0, t0.out);
  };
  auto a = both("r", {1, 2}, {10, 20});
  REQUIRE(a.second == std::vector<int32_t>{11, 22});
  core::HandleState* first = a.first.state();
  // Held: the next collective of the name gets another state, and this one keeps its result.
  auto b = both("r", {3, 4}, {30, 40});
  REQUIRE(b.second == std::vector<int32_t>{33, 44});
  REQUIRE(b.first.state() != first);
  REQUIRE(a.first.poll());
  REQUIRE(a.first.wait_status().ok());
  // Let go: recycled, as good as new.
  a.first = Handle();
  auto d = both("r", {5, 6}, {50, 60});
  REQUIRE(d.second == std::vector<int32_t>{55, 66});
  REQUIRE(d.first.state() == first);
  REQUIRE(d.first.wait_status().ok());
  // A part of join_handles() (which refers to it weakly) is never recycled.
  core::HandleState* joined = d.first.state();
  Handle j = core::join_handles({d.first});
  REQUIRE(j.wait_status().ok());
  j = Handle();
  d.first = Handle();
  b.first = Handle();
  auto e = both("r", {7, 8}, {70, 80});
  REQUIRE(e.second == std::vector<int32_t>{77, 88});
  REQUIRE(e.first.state() != joined);
  // A failed collective's state comes back without its error.
  auto bad = both("m", {1, 2}, {1, 2, 3});
  REQUIRE_FALSE(bad.first.wait_status().ok());
  core::HandleState* failed = bad.first.state();
  bad.first = Handle();
  auto m1 = both("m", {1, 2}, {3, 4});
  auto m2 = both("m", {2, 2}, {3, 3});
  REQUIRE((m1.first.state() == failed || m2.first.state() == failed));
  REQUIRE(m1.first.wait_status().ok());
  REQUIRE(m2.first.wait_status().ok());
  REQUIRE(m2.second == std::vector<int32_t>{5, 5});
}

TEST_CASE("a step's names are predicted from the last step even after one-off names", "[local]") {
  // A name submitted once before the loop (as hvd.init's own collectives) must not make every
  // later step look its names up by hashing: the predicted order re-synchronises where a
  // known name comes again.
  Cluster c(2);
  c.start_all();
  sum_batch(c, {"once"}, 2);
  std::vector<std::string> steady = numbered("p.", 0, 50);
  sum_batch(c, steady, 3);
  sum_batch(c, steady, 3);
  std::vector<uint64_t> before;
  for (int r = 0; r < c.size(); ++r) before.push_back(c[r].stats().slot_lookups);
  constexpr int kSteps = 5;
  for (int step = 0; step < kSteps; ++step) sum_batch(c, steady, 3);
  for (int r = 0; r < c.size(); ++r) {
    const uint64_t hashed = c[r].stats().slot_lookups - before[static_cast<size_t>(r)];
    INFO("rank " << r << ": " << hashed << " lookups by hashing in " << kSteps << " steps");
    REQUIRE(hashed <= static_cast<uint64_t>(kSteps));
  }
  sum_batch(c, {"once"}, 2);  // the one-off name again, then the steps: still correct
  sum_batch(c, steady, 4);
}

TEST_CASE("a burst that repeats the last step runs in one round, however slowly it comes",
          "[local]") {
  // Names 150 us apart: the settling loop alone would start a round after every one (it goes
  // once kSettleStep brings nothing new); following the learned step it waits for the step's
  // last name (or kSettleCap, or a waiting caller) instead.
  Cluster c(2);
  c.start_all();
  const std::vector<std::string> names = numbered("slow.", 0, 4);
  sum_batch(c, names, 2);  // learns the step
  std::vector<uint64_t> before;
  for (int r = 0; r < c.size(); ++r) before.push_back(c[r].stats().rounds);
  std::vector<std::vector<Tensor<int32_t>>> t(2);
  std::vector<Handle> hs;
  for (size_t k = 0; k < names.size(); ++k) {
    for (int r = 0; r < c.size(); ++r) {
      t[static_cast<size_t>(r)].emplace_back(std::vector<int32_t>{r + 1, static_cast<int32_t>(k)});
    }
  }
  for (size_t k = 0; k < names.size(); ++k) {
    if (k > 0) std::this_thread::sleep_for(std::chrono::microseconds(150));
    for (int r = 0; r < c.size(); ++r) {
      hs.push_back(submit(c[r], names[k], t[static_cast<size_t>(r)][k]));
    }
  }
  for (auto& h : hs) await_ok(h, "slow burst");
  for (int r = 0; r < c.size(); ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      REQUIRE(t[static_cast<size_t>(r)][k].out ==
              std::vector<int32_t>{3, 2 * static_cast<int32_t>(k)});
    }
    const uint64_t rounds = c[r].stats().rounds - before[static_cast<size_t>(r)];
    INFO("rank " << r << ": " << rounds << " rounds for a step of " << names.size() << " names");
    REQUIRE(rounds <= 2);  // one; two where the first name's round began before the burst
  }
}
