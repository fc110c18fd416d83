// SPDX-License-Identifier: Apache-2.0
// [local] the response cache fast path: hits skip the gather, eviction and renegotiation.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

// One allreduce Sum of `name` on every rank; rank r contributes `len` copies of r + base.
// Requires every rank's output to equal the independently computed sum.
void allreduce_round(Cluster& c, const std::string& name, size_t len, int base) {
  std::vector<Tensor<int32_t>> t;
  for (int r = 0; r < c.size(); ++r) t.emplace_back(std::vector<int32_t>(len, r + base));
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)]));
  for (auto& h : hs) await_ok(h, name);
  int32_t expect = 0;
  for (int r = 0; r < c.size(); ++r) expect += r + base;
  for (int r = 0; r < c.size(); ++r) {
    INFO(name << " on rank " << r);
    REQUIRE(t[static_cast<size_t>(r)].out == std::vector<int32_t>(len, expect));
  }
}

}  // namespace

TEST_CASE("a repeated allreduce is served from the cache without a gather", "[local]") {
  Cluster c(3);
  c.start_all();
  allreduce_round(c, "w", 4, 1);
  const auto gathers = c.gathers();
  const uint64_t full_rounds = c[0].stats().full_rounds;
  REQUIRE(gathers == std::vector<int>(3, gathers[0]));
  REQUIRE(gathers[0] >= 1);
  for (int i = 0; i < 5; ++i) allreduce_round(c, "w", 4, 10 * i);
  REQUIRE(c.gathers() == gathers);
  REQUIRE(c[0].stats().full_rounds == full_rounds);
  REQUIRE(c.transports[0]->and_calls.load() >= 6);
}

TEST_CASE("cache capacity 0 negotiates every round through the coordinator", "[local]") {
  Cluster c(2, with_cache(0));
  c.start_all();
  allreduce_round(c, "w", 3, 1);
  auto before = c.gathers();
  for (int i = 0; i < 3; ++i) allreduce_round(c, "w", 3, i);
  auto after = c.gathers();
  for (int r = 0; r < 2; ++r)
    REQUIRE(after[static_cast<size_t>(r)] >= before[static_cast<size_t>(r)] + 3);
}

TEST_CASE("capacity 2 with 5 names evicts and still gives right results", "[local]") {
  Cluster c(3, with_cache(2));
  c.start_all();
  const std::vector<std::string> names = {"n0", "n1", "n2", "n3", "n4"};
  for (int iter = 0; iter < 6; ++iter) {
    // All five names in flight at once, each rank in its own order.
    std::vector<std::vector<Tensor<int32_t>>> t(3);
    std::vector<Handle> hs;
    for (int r = 0; r < 3; ++r) {
      for (size_t k = 0; k < names.size(); ++k) {
        t[static_cast<size_t>(r)].emplace_back(
            std::vector<int32_t>(k + 1, static_cast<int32_t>(100 * iter + 10 * k + r)));
      }
      for (size_t j = 0; j < names.size(); ++j) {
        size_t k = (j + static_cast<size_t>(r * 2 + iter)) % names.size();
        hs.push_back(submit(c[r], names[k], t[static_cast<size_t>(r)][k]));
      }
    }
    for (auto& h : hs) await_ok(h, "iteration " + std::to_string(iter));
    for (size_t k = 0; k < names.size(); ++k) {
      const int32_t expect = static_cast<int32_t>(3 * (100 * iter + 10 * k) + 0 + 1 + 2);
      for (int r = 0; r < 3; ++r) {
        INFO("iteration " << iter << " " << names[k] << " rank " << r);
        REQUIRE(t[static_cast<size_t>(r)][k].out == std::vector<int32_t>(k + 1, expect));
      }
    }
    // One name at a time as well: hits and misses interleave with evictions.
    for (size_t k = 0; k < names.size(); ++k) allreduce_round(c, names[(k * 3) % 5], 2, iter);
  }
}

TEST_CASE("a cached name re-submitted with a new shape on all ranks renegotiates", "[local]") {
  Cluster c(2);
  c.start_all();
  allreduce_round(c, "w", 4, 1);
  allreduce_round(c, "w", 4, 2);  // cached
  auto before = c.gathers();
  allreduce_round(c, "w", 6, 3);  // parameters changed: the full path again
  REQUIRE(c.gathers()[0] > before[0]);
  // The new shape is what is cached now.
  auto cached = c.gathers();
  allreduce_round(c, "w", 6, 4);
  REQUIRE(c.gathers() == cached);
  // And back to the old shape works too.
  allreduce_round(c, "w", 4, 5);
}

TEST_CASE("a cached name changing dtype on all ranks renegotiates", "[local]") {
  Cluster c(2);
  c.start_all();
  allreduce_round(c, "x", 2, 1);
  Tensor<float> a({1.5f, 2.5f}), b({0.25f, 0.5f});
  run_both(c, "x", a, b);
  REQUIRE(a.out == std::vector<float>{1.75f, 3.0f});
  REQUIRE(b.out == a.out);
}

TEST_CASE("a cached name submitted by one rank waits for the others", "[local]") {
  Cluster c(2);
  c.start_all();
  allreduce_round(c, "w", 2, 1);
  Tensor<int32_t> a({5, 6}), b({7, 8});
  auto h0 = submit(c[0], "w", a);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_FALSE(h0.poll());
  auto h1 = submit(c[1], "w", b);
  await_ok(h0, "rank 0");
  await_ok(h1, "rank 1");
  REQUIRE(a.out == std::vector<int32_t>{12, 14});
  REQUIRE(b.out == a.out);
}

TEST_CASE("an unchanged request whose cache entry went meanwhile is negotiated again", "[local]") {
  // Rank 0 submits "w" as before, rank 1 with a new shape: the entry is evicted everywhere
  // and the round fails. Rank 0's next "w" is unchanged from its last request, whose cache
  // entry is gone: it must go to the coordinator again, not wait on the entry's old bit.
  Cluster c(2);
  c.start_all();
  allreduce_round(c, "w", 4, 1);
  allreduce_round(c, "w", 4, 2);  // served from the cache
  Tensor<int32_t> a(std::vector<int32_t>(4, 1)), b(std::vector<int32_t>(5, 1));
  auto h0 = submit(c[0], "w", a);
  auto h1 = submit(c[1], "w", b);
  for (const auto& h : {h0, h1}) REQUIRE(await(h, "w").code() == StatusCode::kMismatch);
  for (int i = 0; i < 3; ++i) allreduce_round(c, "w", 4, 3 + i);
  // Another name takes the freed bit; "w" still finds its own entry.
  allreduce_round(c, "v", 2, 7);
  for (int i = 0; i < 2; ++i) allreduce_round(c, "w", 4, 9 + i);
}

TEST_CASE("a step of 1,500 tensors at the default capacity is served from the cache", "[local]") {
  // More names per step than the 1,024 entries of HVD_CACHE_CAPACITY's default: without
  // growth they evict each other cyclically and every tensor goes through rank 0 every step.
  Cluster c(2);
  c.start_all();
  constexpr int kTensors = 1500;
  auto step = [&](int base) {
    std::vector<std::vector<Tensor<int32_t>>> t(2);
    std::vector<Handle> hs;
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < kTensors; ++k) {
        t[static_cast<size_t>(r)].emplace_back(std::vector<int32_t>{base + k + r});
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < kTensors; ++k) {
        hs.push_back(submit(c[r], "layer" + std::to_string(k) + ".weight",
                            t[static_cast<size_t>(r)][static_cast<size_t>(k)]));
      }
    }
    for (auto& h : hs) await_ok(h, "step " + std::to_string(base));
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < kTensors; ++k) {
        INFO("rank " << r << " tensor " << k);
        REQUIRE(t[static_cast<size_t>(r)][static_cast<size_t>(k)].out[0] == 2 * (base + k) + 1);
      }
    }
  };
  for (int i = 0; i < 3; ++i) step(10 * i);  // negotiated, evicted once, then cached
  const auto gathers = c.gathers();
  const uint64_t full0 = c[0].stats().full_rounds, full1 = c[1].stats().full_rounds;
  const uint64_t rounds0 = c[0].stats().rounds;
  for (int i = 3; i < 6; ++i) step(10 * i);
  // Steady state: a 100% hit rate on every rank (no gather, no full round), in few rounds.
  CHECK(c.gathers() == gathers);
  CHECK(c[0].stats().full_rounds == full0);
  CHECK(c[1].stats().full_rounds == full1);
  CHECK(c[0].stats().rounds > rounds0);
}
