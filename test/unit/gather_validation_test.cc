// SPDX-License-Identifier: Apache-2.0
// Validation of allgather, alltoall, reducescatter, join participation and process-set rank
// lists: agreed responses and error messages naming tensor, ranks and values.
#include "hvd/core/validation.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;
using hvd::test::Contains;

namespace {

Request req(int rank, OpType op, std::vector<int64_t> shape) {
  Request r;
  r.rank = rank;
  r.op = op;
  r.name = "emb";
  r.dtype = DataType::kFloat32;
  r.shape = std::move(shape);
  return r;
}

Request add_set(int rank, std::vector<int64_t> ranks) {
  Request r = req(rank, OpType::kAddProcessSet, {0});
  r.name = "process_set.add.0";
  r.dtype = DataType::kUInt8;
  r.splits = std::move(ranks);
  return r;
}

}  // namespace

TEST_CASE("allgather agrees on ragged first dimensions and records each rank's rows", "[unit]") {
  std::vector<Request> v = {req(0, OpType::kAllgather, {3, 4, 2}),
                            req(1, OpType::kAllgather, {0, 4, 2}),
                            req(2, OpType::kAllgather, {5, 4, 2})};
  Response r = build_response(v);
  REQUIRE_FALSE(r.is_error());
  REQUIRE(r.rank_rows == std::vector<int64_t>{3, 0, 5});
  REQUIRE(r.numels == std::vector<int64_t>{8});  // elements of one row
}

TEST_CASE("allgather trailing dimension mismatch names the ranks and shapes", "[unit]") {
  std::vector<Request> v = {req(0, OpType::kAllgather, {3, 4}), req(1, OpType::kAllgather, {1, 4}),
                            req(2, OpType::kAllgather, {2, 5}), req(3, OpType::kAllgather, {2})};
  Response r = build_response(v);
  REQUIRE(r.error ==
          "allgather 'emb': dimensions after the first must match on every rank, but ranks 0-1 "
          "have shapes [3, 4], [1, 4], rank 2 has shape [2, 5] and rank 3 has shape [2]");
  v = {req(0, OpType::kAllgather, {3, 4}), req(1, OpType::kAllgather, {3, 4})};
  v[1].dtype = DataType::kInt32;
  REQUIRE(build_response(v).error ==
          "allgather 'emb': dtype float32 on rank 0 but int32 on rank 1");
}

TEST_CASE("allgather and alltoall accept bool; reductions do not", "[unit]") {
  Request r = req(0, OpType::kAllgather, {2});
  r.dtype = DataType::kBool;
  REQUIRE(validate_local(r, 2).ok());
  r.op = OpType::kAlltoall;
  REQUIRE(validate_local(r, 2).ok());
  r.op = OpType::kReducescatter;
  REQUIRE(validate_local(r, 2).message() ==
          "reducescatter 'emb': dtype bool cannot be reduced (use uint8)");
}

TEST_CASE("alltoall splits must have one entry per rank and sum to the first dimension", "[unit]") {
  Request r = req(0, OpType::kAlltoall, {6, 2});
  r.splits = {1, 2, 3};
  REQUIRE(validate_local(r, 3).ok());
  r.splits = {1, 2, 2};
  REQUIRE(validate_local(r, 3).message() ==
          "alltoall 'emb': splits [1, 2, 2] sum to 5 but the first dimension is 6");
  r.splits = {3, 3};
  REQUIRE(validate_local(r, 3).message() ==
          "alltoall 'emb': 2 splits [3, 3] given but the process set has 3 ranks (one split per "
          "rank)");
  r.splits = {7, -1, 0};
  REQUIRE(validate_local(r, 3).message() == "alltoall 'emb': negative split in [7, -1, 0]");
  r.splits = {};
  REQUIRE(validate_local(r, 3).ok());  // 6 rows over 3 ranks: 2 each
  REQUIRE(validate_local(r, 4).message() ==
          "alltoall 'emb': first dimension 6 cannot be split evenly over 4 ranks; pass splits "
          "(rows for each rank)");
  r.splits = {0, 6, 0, 0};
  REQUIRE(validate_local(r, 4).ok());  // zero splits are fine
}

TEST_CASE("alltoall response holds the send matrix, from splits or the equal split", "[unit]") {
  std::vector<Request> v = {req(0, OpType::kAlltoall, {3, 2}), req(1, OpType::kAlltoall, {4, 2})};
  v[0].splits = {1, 2};
  // rank 1: no splits, 4 rows over 2 ranks.
  Response r = build_response(v);
  REQUIRE_FALSE(r.is_error());
  REQUIRE(r.rank_rows == std::vector<int64_t>{1, 2, 2, 2});
  REQUIRE(r.numels == std::vector<int64_t>{2});
  v[1].shape = {4, 3};
  REQUIRE_THAT(build_response(v).error,
               Contains("alltoall 'emb': dimensions after the first must match on every rank, "
                        "but rank 0 has shape [3, 2] and rank 1 has shape [4, 3]"));
}

TEST_CASE("reducescatter needs the same shape everywhere; Sum and Average only", "[unit]") {
  std::vector<Request> v = {req(0, OpType::kReducescatter, {5, 3}),
                            req(1, OpType::kReducescatter, {5, 3}),
                            req(2, OpType::kReducescatter, {4, 3})};
  REQUIRE(build_response(v).error ==
          "reducescatter 'emb': shape [5, 3] on ranks 0-1 but [4, 3] on rank 2");
  v[2].shape = {5, 3};
  Response r = build_response(v);
  REQUIRE_FALSE(r.is_error());
  REQUIRE(r.numels == std::vector<int64_t>{3});
  Request q = req(0, OpType::kReducescatter, {5});
  q.reduce_op = ReduceOp::kProduct;
  REQUIRE(validate_local(q, 2).message() ==
          "reducescatter 'emb': reduce op Product is not supported (use Sum or Average)");
  q.reduce_op = ReduceOp::kAverage;
  q.shape = {};
  REQUIRE(validate_local(q, 2).message() ==
          "reducescatter 'emb': needs a tensor with at least one dimension (got a scalar)");
}

TEST_CASE("reducescatter rows: the first R%N ranks get one extra row, slices tile the rows",
          "[unit]") {
  // Worked by hand: 7 rows over 3 ranks -> 3, 2, 2 starting at 0, 3, 5; 2 over 3 -> 1, 1, 0.
  REQUIRE(ops::reducescatter_rows(7, 3, 0) == 3);
  REQUIRE(ops::reducescatter_rows(7, 3, 2) == 2);
  REQUIRE(ops::reducescatter_start(7, 3, 2) == 5);
  REQUIRE(ops::reducescatter_rows(2, 3, 2) == 0);
  REQUIRE(ops::reducescatter_start(2, 3, 2) == 2);
  for (int64_t rows = 0; rows < 40; ++rows) {
    for (int n = 1; n <= 6; ++n) {
      int64_t next = 0;
      for (int r = 0; r < n; ++r) {
        INFO("rows " << rows << " n " << n << " rank " << r);
        REQUIRE(ops::reducescatter_start(rows, n, r) == next);
        const int64_t mine = ops::reducescatter_rows(rows, n, r);
        REQUIRE((mine == rows / n || mine == rows / n + 1));
        REQUIRE((mine == rows / n + 1) == (r < rows % n));
        next += mine;
      }
      REQUIRE(next == rows);
    }
  }
}

TEST_CASE("joined ranks take part in allreduce and allgather, not alltoall or reducescatter",
          "[unit]") {
  std::vector<Request> v = {req(0, OpType::kAllreduce, {4}), req(2, OpType::kAllreduce, {4})};
  Response r = build_response(v, 4, {1, 3});
  REQUIRE_FALSE(r.is_error());
  REQUIRE(r.joined == std::vector<int64_t>{1, 3});
  v = {req(0, OpType::kAllgather, {2, 2}), req(1, OpType::kAllgather, {1, 2})};
  r = build_response(v, 3, {2});
  REQUIRE(r.rank_rows == std::vector<int64_t>{2, 1, 0});  // the joined rank has no rows
  v = {req(0, OpType::kAlltoall, {2})};
  REQUIRE(build_response(v, 2, {1}).error ==
          "alltoall 'emb': cannot run while rank 1 has joined (after hvd::join() a rank takes "
          "part only in allreduce, allgather, broadcast and barrier); call it on every rank "
          "before join()");
  v = {req(0, OpType::kReducescatter, {2})};
  REQUIRE_THAT(build_response(v, 3, {1, 2}).error,
               Contains("reducescatter 'emb': cannot run while ranks 1-2 have joined"));
  v = {req(0, OpType::kBroadcast, {2})};
  v[0].root = 1;
  REQUIRE(build_response(v, 2, {1}).error ==
          "broadcast 'emb': root rank 1 has joined and has no tensor to send");
}

TEST_CASE("process set rank lists: duplicates, out of range, empty, differing", "[unit]") {
  Response ok = build_response({add_set(0, {2, 0}), add_set(1, {2, 0}), add_set(2, {2, 0})});
  REQUIRE_FALSE(ok.is_error());
  REQUIRE(ok.rank_rows == std::vector<int64_t>{2, 0});  // the order given is kept
  REQUIRE(build_response({add_set(0, {1, 1}), add_set(1, {1, 1})}).error ==
          "add_process_set([1, 1]): rank 1 is listed more than once");
  REQUIRE(build_response({add_set(0, {0, 2}), add_set(1, {0, 2})}).error ==
          "add_process_set([0, 2]): rank 2 is out of range (hvd has 2 ranks: 0-1)");
  REQUIRE(build_response({add_set(0, {-1}), add_set(1, {-1})}).error ==
          "add_process_set([-1]): rank -1 is out of range (hvd has 2 ranks: 0-1)");
  REQUIRE(build_response({add_set(0, {}), add_set(1, {})}).error ==
          "add_process_set([]): a process set needs at least one rank");
  REQUIRE(build_response({add_set(0, {0}), add_set(1, {0, 1}), add_set(2, {0, 1})}).error ==
          "add_process_set 'process_set.add.0': rank list [0] on rank 0 but [0, 1] on ranks 1-2");
}

TEST_CASE("removing a process set fails naming the ranks with work in flight", "[unit]") {
  auto rm = [](int rank, bool busy) {
    Request r = req(rank, OpType::kRemoveProcessSet, {0});
    r.name = "process_set.remove.1";
    r.root = 4;
    r.splits = {busy ? 1 : 0};
    return r;
  };
  REQUIRE_FALSE(build_response({rm(0, false), rm(1, false)}).is_error());
  REQUIRE(build_response({rm(0, true), rm(1, false), rm(2, true)}).error ==
          "remove_process_set(4): collectives are still in flight on it on ranks 0,2; wait for "
          "them before removing the set");
}
