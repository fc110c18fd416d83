// SPDX-License-Identifier: Apache-2.0
// Wire format of request and response lists: round trips and rejection of damaged bytes.
#include "hvd/core/message.h"

#include <cstring>

#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;

namespace {

// Every field set to a value different from its default.
Request full_request() {
  Request r;
  r.rank = 3;
  r.op = OpType::kAlltoall;
  r.name = "layer1.weight";
  r.dtype = DataType::kBFloat16;
  r.shape = {64, 32, 3};
  r.reduce_op = ReduceOp::kMax;
  r.root = 2;
  r.prescale = 0.25;
  r.postscale = -1.5;
  r.device = Device::cuda(1);
  r.process_set = 7;
  r.group = "grad-bucket-0";
  r.group_size = 4;
  r.splits = {1, 0, 5, 2};
  r.refused = "allreduce 'x': bad on this rank";
  return r;
}

Response full_response() {
  Response r;
  r.op = OpType::kAllgather;
  r.names = {"a", "bb", ""};
  r.dtype = DataType::kInt64;
  r.reduce_op = ReduceOp::kProduct;
  r.root = 5;
  r.prescale = 2.0;
  r.postscale = 1.0 / 3.0;
  r.device = Device::cuda(3);
  r.process_set = 9;
  r.numels = {10, 20, 0};
  r.rank_rows = {1, 2, 3, 4};
  r.error = "allreduce 'a': dtype float32 on rank 0 but int32 on rank 1";
  return r;
}

void require_same(const Request& a, const Request& b) {
  REQUIRE(a.rank == b.rank);
  REQUIRE(a.op == b.op);
  REQUIRE(a.name == b.name);
  REQUIRE(a.dtype == b.dtype);
  REQUIRE(a.shape == b.shape);
  REQUIRE(a.reduce_op == b.reduce_op);
  REQUIRE(a.root == b.root);
  REQUIRE(a.prescale == b.prescale);
  REQUIRE(a.postscale == b.postscale);
  REQUIRE(a.device == b.device);
  REQUIRE(a.process_set == b.process_set);
  REQUIRE(a.group == b.group);
  REQUIRE(a.group_size == b.group_size);
  REQUIRE(a.splits == b.splits);
  REQUIRE(a.refused == b.refused);
}

void require_same(const Response& a, const Response& b) {
  REQUIRE(a.op == b.op);
  REQUIRE(a.names == b.names);
  REQUIRE(a.dtype == b.dtype);
  REQUIRE(a.reduce_op == b.reduce_op);
  REQUIRE(a.root == b.root);
  REQUIRE(a.prescale == b.prescale);
  REQUIRE(a.postscale == b.postscale);
  REQUIRE(a.device == b.device);
  REQUIRE(a.process_set == b.process_set);
  REQUIRE(a.numels == b.numels);
  REQUIRE(a.rank_rows == b.rank_rows);
  REQUIRE(a.error == b.error);
}

}  // namespace

TEST_CASE("request list round trips every field", "[unit]") {
  RequestList l;
  l.shutdown = true;
  l.error = "rank 3: executing allreduce 'w' threw: bad_alloc";
  l.notices = {"rank 3 refused its call locally (allreduce '@w': reserved)", ""};
  l.requests.push_back(full_request());
  Request plain;  // all defaults, empty name, no group, no splits
  l.requests.push_back(plain);
  auto bytes = serialize(l);
  auto parsed = parse_request_list(bytes.data(), bytes.size());
  REQUIRE(parsed.ok());
  REQUIRE(parsed.value().shutdown);
  REQUIRE(parsed.value().error == l.error);
  REQUIRE(parsed.value().notices == l.notices);
  REQUIRE(parsed.value().requests.size() == 2);
  require_same(parsed.value().requests[0], full_request());
  require_same(parsed.value().requests[1], plain);
  REQUIRE(parsed.value().requests[0].same_params(full_request()));
}

TEST_CASE("empty request list round trips without the shutdown flag", "[unit]") {
  auto bytes = serialize(RequestList{});
  auto parsed = parse_request_list(bytes.data(), bytes.size());
  REQUIRE(parsed.ok());
  REQUIRE_FALSE(parsed.value().shutdown);
  REQUIRE(parsed.value().error.empty());
  REQUIRE(parsed.value().requests.empty());
}

TEST_CASE("response list round trips every field, shutdown ranks and errors", "[unit]") {
  ResponseList l;
  l.shutdown_ranks = {0, 3, 17};
  l.error = "hvd stopped on every rank: rank 3: ...";
  l.shutdown_note = "rank 0 refused its call: alltoall 'x': splits";
  l.responses.push_back(full_response());
  Response ok;
  ok.names = {"w"};
  ok.numels = {12};
  l.responses.push_back(ok);
  auto bytes = serialize(l);
  auto parsed = parse_response_list(bytes.data(), bytes.size());
  REQUIRE(parsed.ok());
  REQUIRE(parsed.value().shutdown_ranks == std::vector<int32_t>{0, 3, 17});
  REQUIRE(parsed.value().error == l.error);
  REQUIRE(parsed.value().shutdown_note == l.shutdown_note);
  REQUIRE(parsed.value().responses.size() == 2);
  require_same(parsed.value().responses[0], full_response());
  REQUIRE(parsed.value().responses[0].is_error());
  require_same(parsed.value().responses[1], ok);
  REQUIRE_FALSE(parsed.value().responses[1].is_error());
}

TEST_CASE("every truncation of a request list is rejected", "[unit]") {
  RequestList l;
  l.requests = {full_request(), full_request()};
  auto bytes = serialize(l);
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n << " of " << bytes.size() << " bytes");
    auto parsed = parse_request_list(bytes.data(), n);
    REQUIRE_FALSE(parsed.ok());
    REQUIRE(parsed.status().code() == StatusCode::kInternal);
  }
}

TEST_CASE("every truncation of a response list is rejected", "[unit]") {
  ResponseList l;
  l.shutdown_ranks = {1};
  l.responses = {full_response(), full_response()};
  auto bytes = serialize(l);
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n << " of " << bytes.size() << " bytes");
    REQUIRE_FALSE(parse_response_list(bytes.data(), n).ok());
  }
}

TEST_CASE("trailing bytes after a list are rejected", "[unit]") {
  auto req = serialize(RequestList{{full_request()}, false, "", {}});
  req.push_back(0);
  REQUIRE_FALSE(parse_request_list(req.data(), req.size()).ok());
  auto resp = serialize(ResponseList{{full_response()}, {}, "", ""});
  resp.push_back(0);
  REQUIRE_FALSE(parse_response_list(resp.data(), resp.size()).ok());
}

TEST_CASE("a request list is not accepted as a response list and vice versa", "[unit]") {
  auto req = serialize(RequestList{});
  auto resp = serialize(ResponseList{});
  REQUIRE_FALSE(parse_response_list(req.data(), req.size()).ok());
  REQUIRE_FALSE(parse_request_list(resp.data(), resp.size()).ok());
}

TEST_CASE("corrupted enum bytes in a request are rejected", "[unit]") {
  // Layout: magic(4) shutdown(1) count(4) | rank(4) op(1) name_len(4) name dtype(1) ... | error
  Request r;
  r.name = "x";
  auto good = serialize(RequestList{{r}, false, "", {}});
  REQUIRE(parse_request_list(good.data(), good.size()).ok());
  const size_t op_at = 4 + 1 + 4 + 4;
  const size_t dtype_at = op_at + 1 + 4 + 1;

  auto bad_magic = good;
  bad_magic[0] ^= 0xff;
  REQUIRE_FALSE(parse_request_list(bad_magic.data(), bad_magic.size()).ok());

  auto bad_op = good;
  bad_op[op_at] = static_cast<uint8_t>(OpType::kRemoveProcessSet) + 1;
  REQUIRE_FALSE(parse_request_list(bad_op.data(), bad_op.size()).ok());

  auto bad_dtype = good;
  REQUIRE(bad_dtype[dtype_at] == static_cast<uint8_t>(DataType::kFloat32));
  bad_dtype[dtype_at] = static_cast<uint8_t>(kNumDataTypes);
  REQUIRE_FALSE(parse_request_list(bad_dtype.data(), bad_dtype.size()).ok());

  auto bad_count = good;  // claims two requests, holds one
  bad_count[5] = 2;
  REQUIRE_FALSE(parse_request_list(bad_count.data(), bad_count.size()).ok());
}

TEST_CASE("a huge length prefix in a response list is rejected, not allocated", "[unit]") {
  Response r;
  r.names = {"x"};
  auto good = serialize(ResponseList{{r}, {}, "", ""});
  // magic(4) nshut(4) count(4) op(1) nnames(4) name_len(4)
  auto bad = good;
  const uint32_t huge = 0xfffffff0u;
  std::memcpy(bad.data() + 4 + 4 + 4 + 1 + 4, &huge, 4);
  REQUIRE_FALSE(parse_response_list(bad.data(), bad.size()).ok());
  auto bad_shut = good;
  std::memcpy(bad_shut.data() + 4, &huge, 4);
  REQUIRE_FALSE(parse_response_list(bad_shut.data(), bad_shut.size()).ok());
}

TEST_CASE("same_params ignores the rank and compares everything else", "[unit]") {
  Request a = full_request();
  Request b = a;
  b.rank = 0;
  REQUIRE(a.same_params(b));
  b.splits = {1, 0, 5, 3};
  REQUIRE_FALSE(a.same_params(b));
  b = a;
  b.group_size = 5;
  REQUIRE_FALSE(a.same_params(b));
  b = a;
  b.device = Device::cuda(0);
  REQUIRE_FALSE(a.same_params(b));
  b = a;
  b.postscale = 1.0;
  REQUIRE_FALSE(a.same_params(b));
}

TEST_CASE("same_params compares each parameter of the one field list and nothing else", "[unit]") {
  // full_request() sets every field away from its default: resetting one field at a time must
  // change same_params exactly for the fields the list calls parameters.
  const Request a = full_request();
  const Request fresh;
  size_t parameters = 0;
  size_t fields = 0;
  for_each_request_field([&](auto m, FieldRole role, auto) {
    ++fields;
    Request b = a;
    b.*m = fresh.*m;
    INFO("field " << fields << " of the list");
    REQUIRE_FALSE(a.*m == b.*m);  // full_request() must set every field
    if (role == FieldRole::kParameter) {
      ++parameters;
      CHECK_FALSE(a.same_params(b));
    } else {
      CHECK(a.same_params(b));
    }
    return true;
  });
  CHECK(fields == request_field_count());
  CHECK(parameters == fields - 2);  // all but rank and refused
}

TEST_CASE("every Request field survives the wire, and response_of copies its counterparts",
          "[unit]") {
  const Request a = full_request();
  auto bytes = serialize(RequestList{{a}, false, "", {}});
  auto back = parse_request_list(bytes.data(), bytes.size());
  REQUIRE(back.ok());
  REQUIRE(back.value().requests.size() == 1);
  const Request& b = back.value().requests[0];
  const Response resp = response_of(a);
  size_t copied = 0;
  for_each_request_field([&](auto m, FieldRole, auto to) {
    CHECK(a.*m == b.*m);
    if constexpr (!std::is_same_v<decltype(to), std::nullptr_t>) {
      CHECK(resp.*to == a.*m);
      ++copied;
    }
    return true;
  });
  CHECK(copied == 8);  // op, dtype, reduce_op, root, prescale, postscale, device, process set
  CHECK(resp.names == std::vector<std::string>{a.name});
}
