// SPDX-License-Identifier: Apache-2.0
// [unit] elastic mode's planning: when a generation counts as success, restart or give up.
#include "hvd/runner/elastic.h"

#include <csignal>

#include "hvd/runner/cli.h"
#include "hvd/runner/errors.h"
#include "hvd_catch.h"
#include "usage_error.h"

using namespace hvd::runner;
using hvd_runner_test::usage_error;

TEST_CASE("a generation succeeds only when every rank exited 0 and rank 0 completed", "[unit]") {
  auto d = decide_after_generation({0, true, 0}, 0, -1);
  CHECK(d.step == NextStep::kSucceed);
  CHECK(d.exit_code == 0);
  d = decide_after_generation({0, false, 0}, 0, -1);
  CHECK(d.step == NextStep::kRestart);
  CHECK_THAT(d.message, hvd::test::Contains("rank 0 never reported completion"));
  CHECK_THAT(d.message, hvd::test::Contains("starting generation 1"));
}

TEST_CASE("a failed generation restarts until --reset-limit restarts were made", "[unit]") {
  GenerationOutcome killed{137, false, 0};
  CHECK(decide_after_generation(killed, 0, 2).step == NextStep::kRestart);
  CHECK(decide_after_generation(killed, 1, 2).step == NextStep::kRestart);
  auto d = decide_after_generation(killed, 2, 2);
  CHECK(d.step == NextStep::kGiveUp);
  CHECK(d.exit_code == 137);
  CHECK_THAT(d.message, hvd::test::Contains("--reset-limit 2"));
  CHECK_THAT(d.message, hvd::test::Contains("SIGKILL"));
  CHECK(decide_after_generation(killed, 0, 0).step == NextStep::kGiveUp);
  CHECK(decide_after_generation(killed, 1000, -1).step == NextStep::kRestart);
  // An early exit 0 that reaches the limit still fails the job.
  CHECK(decide_after_generation({0, false, 0}, 1, 1).exit_code == kExitLaunch);
}

TEST_CASE("a rank's death reported after a survivor's restart request is the failure", "[unit]") {
  constexpr int kKilled = kExitSignalBase + SIGKILL, kSegv = kExitSignalBase + SIGSEGV;
  CHECK(supersedes_restart_request(kExitElasticRestart, kKilled, false));
  CHECK(supersedes_restart_request(kExitElasticRestart, kSegv, false));
  // hvdrun's own TERM or KILL, a SIGPIPE from the dead peer, a plain exit code: not a cause.
  CHECK_FALSE(supersedes_restart_request(kExitElasticRestart, kExitSignalBase + SIGTERM, false));
  CHECK_FALSE(supersedes_restart_request(kExitElasticRestart, kKilled, true));
  CHECK_FALSE(supersedes_restart_request(kExitElasticRestart, kExitSignalBase + SIGPIPE, false));
  CHECK_FALSE(supersedes_restart_request(kExitElasticRestart, 1, false));
  CHECK_FALSE(supersedes_restart_request(kExitElasticRestart, kExitElasticRestart, false));
  // Only a restart request is replaced: a first real failure stays the failure.
  CHECK_FALSE(supersedes_restart_request(kKilled, kSegv, false));
  CHECK_FALSE(supersedes_restart_request(1, kKilled, false));
}

TEST_CASE("a signal to hvdrun ends an elastic job without a restart", "[unit]") {
  auto d = decide_after_generation({143, false, SIGTERM}, 0, -1);
  CHECK(d.step == NextStep::kGiveUp);
  CHECK(d.exit_code == 128 + SIGTERM);
}

TEST_CASE("every rank learns the state directory and its generation", "[unit]") {
  auto env = elastic_env("/dev/shm/hvd-elastic-x", 3);
  REQUIRE(env.size() == 2);
  CHECK(env[0] == EnvVar{"HVD_ELASTIC_STATE_DIR", std::string("/dev/shm/hvd-elastic-x")});
  CHECK(env[1] == EnvVar{"HVD_ELASTIC_GENERATION", std::string("3")});
}

TEST_CASE("--min-np and --reset-limit parse and are checked", "[unit]") {
  auto p = parse_command_line({"-np", "4", "--min-np", "2", "--reset-limit", "3", "prog"});
  CHECK(p.options.min_np == 2);
  CHECK(p.options.reset_limit == 3);
  CHECK(parse_command_line({"-np", "2", "prog"}).options.min_np == 0);
  const auto call_1 = [] { parse_command_line({"-np", "2", "--min-np", "3", "prog"}); };
  CHECK_THAT(usage_error(call_1), hvd::test::Contains("--min-np 3 must be between 1 and -np 2"));
  const auto call_2 = [] { parse_command_line({"-np", "2", "--reset-limit", "1", "prog"}); };
  CHECK_THAT(usage_error(call_2), hvd::test::Contains("--reset-limit needs elastic mode"));
}
