// SPDX-License-Identifier: Apache-2.0
// [unit] host specs, hostfiles, slot assignment and rank placement.
#include "hvd/runner/hosts.h"

#include "hvd/runner/errors.h"
#include "hvd_catch.h"
#include "usage_error.h"

using namespace hvd::runner;

namespace {
using hvd_runner_test::usage_error;
}  // namespace

TEST_CASE("host list parses names with slots, slots default to 1", "[unit]") {
  auto h = parse_host_list("a:4,b,c.example.com:2");
  REQUIRE(h == std::vector<HostSlots>{{"a", 4}, {"b", 1}, {"c.example.com", 2}});
  REQUIRE(parse_host_list(" node-1:8 ") == std::vector<HostSlots>{{"node-1", 8}});
  REQUIRE(parse_host_list("10.0.0.5:2") == std::vector<HostSlots>{{"10.0.0.5", 2}});
}

TEST_CASE("malformed host specs are rejected with the entry and the fix", "[unit]") {
  using hvd::test::Contains;
  CHECK_THAT(usage_error([] { parse_host_list("a:x"); }),
             Contains("bad slot count in host spec 'a:x'") && Contains("host:slots"));
  CHECK_THAT(usage_error([] { parse_host_list("a:0"); }), Contains("positive integer"));
  CHECK_THAT(usage_error([] { parse_host_list("a:"); }), Contains("'a:'"));
  CHECK_THAT(usage_error([] { parse_host_list("a:2:3"); }), Contains("bad slot count"));
  CHECK_THAT(usage_error([] { parse_host_list(":4"); }), Contains("bad host name ''"));
  CHECK_THAT(usage_error([] { parse_host_list("a,,b"); }), Contains("empty host entry"));
  CHECK_THAT(usage_error([] { parse_host_list("a b:2"); }), Contains("bad host name 'a b'"));
  CHECK_THAT(usage_error([] { parse_host_list(""); }), Contains("-H is empty"));
}

TEST_CASE("duplicate hosts are rejected naming the host", "[unit]") {
  CHECK_THAT(usage_error([] { parse_host_list("a:2,b:2,a:1"); }),
             hvd::test::Contains("host 'a' is listed twice in -H") && hvd::test::Contains("a:8"));
}

TEST_CASE("hostfile lines: host slots=N, comments, blank lines", "[unit]") {
  auto h = parse_hostfile(
      "# cluster\n"
      "node1 slots=4\n"
      "\n"
      "node2   slots=2 max_slots=8  # gpu box\n"
      "node3\n"
      "node4:3\n",
      "hosts.txt");
  REQUIRE(h == std::vector<HostSlots>{{"node1", 4}, {"node2", 2}, {"node3", 1}, {"node4", 3}});
}

TEST_CASE("bad hostfiles name the file and line", "[unit]") {
  using hvd::test::Contains;
  CHECK_THAT(usage_error([] { parse_hostfile("a slots=2\nb slots=two\n", "h.txt"); }),
             Contains("h.txt:2") && Contains("slots=two"));
  CHECK_THAT(usage_error([] { parse_hostfile("a cpus=2\n", "h.txt"); }),
             Contains("h.txt:1: unknown field 'cpus=2'"));
  CHECK_THAT(usage_error([] { parse_hostfile("# nothing\n\n", "h.txt"); }),
             Contains("lists no hosts"));
  CHECK_THAT(usage_error([] { parse_hostfile("a\na slots=2\n", "h.txt"); }),
             Contains("listed twice in hostfile h.txt"));
}

TEST_CASE("slots are filled host by host (slot-major)", "[unit]") {
  std::vector<HostSlots> hosts{{"a", 4}, {"b", 4}, {"c", 2}};
  REQUIRE(assign_slots(hosts, 8) == std::vector<HostSlots>{{"a", 4}, {"b", 4}});
  REQUIRE(assign_slots(hosts, 6) == std::vector<HostSlots>{{"a", 4}, {"b", 2}});
  REQUIRE(assign_slots(hosts, 3) == std::vector<HostSlots>{{"a", 3}});
  REQUIRE(assign_slots(hosts, 10) == hosts);
  auto p = place_ranks(assign_slots(hosts, 6));
  REQUIRE(p.size() == 6);
  CHECK((p[0].host == "a" && p[0].local_rank == 0));
  CHECK((p[3].host == "a" && p[3].local_rank == 3));
  CHECK((p[4].host == "b" && p[4].local_rank == 0 && p[4].rank == 4));
  CHECK((p[5].host == "b" && p[5].local_rank == 1));
}

TEST_CASE("more ranks than slots is an error with the totals and the fix", "[unit]") {
  std::vector<HostSlots> hosts{{"a", 4}, {"b", 2}};
  CHECK(usage_error([&] { assign_slots(hosts, 8); }) ==
        "-np 8 needs 8 slots but the hosts have only 6 (a:4,b:2); add hosts or slots "
        "(host:slots) or lower -np");
  CHECK_THAT(usage_error([&] { assign_slots(hosts, 0); }), hvd::test::Contains("at least 1"));
}

TEST_CASE("local host names", "[unit]") {
  CHECK(is_local_host("localhost", "vm"));
  CHECK(is_local_host("127.0.0.1", "vm"));
  CHECK(is_local_host("vm", "vm"));
  CHECK_FALSE(is_local_host("node1", "vm"));
  CHECK_FALSE(is_local_host("127.example.com", "vm"));
  CHECK(is_local_host("vm", "vm.example.com"));  // the first label of this machine's name
  CHECK_FALSE(is_local_host("vm.other.com", "vm.example.com"));
  CHECK_FALSE(is_local_host("example", "vm.example.com"));
  CHECK(format_host_list({{"a", 4}, {"b", 1}}) == "a:4,b:1");
}
