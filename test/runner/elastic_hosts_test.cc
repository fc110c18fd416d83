// SPDX-License-Identifier: Apache-2.0
// [unit] elastic mode's host planning: discovery output, blacklist and cooldown, the next
// generation's hosts and np, host changes, and the elastic flags of the command line.
#include "hvd/runner/elastic_hosts.h"

#include <algorithm>
#include <random>
#include <set>

#include "hvd/runner/cli.h"
#include "hvd_catch.h"
#include "usage_error.h"

using namespace hvd::runner;
using hvd_runner_test::usage_error;

namespace {
std::vector<HostSlots> hs(std::initializer_list<HostSlots> l) { return l; }
Options parse(std::vector<std::string> args) { return parse_command_line(args).options; }
}  // namespace

TEST_CASE("the discovery script's lines give hosts, slots default to --slots-per-host", "[unit]") {
  auto d = parse_discovery_output("a:4\n  b  \n# comment\n\nc:2 # trailing\n", 3);
  CHECK(d.error.empty());
  CHECK(d.hosts == hs({{"a", 4}, {"b", 3}, {"c", 2}}));
  CHECK(parse_discovery_output("", 1).hosts.empty());
  CHECK(parse_discovery_output("", 1).error.empty());
}

TEST_CASE("bad discovery output is rejected naming the line", "[unit]") {
  auto d = parse_discovery_output("a:2\nb:x\n", 1);
  CHECK(d.hosts.empty());
  CHECK_THAT(d.error, hvd::test::Contains("line 2 'b:x'"));
  CHECK_THAT(d.error, hvd::test::Contains("whole number"));
  CHECK_THAT(parse_discovery_output("a:0", 1).error, hvd::test::Contains("at least 1 slot"));
  CHECK_THAT(parse_discovery_output("a\na:2", 1).error, hvd::test::Contains("listed twice"));
  CHECK_THAT(parse_discovery_output("a b", 1).error, hvd::test::Contains("not a host name"));
  CHECK_THAT(parse_discovery_output(":3", 1).error, hvd::test::Contains("not a host name"));
}

TEST_CASE("a blacklisted host's cooldown is random within MIN..MAX, backing off per failure",
          "[unit]") {
  CooldownRange r{10, 50};
  std::mt19937_64 rng(12345);
  // Per failure count: the draws stay within [b, min(2 b, MAX)], b = MIN * 2^(n-1) capped.
  const double low[] = {10, 20, 40, 50, 50};
  const double high[] = {20, 40, 50, 50, 50};
  double mean_prev = 0;
  for (int n = 1; n <= 5; ++n) {
    std::set<double> seen;
    double lo = 1e9, hi = -1, sum = 0;
    for (int i = 0; i < 200; ++i) {
      const double s = cooldown_seconds(r, n, rng);
      seen.insert(s);
      lo = std::min(lo, s);
      hi = std::max(hi, s);
      sum += s;
    }
    INFO("failure " << n << ": draws in [" << lo << ", " << hi << "]");
    CHECK(lo >= low[n - 1]);
    CHECK(hi <= high[n - 1]);
    CHECK(lo >= r.min_s);
    CHECK(hi <= r.max_s);
    if (n < 3) {
      CHECK(seen.size() > 100);                           // random, not one value
      CHECK(hi - lo > 0.8 * (high[n - 1] - low[n - 1]));  // spread over the interval
    }
    CHECK(sum / 200 >= mean_prev);  // the backoff grows with repeated failures
    mean_prev = sum / 200;
  }
  CHECK(cooldown_seconds(r, 1000, rng) == 50);  // capped at MAX
  CHECK(cooldown_seconds(CooldownRange{3, 3}, 1, rng) == 3);
  // The same seed gives the same cooldowns; the Blacklist keeps a host out for what it drew.
  std::mt19937_64 a(7), b(7);
  CHECK(cooldown_seconds(r, 2, a) == cooldown_seconds(r, 2, b));
  Blacklist bl(r, 99);
  const double c1 = bl.add("a", 100);
  CHECK((c1 >= 10 && c1 <= 20));
  CHECK(bl.blocked("a", 100 + c1 - 0.01));
  CHECK_FALSE(bl.blocked("a", 100 + c1));
  const double c2 = bl.add("a", 200);
  CHECK((c2 >= 20 && c2 <= 40));
  CHECK(bl.blocked("a", 200 + c2 - 0.01));
  CHECK_FALSE(bl.blocked("a", 200 + c2 + 0.01));
  CHECK(bl.failures("a") == 2);
  CHECK_FALSE(bl.blocked("b", 0));
}

TEST_CASE("without a cooldown range a blacklisted host never returns", "[unit]") {
  Blacklist b;
  CHECK(b.add("a", 0) == -1);
  CHECK(b.blocked("a", 1e12));
}

TEST_CASE("a generation takes min(max-np, free slots) slot-major, skipping the blacklist",
          "[unit]") {
  Blacklist b;
  auto hosts = hs({{"a", 2}, {"b", 2}, {"c", 1}});
  auto p = plan_generation(hosts, b, 0, 2, 3);
  REQUIRE(p.ready);
  CHECK(p.np == 3);
  CHECK(p.available_slots == 5);
  CHECK(p.used == hs({{"a", 2}, {"b", 1}}));
  p = plan_generation(hosts, b, 0, 2, 0);  // no --max-np: every slot
  CHECK(p.np == 5);
  CHECK(p.used == hosts);
  b.add("a", 0);
  p = plan_generation(hosts, b, 0, 2, 3);
  CHECK(p.np == 3);
  CHECK(p.used == hs({{"b", 2}, {"c", 1}}));
}

TEST_CASE("below --min-np free slots no generation starts, and the plan says why", "[unit]") {
  Blacklist b(CooldownRange{5, 5});
  b.add("b", 0);
  auto p = plan_generation(hs({{"a", 1}, {"b", 2}}), b, 1, 2, 0);
  CHECK_FALSE(p.ready);
  CHECK(p.available_slots == 1);
  CHECK_THAT(p.why_not, hvd::test::Contains("1 slot(s) available (a:1)"));
  CHECK_THAT(p.why_not, hvd::test::Contains("blacklisted: b"));
  CHECK_THAT(p.why_not, hvd::test::Contains("--min-np 2"));
  // After the cooldown the host is back.
  CHECK(plan_generation(hs({{"a", 1}, {"b", 2}}), b, 6, 2, 0).np == 3);
  CHECK_FALSE(plan_generation({}, b, 0, 1, 0).ready);
}

TEST_CASE("host changes: a running host gone or blacklisted is removed, more slots is added",
          "[unit]") {
  Blacklist b;
  auto running = hs({{"a", 1}, {"b", 1}});
  CHECK(host_update_bits(running, hs({{"a", 1}, {"b", 1}}), b, 0, 1, 0) == kHostsUnchanged);
  CHECK(host_update_bits(running, hs({{"a", 1}, {"b", 1}, {"c", 1}}), b, 0, 1, 0) == kHostsAdded);
  // At --max-np already: a new host changes nothing.
  CHECK(host_update_bits(running, hs({{"a", 1}, {"b", 1}, {"c", 1}}), b, 0, 1, 2) ==
        kHostsUnchanged);
  CHECK(host_update_bits(running, hs({{"a", 1}}), b, 0, 1, 0) == kHostsRemoved);
  CHECK(host_update_bits(running, hs({{"a", 1}, {"c", 2}}), b, 0, 1, 0) ==
        (kHostsRemoved | kHostsAdded));
  CHECK(host_update_bits(running, hs({{"a", 2}, {"b", 1}}), b, 0, 1, 0) == kHostsAdded);
  b.add("b", 0);
  CHECK(host_update_bits(running, hs({{"a", 1}, {"b", 1}}), b, 0, 1, 0) == kHostsRemoved);
}

TEST_CASE("the failed rank's host is blacklisted, not for a restart, a signal or this machine",
          "[unit]") {
  auto used = hs({{"a", 2}, {"b", 1}, {"localhost", 1}});
  auto outcome = [](int code, int rank) {
    GenerationOutcome o;
    o.exit_code = code;
    o.failed_rank = rank;
    return o;
  };
  CHECK(host_to_blacklist(outcome(137, 1), used, "me") == std::optional<std::string>("a"));
  CHECK(host_to_blacklist(outcome(1, 2), used, "me") == std::optional<std::string>("b"));
  CHECK_FALSE(host_to_blacklist(outcome(137, 3), used, "me"));  // localhost
  CHECK_FALSE(host_to_blacklist(outcome(137, 2), hs({{"me", 3}}), "me.example.org"));
  CHECK_FALSE(host_to_blacklist(outcome(kExitElasticRestart, 2), used, "me"));
  CHECK_FALSE(host_to_blacklist(outcome(5, -1), used, "me"));  // mpirun failed on its own
  CHECK_FALSE(host_to_blacklist(outcome(137, 9), used, "me"));
  GenerationOutcome signalled = outcome(143, 2);
  signalled.signal = 15;
  CHECK_FALSE(host_to_blacklist(signalled, used, "me"));
  GenerationOutcome early_exit0 = outcome(5, 2);  // a rank exited 0 without completing
  CHECK(host_to_blacklist(early_exit0, used, "me") == std::optional<std::string>("b"));
  GenerationOutcome done;
  done.rank0_done = true;
  CHECK_FALSE(host_to_blacklist(done, used, "me"));
}

TEST_CASE("spare hosts: unused, remote, not blacklisted, not checked before, in source order",
          "[unit]") {
  Blacklist blacklist;
  blacklist.add("d", 0);
  auto hosts = hs({{"e", 1}, {"a", 2}, {"b", 1}, {"c", 1}, {"d", 1}, {"me", 2}, {"localhost", 1}});
  auto used = hs({{"a", 2}, {"me", 1}});
  CHECK(spare_hosts_to_check(hosts, used, blacklist, 1, {}, "me.example.org") ==
        std::vector<std::string>{"e", "b", "c"});
  CHECK(spare_hosts_to_check(hosts, used, blacklist, 1, {"b", "a"}, "me") ==
        std::vector<std::string>{"e", "c"});
  CHECK(spare_hosts_to_check(hosts, hosts, blacklist, 1, {}, "me").empty());
  Blacklist cooling(CooldownRange{10, 10});
  cooling.add("c", 0);
  CHECK(spare_hosts_to_check(hs({{"c", 1}}), {}, cooling, 5, {}, "me").empty());
  CHECK(spare_hosts_to_check(hs({{"c", 1}}), {}, cooling, 25, {}, "me") ==
        std::vector<std::string>{"c"});  // back after its cooldown
}

TEST_CASE("hvdrun takes Horovod's elastic flags", "[unit]") {
  auto o = parse({"--min-np", "2", "--max-np", "4", "--slots-per-host", "2",
                  "--host-discovery-script", "./discover.sh", "--elastic-timeout", "30",
                  "--blacklist-cooldown-range", "10", "100", "--reset-limit", "3", "prog"});
  CHECK(o.np == 0);
  CHECK(o.min_np == 2);
  CHECK(o.max_np == 4);
  CHECK(o.slots_per_host == 2);
  CHECK(o.host_discovery_script == "./discover.sh");
  CHECK(o.elastic_timeout_s() == 30);
  CHECK(o.blacklist_cooldown_range == std::vector<double>{10, 100});
  CHECK(o.command == std::vector<std::string>{"prog"});
  CHECK(parse({"-np", "2", "--min-np", "1", "prog"}).elastic_timeout_s() == 600);
  // A discovery script alone means elastic mode with --min-np = -np.
  o = parse({"-np", "3", "--host-discovery-script", "d.sh", "prog"});
  CHECK(o.elastic());
  CHECK(o.min_np == 3);
  // -H in elastic mode is accepted (the hosts are the host source).
  CHECK(parse({"--min-np", "1", "-H", "a:2,b:2", "prog"}).hosts == "a:2,b:2");
}

TEST_CASE("bad elastic flags are refused with the fix", "[unit]") {
  auto err = [](std::vector<std::string> a) { return usage_error([&] { parse_command_line(a); }); };
  CHECK_THAT(err({"-np", "2", "--max-np", "4", "prog"}),
             hvd::test::Contains("--max-np needs elastic mode"));
  CHECK_THAT(err({"-np", "2", "--blacklist-cooldown-range", "1", "2", "prog"}),
             hvd::test::Contains("--blacklist-cooldown-range needs elastic mode"));
  CHECK_THAT(err({"--min-np", "3", "--max-np", "2", "prog"}),
             hvd::test::Contains("--max-np 2 must be at least --min-np 3"));
  CHECK_THAT(err({"-np", "5", "--min-np", "1", "--max-np", "4", "prog"}),
             hvd::test::Contains("-np 5 is above --max-np 4"));
  CHECK_THAT(err({"--host-discovery-script", "d.sh", "prog"}),
             hvd::test::Contains("needs --min-np N"));
  CHECK_THAT(err({"--min-np", "1", "--host-discovery-script", "d.sh", "-H", "a", "prog"}),
             hvd::test::Contains("drop the other"));
  CHECK_THAT(err({"--min-np", "1", "--blacklist-cooldown-range", "9", "3", "prog"}),
             hvd::test::Contains("0 <= MIN <= MAX"));
  CHECK_THAT(err({"--min-np", "1", "--blacklist-cooldown-range", "9", "prog"}),
             hvd::test::Contains("--blacklist-cooldown-range"));
  CHECK_THAT(err({"--min-np", "1", "--elastic-timeout", "0", "prog"}),
             hvd::test::Contains("--elastic-timeout must be a positive"));
  CHECK_THAT(err({"prog"}), hvd::test::Contains("missing -np"));
}
