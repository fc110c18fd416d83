// SPDX-License-Identifier: Apache-2.0
// A mistake made on one rank only (a null input, an output that does not match, an empty
// group, an invalid reduce op, a wrong allocator count, a refused add_process_set, a name the
// response cache holds, a scale factor off by 1e-9) fails every rank's call at once with that
// rank's reason, instead of leaving the other ranks waiting for it; the job goes on.
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd::test::Contains;

namespace {

using hvd_test::error_of;

// Runs `right` on every rank but the last and `wrong` on the last; every rank's call must
// throw, the others' naming the last rank. Prints how long the slowest rank took to fail.
void one_rank_wrong(const char* label, const std::function<void()>& right,
                    const std::function<void()>& wrong, const std::string& reason) {
  const int r = hvd::rank(), last = hvd::size() - 1;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = error_of(r == last ? wrong : right);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  INFO(label << " on rank " << r);
  CHECK_THAT(err, Contains(reason));
  if (r != last) CHECK_THAT(err, Contains("refused on rank " + std::to_string(last)));
  hvd::TensorView t(&ms, DataType::kFloat64, {1});
  hvd::allreduce(t, "", ReduceOp::kMax);
  if (r == 0) std::printf("[%s] every rank failed within %.1f ms\n", label, ms);
  std::vector<int32_t> v(2, 1);
  hvd::allreduce(hvd::TensorView(v.data(), DataType::kInt32, {2}), "", ReduceOp::kSum);
  REQUIRE(v[0] == hvd::size());
}

}  // namespace

TEST_CASE("a mistake on one rank fails every rank's call at once", "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);
  std::vector<float> a(4, 1.0f), b(4, 1.0f), out5(5);
  hvd::TensorView va(a.data(), DataType::kFloat32, {4}), vb(b.data(), DataType::kFloat32, {4});
  for (const std::string name : {"one.x", ""}) {  // named and automatic names
    const auto group_ab = [&] { hvd::grouped_allreduce({va, vb}, name); };
    one_rank_wrong(
        "null input", [&] { hvd::allreduce(va, name); },
        [&] { hvd::allreduce(hvd::TensorView(nullptr, DataType::kFloat32, {4}), name); },
        "input data is null");
    one_rank_wrong(
        "output does not match", [&] { hvd::allreduce_async(va, va, name).wait(); },
        [&] {
          hvd::allreduce_async(va, hvd::TensorView(out5.data(), DataType::kFloat32, {5}), name)
              .wait();
        },
        "does not match input");
    one_rank_wrong(
        "null group member", group_ab,
        [&] {
          hvd::grouped_allreduce({va, hvd::TensorView(nullptr, DataType::kFloat32, {4})}, name);
        },
        "input data is null");
    one_rank_wrong(
        "empty group", group_ab, [&] { hvd::grouped_allreduce({}, name); },
        "an empty list of tensors");
    one_rank_wrong(
        "empty allgather group",
        [&] {
          for (auto& h : hvd::grouped_allgather_async({va}, name)) h.wait();
        },
        [&] {
          for (auto& h : hvd::grouped_allgather_async({}, name)) h.wait();
        },
        "an empty list of tensors");
    one_rank_wrong(
        "invalid reduce op", [&] { hvd::allreduce(va, name, ReduceOp::kSum); },
        [&] { hvd::allreduce(va, name, static_cast<ReduceOp>(9)); },
        "reduce op 9 is not one of Sum, Average, Min, Max, Product");
  }
  // A name the response cache holds (negotiated twice with these parameters): the others'
  // calls take the cached path, the refusal must still reach them at once.
  for (const bool null_input : {true, false}) {
    for (int i = 0; i < 2; ++i) hvd::allreduce(va, "one.cached", ReduceOp::kSum);
    one_rank_wrong(
        null_input ? "cached name, null input" : "cached name, invalid op",
        [&] { hvd::allreduce(va, "one.cached", ReduceOp::kSum); },
        [&] {
          if (null_input) {
            hvd::allreduce(hvd::TensorView(nullptr, DataType::kFloat32, {4}), "one.cached",
                           ReduceOp::kSum);
          } else {
            hvd::allreduce(va, "one.cached", static_cast<ReduceOp>(9));
          }
        },
        null_input ? "input data is null" : "reduce op 9 is not one of");
  }
  // A grouped call's allocator count (none, or one per tensor) is checked on this rank only.
  std::vector<float> rows(8);
  const hvd::Allocator one = [&](const std::vector<int64_t>&) -> void* { return rows.data(); };
  one_rank_wrong(
      "allocator count",
      [&] {
        for (auto& h : hvd::grouped_allgather_async({va, vb}, "one.alloc")) h.wait();
      },
      [&] {
        for (auto& h : hvd::grouped_allgather_async({va, vb}, "one.alloc", {}, {one})) h.wait();
      },
      "1 allocators for 2 tensors");
  one_rank_wrong(
      "reducescatter allocator count",
      [&] {
        for (auto& h : hvd::grouped_reducescatter_async({va}, "one.rs.alloc", ReduceOp::kSum))
          h.wait();
      },
      [&] {
        for (auto& h : hvd::grouped_reducescatter_async({va}, "one.rs.alloc", ReduceOp::kSum, 1.0,
                                                        1.0, {}, {one, one}))
          h.wait();
      },
      "2 allocators for 1 tensors");
  // add_process_set refused by its caller on one rank (e.g. the Python binding's duplicate-set
  // check): the others' add_process_set fails with that rank's reason and list.
  const auto add_01 = [] { hvd::add_process_set({0, 1}); };
  const auto refuse_01 = [] {
    hvd::detail::refuse_add_process_set({0, 1}, "a duplicate of set 9");
  };
  one_rank_wrong("add_process_set refused", add_01, refuse_01,
                 "add_process_set([0, 1]): a duplicate of set 9");
  // Scale factors are compared exactly: 1 and 1 + 1e-9 differ (a mismatch, not a refusal).
  const int r = hvd::rank(), last = hvd::size() - 1;
  const std::string err = error_of(
      [&] { hvd::allreduce(va, "one.scale", ReduceOp::kSum, r == last ? 1.0 + 1e-9 : 1.0); });
  CHECK_THAT(err, Contains("prescale factor 1 on rank"));
  CHECK_THAT(err, Contains("1.000000001 on rank " + std::to_string(last)));
}

namespace {

// Waits for `h` at most `limit_s` seconds (a hang becomes a failure, not an endless test);
// returns its error, "(no error)", or "(still waiting)". `*ms`: how long it took.
std::string error_within(const hvd::Handle& h, double limit_s, double* ms) {
  const auto t0 = std::chrono::steady_clock::now();
  auto waited = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  while (!h.poll() && waited() < limit_s)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  *ms = waited() * 1000;
  return h.poll() ? hvd_test::wait_error(h)
                  : "(still waiting after " + std::to_string(limit_s) + " s)";
}

// The last rank makes `wrong` (it throws at once, before it could name the tensor the others
// call: a reserved name, an unknown or removed set); the ranks in `right_ranks` call `right`;
// the others nothing. Every calling rank must fail within 2 s, the others naming the last
// rank, its reason and their tensor; then the job goes on.
void refused_before_naming(const char* label, const std::vector<int>& right_ranks,
                           const std::function<hvd::Handle()>& right,
                           const std::function<void()>& wrong, const std::string& tensor,
                           const std::string& reason) {
  const int r = hvd::rank(), last = hvd::size() - 1;
  double ms = 0;
  std::string err;
  INFO(label << " on rank " << r);
  if (r == last) {
    const auto t0 = std::chrono::steady_clock::now();
    err = error_of(wrong);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK_THAT(err, Contains(reason));
  } else if (std::find(right_ranks.begin(), right_ranks.end(), r) != right_ranks.end()) {
    err = error_within(right(), 5.0, &ms);
    CHECK_THAT(err, Contains(tensor));
    CHECK_THAT(err, Contains("rank " + std::to_string(last) + " refused its call locally"));
    CHECK_THAT(err, Contains(reason));
  }
  CHECK(ms < 2000);
  std::vector<double> all(static_cast<size_t>(hvd::size()), 0.0);
  all[static_cast<size_t>(r)] = ms;
  hvd::allreduce(hvd::TensorView(all.data(), DataType::kFloat64, {hvd::size()}), "",
                 ReduceOp::kSum);
  if (r == 0) {
    std::printf("[%s] np %d: ranks failed within", label, hvd::size());
    for (double x : all) std::printf(" %.1f", x);
    std::printf(" ms\n");
  }
  std::vector<int32_t> v(2, 1);
  hvd::allreduce(hvd::TensorView(v.data(), DataType::kInt32, {2}), "", ReduceOp::kSum);
  REQUIRE(v[0] == hvd::size());
}

}  // namespace

TEST_CASE("a call refused before naming its tensor on one rank fails every rank within 2 s",
          "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);
  const int last = hvd::size() - 1;
  std::vector<int> everyone_else;
  for (int i = 0; i < last; ++i) everyone_else.push_back(i);
  std::vector<float> a(4, 1.0f);
  hvd::TensorView va(a.data(), DataType::kFloat32, {4});
  const std::string reserved = "names starting with '@' are reserved";
  for (const bool cached : {false, true}) {
    const std::string x = cached ? "nb.cached" : "nb.fresh";
    if (cached) {
      for (int i = 0; i < 2; ++i) hvd::allreduce(va, x);  // the others take the cached path
    }
    refused_before_naming(
        cached ? "reserved name, cached" : "reserved name", everyone_else,
        [&] { return hvd::allreduce_async(va, x); }, [&] { hvd::allreduce(va, "@" + x); },
        "allreduce '" + x + "'", reserved);
  }
  refused_before_naming(
      "unknown process set", everyone_else, [&] { return hvd::allreduce_async(va, "nb.unknown"); },
      [&] { hvd::allreduce(va, "nb.unknown", ReduceOp::kSum, 1.0, 1.0, hvd::ProcessSet(12345)); },
      "allreduce 'nb.unknown'", "there is no process set 12345");
  // A removed set (every rank removed it) given by the last rank only.
  hvd::ProcessSet gone = hvd::add_process_set({0, last});
  const int32_t gone_id = gone.id();
  hvd::remove_process_set(gone);
  refused_before_naming(
      "removed process set", everyone_else, [&] { return hvd::allgather_async(va, "nb.removed"); },
      [&] { hvd::allgather_async(va, "nb.removed", hvd::ProcessSet(gone_id)).wait(); },
      "allgather 'nb.removed'", "there is no process set " + std::to_string(gone_id));
  // On a process set: rank 0 waits there, the last rank gives an unknown set / a reserved name.
  hvd::ProcessSet pair = hvd::add_process_set({0, last});
  refused_before_naming(
      "unknown set, others on a process set", {0},
      [&] { return hvd::allreduce_async(va, "nb.pair", ReduceOp::kSum, 1.0, 1.0, pair); },
      [&] { hvd::allreduce(va, "nb.pair", ReduceOp::kSum, 1.0, 1.0, hvd::ProcessSet(12345)); },
      "allreduce 'nb.pair'", "there is no process set 12345");
  refused_before_naming(
      "reserved name on a process set", {0},
      [&] { return hvd::broadcast_async(va, 0, "nb.pair.b", pair); },
      [&] { hvd::broadcast(va, 0, "@nb.pair.b", pair); }, "broadcast 'nb.pair.b'", reserved);
  // A grouped call: every member fails.
  std::vector<float> b(4, 1.0f);
  hvd::TensorView vb(b.data(), DataType::kFloat32, {4});
  {
    const int r = hvd::rank();
    double ms = 0;
    std::string err;
    if (r == last) {
      err = error_of([&] { hvd::grouped_allreduce({va, vb}, "@nb.group"); });
      CHECK_THAT(err, Contains(reserved));
    } else {
      err = error_within(hvd::grouped_allreduce_async({va, vb}, "nb.group"), 5.0, &ms);
      CHECK_THAT(err, Contains("refused its call locally"));
    }
    CHECK(ms < 2000);
  }
  // Every rank makes the same mistake: each fails alone, as before, and nothing is left over
  // to fail a later call that the last rank comes to late.
  CHECK_THAT(error_of([&] { hvd::allreduce(va, "@nb.all"); }), Contains(reserved));
  CHECK_THAT(error_of([&] {
               hvd::allreduce(va, "nb.all", ReduceOp::kSum, 1.0, 1.0, hvd::ProcessSet(12345));
             }),
             Contains("there is no process set 12345"));
  if (hvd::rank() == last) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<float> c(4, 1.0f);
  hvd::allreduce(hvd::TensorView(c.data(), DataType::kFloat32, {4}), "nb.after", ReduceOp::kSum);
  CHECK(c[0] == static_cast<float>(hvd::size()));
  hvd::remove_process_set(pair);
}
