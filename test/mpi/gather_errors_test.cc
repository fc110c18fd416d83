// SPDX-License-Identifier: Apache-2.0
// allgather / alltoall / reducescatter errors: messages name tensor, ranks and values.
#include <stdexcept>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::test::Contains;

namespace {

using hvd_test::error_of;

}  // namespace

TEST_CASE("allgather with differing trailing dimensions names ranks and shapes",
          "[mpi][multirank]") {
  const int r = hvd::rank(), n = hvd::size();
  REQUIRE(n >= 2);  // [multirank]: np = 1 runs exclude it
  std::vector<float> v(8, 1.0f);
  const int64_t cols = r == 0 ? 3 : 4;
  std::string err = error_of([&] {
    hvd::allgather(hvd::TensorView(v.data(), DataType::kFloat32, {1, cols}), "ge.trail");
  });
  std::string others = n == 2 ? "rank 1 has shape [1, 4]"
                              : "ranks 1-" + std::to_string(n - 1) + " have shapes [1, 4]";
  REQUIRE_THAT(err, Contains("allgather 'ge.trail': dimensions after the first must match on "
                             "every rank, but rank 0 has shape [1, 3] and " +
                             others));
  // Still serving, and the same name works once shapes agree.
  hvd::Handle h = hvd::allgather(hvd::TensorView(v.data(), DataType::kFloat32, {2, 4}), "ge.trail");
  REQUIRE(h.output().shape == std::vector<int64_t>{2 * n, 4});
}

TEST_CASE("alltoall splits that do not fit are rejected with the values", "[mpi]") {
  const int n = hvd::size();
  std::vector<float> v(16, 1.0f);
  hvd::TensorView t(v.data(), DataType::kFloat32, {4, 2});
  std::vector<int64_t> bad_sum(static_cast<size_t>(n), 1);
  bad_sum[0] = 5;
  std::string err = error_of([&] { hvd::alltoall(t, bad_sum, "ge.sum"); });
  REQUIRE_THAT(err, Contains("alltoall 'ge.sum': splits " + hvd::shape_str(bad_sum) + " sum to " +
                             std::to_string(5 + n - 1) + " but the first dimension is 4"));
  err = error_of(
      [&] { hvd::alltoall(t, std::vector<int64_t>(static_cast<size_t>(n + 1), 0), "ge.len"); });
  REQUIRE_THAT(err, Contains("alltoall 'ge.len': " + std::to_string(n + 1) + " splits"));
  REQUIRE_THAT(err, Contains("but the process set has " + std::to_string(n) + " ranks"));
  if (n > 1) {
    hvd::TensorView odd(v.data(), DataType::kFloat32, {static_cast<int64_t>(n + 1)});
    err = error_of([&] { hvd::alltoall(odd, {}, "ge.div"); });
    REQUIRE_THAT(err, Contains("alltoall 'ge.div': first dimension " + std::to_string(n + 1) +
                               " cannot be split evenly over " + std::to_string(n) + " ranks"));
  }
}

TEST_CASE("reducescatter rejects unsupported ops, bool and scalars", "[mpi]") {
  std::vector<float> v(4, 1.0f);
  std::string err = error_of([&] {
    hvd::reducescatter(hvd::TensorView(v.data(), DataType::kFloat32, {4}), "ge.min",
                       hvd::ReduceOp::kMin);
  });
  REQUIRE_THAT(err, Contains("reducescatter 'ge.min': reduce op Min is not supported"));
  err = error_of(
      [&] { hvd::reducescatter(hvd::TensorView(v.data(), DataType::kBool, {4}), "ge.bool"); });
  REQUIRE_THAT(err, Contains("reducescatter 'ge.bool': dtype bool cannot be reduced"));
  err = error_of(
      [&] { hvd::allgather(hvd::TensorView(v.data(), DataType::kFloat32, {}), "ge.scalar"); });
  REQUIRE_THAT(err, Contains("allgather 'ge.scalar': needs a tensor with at least one dimension"));
}

TEST_CASE("an output allocator that fails on one rank fails that rank only; no rank hangs",
          "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<int32_t> in(6, r + 1);
  hvd::TensorView t(in.data(), DataType::kInt32, {3, 2});
  std::vector<int32_t> out;
  auto alloc = [&](const std::vector<int64_t>& shape) -> void* {
    out.resize(static_cast<size_t>(hvd::shape_numel(shape)));
    return out.data();
  };
  // Rank 0's allocator returns null for allgather and throws for alltoall and reducescatter;
  // the collectives run on every rank (rank 0 takes part with hvd's own memory).
  auto null_alloc = [](const std::vector<int64_t>&) -> void* { return nullptr; };
  auto throwing = [](const std::vector<int64_t>&) -> void* {
    throw std::runtime_error("out of memory in the framework");
  };
  auto check = [&](hvd::Handle h, const std::string& what, const std::string& msg) {
    hvd::Status s = h.wait_status();
    if (r == 0) {
      INFO(s.to_string());
      REQUIRE_FALSE(s.ok());
      REQUIRE_THAT(s.message(), Contains(what) && Contains(msg));
    } else {
      REQUIRE(s.ok());
    }
  };
  check(hvd::allgather_async(t, "ge.alloc.ag", {}, r == 0 ? hvd::Allocator(null_alloc) : alloc),
        "allgather 'ge.alloc.ag'", "returned null");
  if (r != 0) {
    REQUIRE(out.size() == static_cast<size_t>(6 * n));
    for (int q = 0; q < n; ++q) REQUIRE(out[static_cast<size_t>(6 * q)] == q + 1);
  }
  std::vector<int64_t> splits(static_cast<size_t>(n), 0);
  splits[static_cast<size_t>(n - 1)] = 3;  // every rank's rows go to the last rank
  check(
      hvd::alltoall_async(t, splits, "ge.alloc.a2a", {}, r == 0 ? hvd::Allocator(throwing) : alloc),
      "alltoall 'ge.alloc.a2a'", "out of memory in the framework");
  if (r == n - 1 && r != 0) {
    REQUIRE(out.size() == static_cast<size_t>(6 * n));
    for (int q = 0; q < n; ++q) REQUIRE(out[static_cast<size_t>(6 * q + 5)] == q + 1);
  }
  hvd::TensorView rows(in.data(), DataType::kInt32, {static_cast<int64_t>(n), 1});
  check(hvd::reducescatter_async(rows, "ge.alloc.rs", hvd::ReduceOp::kSum, 1.0, 1.0, {},
                                 r == 0 ? hvd::Allocator(throwing) : alloc),
        "reducescatter 'ge.alloc.rs'", "out of memory in the framework");
  if (r != 0) REQUIRE(out == std::vector<int32_t>{n * (n + 1) / 2});
  // Every rank goes on, the same names included.
  hvd::Handle h = hvd::allgather(t, "ge.alloc.ag");
  REQUIRE(h.output().shape == std::vector<int64_t>{3 * n, 2});
}
