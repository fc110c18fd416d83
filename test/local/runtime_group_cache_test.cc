// SPDX-License-Identifier: Apache-2.0
// [local] grouped allreduces through the response cache: cached whole, run once every member
// is ready everywhere, renegotiated (never stuck) when a member changes, the cache grown for a
// group larger than it.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;
using hvd::test::Contains;

namespace {

Opts grouped(const std::string& group, int size) {
  Opts o;
  o.group = group;
  o.group_size = size;
  return o;
}

std::string member(const std::string& group, int k) { return group + "." + std::to_string(k); }

// Every rank submits the group's `size` members (rank r, member k: len floats of
// base + 10 r + k) and every output must equal the sum over ranks.
void group_round(Cluster& c, const std::string& group, int size, size_t len, int base) {
  const Opts o = grouped(group, size);
  std::vector<std::vector<Tensor<float>>> t(static_cast<size_t>(c.size()));
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) {
    for (int k = 0; k < size; ++k) {
      t[static_cast<size_t>(r)].emplace_back(std::vector<float>(len, float(base + 10 * r + k)));
    }
    for (int k = 0; k < size; ++k) {
      hs.push_back(
          submit(c[r], member(group, k), t[static_cast<size_t>(r)][static_cast<size_t>(k)], o));
    }
  }
  for (auto& h : hs) await_ok(h, group);
  for (int k = 0; k < size; ++k) {
    float expect = 0;
    for (int r = 0; r < c.size(); ++r) expect += float(base + 10 * r + k);
    for (int r = 0; r < c.size(); ++r) {
      INFO(member(group, k) << " on rank " << r);
      REQUIRE(t[static_cast<size_t>(r)][static_cast<size_t>(k)].out ==
              std::vector<float>(len, expect));
    }
  }
}

}  // namespace

TEST_CASE("a repeated grouped allreduce is served from the cache without a gather", "[local]") {
  Cluster c(3);
  c.start_all();
  group_round(c, "g", 4, 3, 1);
  const auto gathers = c.gathers();
  const uint64_t full_rounds = c[0].stats().full_rounds;
  for (int i = 0; i < 5; ++i) group_round(c, "g", 4, 3, 100 * i);
  REQUIRE(c.gathers() == gathers);
  REQUIRE(c[0].stats().full_rounds == full_rounds);
}

TEST_CASE("a cached group runs only once every member is ready on every rank", "[local]") {
  Cluster c(2);
  c.start_all();
  group_round(c, "g", 3, 2, 1);
  const uint64_t full_rounds = c[0].stats().full_rounds;
  const size_t batches = c.executors[0]->batches().size();
  const Opts o = grouped("g", 3);
  std::vector<std::vector<Tensor<float>>> t(2);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) {
      t[static_cast<size_t>(r)].emplace_back(std::vector<float>{float(r + 1), float(k)});
    }
  }
  std::vector<Handle> hs;
  for (int k = 0; k < 3; ++k) hs.push_back(submit(c[0], member("g", k), t[0][size_t(k)], o));
  // Rank 1 submits two of the three: both are ready everywhere through the cache, but must wait.
  hs.push_back(submit(c[1], member("g", 0), t[1][0], o));
  hs.push_back(submit(c[1], member("g", 1), t[1][1], o));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (auto& h : hs) REQUIRE_FALSE(h.poll());
  REQUIRE(c.executors[0]->batches().size() == batches);
  hs.push_back(submit(c[1], member("g", 2), t[1][2], o));
  for (auto& h : hs) await_ok(h, "cached group");
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> expect = {3.0f, 2.0f * float(k)};
    REQUIRE(t[0][static_cast<size_t>(k)].out == expect);
    REQUIRE(t[1][static_cast<size_t>(k)].out == expect);
  }
  REQUIRE(c[0].stats().full_rounds == full_rounds);
}

TEST_CASE("a group larger than the cache grows it, then is served from the cache", "[local]") {
  Cluster c(2, with_cache(2));
  c.start_all();
  // 3 members, 2 entries: the cache grows instead of evicting the group's own members; then
  // "small" pushes "big" out once, and big's return to the full cache grows it again.
  for (int i = 0; i < 2; ++i) {
    group_round(c, "big", 3, 2, i);
    group_round(c, "small", 2, 2, i);
  }
  const uint64_t before = c[0].stats().full_rounds;
  for (int i = 2; i < 5; ++i) {
    group_round(c, "big", 3, 2, i);
    group_round(c, "small", 2, 2, i);
  }
  REQUIRE(c[0].stats().full_rounds == before);
}

TEST_CASE("a cached group called with another size or a changed member is renegotiated",
          "[local]") {
  Cluster c(3);
  c.start_all();
  group_round(c, "g", 3, 2, 1);
  group_round(c, "g", 3, 2, 2);
  group_round(c, "g", 2, 2, 3);  // the same members, fewer of them
  group_round(c, "g", 4, 2, 4);  // one member more
  group_round(c, "g", 4, 5, 5);  // every member longer
  group_round(c, "g", 4, 5, 6);
  // A member whose shape differs on one rank fails the whole group on every rank, and the group
  // works again afterwards.
  const Opts o = grouped("g", 4);
  std::vector<std::vector<Tensor<float>>> t(3);
  std::vector<Handle> hs;
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 4; ++k) {
      t[size_t(r)].emplace_back(std::vector<float>(r == 1 && k == 2 ? 6 : 5, 1.0f));
    }
    for (int k = 0; k < 4; ++k)
      hs.push_back(submit(c[r], member("g", k), t[size_t(r)][size_t(k)], o));
  }
  for (size_t i = 0; i < hs.size(); ++i) {
    Status s = await(hs[i], "member " + std::to_string(i));
    INFO("handle " << i << ": " << s.to_string());
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE_THAT(s.message(), Contains("'g.2'"));
  }
  group_round(c, "g", 4, 5, 8);
  group_round(c, "g", 4, 5, 9);
}
