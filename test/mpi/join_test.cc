// SPDX-License-Identifier: Apache-2.0
// join(): joined ranks take part in allreduce / allgather / broadcast; other ops fail cleanly.
#include <chrono>
#include <thread>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd::test::Contains;

namespace {

using hvd_test::wait_error;

}  // namespace

TEST_CASE("join with 1..N-1 ranks joined early: allreduce, allgather, broadcast", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  if (n == 1) {  // the only rank is the last to join, at once, every time
    REQUIRE(hvd::join() == 0);
    REQUIRE(hvd::join() == 0);
  }
  for (int k = 1; k < n; ++k) {
    const int active = n - k;  // ranks 0 .. active-1 keep working
    const std::string tag = "j" + std::to_string(k) + ".";
    if (r >= active) {
      REQUIRE(hvd::join() == 0);
      continue;
    }
    for (int it = 0; it < 3; ++it) {  // repeated: the cache must not short-circuit joined ranks
      std::vector<float> s(5, static_cast<float>(r + 1)), a(5, static_cast<float>(r + 1));
      std::vector<int32_t> si(4, r + 1);
      auto hs = hvd::allreduce_async(hvd::TensorView(s.data(), DataType::kFloat32, {5}),
                                     tag + "sum", ReduceOp::kSum);
      auto ha = hvd::allreduce_async(hvd::TensorView(a.data(), DataType::kFloat32, {5}),
                                     tag + "avg", ReduceOp::kAverage);
      auto hi = hvd::allreduce_async(hvd::TensorView(si.data(), DataType::kInt32, {4}),
                                     tag + "isum", ReduceOp::kSum);
      std::vector<double> g(static_cast<size_t>(r + 1), r);
      auto hg =
          hvd::allgather_async(hvd::TensorView(g.data(), DataType::kFloat64, {r + 1}), tag + "ag");
      std::vector<int64_t> b(3, r == 0 ? 42 : -1);
      auto hb =
          hvd::broadcast_async(hvd::TensorView(b.data(), DataType::kInt64, {3}), 0, tag + "bc");
      hs.wait();
      ha.wait();
      hi.wait();
      hg.wait();
      hb.wait();
      const float sum = static_cast<float>(active * (active + 1) / 2);
      for (float x : s) REQUIRE(x == sum);
      for (float x : a) REQUIRE(x == Approx(sum / n));  // by the set size, as Horovod
      for (int32_t x : si) REQUIRE(x == active * (active + 1) / 2);
      const auto& out = hg.output();
      int64_t rows = 0;
      for (int q = 0; q < active; ++q) rows += q + 1;
      REQUIRE(out.shape == std::vector<int64_t>{rows});
      const auto* p = static_cast<const double*>(out.data);
      int64_t at = 0;
      for (int q = 0; q < active; ++q) {
        for (int i = 0; i <= q; ++i) REQUIRE(p[at++] == q);
      }
      for (int64_t x : b) REQUIRE(x == 42);
    }
    // Rank 0 joins last: once the others joined, it runs one more allreduce alone (so their
    // joins are negotiated in an earlier round than its own; joins in one round tie).
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::vector<float> f(2, 3.0f);
      hvd::allreduce(hvd::TensorView(f.data(), DataType::kFloat32, {2}), tag + "alone",
                     ReduceOp::kAverage);
      for (float x : f) REQUIRE(x == 3.0f / n);  // the joined ranks added zeros
    }
    REQUIRE(hvd::join() == 0);
  }
  // Everything works normally afterwards (at np = 1 too): no rank is still counted as joined
  // (it would add zeros, or fail the allreduce).
  std::vector<float> v(3, static_cast<float>(r + 1));
  hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {3}), "after.join", ReduceOp::kSum);
  for (float x : v) REQUIRE(x == static_cast<float>(n * (n + 1) / 2));
  std::vector<int64_t> b(2, r == 0 ? 7 : -1);
  hvd::broadcast(hvd::TensorView(b.data(), DataType::kInt64, {2}), 0, "after.join.bc");
  for (int64_t x : b) REQUIRE(x == 7);
}

TEST_CASE("join returns the rank that joined last, whichever rank it is",
          "[mpi][multirank][join-order]") {
  const int r = hvd::rank(), n = hvd::size();
  REQUIRE(n >= 2);
  // Each rank in turn joins 0.4 s after the others, which have nothing else to do (so every
  // join may reach rank 0 in the same round): every rank must return that rank, each time.
  for (int last = 0; last < n; ++last) {
    if (r == last) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    INFO("rank " << last << " joined last");
    REQUIRE(hvd::join() == last);
  }
}

TEST_CASE("ops a joined rank cannot take part in fail with a clear error", "[mpi][multirank]") {
  const int r = hvd::rank(), n = hvd::size();
  REQUIRE(n >= 2);  // [multirank]: np = 1 runs exclude it
  const int last = n - 1;
  if (r == last) {
    REQUIRE(hvd::join() == last - 1);
  } else {
    std::vector<float> t(static_cast<size_t>(2 * n), 1.0f);
    std::string err = wait_error(hvd::alltoall_async(
        hvd::TensorView(t.data(), DataType::kFloat32, {2 * n}), {}, "jerr.a2a"));
    std::string who = "rank " + std::to_string(last) + " has joined";
    REQUIRE_THAT(err, Contains("alltoall 'jerr.a2a': cannot run while " + who));
    err = wait_error(hvd::reducescatter_async(
        hvd::TensorView(t.data(), DataType::kFloat32, {2 * n}), "jerr.rs"));
    REQUIRE_THAT(err, Contains("reducescatter 'jerr.rs': cannot run while " + who));
    err = wait_error(hvd::broadcast_async(hvd::TensorView(t.data(), DataType::kFloat32, {2 * n}),
                                          last, "jerr.bc"));
    REQUIRE(err == "broadcast 'jerr.bc': root rank " + std::to_string(last) +
                       " has joined and has no tensor to send");
    // The highest of the ranks joining last wins; rank last-1 sleeps so it is the last one.
    if (r == last - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    REQUIRE(hvd::join() == last - 1);
  }
}

TEST_CASE("unnamed collectives made while other ranks are joined keep automatic names in step",
          "[mpi][multirank]") {
  const int n = hvd::size();
  REQUIRE(n >= 2);
  // Automatic names count the unnamed calls of each rank; a joined rank makes none. Rank 0
  // makes three unnamed allreduces while the others are joined, so afterwards its count is
  // ahead of theirs: join() must bring every rank's count to the same number.
  if (hvd::rank() == 0) {
    for (int i = 0; i < 3; ++i) {
      std::vector<float> f(2, 5.0f);
      hvd::allreduce(hvd::TensorView(f.data(), DataType::kFloat32, {2}), "", ReduceOp::kSum);
      for (float x : f) REQUIRE(x == 5.0f);  // the joined ranks contributed zeros
    }
  }
  // Rank 0 joins after its allreduces, which needed every other rank joined first: it is last.
  REQUIRE(hvd::join() == 0);
  for (int i = 0; i < 2; ++i) {  // unnamed calls by every rank must pair up and finish
    std::vector<float> v(3, 1.0f);
    hvd::Handle h = hvd::allreduce_async(hvd::TensorView(v.data(), DataType::kFloat32, {3}), "",
                                         ReduceOp::kSum);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!hvd::poll(h) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(hvd::poll(h));  // not paired within 10 s: the automatic names diverged
    hvd::wait(h);
    for (float x : v) REQUIRE(x == static_cast<float>(n));
  }
}
