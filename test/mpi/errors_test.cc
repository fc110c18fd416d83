// SPDX-License-Identifier: Apache-2.0
// Bad input: clear errors naming tensor, ranks and values; the runtime keeps serving afterwards.
#include <chrono>
#include <thread>

#include "hvd/core/validation.h"
#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;

namespace {

using hvd_test::wait_error;

// "rank 0" / "ranks 1-3" for the ranks other than 0.
std::string others() {
  int n = hvd::size();
  return n == 2 ? "rank 1" : "ranks 1-" + std::to_string(n - 1);
}

void check_still_serving(const std::string& name) {
  std::vector<float> v(5, 1.0f);
  hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {5}), name, ReduceOp::kSum);
  for (float x : v) REQUIRE(x == static_cast<float>(hvd::size()));
}

}  // namespace

TEST_CASE("mismatched shapes fail on every rank naming tensor, ranks and shapes",
          "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);  // [multirank]: np = 1 runs exclude it
  const int r = hvd::rank();
  for (int rep = 0; rep < 2; ++rep) {  // also after the name was cached with another shape
    std::vector<float> v(8, 1.0f);
    int64_t len = r == 0 ? 4 : 5;
    if (rep == 1) {  // first agree on [4] so the name is cached, then disagree
      hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {4}), "mm.shape");
    }
    auto h = hvd::allreduce_async(hvd::TensorView(v.data(), DataType::kFloat32, {len}), "mm.shape");
    std::string err = wait_error(h);
    REQUIRE(err == "allreduce 'mm.shape': shape [4] on rank 0 but [5] on " + others());
  }
  check_still_serving("after.shape");
}

TEST_CASE("mismatched dtype, reduce op, scale factors and root are reported", "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);  // [multirank]: np = 1 runs exclude it
  const int r = hvd::rank();
  std::vector<int32_t> buf(4, 1);
  hvd::TensorView v(buf.data(), r == 0 ? DataType::kFloat32 : DataType::kInt32, {4});
  REQUIRE(wait_error(hvd::allreduce_async(v, "mm.dtype")) ==
          "allreduce 'mm.dtype': dtype float32 on rank 0 but int32 on " + others());

  hvd::TensorView f(buf.data(), DataType::kFloat32, {4});
  REQUIRE(wait_error(hvd::allreduce_async(f, "mm.op", r == 0 ? ReduceOp::kSum : ReduceOp::kMax)) ==
          "allreduce 'mm.op': reduce op Sum on rank 0 but Max on " + others());
  REQUIRE(wait_error(hvd::allreduce_async(f, "mm.pre", ReduceOp::kSum, r == 0 ? 1.0 : 2.0)) ==
          "allreduce 'mm.pre': prescale factor 1 on rank 0 but 2 on " + others());
  REQUIRE(wait_error(hvd::allreduce_async(f, "mm.post", ReduceOp::kSum, 1.0, r == 0 ? 0.5 : 1.0)) ==
          "allreduce 'mm.post': postscale factor 0.5 on rank 0 but 1 on " + others());
  REQUIRE(wait_error(hvd::broadcast_async(f, r == 0 ? 0 : 1, "mm.root")) ==
          "broadcast 'mm.root': root rank 0 on rank 0 but 1 on " + others());
  check_still_serving("after.mismatch");
}

TEST_CASE("a name submitted twice while in flight is rejected; the first completes", "[mpi]") {
  // Rank 0 submits 'dup' twice; the others submit it once, late, so on rank 0 it is still
  // in flight at the second submission (at np = 1 it may already be done).
  std::vector<float> a(3, 2.0f), b(3, 7.0f);
  hvd::barrier();
  if (hvd::rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto h = hvd::allreduce_async(hvd::TensorView(a.data(), DataType::kFloat32, {3}), "dup",
                                ReduceOp::kSum);
  if (hvd::rank() == 0 && hvd::size() > 1) {
    REQUIRE_THROWS_WITH(
        hvd::allreduce_async(hvd::TensorView(b.data(), DataType::kFloat32, {3}), "dup"),
        hvd::test::Contains("allreduce 'dup': a collective named 'dup' is already in "
                            "flight on rank 0"));
  }
  h.wait();
  for (float x : a) REQUIRE(x == 2.0f * hvd::size());
  for (float x : b) REQUIRE(x == 7.0f);
}

TEST_CASE("local bad input throws at once with a clear message", "[mpi]") {
  const int n = hvd::size();
  std::vector<float> v(4, 1.0f);
  hvd::TensorView ok(v.data(), DataType::kFloat32, {4});
  REQUIRE_THROWS_WITH(hvd::broadcast_async(ok, n, "bad.root"),
                      "broadcast 'bad.root': root rank " + std::to_string(n) +
                          " is out of range (process set has " + std::to_string(n) + " ranks: 0-" +
                          std::to_string(n - 1) + ")");
  REQUIRE_THROWS_WITH(hvd::broadcast_async(ok, -1, "bad.root2"),
                      hvd::test::Contains("root rank -1 is out of range"));
  REQUIRE_THROWS_WITH(
      hvd::allreduce_async(hvd::TensorView(nullptr, DataType::kFloat32, {2, 3}), "bad.null"),
      "allreduce 'bad.null': input data is null but shape [2, 3] has 6 elements");
  REQUIRE_THROWS_WITH(
      hvd::allreduce_async(hvd::TensorView(v.data(), DataType::kBool, {4}), "bad.bool"),
      hvd::test::Contains("dtype bool cannot be reduced"));
  std::vector<float> out(5);
  REQUIRE_THROWS_WITH(
      hvd::allreduce_async(ok, hvd::TensorView(out.data(), DataType::kFloat32, {5}), "bad.out"),
      hvd::test::Contains("does not match input"));
  // A zero-element tensor with null data is fine.
  hvd::allreduce(hvd::TensorView(nullptr, DataType::kFloat32, {0}), "empty");
  check_still_serving("after.local");
}

TEST_CASE("a grouped allreduce with one mismatched member fails as a whole", "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);  // [multirank]: np = 1 runs exclude it
  const int r = hvd::rank();
  std::vector<float> a(4, 1.0f), b(6, 1.0f);
  std::vector<hvd::TensorView> views = {
      hvd::TensorView(a.data(), DataType::kFloat32, {4}),
      hvd::TensorView(b.data(), DataType::kFloat32, {r == 0 ? 6 : 5})};
  std::string err = wait_error(hvd::grouped_allreduce_async(views, "g.bad", ReduceOp::kSum));
  REQUIRE(err ==
          "grouped allreduce 'g.bad' (member 1): shape [6] on rank 0 but [5] on " + others());
  check_still_serving("after.group");
}

TEST_CASE("rank_ranges formats rank lists compactly", "[mpi]") {
  REQUIRE(hvd::core::rank_ranges({3, 0, 1, 2, 7}) == "0-3,7");
}
