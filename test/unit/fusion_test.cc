// SPDX-License-Identifier: Apache-2.0
// Fusion planning: which consecutive responses become one collective.
#include "hvd/core/fusion.h"

#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;

namespace {

Response allreduce(const std::string& name, int64_t numel, DataType dt = DataType::kFloat32) {
  Response r;
  r.op = OpType::kAllreduce;
  r.names = {name};
  r.dtype = dt;
  r.numels = {numel};
  return r;
}

std::vector<std::vector<std::string>> names_of(const std::vector<Response>& rs) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : rs) out.push_back(r.names);
  return out;
}

using Names = std::vector<std::vector<std::string>>;

FusionOptions opts(int64_t threshold, int64_t direct = 1LL << 30) {
  FusionOptions o;
  o.threshold_bytes = threshold;
  o.direct_bytes = direct;
  return o;
}

}  // namespace

TEST_CASE("response_bytes sums the tensors of a response", "[unit]") {
  Response r = allreduce("a", 10, DataType::kFloat64);
  r.names.push_back("b");
  r.numels.push_back(3);
  REQUIRE(response_bytes(r) == 13 * 8);
}

TEST_CASE("consecutive same-key allreduces are merged up to the threshold", "[unit]") {
  // 400-byte tensors and a 1000-byte threshold: two per batch, a 204-byte fifth does not fit.
  std::vector<Response> in = {allreduce("a", 100), allreduce("b", 100), allreduce("c", 100),
                              allreduce("d", 100), allreduce("e", 51)};
  auto out = plan_fusion(in, opts(1000));
  REQUIRE(names_of(out) == Names{{"a", "b"}, {"c", "d"}, {"e"}});
  REQUIRE(out[0].numels == std::vector<int64_t>{100, 100});
  REQUIRE(out[1].numels == std::vector<int64_t>{100, 100});
  for (const auto& r : out) REQUIRE(response_bytes(r) <= 1000);
}

TEST_CASE("a batch exactly at the threshold is still one batch", "[unit]") {
  auto out = plan_fusion({allreduce("a", 100), allreduce("b", 150)}, opts(1000));
  REQUIRE(names_of(out) == Names{{"a", "b"}});
}

TEST_CASE("a change of dtype, reduce op, scale, device or process set splits the run", "[unit]") {
  Response base = allreduce("x", 4);
  std::vector<Response> variants;
  Response v = base;
  v.dtype = DataType::kInt32;
  variants.push_back(v);
  v = base;
  v.reduce_op = ReduceOp::kMax;
  variants.push_back(v);
  v = base;
  v.prescale = 0.5;
  variants.push_back(v);
  v = base;
  v.postscale = 2.0;
  variants.push_back(v);
  v = base;
  v.device = Device::cuda(0);
  variants.push_back(v);
  v = base;
  v.process_set = 1;
  variants.push_back(v);
  for (size_t i = 0; i < variants.size(); ++i) {
    INFO("variant " << i);
    Response a = base, b = base, c = variants[i], d = variants[i];
    a.names = {"a"};
    b.names = {"b"};
    c.names = {"c"};
    d.names = {"d"};
    auto out = plan_fusion({a, b, c, d}, opts(1 << 20));
    REQUIRE(names_of(out) == Names{{"a", "b"}, {"c", "d"}});
    REQUIRE(out[1].dtype == variants[i].dtype);
    REQUIRE(out[1].reduce_op == variants[i].reduce_op);
    REQUIRE(out[1].prescale == variants[i].prescale);
    REQUIRE(out[1].postscale == variants[i].postscale);
    REQUIRE(out[1].device == variants[i].device);
    REQUIRE(out[1].process_set == variants[i].process_set);
  }
}

TEST_CASE("device index differences do not split a run (the plan must match on all ranks)",
          "[unit]") {
  Response a = allreduce("a", 1), b = allreduce("b", 1);
  a.device = Device::cuda(1);  // e.g. rebuilt from this rank's cache entry
  b.device = Device::cuda(0);  // e.g. from the coordinator (rank 0's device)
  REQUIRE(names_of(plan_fusion({a, b}, opts(1 << 20))) == Names{{"a", "b"}});
}

TEST_CASE("a key change and back does not rejoin the earlier batch", "[unit]") {
  auto out = plan_fusion(
      {allreduce("a", 1), allreduce("b", 1, DataType::kInt32), allreduce("c", 1)}, opts(1 << 20));
  REQUIRE(names_of(out) == Names{{"a"}, {"b"}, {"c"}});
}

TEST_CASE("tensors of at least direct_bytes are never fused", "[unit]") {
  // direct = 400 bytes: "big" (100 floats = 400 bytes) runs alone and breaks the run.
  auto out = plan_fusion(
      {allreduce("a", 10), allreduce("big", 100), allreduce("b", 10), allreduce("c", 99)},
      opts(1 << 20, 400));
  REQUIRE(names_of(out) == Names{{"a"}, {"big"}, {"b", "c"}});
}

TEST_CASE("a tensor larger than the threshold runs alone", "[unit]") {
  auto out =
      plan_fusion({allreduce("a", 10), allreduce("huge", 1000), allreduce("b", 10)}, opts(400));
  REQUIRE(names_of(out) == Names{{"a"}, {"huge"}, {"b"}});
}

TEST_CASE("errors and broadcasts pass through unchanged and end a batch", "[unit]") {
  Response err = allreduce("bad", 10);
  err.error = "allreduce 'bad': shape [10] on rank 0 but [11] on rank 1";
  Response bc = allreduce("bc", 10);
  bc.op = OpType::kBroadcast;
  bc.root = 1;
  auto out = plan_fusion({allreduce("a", 1), allreduce("b", 1), err, allreduce("c", 1), bc,
                          allreduce("d", 1), allreduce("e", 1)},
                         opts(1 << 20));
  REQUIRE(names_of(out) == Names{{"a", "b"}, {"bad"}, {"c"}, {"bc"}, {"d", "e"}});
  REQUIRE(out[1].error == err.error);
  REQUIRE(out[3].op == OpType::kBroadcast);
  REQUIRE(out[3].root == 1);
}

TEST_CASE("an already multi-name response is not merged further", "[unit]") {
  Response two = allreduce("g1", 1);
  two.names.push_back("g2");
  two.numels.push_back(1);
  auto out = plan_fusion({allreduce("a", 1), two, allreduce("b", 1)}, opts(1 << 20));
  REQUIRE(names_of(out) == Names{{"a"}, {"g1", "g2"}, {"b"}});
}

TEST_CASE("fusion preserves the order of every tensor", "[unit]") {
  std::vector<Response> in;
  std::vector<std::string> expect;
  for (int i = 0; i < 40; ++i) {
    // Mixed dtypes and sizes so that batches break in several ways.
    DataType dt = (i % 7 == 3) ? DataType::kInt32 : DataType::kFloat32;
    in.push_back(allreduce("t" + std::to_string(i), 10 + (i * 13) % 50, dt));
    expect.push_back("t" + std::to_string(i));
  }
  auto out = plan_fusion(in, opts(500));
  std::vector<std::string> flat;
  for (const auto& r : out) {
    REQUIRE(r.names.size() == r.numels.size());
    REQUIRE(response_bytes(r) <= 500);
    for (const auto& n : r.names) flat.push_back(n);
  }
  REQUIRE(flat == expect);
  REQUIRE(out.size() < in.size());  // something was fused
}

TEST_CASE("threshold 0 disables fusion", "[unit]") {
  std::vector<Response> in = {allreduce("a", 1), allreduce("b", 1), allreduce("c", 1)};
  REQUIRE(names_of(plan_fusion(in, opts(0))) == Names{{"a"}, {"b"}, {"c"}});
  REQUIRE(names_of(plan_fusion(in, opts(-1))) == Names{{"a"}, {"b"}, {"c"}});
  REQUIRE(names_of(plan_fusion(in, opts(12))) == Names{{"a", "b", "c"}});
}

TEST_CASE("an empty response list plans to nothing", "[unit]") {
  REQUIRE(plan_fusion({}, FusionOptions{}).empty());
}

TEST_CASE("plan_fusion_runs batches cached requests by the same rules", "[unit]") {
  auto q = [](const std::string& name, int64_t n, DataType t = DataType::kFloat32) {
    Request r;
    r.op = OpType::kAllreduce;
    r.name = name;
    r.dtype = t;
    r.shape = {n};
    return r;
  };
  std::vector<Request> reqs = {q("a", 10),   q("b", 10), q("c", 10, DataType::kInt32),
                               q("d", 1000), q("e", 10), q("f", 10)};
  reqs[5].op = OpType::kBroadcast;
  std::vector<const Request*> ptrs;
  for (const auto& r : reqs) ptrs.push_back(&r);
  // a+b fuse; c has another dtype; d is over the direct size; e alone; f is a broadcast.
  CHECK(plan_fusion_runs(ptrs, opts(1 << 20, 1000 * 4)) == std::vector<size_t>{2, 3, 4, 5, 6});
  // The threshold closes a batch: 40 + 40 > 60.
  CHECK(plan_fusion_runs(ptrs, opts(60)) == std::vector<size_t>{1, 2, 3, 4, 5, 6});
  // Fusion off: one each.
  CHECK(plan_fusion_runs(ptrs, opts(0)) == std::vector<size_t>{1, 2, 3, 4, 5, 6});
  // Scale factors and reduce ops must agree.
  reqs[1].prescale = 2.0;
  CHECK(plan_fusion_runs(ptrs, opts(1 << 20, 1000 * 4)).front() == 1);
  CHECK(plan_fusion_runs({}, opts(1 << 20)).empty());
}
