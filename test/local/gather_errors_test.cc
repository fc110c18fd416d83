// SPDX-License-Identifier: Apache-2.0
// [local] errors of allgather, alltoall and reducescatter: each message names the tensor, the
// ranks and the values; the runtime keeps serving afterwards.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;
using hvd::test::Contains;

namespace {

// Submits `name` on every rank with rank r's shape `shapes[r]` and options `o`; returns the
// statuses once all completed.
std::vector<Status> run_shapes(Cluster& c, const std::string& name,
                               const std::vector<std::vector<int64_t>>& shapes, Opts o) {
  std::vector<Tensor<float>> t;
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) {
    t.emplace_back(
        std::vector<float>(static_cast<size_t>(shape_numel(shapes[static_cast<size_t>(r)])), 1.0f));
  }
  for (int r = 0; r < c.size(); ++r) {
    o.shape = shapes[static_cast<size_t>(r)];
    hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)], o));
  }
  std::vector<Status> out;
  for (auto& h : hs) out.push_back(await(h, name));
  return out;
}

void still_serving(Cluster& c) {
  std::vector<Tensor<float>> t;
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) t.emplace_back(std::vector<float>(2, float(r)));
  Opts o;
  o.op = OpType::kAllgather;
  for (int r = 0; r < c.size(); ++r)
    hs.push_back(submit(c[r], "after", t[static_cast<size_t>(r)], o));
  for (auto& h : hs) {
    await_ok(h, "after");
    REQUIRE(h.output().shape == std::vector<int64_t>{2 * c.size()});
  }
}

}  // namespace

TEST_CASE("allgather with differing trailing dimensions names the ranks and shapes", "[local]") {
  Cluster c(3);
  c.start_all();
  Opts o;
  o.op = OpType::kAllgather;
  auto st = run_shapes(c, "ag.bad", {{2, 3}, {1, 3}, {2, 4}}, o);
  for (const auto& s : st) {
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE(s.message() ==
            "allgather 'ag.bad': dimensions after the first must match on every rank, but "
            "ranks 0-1 have shapes [2, 3], [1, 3] and rank 2 has shape [2, 4]");
  }
  o.op = OpType::kAlltoall;
  st = run_shapes(c, "a2a.bad", {{3, 2}, {3, 2}, {3, 1}}, o);
  for (const auto& s : st) {
    REQUIRE_THAT(s.message(), Contains("alltoall 'a2a.bad': dimensions after the first must match "
                                       "on every rank, but ranks 0-1 have shapes [3, 2], [3, 2] "
                                       "and rank 2 has shape [3, 1]"));
  }
  still_serving(c);
}

TEST_CASE("alltoall splits that do not fit fail at once with the values", "[local]") {
  Cluster c(3);
  c.start_all();
  Tensor<float> t(std::vector<float>(4, 1.0f));
  Opts o;
  o.op = OpType::kAlltoall;
  o.splits = std::vector<int64_t>{1, 1, 1};
  Status s = await(submit(c[0], "a2a.sum", t, o), "a2a.sum");
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message() ==
          "alltoall 'a2a.sum': splits [1, 1, 1] sum to 3 but the first "
          "dimension is 4");
  o.splits = std::vector<int64_t>{2, 2};
  s = await(submit(c[0], "a2a.len", t, o), "a2a.len");
  REQUIRE(s.message() ==
          "alltoall 'a2a.len': 2 splits [2, 2] given but the process set has 3 "
          "ranks (one split per rank)");
  o.splits = std::vector<int64_t>{3, 2, -1};
  s = await(submit(c[0], "a2a.neg", t, o), "a2a.neg");
  REQUIRE_THAT(s.message(), Contains("negative split in [3, 2, -1]"));
  o.splits = std::vector<int64_t>{};
  s = await(submit(c[0], "a2a.even", t, o), "a2a.even");
  REQUIRE(s.message() ==
          "alltoall 'a2a.even': first dimension 4 cannot be split evenly over 3 "
          "ranks; pass splits (rows for each rank)");
  still_serving(c);  // nothing of the above reached the other ranks
}

TEST_CASE("reducescatter rejects differing shapes, unsupported ops, bool and scalars", "[local]") {
  Cluster c(3);
  c.start_all();
  Opts o;
  o.op = OpType::kReducescatter;
  auto st = run_shapes(c, "rs.bad", {{4, 2}, {4, 2}, {5, 2}}, o);
  for (const auto& s : st) {
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE(s.message() ==
            "reducescatter 'rs.bad': shape [4, 2] on ranks 0-1 but [5, 2] on rank 2");
  }
  Tensor<float> t(std::vector<float>(3, 1.0f));
  o.reduce = ReduceOp::kMax;
  Status s = await(submit(c[0], "rs.max", t, o), "rs.max");
  REQUIRE(s.message() ==
          "reducescatter 'rs.max': reduce op Max is not supported (use Sum or "
          "Average)");
  o.reduce = ReduceOp::kSum;
  o.shape = std::vector<int64_t>{};
  TensorEntry e;  // a scalar: no first dimension to scatter
  e.request.op = OpType::kReducescatter;
  e.request.name = "rs.scalar";
  e.request.dtype = DataType::kFloat32;
  e.input = TensorView(t.in.data(), DataType::kFloat32, {});
  s = await(c[0].enqueue(std::move(e)), "rs.scalar");
  REQUIRE(s.message() ==
          "reducescatter 'rs.scalar': needs a tensor with at least one dimension "
          "(got a scalar)");
  st = run_shapes(c, "rs.avg.mix", {{3}, {3}, {3}}, o);  // agreeing: fine
  for (const auto& x : st) REQUIRE(x.ok());
  still_serving(c);
}

TEST_CASE("one mismatched member fails a whole grouped allgather", "[local]") {
  Cluster c(2);
  c.start_all();
  std::vector<Tensor<float>> t;
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) t.emplace_back(std::vector<float>(4, 1.0f));
  }
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) {
      Opts o;
      o.op = OpType::kAllgather;
      o.group = "gbad";
      o.group_size = 2;
      o.shape = (k == 1 && r == 1) ? std::vector<int64_t>{1, 4} : std::vector<int64_t>{2, 2};
      hs.push_back(submit(c[r], "gbad." + std::to_string(k), t[static_cast<size_t>(r * 2 + k)], o));
    }
  }
  for (auto& h : hs) {
    Status s = await(h, "gbad");
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE_THAT(s.message(), Contains("allgather 'gbad.1': dimensions after the first must "
                                       "match on every rank, but rank 0 has shape [2, 2] and "
                                       "rank 1 has shape [1, 4]"));
  }
  still_serving(c);
}
