// SPDX-License-Identifier: Apache-2.0
// Process sets: disjoint sets run different collectives at once; errors name set and ranks.
#include <chrono>
#include <thread>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd::test::Contains;

namespace {

using hvd_test::error_of;

// Even and odd global ranks (np = 1: the odd set is empty, so {0} twice is not used).
std::vector<int> evens() {
  std::vector<int> v;
  for (int i = 0; i < hvd::size(); i += 2) v.push_back(i);
  return v;
}
std::vector<int> odds() {
  std::vector<int> v;
  for (int i = 1; i < hvd::size(); i += 2) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("two disjoint process sets run different collectives at the same time",
          "[mpi][multirank]") {
  const int r = hvd::rank(), n = hvd::size();
  REQUIRE(n >= 2);  // [multirank]: np = 1 runs exclude it
  hvd::ProcessSet a = hvd::add_process_set(evens());
  hvd::ProcessSet b = hvd::add_process_set(odds());
  REQUIRE(a.id() != b.id());
  REQUIRE(a.ranks() == evens());
  REQUIRE(hvd::process_sets().size() >= 3);
  const bool in_a = r % 2 == 0;
  hvd::ProcessSet mine = in_a ? a : b;
  REQUIRE(mine.included());
  REQUIRE(mine.rank() == r / 2);
  const int ms = mine.size();
  for (int it = 0; it < 20; ++it) {
    if (in_a) {  // set A: allreduce of global ranks
      std::vector<int32_t> v(7, r);
      hvd::allreduce(hvd::TensorView(v.data(), DataType::kInt32, {7}), "ps.ar", ReduceOp::kSum, 1.0,
                     1.0, a);
      int32_t expect = 0;
      for (int q : evens()) expect += q;
      for (int32_t x : v) REQUIRE(x == expect);
    } else {  // set B: allgather of global ranks, one row each
      std::vector<float> v(2, static_cast<float>(r));
      hvd::Handle h =
          hvd::allgather(hvd::TensorView(v.data(), DataType::kFloat32, {1, 2}), "ps.ag", b);
      REQUIRE(h.output().shape == std::vector<int64_t>{ms, 2});
      const auto* p = static_cast<const float*>(h.output().data);
      for (int i = 0; i < ms; ++i)
        REQUIRE(p[2 * i] == static_cast<float>(odds()[static_cast<size_t>(i)]));
    }
  }
  // Broadcast roots are global ranks (as in Horovod): B's first member is global rank 1.
  std::vector<int64_t> bc(2, r);
  hvd::broadcast(hvd::TensorView(bc.data(), DataType::kInt64, {2}), in_a ? 0 : 1, "ps.bc", mine);
  REQUIRE(bc[0] == (in_a ? 0 : 1));

  // One set stalls (its rank 1 has not submitted) while the other set and the global set work.
  std::vector<float> stall(3, 1.0f);
  hvd::Handle hs;
  if (in_a && mine.rank() == 0 && a.size() > 1) {
    hs = hvd::allreduce_async(hvd::TensorView(stall.data(), DataType::kFloat32, {3}), "ps.stall",
                              ReduceOp::kSum, 1.0, 1.0, a);
  }
  if (!in_a) {
    for (int it = 0; it < 5; ++it) {
      std::vector<float> v(2, 1.0f);
      hvd::allgather(hvd::TensorView(v.data(), DataType::kFloat32, {1, 2}), "ps.during", b);
    }
  }
  std::vector<float> g(2, 1.0f);
  hvd::allreduce(hvd::TensorView(g.data(), DataType::kFloat32, {2}), "ps.global", ReduceOp::kSum);
  REQUIRE(g[0] == static_cast<float>(n));
  if (hs.valid()) {
    INFO((hs.poll() ? hs.wait_status().to_string() : std::string("pending")));
    REQUIRE_FALSE(hs.poll());  // A is still waiting for its other members
  }
  // A's other members submit only after that check: a second global collective needs rank 0,
  // which reaches it only after checking (a fast peer could otherwise finish "ps.stall" first).
  std::vector<float> g2(1, 1.0f);
  hvd::allreduce(hvd::TensorView(g2.data(), DataType::kFloat32, {1}), "ps.checked", ReduceOp::kSum);
  if (in_a && mine.rank() != 0) {
    hvd::allreduce(hvd::TensorView(stall.data(), DataType::kFloat32, {3}), "ps.stall",
                   ReduceOp::kSum, 1.0, 1.0, a);
  }
  if (hs.valid()) hs.wait();
  if (in_a) REQUIRE(stall[0] == static_cast<float>(a.size()));

  // A collective on a set this rank is not a member of fails at once.
  hvd::ProcessSet other = in_a ? b : a;
  std::vector<float> x(1, 0.0f);
  std::string err = error_of([&] {
    hvd::allreduce(hvd::TensorView(x.data(), DataType::kFloat32, {1}), "ps.notmine", ReduceOp::kSum,
                   1.0, 1.0, other);
  });
  REQUIRE_THAT(err, Contains("allreduce 'ps.notmine': rank " + std::to_string(r) +
                             " is not a member of process set " + std::to_string(other.id())));

  hvd::remove_process_set(a);
  hvd::remove_process_set(b);
  err = error_of([&] {
    hvd::allreduce(hvd::TensorView(x.data(), DataType::kFloat32, {1}), "ps.gone", ReduceOp::kSum,
                   1.0, 1.0, a);
  });
  REQUIRE_THAT(err, Contains("there is no process set " + std::to_string(a.id())));
}

TEST_CASE("a broadcast on a process set takes its root as a global rank", "[mpi][multirank]") {
  // The set of every rank but 0: at np 4 ranks 1-3, whose last member is global rank 3 (set
  // rank 2); at np 2 rank 1 alone (global root 1, set rank 0).
  const int r = hvd::rank(), n = hvd::size();
  REQUIRE(n >= 2);
  std::vector<int> members;
  for (int i = 1; i < n; ++i) members.push_back(i);
  hvd::ProcessSet ps = hvd::add_process_set(members);
  if (ps.included()) {
    for (int root : {1, n - 1}) {
      std::vector<int32_t> v(3, r * 10);
      hvd::broadcast(hvd::TensorView(v.data(), DataType::kInt32, {3}), root, "ps.groot", ps);
      for (int32_t x : v) REQUIRE(x == root * 10);
    }
    // A root outside the set (global rank 0) fails on every member, naming it.
    std::vector<int32_t> v(3, r);
    const std::string err = hvd_test::error_of(
        [&] { hvd::broadcast(hvd::TensorView(v.data(), DataType::kInt32, {3}), 0, "ps.out", ps); });
    CHECK_THAT(err, Contains("root rank 0 is not a member of process set"));
    CHECK_THAT(err, Contains("'ps.out'"));
    // A root outside the set on one member only (the last): every member fails, naming it.
    if (ps.size() > 1) {
      const int bad_root = r == n - 1 ? 0 : 1;
      const std::string e2 = hvd_test::error_of([&] {
        hvd::broadcast(hvd::TensorView(v.data(), DataType::kInt32, {3}), bad_root, "ps.out1", ps);
      });
      CHECK_THAT(e2, Contains("root rank 0 is not a member"));
      if (r != n - 1) {
        CHECK_THAT(e2, Contains("refused on rank " + std::to_string(ps.size() - 1)));
      }
    }
    std::vector<int32_t> after(1, 1);
    hvd::allreduce(hvd::TensorView(after.data(), DataType::kInt32, {1}), "ps.groot.after",
                   ReduceOp::kSum, 1.0, 1.0, ps);
    REQUIRE(after[0] == ps.size());
  }
  hvd::barrier();
  hvd::remove_process_set(ps);
}

TEST_CASE("invalid or differing process set rank lists fail on every rank", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::string err = error_of([&] { hvd::add_process_set({0, 0}); });
  REQUIRE_THAT(err, Contains("rank 0 is listed more than once"));
  err = error_of([&] { hvd::add_process_set({0, n}); });
  REQUIRE_THAT(err, Contains("rank " + std::to_string(n) + " is out of range (hvd has " +
                             std::to_string(n) + " ranks"));
  if (n >= 2) {
    std::vector<int> list = r == 0 ? std::vector<int>{0} : std::vector<int>{0, 1};
    err = error_of([&] { hvd::add_process_set(list); });
    REQUIRE_THAT(err, Contains("rank list [0] on rank 0 but [0, 1] on rank"));
  }
  // Still serving.
  std::vector<float> v(2, 1.0f);
  hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {2}), "ps.after", ReduceOp::kSum);
  REQUIRE(v[0] == static_cast<float>(n));
}

TEST_CASE("removing a process set with work in flight fails", "[mpi][multirank]") {
  const int r = hvd::rank(), n = hvd::size();
  REQUIRE(n >= 2);  // [multirank]: np = 1 runs exclude it
  hvd::ProcessSet s = hvd::add_process_set({0, 1});
  std::vector<float> v(2, 1.0f);
  hvd::Handle h;
  if (r == 0) {
    h = hvd::allreduce_async(hvd::TensorView(v.data(), DataType::kFloat32, {2}), "ps.busy",
                             ReduceOp::kSum, 1.0, 1.0, s);
  }
  std::string err = error_of([&] { hvd::remove_process_set(s); });
  REQUIRE_THAT(err, Contains("remove_process_set(" + std::to_string(s.id()) +
                             "): collectives are still in flight on it on rank 0"));
  if (r == 1) {
    hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {2}), "ps.busy", ReduceOp::kSum,
                   1.0, 1.0, s);
  }
  if (r == 0) h.wait();
  if (r < 2) REQUIRE(v[0] == 2.0f);
  hvd::remove_process_set(s);
}
