// SPDX-License-Identifier: Apache-2.0
// Pure pieces behind allgather / alltoall / reducescatter: fusion of allgather runs, the wire
// format of their fields, cached responses, the output pool.
#include "hvd/core/cache.h"
#include "hvd/core/fusion.h"
#include "hvd/core/output_pool.h"
#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;

namespace {

// An allgather of `name` over ranks with `rows` rows each of `row` float32 elements.
Response allgather(const std::string& name, std::vector<int64_t> rows, int64_t row = 4) {
  Response r;
  r.op = OpType::kAllgather;
  r.names = {name};
  r.numels = {row};
  r.rank_rows = std::move(rows);
  return r;
}

FusionOptions opts(int64_t threshold, int64_t direct = 1LL << 30) {
  FusionOptions o;
  o.threshold_bytes = threshold;
  o.direct_bytes = o.allgather_direct_bytes = direct;
  return o;
}

std::vector<std::vector<std::string>> names_of(const std::vector<Response>& rs) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : rs) out.push_back(r.names);
  return out;
}
using Names = std::vector<std::vector<std::string>>;

}  // namespace

TEST_CASE("allgather bytes count the gathered output of every rank", "[unit]") {
  // (2 + 0 + 3) rows x 4 floats, and a second tensor of (1 + 1 + 1) rows x 2 floats.
  Response r = allgather("a", {2, 0, 3});
  REQUIRE(response_bytes(r) == 5 * 4 * 4);
  r.names.push_back("b");
  r.numels.push_back(2);
  r.rank_rows.insert(r.rank_rows.end(), {1, 1, 1});
  REQUIRE(response_bytes(r) == (5 * 4 + 3 * 2) * 4);
}

TEST_CASE("consecutive allgathers fuse with rank rows concatenated name by name", "[unit]") {
  auto out = plan_fusion(
      {allgather("a", {1, 2}), allgather("b", {0, 3}, 2), allgather("c", {4, 0})}, opts(1 << 20));
  REQUIRE(names_of(out) == Names{{"a", "b", "c"}});
  REQUIRE(out[0].numels == std::vector<int64_t>{4, 2, 4});
  REQUIRE(out[0].rank_rows == std::vector<int64_t>{1, 2, 0, 3, 4, 0});
}

TEST_CASE("the allgather fusion threshold counts gathered bytes", "[unit]") {
  // Each gathers 3 rows x 4 floats = 48 bytes: two fit in 100 bytes, the third does not.
  auto out = plan_fusion({allgather("a", {1, 2}), allgather("b", {2, 1}), allgather("c", {3, 0})},
                         opts(100));
  REQUIRE(names_of(out) == Names{{"a", "b"}, {"c"}});
  // A tensor whose gathered size reaches allgather_direct_bytes runs alone; allreduces keep
  // their own (larger) limit.
  FusionOptions o = opts(1 << 20);
  o.allgather_direct_bytes = 1000;
  out = plan_fusion({allgather("a", {1, 2}), allgather("big", {100, 100}), allgather("c", {1, 1})},
                    o);
  REQUIRE(names_of(out) == Names{{"a"}, {"big"}, {"c"}});
  REQUIRE(response_bytes(allgather("big", {100, 100})) == 3200);
  // The default: 64 KiB gathered.
  REQUIRE(FusionOptions{}.allgather_direct_bytes == 64 << 10);
  out = plan_fusion({allgather("x", {2048, 2048}), allgather("y", {2048, 2048})},
                    FusionOptions{});  // 2 x 2048 rows x 16 bytes = 64 KiB each
  REQUIRE(names_of(out) == Names{{"x"}, {"y"}});
}

TEST_CASE("allgather runs split on dtype, process set, joined ranks and other ops", "[unit]") {
  Response b = allgather("b", {1, 1});
  b.dtype = DataType::kInt32;
  REQUIRE(names_of(plan_fusion({allgather("a", {1, 1}), b}, opts(1 << 20))) == Names{{"a"}, {"b"}});
  b = allgather("b", {1, 1});
  b.process_set = 2;
  REQUIRE(names_of(plan_fusion({allgather("a", {1, 1}), b}, opts(1 << 20))) == Names{{"a"}, {"b"}});
  b = allgather("b", {1, 0});
  b.joined = {1};
  REQUIRE(names_of(plan_fusion({allgather("a", {1, 1}), b}, opts(1 << 20))) == Names{{"a"}, {"b"}});
  // Reduce op and scale factors do not matter to an allgather.
  b = allgather("b", {1, 1});
  b.reduce_op = ReduceOp::kMax;
  b.prescale = 3.0;
  REQUIRE(names_of(plan_fusion({allgather("a", {1, 1}), b}, opts(1 << 20))) == Names{{"a", "b"}});
  Response ar;
  ar.op = OpType::kAllreduce;
  ar.names = {"r"};
  ar.numels = {4};
  REQUIRE(names_of(plan_fusion({allgather("a", {1, 1}), ar, allgather("b", {1, 1})},
                               opts(1 << 20))) == Names{{"a"}, {"r"}, {"b"}});
}

TEST_CASE("alltoall and reducescatter are never fused", "[unit]") {
  Response a, b;
  a.op = b.op = OpType::kAlltoall;
  a.names = {"a"};
  b.names = {"b"};
  a.numels = b.numels = {1};
  a.rank_rows = b.rank_rows = {1, 1, 1, 1};
  REQUIRE(names_of(plan_fusion({a, b}, opts(1 << 20))) == Names{{"a"}, {"b"}});
  a.op = b.op = OpType::kReducescatter;
  a.rank_rows = b.rank_rows = {};
  REQUIRE(names_of(plan_fusion({a, b}, opts(1 << 20))) == Names{{"a"}, {"b"}});
}

TEST_CASE("responses round trip rank rows and joined ranks; requests their splits", "[unit]") {
  ResponseList l;
  Response a2a;
  a2a.op = OpType::kAlltoall;
  a2a.names = {"x"};
  a2a.numels = {6};
  a2a.rank_rows = {0, 1, 2, 3, 4, 5, 6, 7, 8};  // 3 x 3 send matrix
  a2a.joined = {};
  Response ag = allgather("g", {3, 0, 2});
  ag.joined = {1, 4};
  Response add;
  add.op = OpType::kAddProcessSet;
  add.names = {"process_set.add.0"};
  add.rank_rows = {3, 1};
  l.responses = {a2a, ag, add};
  auto bytes = serialize(l);
  auto back = parse_response_list(bytes.data(), bytes.size());
  REQUIRE(back.ok());
  REQUIRE(back.value().responses.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const Response &x = l.responses[i], &y = back.value().responses[i];
    REQUIRE(y.op == x.op);
    REQUIRE(y.names == x.names);
    REQUIRE(y.numels == x.numels);
    REQUIRE(y.rank_rows == x.rank_rows);
    REQUIRE(y.joined == x.joined);
  }

  RequestList q;
  Request r;
  r.op = OpType::kAlltoall;
  r.name = "x";
  r.shape = {6, 2};
  r.splits = {1, 0, 5};
  r.group = "grp";
  r.group_size = 2;
  q.requests = {r};
  auto qb = serialize(q);
  auto qback = parse_request_list(qb.data(), qb.size());
  REQUIRE(qback.ok());
  REQUIRE(qback.value().requests.at(0).same_params(r));
  REQUIRE(qback.value().requests.at(0).splits == std::vector<int64_t>{1, 0, 5});
}

TEST_CASE("the cache keeps the agreed response with this rank's parameters", "[unit]") {
  ResponseCache c(4);
  Request mine;
  mine.op = OpType::kAllgather;
  mine.name = "g";
  mine.shape = {2, 4};
  Response agreed = allgather("g", {2, 5, 0});
  REQUIRE_FALSE(c.put(mine, agreed).has_value());
  uint32_t bit = 99;
  REQUIRE(c.lookup(mine, &bit) == ResponseCache::Lookup::kHit);
  REQUIRE(c.response_at(bit).rank_rows == std::vector<int64_t>{2, 5, 0});
  Request other = mine;
  other.shape = {3, 4};  // this rank's first dimension changed: the entry no longer holds
  REQUIRE(c.lookup(other, &bit) == ResponseCache::Lookup::kMismatch);
  REQUIRE(c.put(other, allgather("g", {3, 5, 0})) == std::nullopt);  // replaced in place
  REQUIRE(c.response_at(bit).rank_rows == std::vector<int64_t>{3, 5, 0});
  c.erase(bit);
  REQUIRE_THROWS(c.response_at(bit));
}

TEST_CASE("the output pool reuses returned buffers of a similar size", "[unit]") {
  auto pool = OutputPool::create(1000);
  uint8_t* first = nullptr;
  {
    auto a = pool->take(300);
    first = a.get();
    REQUIRE(pool->idle_buffers() == 0);
  }
  REQUIRE(pool->idle_bytes() == 300);
  {
    auto b = pool->take(200);  // 300 <= 2 x 200: reused
    REQUIRE(b.get() == first);
    REQUIRE(pool->reused() == 1);
    auto c = pool->take(200);  // nothing idle: a new buffer
    REQUIRE(c.get() != first);
  }
  REQUIRE(pool->idle_buffers() == 2);
  auto small = pool->take(100);  // 200 <= 2 x 100: the 200-byte buffer, not the 300
  REQUIRE(pool->idle_bytes() == 300);
  auto tiny = pool->take(10);  // 300 > 2 x 10: not reused
  REQUIRE(pool->reused() == 2);
}

TEST_CASE("the output pool frees beyond its cap and may die before its buffers", "[unit]") {
  auto pool = OutputPool::create(500);
  {  // two buffers out at once, both back at the end of the block
    auto a = pool->take(400);
    auto b = pool->take(400);
  }
  REQUIRE(pool->idle_buffers() == 1);  // the second would exceed 500 bytes idle: freed
  REQUIRE(pool->idle_bytes() == 400);
  std::shared_ptr<uint8_t> kept = pool->take(1000);
  std::weak_ptr<OutputPool> weak = pool;
  pool.reset();
  REQUIRE_FALSE(weak.expired());  // the buffer keeps its pool alive
  kept.get()[0] = 7;
  kept.reset();
  REQUIRE(weak.expired());
}
