// SPDX-License-Identifier: Apache-2.0
// [local] rounds stepped by hand with run_once(): what one round sees and agrees on.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

using Batches = std::vector<std::vector<std::string>>;

}  // namespace

TEST_CASE("run_once with requests from every rank completes them in one round", "[local]") {
  Cluster c(3);
  std::vector<Tensor<int32_t>> t;
  for (int r = 0; r < 3; ++r) t.emplace_back(std::vector<int32_t>{r, 10 * r});
  std::vector<Handle> hs;
  for (int r = 0; r < 3; ++r) hs.push_back(submit(c[r], "x", t[static_cast<size_t>(r)]));
  REQUIRE(c.step_all());
  for (auto& h : hs) REQUIRE(h.poll());
  for (auto& h : hs) REQUIRE(h.wait_status().ok());
  for (int r = 0; r < 3; ++r) REQUIRE(t[static_cast<size_t>(r)].out == std::vector<int32_t>{3, 30});
  REQUIRE(c[0].stats().rounds == 1);
  REQUIRE(c[0].stats().full_rounds == 1);
}

TEST_CASE("a cached and a new allreduce in one round run as one fused batch", "[local]") {
  Cluster c(2);
  Tensor<float> a0({1.0f}), a1({2.0f});
  auto h0 = submit(c[0], "a", a0);
  auto h1 = submit(c[1], "a", a1);
  REQUIRE(c.step_all());
  REQUIRE((h0.poll() && h1.poll()));
  std::vector<Tensor<float>> t;
  for (int i = 0; i < 4; ++i) t.emplace_back(std::vector<float>{float(i + 1)});
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) {
    hs.push_back(submit(c[r], "a", t[static_cast<size_t>(2 * r)]));      // cache hit
    hs.push_back(submit(c[r], "b", t[static_cast<size_t>(2 * r + 1)]));  // new name
  }
  const auto gathers = c.gathers();
  REQUIRE(c.step_all());
  REQUIRE(c.gathers()[0] == gathers[0] + 1);  // b needed the coordinator
  for (auto& h : hs) REQUIRE(h.poll());
  for (auto& h : hs) REQUIRE(h.wait_status().ok());
  REQUIRE(t[0].out[0] == 1.0f + 3.0f);
  REQUIRE(t[1].out[0] == 2.0f + 4.0f);
  REQUIRE(c.executors[0]->batches() == Batches{{"a"}, {"a", "b"}});
  REQUIRE(c.executors[1]->batches() == c.executors[0]->batches());
}

TEST_CASE("device tensors on a different device index per rank fuse the same way everywhere",
          "[local]") {
  // One GPU per rank: rank r's tensors live on cuda:r. A cached response is rebuilt from the
  // rank's own request, a new one comes from the coordinator; fusion must not tell them apart
  // by device index, or ranks would plan different batches and their collectives would not
  // match.
  Cluster c(2, Config{}, /*device_executor=*/true);
  auto on = [](int r) {
    Opts o;
    o.device = Device::cuda(r);
    return o;
  };
  Tensor<float> a0({1.0f}), a1({2.0f});
  auto h0 = submit(c[0], "a", a0, on(0));
  auto h1 = submit(c[1], "a", a1, on(1));
  REQUIRE(c.step_all());
  REQUIRE(h0.wait_status().ok());
  REQUIRE(h1.wait_status().ok());

  std::vector<Tensor<float>> t;
  for (int i = 0; i < 4; ++i) t.emplace_back(std::vector<float>{float(i + 1)});
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) {
    hs.push_back(submit(c[r], "a", t[static_cast<size_t>(2 * r)], on(r)));
    hs.push_back(submit(c[r], "b", t[static_cast<size_t>(2 * r + 1)], on(r)));
  }
  REQUIRE(c.step_all());
  for (auto& h : hs) {
    Status s = await(h, "device allreduce");
    INFO(s.to_string());
    REQUIRE(s.ok());
  }
  REQUIRE(t[0].out[0] == 4.0f);
  REQUIRE(t[1].out[0] == 6.0f);
  REQUIRE(c.device_executors[1]->batches() == c.device_executors[0]->batches());
  REQUIRE(c.executors[0]->batches().empty());  // nothing went to the host executor
}

TEST_CASE("names each submitted by one rank complete in the round all ranks have them", "[local]") {
  // Round 1: rank 0 has "late", rank 1 has "early": nothing is ready, nothing completes.
  // Round 2: each rank adds the other name: both complete, on every rank.
  Cluster c(2);
  Tensor<int32_t> a({5}), b({6});
  auto h0 = submit(c[0], "late", a);
  // Rank 1's run_once would block waiting for work; give it a request for another name that
  // rank 0 submits in the next round.
  Tensor<int32_t> e0({1}), e1({2});
  auto he1 = submit(c[1], "early", e1);
  REQUIRE(c.step_all());
  REQUIRE_FALSE(h0.poll());
  REQUIRE_FALSE(he1.poll());
  auto h1 = submit(c[1], "late", b);
  auto he0 = submit(c[0], "early", e0);
  REQUIRE(c.step_all());
  for (auto* h : {&h0, &h1, &he0, &he1}) {
    REQUIRE(h->poll());
    REQUIRE(h->wait_status().ok());
  }
  REQUIRE(a.out[0] == 11);
  REQUIRE(e0.out[0] == 3);
  REQUIRE(c.executors[0]->batches() == c.executors[1]->batches());
}

TEST_CASE("a cached set planned before is planned again once the cache changed under its bits",
          "[local]") {
  // The runtime reuses the batches it planned for a set of cached tensors while the rounds
  // bring the same cache bits. Here a new name takes the bit of an evicted one (a cache of
  // two) while the bits of the cached set stay the same: "c" (int32) must not run fused
  // with "b" (float) as the old plan of a and b (both float) would have it.
  Cluster c(2, with_cache(2));
  auto step = [&](const std::vector<std::string>& names) {
    std::vector<Tensor<float>> f;
    std::vector<Tensor<int32_t>> i;
    f.reserve(4);
    i.reserve(2);
    std::vector<Handle> hs;
    for (int r = 0; r < 2; ++r) {
      for (const auto& n : names) {
        if (n == "c") {
          i.emplace_back(std::vector<int32_t>{100 + r, 200 + r});
          hs.push_back(submit(c[r], n, i.back()));
        } else {
          f.emplace_back(std::vector<float>{0.5f + r, 1.5f + r});
          hs.push_back(submit(c[r], n, f.back()));
        }
      }
    }
    REQUIRE(c.step_all());
    for (auto& h : hs) REQUIRE(h.wait_status().ok());
    for (auto& t : f) REQUIRE(t.out == std::vector<float>{2.0f, 4.0f});
    for (auto& t : i) REQUIRE(t.out == std::vector<int32_t>{201, 401});
  };
  step({"a", "b"});       // negotiated, cached
  step({"a", "b"});       // cached: one batch, planned
  step({"a", "b", "c"});  // a, b cached and c new in one round: c evicts a, takes its bit
  step({"c", "b"});       // the same cache bits as the rounds before
  const Batches want{{"a", "b"}, {"a", "b"}, {"a", "b"}, {"c"}, {"c"}, {"b"}};
  REQUIRE(c.executors[0]->batches() == want);
  REQUIRE(c.executors[1]->batches() == want);
}
