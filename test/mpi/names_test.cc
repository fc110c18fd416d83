// SPDX-License-Identifier: Apache-2.0
// Names: group members and automatic names never meet user names; a group with a different
// number of tensors on some rank fails on every rank and leaves nothing behind; tens of
// thousands of names may be in flight at once.
#include <chrono>
#include <thread>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;

namespace {

using hvd_test::error_of;

constexpr auto kPatience = std::chrono::seconds(20);

// The error with which `h` failed, "(no error)", or "(still pending)" after kPatience (a hang).
std::string settle(const hvd::Handle& h) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!h.poll()) {
    if (std::chrono::steady_clock::now() > deadline) return "(still pending)";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return error_of([&h] { h.wait(); });
}

hvd::TensorView view(std::vector<float>& v) {
  return hvd::TensorView(v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())});
}

// "rank 0" at np = 2, "ranks 0,2" at np = 3, "ranks 0,2-3" at np = 4: every rank but rank 1.
std::string all_but_rank1() {
  const int n = hvd::size();
  if (n == 2) return "rank 0";
  return "ranks 0,2" + (n > 3 ? "-" + std::to_string(n - 1) : std::string());
}

// n(n+1)/2 * k: the Sum over ranks of (rank + 1) * k.
float sum_of(float k) {
  const int n = hvd::size();
  return k * static_cast<float>(n * (n + 1) / 2);
}

void check_still_serving(const std::string& name) {
  hvd::barrier();
  std::vector<float> v(5, 1.0f);
  hvd::allreduce(view(v), name, ReduceOp::kSum);
  for (float x : v) REQUIRE(x == static_cast<float>(hvd::size()));
}

}  // namespace

TEST_CASE("a group with a different number of tensors on one rank fails on every rank",
          "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);  // [multirank]: np = 1 runs exclude it
  const int r = hvd::rank();
  const std::string sizes = "2 tensors on " + all_but_rank1() + " but 3 on rank 1";
  std::vector<std::vector<float>> bufs(3, std::vector<float>(4, 1.0f));
  std::vector<hvd::TensorView> views;
  for (int i = 0; i < (r == 1 ? 3 : 2); ++i) views.push_back(view(bufs[static_cast<size_t>(i)]));

  REQUIRE(settle(hvd::grouped_allreduce_async(views, "count.ar")) ==
          "grouped allreduce 'count.ar': " + sizes);
  hvd::barrier();  // nothing of the group is left pending anywhere

  for (const hvd::Handle& h : hvd::grouped_allgather_async(views, "count.ag")) {
    REQUIRE(settle(h) == "grouped allgather 'count.ag': " + sizes);
  }
  // The same group name with agreeing sizes works afterwards.
  std::vector<float> a(4, static_cast<float>(r + 1)), b(2, static_cast<float>(10 * (r + 1)));
  REQUIRE(settle(hvd::grouped_allreduce_async({view(a), view(b)}, "count.ar", ReduceOp::kSum)) ==
          "(no error)");
  for (float x : a) REQUIRE(x == sum_of(1));
  for (float x : b) REQUIRE(x == sum_of(10));
  check_still_serving("count.after");
}

TEST_CASE("user names never meet the names of group members", "[mpi]") {
  const int r = hvd::rank();
  const float k = static_cast<float>(r + 1);
  for (bool group_first_on_rank0 : {false, true}) {
    INFO("group first on rank 0: " << group_first_on_rank0);
    std::vector<float> x(3, k), a(2, 10 * k), b(5, 100 * k);
    hvd::Handle hx, hg;
    if (group_first_on_rank0 && r == 0) {
      hg = hvd::grouped_allreduce_async({view(a), view(b)}, "coll.g", ReduceOp::kSum);
      hx = hvd::allreduce_async(view(x), "coll.g/0", ReduceOp::kSum);
    } else {
      hx = hvd::allreduce_async(view(x), "coll.g/0",
                                ReduceOp::kSum);  // the name group 'coll.g' member 0 had
      hg = hvd::grouped_allreduce_async({view(a), view(b)}, "coll.g", ReduceOp::kSum);
    }
    REQUIRE(settle(hx) == "(no error)");
    REQUIRE(settle(hg) == "(no error)");
    for (float v : x) REQUIRE(v == sum_of(1));
    for (float v : a) REQUIRE(v == sum_of(10));
    for (float v : b) REQUIRE(v == sum_of(100));
  }
  check_still_serving("coll.after");
}

TEST_CASE("a user name shaped like an automatic name never pairs with an unnamed call", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  // A new set: its first unnamed allreduce is the set's automatic name number 0.
  hvd::ProcessSet ps = hvd::add_process_set(all);
  const float k = static_cast<float>(r + 1);
  std::vector<float> named(4, 1000 * k), unnamed(4, k);
  hvd::Handle hn, hu;
  if (r == 0) {
    hn = hvd::allreduce_async(view(named), "allreduce.noname.0", ReduceOp::kSum, 1.0, 1.0, ps);
    hu = hvd::allreduce_async(view(unnamed), "", ReduceOp::kSum, 1.0, 1.0, ps);
  } else {
    hu = hvd::allreduce_async(view(unnamed), "", ReduceOp::kSum, 1.0, 1.0, ps);
    hn = hvd::allreduce_async(view(named), "allreduce.noname.0", ReduceOp::kSum, 1.0, 1.0, ps);
  }
  REQUIRE(settle(hn) == "(no error)");
  REQUIRE(settle(hu) == "(no error)");
  for (float v : named) REQUIRE(v == sum_of(1000));
  for (float v : unnamed) REQUIRE(v == sum_of(1));
  hvd::remove_process_set(ps);
  check_still_serving("auto.after");
}

TEST_CASE("names starting with '@' are refused at submission naming the name", "[mpi]") {
  std::vector<float> v(4, 1.0f);
  const std::string why =
      ": names starting with '@' are reserved for hvd's own collectives; "
      "choose another name";
  REQUIRE_THROWS_WITH(hvd::allreduce_async(view(v), "@x"), "allreduce '@x'" + why);
  REQUIRE_THROWS_WITH(hvd::grouped_allreduce_async({view(v)}, "@g"),
                      "grouped_allreduce '@g'" + why);
  REQUIRE_THROWS_WITH(hvd::broadcast_async(view(v), 0, "@b"), "broadcast '@b'" + why);
  REQUIRE_THROWS_WITH(hvd::allgather_async(view(v), "@ag"), "allgather '@ag'" + why);
  REQUIRE_THROWS_WITH(hvd::reducescatter_async(view(v), "@rs"), "reducescatter '@rs'" + why);
  // '@' elsewhere in a name is fine.
  hvd::allreduce(view(v), "at.@.middle", ReduceOp::kSum);
  for (float x : v) REQUIRE(x == static_cast<float>(hvd::size()));
}

TEST_CASE("20,000 allreduces in flight at once all complete with the right sums", "[mpi]") {
  // More names in flight than the tensor table keeps idle (8,192) and the response cache holds
  // (1,024 by default); the second pass submits the same names again.
  constexpr int kInFlight = 20000, kLen = 4;
  const float r1 = static_cast<float>(hvd::rank() + 1);
  std::vector<std::vector<float>> bufs(kInFlight, std::vector<float>(kLen));
  std::vector<hvd::Handle> hs(kInFlight);
  for (int pass = 0; pass < 2; ++pass) {
    for (int j = 0; j < kInFlight; ++j) {
      auto& b = bufs[static_cast<size_t>(j)];
      for (int i = 0; i < kLen; ++i)
        b[static_cast<size_t>(i)] = r1 * static_cast<float>(j % 97 + i + pass);
      hs[static_cast<size_t>(j)] =
          hvd::allreduce_async(view(b), "inflight." + std::to_string(j), ReduceOp::kSum);
    }
    for (auto& h : hs) h.wait();
    for (int j = 0; j < kInFlight; ++j) {
      for (int i = 0; i < kLen; ++i) {
        const float got = bufs[static_cast<size_t>(j)][static_cast<size_t>(i)];
        const float want = sum_of(static_cast<float>(j % 97 + i + pass));
        if (got != want) {
          FAIL("pass " << pass << ", inflight." << j << " element " << i << ": " << got
                       << " != " << want);
        }
      }
    }
  }
}
