// SPDX-License-Identifier: Apache-2.0
// [unit] hvdrun's command line: flags, program arguments, bad input and its messages.
#include "hvd/runner/cli.h"

#include "hvd/runner/errors.h"
#include "hvd_catch.h"

using namespace hvd::runner;
using hvd::test::Contains;

namespace {
std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse_command_line(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST_CASE("-np, -H and the program with its own flags", "[unit]") {
  auto p = parse_command_line({"-np", "8", "-H", "a:4,b:4", "./train", "--lr", "0.1", "-np", "3"});
  REQUIRE_FALSE(p.help);
  const Options& o = p.options;
  CHECK(o.np == 8);
  CHECK(o.hosts == "a:4,b:4");
  CHECK(o.command == std::vector<std::string>{"./train", "--lr", "0.1", "-np", "3"});
  CHECK(o.start_timeout_s == 30);
}

TEST_CASE("every flag is parsed", "[unit]") {
  auto o = parse_command_line({"--np",
                               "2",
                               "--hostfile",
                               "h.txt",
                               "-p",
                               "2222",
                               "-i",
                               "/k",
                               "--network-interface",
                               "eth0,ib0",
                               "-x",
                               "FOO",
                               "-x",
                               "BAR=1",
                               "--start-timeout",
                               "5",
                               "--grace-period",
                               "1.5",
                               "--output-filename",
                               "out",
                               "--timeline-filename",
                               "tl.json",
                               "--timeline-mark-cycles",
                               "--fusion-threshold-mb",
                               "32",
                               "--cycle-time-ms",
                               "2.5",
                               "--cache-capacity",
                               "0",
                               "--log-level",
                               "debug",
                               "--verbose",
                               "--dry-run",
                               "--",
                               "prog",
                               "-x"})
               .options;
  CHECK(o.np == 2);
  CHECK(o.hostfile == "h.txt");
  CHECK(o.ssh_port == 2222);
  CHECK(o.ssh_identity == "/k");
  CHECK(o.network_interfaces == std::vector<std::string>{"eth0", "ib0"});
  CHECK(o.env == std::vector<std::string>{"FOO", "BAR=1"});
  CHECK(o.start_timeout_s == 5);
  CHECK(o.grace_period_s == 1.5);
  CHECK(o.output_dir == "out");
  CHECK(o.timeline == "tl.json");
  CHECK(o.timeline_mark_cycles);
  CHECK(*o.fusion_threshold_mb == 32);
  CHECK(*o.cycle_time_ms == 2.5);
  CHECK(*o.cache_capacity == 0);
  CHECK(o.log_level == "debug");
  CHECK((o.verbose && o.dry_run && !o.check_build));
  CHECK(o.command == std::vector<std::string>{"prog", "-x"});
}

TEST_CASE("--help returns the text documenting every flag", "[unit]") {
  auto p = parse_command_line({"--help"});
  REQUIRE(p.help);
  for (const char* flag :
       {"--np", "-H", "--hostfile", "--ssh-port", "--ssh-identity-file", "--network-interface",
        "-x", "--start-timeout", "--output-filename", "--timeline-filename",
        "--timeline-mark-cycles", "--fusion-threshold-mb", "--cycle-time-ms", "--cache-capacity",
        "--log-level", "--verbose", "--dry-run", "--check-build", "Exit codes"}) {
    CHECK_THAT(p.help_text, Contains(flag));
  }
}

TEST_CASE("--check-build needs no program", "[unit]") {
  CHECK(parse_command_line({"--check-build"}).options.check_build);
}

TEST_CASE("bad command lines: one line naming the problem and the fix", "[unit]") {
  CHECK(usage_error({"-np", "2", "--bogus", "prog"}) ==
        "unknown option '--bogus'; see hvdrun --help (options go before the program)");
  CHECK_THAT(usage_error({"-np", "2"}), Contains("no program given; usage: hvdrun -np N"));
  CHECK(usage_error({"prog"}) == "missing -np: give the number of ranks, e.g. -np 4");
  CHECK_THAT(usage_error({"-np", "two", "prog"}), Contains("two") && Contains("--help"));
  CHECK_THAT(usage_error({"-np", "-1", "prog"}), Contains("at least 1"));
  CHECK(usage_error({"-np", "2", "-H", "a", "--hostfile", "f", "prog"}) ==
        "-H and --hostfile both given; use one of them");
  CHECK_THAT(usage_error({"-np", "2", "-p", "70000", "prog"}), Contains("1-65535"));
  CHECK_THAT(usage_error({"-np", "2", "--start-timeout", "0", "prog"}),
             Contains("--start-timeout must be a positive"));
  CHECK_THAT(usage_error({"-np", "2", "-x", "1BAD=2", "prog"}),
             Contains("'1BAD' is not a variable name") && Contains("-x NAME=value"));
  CHECK_THAT(usage_error({"-np", "2", "--log-level", "loud", "prog"}),
             Contains("--log-level 'loud' is unknown"));
  CHECK_THAT(usage_error({"-np", "2", "--cycle-time-ms", "0", "prog"}), Contains("> 0"));
  CHECK_THAT(usage_error({"-np", "2", "--cache-capacity", "-3", "prog"}), Contains(">= 0"));
  CHECK_THAT(usage_error({"-np", "2", "--fusion-threshold-mb", "-1", "prog"}), Contains(">= 0"));
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-np", "2", "--bogus", "prog"}, {"-np", "2"}, {"-np", "x", "p"}}) {
    CHECK(usage_error(args).find('\n') == std::string::npos);
  }
}
