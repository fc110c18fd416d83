// SPDX-License-Identifier: Apache-2.0
// Validation: responses from agreeing requests, errors naming tensor, ranks and values.
#include "hvd/core/validation.h"

#include <cmath>
#include <limits>

#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;
using hvd::test::Contains;

namespace {

Request req(int rank, OpType op = OpType::kAllreduce) {
  Request r;
  r.rank = rank;
  r.op = op;
  r.name = "layer1.weight";
  r.dtype = DataType::kFloat32;
  r.shape = {64, 32};
  return r;
}

// n ranks with identical requests, then `edit` applied to the ranks in `odd`.
template <typename F>
std::vector<Request> ranks_with(int n, std::vector<int> odd, F edit,
                                OpType op = OpType::kAllreduce) {
  std::vector<Request> v;
  for (int i = 0; i < n; ++i) v.push_back(req(i, op));
  for (int i : odd) edit(v[static_cast<size_t>(i)]);
  return v;
}

}  // namespace

TEST_CASE("rank_ranges collapses consecutive ranks", "[unit]") {
  REQUIRE(rank_ranges({}) == "");
  REQUIRE(rank_ranges({3}) == "3");
  REQUIRE(rank_ranges({0, 1, 2, 5}) == "0-2,5");
  REQUIRE(rank_ranges({5, 2, 0, 1}) == "0-2,5");
  REQUIRE(rank_ranges({1, 3, 5}) == "1,3,5");
  REQUIRE(rank_ranges({0, 1, 3, 4, 7, 8, 9}) == "0-1,3-4,7-9");
}

TEST_CASE("agreeing requests give a response with the agreed parameters", "[unit]") {
  auto v = ranks_with(3, {}, [](Request&) {});
  for (auto& r : v) {
    r.reduce_op = ReduceOp::kAverage;
    r.prescale = 0.5;
    r.postscale = 3.0;
    r.process_set = 2;
  }
  Response resp = build_response(v);
  REQUIRE_FALSE(resp.is_error());
  REQUIRE(resp.op == OpType::kAllreduce);
  REQUIRE(resp.names == std::vector<std::string>{"layer1.weight"});
  REQUIRE(resp.dtype == DataType::kFloat32);
  REQUIRE(resp.reduce_op == ReduceOp::kAverage);
  REQUIRE(resp.prescale == 0.5);
  REQUIRE(resp.postscale == 3.0);
  REQUIRE(resp.process_set == 2);
  REQUIRE(resp.numels == std::vector<int64_t>{64 * 32});
}

TEST_CASE("different device indexes of the same kind agree", "[unit]") {
  auto v = ranks_with(2, {}, [](Request&) {});
  v[0].device = Device::cuda(0);
  v[1].device = Device::cuda(1);
  REQUIRE_FALSE(build_response(v).is_error());
}

TEST_CASE("a shape mismatch names the tensor, both rank sets and both shapes", "[unit]") {
  auto v = ranks_with(4, {3}, [](Request& r) { r.shape = {64, 16}; });
  Response resp = build_response(v);
  REQUIRE(resp.is_error());
  REQUIRE(resp.names == std::vector<std::string>{"layer1.weight"});
  REQUIRE(resp.error ==
          "allreduce 'layer1.weight': shape [64, 32] on ranks 0-2 but [64, 16] on rank 3");
}

TEST_CASE("a dtype mismatch names both dtypes and rank sets", "[unit]") {
  auto v = ranks_with(4, {0, 2}, [](Request& r) { r.dtype = DataType::kInt32; });
  Response resp = build_response(v);
  REQUIRE(resp.error ==
          "allreduce 'layer1.weight': dtype int32 on ranks 0,2 but float32 on ranks 1,3");
}

TEST_CASE("an operation mismatch names both operations", "[unit]") {
  auto v = ranks_with(2, {1}, [](Request& r) { r.op = OpType::kBroadcast; });
  REQUIRE(build_response(v).error ==
          "allreduce 'layer1.weight': operation allreduce on rank 0 but broadcast on rank 1");
}

TEST_CASE("a reduce op mismatch names both reduce ops", "[unit]") {
  auto v = ranks_with(3, {2}, [](Request& r) { r.reduce_op = ReduceOp::kMax; });
  REQUIRE(build_response(v).error ==
          "allreduce 'layer1.weight': reduce op Sum on ranks 0-1 but Max on rank 2");
}

TEST_CASE("a broadcast root mismatch names both roots", "[unit]") {
  const auto root_2 = [](Request& r) { r.root = 2; };
  auto v = ranks_with(3, {1}, root_2, OpType::kBroadcast);
  REQUIRE(build_response(v).error ==
          "broadcast 'layer1.weight': root rank 0 on ranks 0,2 but 2 on rank 1");
}

TEST_CASE("prescale and postscale mismatches name both factors", "[unit]") {
  auto pre = ranks_with(2, {1}, [](Request& r) { r.prescale = 0.5; });
  REQUIRE(build_response(pre).error ==
          "allreduce 'layer1.weight': prescale factor 1 on rank 0 but 0.5 on rank 1");
  auto post = ranks_with(2, {0}, [](Request& r) { r.postscale = 0.25; });
  REQUIRE(build_response(post).error ==
          "allreduce 'layer1.weight': postscale factor 0.25 on rank 0 but 1 on rank 1");
}

TEST_CASE("scale factors are compared exactly and printed with the digits that differ", "[unit]") {
  auto pre = ranks_with(2, {1}, [](Request& r) { r.prescale = 1.0 + 1e-9; });
  REQUIRE(build_response(pre).error ==
          "allreduce 'layer1.weight': prescale factor 1 on rank 0 but 1.000000001 on rank 1");
  auto post = ranks_with(3, {2}, [](Request& r) { r.postscale = std::nextafter(1.0, 2.0); });
  REQUIRE(build_response(post).error ==
          "allreduce 'layer1.weight': postscale factor 1 on ranks 0-1 but 1.0000000000000002 on "
          "rank 2");
  auto same = ranks_with(2, {1}, [](Request& r) { r.prescale = 0.1; });
  for (auto& r : same) r.prescale = 0.1;
  REQUIRE_FALSE(build_response(same).is_error());
}

TEST_CASE("a device kind mismatch names cpu and cuda", "[unit]") {
  auto v = ranks_with(3, {1, 2}, [](Request& r) { r.device = Device::cuda(0); });
  REQUIRE(build_response(v).error ==
          "allreduce 'layer1.weight': device kind cpu on rank 0 but cuda on ranks 1-2");
}

TEST_CASE("a group mismatch names both groups", "[unit]") {
  auto v = ranks_with(2, {1}, [](Request& r) {
    r.group = "g";
    r.group_size = 2;
  });
  REQUIRE(build_response(v).error ==
          "allreduce 'layer1.weight': group (not grouped) on rank 0 but 'g' of 2 on rank 1");
}

TEST_CASE("three different values are all listed", "[unit]") {
  auto v = ranks_with(3, {}, [](Request&) {});
  v[1].shape = {1};
  v[2].shape = {2};
  REQUIRE(build_response(v).error ==
          "allreduce 'layer1.weight': shape [64, 32] on rank 0, [1] on rank 1 but [2] on rank 2");
}

TEST_CASE("broadcasts ignore reduce op and scale factors", "[unit]") {
  auto v = ranks_with(
      2, {1},
      [](Request& r) {
        r.reduce_op = ReduceOp::kMax;
        r.prescale = 3.0;
      },
      OpType::kBroadcast);
  Response resp = build_response(v);
  REQUIRE_FALSE(resp.is_error());
  REQUIRE(resp.op == OpType::kBroadcast);
}

TEST_CASE("validate_local accepts a well-formed request", "[unit]") {
  REQUIRE(validate_local(req(0), 4).ok());
  Request bc = req(0, OpType::kBroadcast);
  bc.root = 3;
  REQUIRE(validate_local(bc, 4).ok());
  Request bool_bc = req(0, OpType::kBroadcast);
  bool_bc.dtype = DataType::kBool;
  REQUIRE(validate_local(bool_bc, 4).ok());
}

TEST_CASE("validate_local rejects a broadcast root out of range", "[unit]") {
  for (int root : {-1, 4, 100}) {
    Request r = req(0, OpType::kBroadcast);
    r.root = root;
    Status s = validate_local(r, 4);
    REQUIRE(s.code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(s.message(), Contains("broadcast 'layer1.weight'"));
    REQUIRE_THAT(s.message(), Contains("root rank " + std::to_string(root)));
    REQUIRE_THAT(s.message(), Contains("0-3"));
  }
}

TEST_CASE("validate_local rejects reducing bool", "[unit]") {
  for (OpType op : {OpType::kAllreduce, OpType::kReducescatter}) {
    Request r = req(0, op);
    r.dtype = DataType::kBool;
    Status s = validate_local(r, 2);
    REQUIRE(s.code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(s.message(), Contains("'layer1.weight'"));
    REQUIRE_THAT(s.message(), Contains("bool"));
  }
}

TEST_CASE("validate_local rejects non-finite scale factors", "[unit]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (auto [pre, post] :
       {std::pair{inf, 1.0}, std::pair{1.0, -inf}, std::pair{nan, 1.0}, std::pair{1.0, nan}}) {
    Request r = req(0);
    r.prescale = pre;
    r.postscale = post;
    Status s = validate_local(r, 2);
    INFO(s.to_string());
    REQUIRE(s.code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(s.message(), Contains("'layer1.weight'"));
    REQUIRE_THAT(s.message(), Contains("finite"));
  }
}

TEST_CASE("validate_local rejects a negative dimension", "[unit]") {
  Request r = req(0);
  r.shape = {3, -1};
  Status s = validate_local(r, 2);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(s.message(), Contains("[3, -1]"));
}

TEST_CASE("hvd's own names are disjoint from user names and described by group", "[unit]") {
  REQUIRE(internal_name("allreduce.noname.3") == "@allreduce.noname.3");
  REQUIRE(member_name("g", 1) == "@g/1");
  REQUIRE(member_name("@group.allreduce.noname.0", 2) == "@@group.allreduce.noname.0/2");
  // A user name that spells a member or an automatic name is still a plain user name.
  REQUIRE(member_name("g", 0) != "g/0");
  // Written into a buffer reused member after member (a group's submission): same names.
  std::string buf = "a much longer name left by another group's member";
  for (size_t i : {size_t{0}, size_t{7}, size_t{123456789}}) {
    member_name_into(&buf, "grp", i);
    REQUIRE(buf == member_name("grp", i));
  }
  REQUIRE(buf == "@grp/123456789");
  REQUIRE(describe(OpType::kAllreduce, "g/0") == "allreduce 'g/0'");
  REQUIRE(describe(OpType::kAllreduce, member_name("g", 1)) == "grouped allreduce 'g' (member 1)");
  REQUIRE(describe(OpType::kAllgather, member_name("a/b", 12)) ==
          "grouped allgather 'a/b' (member 12)");
  REQUIRE(describe(OpType::kAllreduce, internal_name("allreduce.noname.3")) ==
          "allreduce '@allreduce.noname.3'");
  REQUIRE(check_user_name("allreduce", "allreduce.noname.3").ok());
  REQUIRE(check_user_name("allreduce", "g/0").ok());
  REQUIRE(check_user_name("allreduce", "a@b").ok());
  REQUIRE(check_user_name("allreduce", "").ok());
  Status s = check_user_name("grouped_allreduce", "@g");
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE(s.message() ==
          "grouped_allreduce '@g': names starting with '@' are reserved for hvd's own "
          "collectives; choose another name");
}

TEST_CASE("a member mismatch names the group and the member", "[unit]") {
  auto reqs = ranks_with(2, {1}, [](Request& r) { r.shape = {5}; });
  reqs[0].shape = {4};
  for (auto& r : reqs) {
    r.name = member_name("bucket", 1);
    r.group = "bucket";
    r.group_size = 2;
  }
  REQUIRE(build_response(reqs).error ==
          "grouped allreduce 'bucket' (member 1): shape [4] on rank 0 but [5] on rank 1");
}

TEST_CASE("group_size_error names the group, every size and its ranks", "[unit]") {
  REQUIRE(group_size_error(OpType::kAllreduce, "g", {2, 2, 2}).empty());
  REQUIRE(group_size_error(OpType::kAllreduce, "g", {2, 0, 2}).empty());  // 0: not known yet
  REQUIRE(group_size_error(OpType::kAllreduce, "g", {2, 3, 2, 2}) ==
          "grouped allreduce 'g': 2 tensors on ranks 0,2-3 but 3 on rank 1");
  REQUIRE(group_size_error(OpType::kReducescatter, "g", {1, 3, 0, 2}) ==
          "grouped reducescatter 'g': 1 tensor on rank 0, 3 on rank 1 but 2 on rank 3");
}
