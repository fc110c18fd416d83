// SPDX-License-Identifier: Apache-2.0
// [local] process sets: disjoint sets run concurrently (a stall in one does not block the
// other), invalid or differing rank lists, non-members, removal with work in flight.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;
using hvd::test::Contains;

namespace {

// add_process_set(ranks) on every rank; returns the new id (requires success everywhere).
int32_t add_set(Cluster& c, const std::vector<int32_t>& ranks) {
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) hs.push_back(c[r].add_process_set(ranks));
  int64_t id = -1;
  for (auto& h : hs) {
    await_ok(h, "add_process_set");
    if (id < 0) id = h.state()->result;
    REQUIRE(h.state()->result == id);  // every rank agrees on the id
  }
  return static_cast<int32_t>(id);
}

std::vector<Status> add_set_each(Cluster& c, const std::vector<std::vector<int32_t>>& lists) {
  std::vector<Handle> hs;
  for (int r = 0; r < c.size(); ++r) {
    hs.push_back(c[r].add_process_set(lists[static_cast<size_t>(r)]));
  }
  std::vector<Status> out;
  for (auto& h : hs) out.push_back(await(h, "add_process_set"));
  return out;
}

}  // namespace

TEST_CASE("disjoint process sets run at the same time; a stall in one does not block the other",
          "[local]") {
  Cluster c(4);
  c.start_all();
  const int32_t a = add_set(c, {0, 1}), b = add_set(c, {3, 2});  // b: rank 3 is set rank 0
  REQUIRE(a != b);
  REQUIRE(c[0].process_set_ranks(b) == std::vector<int32_t>{3, 2});

  // Set a: only rank 0 submits, so it waits for rank 1.
  Tensor<float> s0(std::vector<float>{1, 2}), s1(std::vector<float>{10, 20});
  Opts oa;
  oa.process_set = a;
  Handle stalled = submit(c[0], "stall", s0, oa);

  // Meanwhile set b runs allgather, then allreduce, to completion.
  for (int it = 0; it < 3; ++it) {
    std::vector<Tensor<int32_t>> g;
    g.emplace_back(std::vector<int32_t>{3, 3, 3});  // global rank 2 (set rank 1): 3 rows
    g.emplace_back(std::vector<int32_t>{7});        // global rank 3 (set rank 0): 1 row
    Opts ob;
    ob.process_set = b;
    ob.op = OpType::kAllgather;
    ob.shape = std::vector<int64_t>{3};
    Handle h2 = submit(c[2], "g", g[0], ob);
    ob.shape = std::vector<int64_t>{1};
    Handle h3 = submit(c[3], "g", g[1], ob);
    await_ok(h2, "set b allgather");
    await_ok(h3, "set b allgather");
    // Set order: rank 3 first.
    REQUIRE(output_of<int32_t>(h2) == std::vector<int32_t>{7, 3, 3, 3});
    REQUIRE(output_of<int32_t>(h3) == std::vector<int32_t>{7, 3, 3, 3});
    Tensor<double> x2(std::vector<double>{1.5}), x3(std::vector<double>{2.0});
    Opts sum;
    sum.process_set = b;
    Handle r2 = submit(c[2], "sum", x2, sum), r3 = submit(c[3], "sum", x3, sum);
    await_ok(r2, "set b allreduce");
    await_ok(r3, "set b allreduce");
    REQUIRE(x2.out == std::vector<double>{3.5});
  }
  REQUIRE_FALSE(stalled.poll());
  Handle h1 = submit(c[1], "stall", s1, oa);
  await_ok(stalled, "set a allreduce");
  await_ok(h1, "set a allreduce");
  REQUIRE(s0.out == std::vector<float>{11, 22});
  REQUIRE(s1.out == std::vector<float>{11, 22});

  // A collective on a set this rank is not a member of fails at once.
  Tensor<float> y(std::vector<float>{1});
  Status s = await(submit(c[2], "notmine", y, oa), "notmine");
  REQUIRE(s.message() == "allreduce 'notmine': rank 2 is not a member of process set " +
                             std::to_string(a) + " (ranks 0-1)");
}

TEST_CASE("process set rank lists that are invalid or differ fail on every rank", "[local]") {
  Cluster c(3);
  c.start_all();
  for (const auto& st : add_set_each(c, {{0, 0}, {0, 0}, {0, 0}})) {
    REQUIRE(st.message() == "add_process_set([0, 0]): rank 0 is listed more than once");
  }
  for (const auto& st : add_set_each(c, {{1, 3}, {1, 3}, {1, 3}})) {
    REQUIRE(st.message() ==
            "add_process_set([1, 3]): rank 3 is out of range (hvd has 3 ranks: "
            "0-2)");
  }
  for (const auto& st : add_set_each(c, {{0, 1}, {0, 1}, {0, 2}})) {
    REQUIRE_THAT(st.message(), Contains("rank list [0, 1] on ranks 0-1 but [0, 2] on rank 2"));
  }
  // Failed adds leave no set behind and the ids stay in step: the next one works everywhere.
  const int32_t id = add_set(c, {0, 2});
  REQUIRE(c[1].process_set_ids() == std::vector<int32_t>{0, id});
}

TEST_CASE("removing a process set with work in flight fails naming the rank", "[local]") {
  Cluster c(2);
  c.start_all();
  const int32_t a = add_set(c, {0, 1});
  Tensor<int32_t> t0(std::vector<int32_t>{1}), t1(std::vector<int32_t>{2});
  Opts o;
  o.process_set = a;
  Handle pending = submit(c[0], "busy", t0, o);
  Handle r0 = c[0].remove_process_set(a), r1 = c[1].remove_process_set(a);
  for (Handle* h : {&r0, &r1}) {
    Status s = await(*h, "remove_process_set");
    REQUIRE(s.message() == "remove_process_set(" + std::to_string(a) +
                               "): collectives are still in flight on it on rank 0; wait for "
                               "them before removing the set");
  }
  Handle h1 = submit(c[1], "busy", t1, o);
  await_ok(pending, "busy");
  await_ok(h1, "busy");
  REQUIRE(t0.out == std::vector<int32_t>{3});
  r0 = c[0].remove_process_set(a);
  r1 = c[1].remove_process_set(a);
  await_ok(r0, "remove");
  await_ok(r1, "remove");
  Status s = await(submit(c[0], "gone", t0, o), "gone");
  REQUIRE_THAT(s.message(), Contains("there is no process set " + std::to_string(a)));
}

TEST_CASE("work submitted on a set after its removal was called fails at once", "[local]") {
  Cluster c(2);
  c.start_all();
  const int32_t a = add_set(c, {0, 1});
  Tensor<int32_t> t0(std::vector<int32_t>{1});
  Opts o;
  o.process_set = a;
  Handle r0 = c[0].remove_process_set(a);
  Handle late = submit(c[0], "late", t0, o);
  // Failed before rank 1 even calls remove: the set's shutdown never meets it.
  REQUIRE(late.poll());
  Status s = await(late, "late");
  REQUIRE_THAT(s.message(), Contains("process set " + std::to_string(a) + " is being removed"));
  Handle r1 = c[1].remove_process_set(a);
  await_ok(r0, "remove");
  await_ok(r1, "remove");
  REQUIRE(c[0].process_set_ids() == std::vector<int32_t>{0});
}
