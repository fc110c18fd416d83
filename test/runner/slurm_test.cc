// SPDX-License-Identifier: Apache-2.0
// [unit] Slurm's node lists and tasks-per-node, and -np/-H checked against an allocation.
#include "hvd/runner/slurm.h"

#include <algorithm>

#include "hvd/runner/cli.h"
#include "hvd/runner/errors.h"
#include "hvd/runner/launch_command.h"
#include "hvd_catch.h"
#include "usage_error.h"

using namespace hvd::runner;
using hvd::test::Contains;
using Names = std::vector<std::string>;
using Slots = std::vector<HostSlots>;

namespace {
using hvd_runner_test::usage_error;

SlurmAllocation alloc_of(const std::string& nodes, const std::string& tasks,
                         const std::string& ntasks = "") {
  auto a = slurm_allocation({"42", nodes, tasks, ntasks});
  REQUIRE(a.has_value());
  return *a;
}
}  // namespace

TEST_CASE("node lists: single hosts, ranges with zero padding, several bracket groups", "[unit]") {
  CHECK(expand_slurm_nodelist("vm") == Names{"vm"});
  CHECK(expand_slurm_nodelist("a,b.example.com") == Names{"a", "b.example.com"});
  CHECK(expand_slurm_nodelist("node[01-04,07],gpu-a[1-2]") ==
        Names{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"});
  CHECK(expand_slurm_nodelist("n[8-11]") == Names{"n8", "n9", "n10", "n11"});
  CHECK(expand_slurm_nodelist("n[098-101]") == Names{"n098", "n099", "n100", "n101"});
  CHECK(expand_slurm_nodelist("n[0-1]") == Names{"n0", "n1"});
  CHECK(expand_slurm_nodelist("login,c[3],d[5-6]-ib") == Names{"login", "c3", "d5-ib", "d6-ib"});
  CHECK(expand_slurm_nodelist("r[1-2]n[01-02]") == Names{"r1n01", "r1n02", "r2n01", "r2n02"});
  CHECK(expand_slurm_nodelist("[1-2]x") == Names{"1x", "2x"});
}

TEST_CASE("malformed node lists name the variable, the bad part and the expected form", "[unit]") {
  auto err = [](const char* s) { return usage_error([&] { expand_slurm_nodelist(s); }); };
  CHECK_THAT(err("node[01-04"), Contains("SLURM_JOB_NODELIST 'node[01-04'") &&
                                    Contains("'[' without ']'") &&
                                    Contains("node[01-04,07],gpu-a[1-2]"));
  CHECK_THAT(err("node01-04]"), Contains("']' without '['"));
  CHECK_THAT(err("node[4-1]"), Contains("range '4-1' runs backwards"));
  CHECK_THAT(err("node[a-b]"), Contains("bad range 'a-b'"));
  CHECK_THAT(err("node[1,]"), Contains("bad range ''"));
  CHECK_THAT(err("node[]"), Contains("empty brackets"));
  CHECK_THAT(err("n[[1]]"), Contains("nested brackets"));
  CHECK_THAT(err("a,,b"), Contains("empty host name"));
  CHECK_THAT(err(""), Contains("empty"));
  CHECK_THAT(err("n[1-2],n1"), Contains("host 'n1' appears twice"));
  CHECK_THAT(err("n[0-99999999]"), Contains("too large"));
}

TEST_CASE("tasks per node: counts and (xN) repeats", "[unit]") {
  CHECK(expand_slurm_tasks_per_node("2") == std::vector<int>{2});
  CHECK(expand_slurm_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_slurm_tasks_per_node("4,1(x2),16") == std::vector<int>{4, 1, 1, 16});
  auto err = [](const char* s) { return usage_error([&] { expand_slurm_tasks_per_node(s); }); };
  CHECK_THAT(err("2(x3"), Contains("SLURM_TASKS_PER_NODE '2(x3'") && Contains("N(xM)"));
  CHECK_THAT(err("2(3)"), Contains("bad repeat in '2(3)'"));
  CHECK_THAT(err("0"), Contains("bad entry '0'"));
  CHECK_THAT(err("2,,1"), Contains("bad entry ''"));
  CHECK_THAT(err("two"), Contains("bad entry 'two'"));
  CHECK_THAT(err("1(x0)"), Contains("bad entry '1(x0)'"));
}

TEST_CASE("an allocation pairs nodes with their tasks; outside one there is none", "[unit]") {
  CHECK_FALSE(slurm_allocation({"", "node1", "1", ""}).has_value());
  CHECK_FALSE(slurm_allocation({"7", "", "", ""}).has_value());
  auto a = alloc_of("node[01-03],gpu1", "2(x3),1", "7");
  CHECK(a.hosts == Slots{{"node01", 2}, {"node02", 2}, {"node03", 2}, {"gpu1", 1}});
  CHECK(a.ntasks == 7);
  CHECK(alloc_of("n[1-2]", "3(x2)").ntasks == 6);
  CHECK(alloc_of("n[1-2]", "3(x2)", "5").ntasks == 5);
  CHECK(describe_allocation(a) == "job 42, 7 tasks on node01:2,node02:2,node03:2,gpu1:1");
  const auto call_1 = [] { slurm_allocation({"42", "n[1-3]", "2(x2)", ""}); };
  CHECK_THAT(usage_error(call_1),
             Contains("gives 2 counts but SLURM_JOB_NODELIST 'n[1-3]' has 3 nodes"));
  const auto call_2 = [] { slurm_allocation({"42", "n[1-2]", "2(x2)", "9"}); };
  CHECK_THAT(usage_error(call_2), Contains("SLURM_NTASKS '9' is not a task count from 1 to 4"));
}

TEST_CASE("no -np and no -H: the whole allocation", "[unit]") {
  auto p = plan_in_allocation(alloc_of("node[01-02]", "2(x2)", "4"), 0, {}, "login");
  CHECK(p.hosts == Slots{{"node01", 2}, {"node02", 2}});
  CHECK(p.np == 4);
  CHECK(assign_slots(p.hosts, p.np) == Slots{{"node01", 2}, {"node02", 2}});
}

TEST_CASE("-np inside an allocation: fewer is fine, more names both numbers", "[unit]") {
  auto a = alloc_of("node[01-02]", "2(x2)", "4");
  auto p = plan_in_allocation(a, 3, {}, "node01");
  CHECK(p.np == 3);
  CHECK(assign_slots(p.hosts, p.np) == Slots{{"node01", 2}, {"node02", 1}});
  CHECK(usage_error([&] { plan_in_allocation(a, 5, {}, "node01"); }) ==
        "-np 5 asks for more ranks than the Slurm allocation (job 42, 4 tasks on "
        "node01:2,node02:2) has; give -np 4 or less, or allocate more tasks (salloc/sbatch -n 5)");
}

TEST_CASE("-H inside an allocation: allocated nodes only, within their tasks", "[unit]") {
  auto a = alloc_of("node[01-02]", "2(x2)", "4");
  auto p = plan_in_allocation(a, 0, {{"node02", 2}}, "node01");
  CHECK(p.hosts == Slots{{"node02", 2}});
  CHECK(p.np == 2);
  CHECK(plan_in_allocation(a, 1, {{"node01", 2}}, "node01").np == 1);
  // This machine under another name matches the node that is this machine.
  CHECK(plan_in_allocation(a, 0, {{"localhost", 2}}, "node01.cluster").np == 2);
  const auto call_3 = [&] { plan_in_allocation(a, 0, {{"node03", 1}}, "node01"); };
  CHECK_THAT(usage_error(call_3),
             Contains("host 'node03' (from -H/--hostfile) is not in the Slurm allocation") &&
                 Contains("node01:2,node02:2"));
  const auto call_4 = [&] { plan_in_allocation(a, 0, {{"node01", 3}}, "node01"); };
  CHECK_THAT(usage_error(call_4), Contains("host 'node01' asks for 3 slots") &&
                                      Contains("but the Slurm allocation (job 42") &&
                                      Contains("has 2 on node01"));
  const auto call_5 = [&] { plan_in_allocation(a, 0, {{"localhost", 1}}, "login"); };
  CHECK_THAT(usage_error(call_5), Contains("host 'localhost' (from -H/--hostfile) is not in"));
  auto small = alloc_of("node[01-02]", "2(x2)", "3");
  const auto call_6 = [&] { plan_in_allocation(small, 0, {{"node01", 2}, {"node02", 2}}, ""); };
  CHECK_THAT(usage_error(call_6),
             Contains("-np 4 asks for more ranks than") && Contains("(job 42, 3 tasks on"));
}

TEST_CASE("inside an allocation -np may be left out; outside it may not", "[unit]") {
  CHECK(parse_command_line({"./train"}, true).options.np == 0);
  CHECK(parse_command_line({"--no-slurm", "-np", "2", "./train"}, true).options.no_slurm);
  CHECK_THAT(usage_error([] { parse_command_line({"./train"}); }), Contains("missing -np"));
}

TEST_CASE("remote hosts of an allocation stay on the ssh launcher the preflight checked",
          "[unit]") {
  LaunchSpec s;
  s.np = 2;
  s.hosts = {{"node01", 1}, {"node02", 1}};
  s.all_local = false;
  s.in_slurm_allocation = true;
  s.command = {"./train"};
  auto c = build_mpirun_command(s);
  auto plm = std::find(c.begin(), c.end(), "plm");
  REQUIRE(plm != c.end());
  CHECK(*(plm - 1) == "--mca");
  CHECK(*(plm + 1) == "rsh");
  s.mpi = open_mpi_profile(5);  // PRRTE's launcher is `ssh`, set through --prtemca
  c = build_mpirun_command(s);
  plm = std::find(c.begin(), c.end(), "plm");
  REQUIRE(plm != c.end());
  CHECK(*(plm - 1) == "--prtemca");
  CHECK(*(plm + 1) == "ssh");
  s.all_local = true;
  c = build_mpirun_command(s);
  CHECK(std::find(c.begin(), c.end(), "plm") == c.end());
  s.all_local = false;
  s.in_slurm_allocation = false;
  c = build_mpirun_command(s);
  CHECK(std::find(c.begin(), c.end(), "plm") == c.end());
}
