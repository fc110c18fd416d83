// SPDX-License-Identifier: Apache-2.0
// [unit] elastic mode's planning: when a generation counts as success, restart or give up.
#include "hvd/runner/elastic.h"

#include <csignal>

#include "hvd/runner/cli.h"
#include "hvd/runner/errors.h"
#include "hvd/runner/wire.h"
#include "hvd_catch.h"
#include "usage_error.h"

using namespace hvd::runner;
using hvd_runner_test::usage_error;

namespace {

// The decision with `resets` restarts made and --reset-limit `limit`, progress not counted.
ElasticDecision decide(const GenerationOutcome& o, int resets, int limit) {
  JobProgress p;
  p.resets_done = resets;
  return decide_after_generation(o, p, {limit, -1});
}

GenerationOutcome failed(int code, int64_t last_commit, int rank = 1) {
  GenerationOutcome o{code, false, 0, rank};
  o.failed_host = "a";
  o.last_commit = last_commit;
  return o;
}

}  // namespace

TEST_CASE("a generation succeeds only when every rank exited 0 and rank 0 completed", "[unit]") {
  auto d = decide({0, true, 0}, 0, -1);
  CHECK(d.step == NextStep::kSucceed);
  CHECK(d.exit_code == 0);
  d = decide({0, false, 0}, 0, -1);
  CHECK(d.step == NextStep::kRestart);
  CHECK_THAT(d.message, hvd::test::Contains("rank 0 never reported completion"));
  CHECK_THAT(d.message, hvd::test::Contains("starting generation 1"));
}

TEST_CASE("a failed generation restarts until --reset-limit restarts were made", "[unit]") {
  GenerationOutcome killed{137, false, 0};
  CHECK(decide(killed, 0, 2).step == NextStep::kRestart);
  CHECK(decide(killed, 1, 2).step == NextStep::kRestart);
  auto d = decide(killed, 2, 2);
  CHECK(d.step == NextStep::kGiveUp);
  CHECK(d.exit_code == 137);
  CHECK_THAT(d.message, hvd::test::Contains("--reset-limit 2"));
  CHECK_THAT(d.message, hvd::test::Contains("SIGKILL"));
  CHECK(decide(killed, 0, 0).step == NextStep::kGiveUp);
  CHECK(decide(killed, 1000, -1).step == NextStep::kRestart);
  // An early exit 0 that reaches the limit still fails the job.
  CHECK(decide({0, false, 0}, 1, 1).exit_code == kExitLaunch);
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

TEST_CASE("a rank's fatal error (exit 76) ends the job at once with exit code 1", "[unit]") {
  JobProgress p;
  auto d = decide_after_generation(failed(kExitElasticFatal, -1), p, {});
  CHECK(d.step == NextStep::kGiveUp);
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.message, hvd::test::Contains("rank 1 on host a ended with an error a restart "
                                            "cannot fix"));
  CHECK_THAT(d.message, hvd::test::Contains("not restarting"));
  // Whatever the limits and the progress: no restart.
  p = JobProgress{};
  decide_after_generation(failed(kExitElasticRestart, 5), p, {-1, -1});
  CHECK(decide_after_generation(failed(kExitElasticFatal, 9), p, {-1, -1}).step ==
        NextStep::kGiveUp);
  // A survivor's restart request (75) is replaced by the fatal exit reported after it.
  CHECK(supersedes_restart_request(kExitElasticRestart, kExitElasticFatal, false));
  CHECK(supersedes_restart_request(kExitElasticRestart, kExitElasticFatal, true));
  CHECK_FALSE(supersedes_restart_request(kExitSignalBase + SIGKILL, kExitElasticFatal, false));
  // A wrapper lost first (mpirun's abort after the fatal exit killed it): the fatal exit wins.
  CHECK(supersedes_restart_request(kExitLaunch, kExitElasticFatal, false));
  CHECK(supersedes_restart_request(kExitLaunch, kExitElasticFatal, true));
  CHECK_FALSE(supersedes_restart_request(kExitLaunch, 1, false));
  CHECK_FALSE(supersedes_restart_request(kExitLaunch, kExitElasticRestart, false));
}

TEST_CASE("a rank's death reported soon after another rank's wrapper was lost is the failure",
          "[unit]") {
  constexpr int kKilled = kExitSignalBase + SIGKILL, kSegv = kExitSignalBase + SIGSEGV;
  constexpr double kGrace = 5.0;
  // mpirun's abort after rank 1's death killed rank 0's wrapper, read first: rank 1 is the cause.
  CHECK(supersedes_lost_rank(kKilled, false, 0.0, kGrace));
  CHECK(supersedes_lost_rank(kSegv, false, 0.5, kGrace));
  CHECK(supersedes_lost_rank(kExitElasticFatal, false, 30.0, kGrace));
  CHECK(supersedes_lost_rank(kExitElasticFatal, true, 30.0, kGrace));
  // Too late (a wrapper's own KILL a grace period after hvdrun's TERM), or hvdrun's KILL.
  CHECK_FALSE(supersedes_lost_rank(kKilled, false, 1.0, kGrace));
  CHECK_FALSE(supersedes_lost_rank(kKilled, false, 0.3, 0.5));
  CHECK(supersedes_lost_rank(kKilled, false, 0.2, 0.5));
  CHECK_FALSE(supersedes_lost_rank(kKilled, true, 0.0, kGrace));
  // hvdrun's TERM, a SIGPIPE from the lost peer, plain codes: consequences, not causes.
  CHECK_FALSE(supersedes_lost_rank(kExitSignalBase + SIGTERM, false, 0.0, kGrace));
  CHECK_FALSE(supersedes_lost_rank(kExitSignalBase + SIGPIPE, false, 0.0, kGrace));
  CHECK_FALSE(supersedes_lost_rank(1, false, 0.0, kGrace));
  CHECK_FALSE(supersedes_lost_rank(kExitElasticRestart, false, 0.0, kGrace));
  CHECK_FALSE(supersedes_lost_rank(0, false, 0.0, kGrace));
}

TEST_CASE("the failure after a restart request is quoted as its cause", "[unit]") {
  CHECK(explains_restart_request(1, false));
  CHECK(explains_restart_request(kExitSignalBase + SIGSEGV, false));
  CHECK(explains_restart_request(kExitSignalBase + SIGKILL, false));
  CHECK_FALSE(explains_restart_request(0, false));
  CHECK_FALSE(explains_restart_request(kExitElasticRestart, false));
  CHECK_FALSE(explains_restart_request(kExitSignalBase + SIGTERM, false));  // hvdrun's TERM
  CHECK_FALSE(explains_restart_request(kExitSignalBase + SIGPIPE, false));
  CHECK_FALSE(explains_restart_request(kExitSignalBase + SIGKILL, true));  // hvdrun's KILL
  // A give-up quotes the cause: rank 1's exception, not rank 0's restart request before it.
  JobProgress p;
  GenerationOutcome o = failed(kExitElasticRestart, -1, 0);
  o.error_rank = 1;
  o.error_host = "b";
  o.error_code = 1;
  o.last_error = "RuntimeError: out of memory";
  const auto d = decide_after_generation(o, p, {-1, 0});
  CHECK(d.step == NextStep::kGiveUp);
  CHECK_THAT(d.message, hvd::test::Contains("the last failure: rank 1 on host b: exit code 1: "
                                            "RuntimeError: out of memory"));
  // ... and ends with the cause's exit code (1), not the restart request's (75).
  CHECK(d.exit_code == 1);
  // A cause whose wrapper vanished before it reported a code (mpirun's abort killed it).
  JobProgress p2;
  o.error_code = kExitLaunch;
  const auto lost = decide_after_generation(o, p2, {-1, 0});
  CHECK(lost.exit_code == kExitLaunch);
  CHECK_THAT(lost.message,
             hvd::test::Contains("the last failure: rank 1 on host b: its wrapper ended before it "
                                 "reported an exit code: RuntimeError: out of memory"));
}

TEST_CASE("generations failing before any new commit end the job after K restarts", "[unit]") {
  JobProgress p;
  const RestartLimits k3{-1, 3};
  // Generation 0 commits up to 4, then fails: progress, restart.
  auto d = decide_after_generation(failed(137, 4), p, k3);
  CHECK(d.step == NextStep::kRestart);
  CHECK(p.failed_in_a_row == 0);
  CHECK(p.last_commit == 4);
  // Generations 1-3 resume from commit 4 and fail before commit 5: three more restarts.
  for (int i = 1; i <= 3; ++i) {
    GenerationOutcome o = failed(1, 4);
    d = decide_after_generation(o, p, k3);
    CHECK(d.step == NextStep::kRestart);
    CHECK(p.failed_in_a_row == i);
  }
  // Generation 4 fails so too: the fourth in a row, past 3 restarts. Its rank's last error line
  // is quoted.
  GenerationOutcome o = failed(1, 4);
  o.last_error = "ValueError: step 13 needs a bigger batch";
  d = decide_after_generation(o, p, k3);
  CHECK(d.step == NextStep::kGiveUp);
  CHECK(d.exit_code == 1);
  CHECK(p.resets_done == 4);
  CHECK_THAT(d.message, hvd::test::Contains("4 generations in a row failed before any new commit"));
  CHECK_THAT(d.message, hvd::test::Contains("the last commit is 4"));
  CHECK_THAT(d.message, hvd::test::Contains("rank 1 on host a: exit code 1: ValueError: step 13 "
                                            "needs a bigger batch"));
  CHECK_THAT(d.message, hvd::test::Contains("--max-restarts-without-progress 3"));

  // Without any commit at all, and a stall (the watchdog's code) without an error line.
  p = JobProgress{};
  for (int i = 0; i < 3; ++i) {
    CHECK(decide_after_generation(failed(kExitStalled, -1), p, k3).step == NextStep::kRestart);
  }
  d = decide_after_generation(failed(kExitStalled, -1), p, k3);
  CHECK(d.step == NextStep::kGiveUp);
  CHECK(d.exit_code == kExitStalled);
  CHECK_THAT(d.message, hvd::test::Contains("no commit was made yet"));
  CHECK_THAT(d.message, hvd::test::Contains("no progress (--elastic-step-timeout)"));
}

TEST_CASE("a new commit resets the count of failures without progress", "[unit]") {
  JobProgress p;
  const RestartLimits k2{-1, 2};
  CHECK(decide_after_generation(failed(137, -1), p, k2).step == NextStep::kRestart);
  CHECK(decide_after_generation(failed(137, -1), p, k2).step == NextStep::kRestart);
  CHECK(p.failed_in_a_row == 2);
  // This one got to commit 1 before failing: the count starts again.
  CHECK(decide_after_generation(failed(137, 1), p, k2).step == NextStep::kRestart);
  CHECK(p.failed_in_a_row == 0);
  CHECK(decide_after_generation(failed(137, 1), p, k2).step == NextStep::kRestart);
  CHECK(decide_after_generation(failed(137, 1), p, k2).step == NextStep::kRestart);
  CHECK(decide_after_generation(failed(137, 1), p, k2).step == NextStep::kGiveUp);
  // A generation ended by a host change is not a failure; 0 allows no restart without
  // progress; -1 no limit.
  p = JobProgress{};
  GenerationOutcome moved = failed(kExitElasticRestart, -1);
  moved.hosts_changed = true;
  CHECK(decide_after_generation(moved, p, {-1, 0}).step == NextStep::kRestart);
  CHECK(decide_after_generation(failed(137, -1), p, {-1, 0}).step == NextStep::kGiveUp);
  p = JobProgress{};
  for (int i = 0; i < 50; ++i) {
    CHECK(decide_after_generation(failed(137, -1), p, {-1, -1}).step == NextStep::kRestart);
  }
  // A success is a success whatever came before.
  CHECK(decide_after_generation({0, true, 0}, p, {-1, 0}).step == NextStep::kSucceed);
}

TEST_CASE("BEAT carries the program's last commit id; a BEAT without one still parses", "[unit]") {
  Message beat{MessageKind::kBeat, "tok", "node1", 1, 7};
  beat.commit = 12;
  CHECK(format_message(beat) == "BEAT tok 1 node1 7 12");
  auto b = parse_message("BEAT tok 1 node1 7 12");
  REQUIRE(b.has_value());
  CHECK((b->kind == MessageKind::kBeat && b->value == 7 && b->commit == 12));
  b = parse_message("BEAT tok 1 node1 7");
  REQUIRE(b.has_value());
  CHECK(b->commit == -1);
  CHECK(format_message(*b) == "BEAT tok 1 node1 7");
  CHECK_FALSE(parse_message("BEAT tok 1 node1 7 x").has_value());
  CHECK_FALSE(parse_message("BEAT tok 1 node1 7 -5").has_value());
}

TEST_CASE("a signal to hvdrun ends an elastic job without a restart", "[unit]") {
  auto d = decide({143, false, SIGTERM}, 0, -1);
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

TEST_CASE("--max-restarts-without-progress parses: default 3, -1 no limit", "[unit]") {
  CHECK(parse_command_line({"-np", "2", "--min-np", "2", "prog"}).options.max_without_progress() ==
        3);
  auto p = parse_command_line(
      {"-np", "2", "--min-np", "2", "--max-restarts-without-progress", "-1", "prog"});
  CHECK(p.options.max_without_progress() == -1);
  const auto call_1 = [] {
    parse_command_line({"-np", "2", "--min-np", "2", "--max-restarts-without-progress", "-2", "p"});
  };
  CHECK_THAT(usage_error(call_1), hvd::test::Contains("must be -1 (no limit), 0 or more"));
  const auto call_2 = [] {
    parse_command_line({"-np", "2", "--max-restarts-without-progress", "1", "prog"});
  };
  CHECK_THAT(usage_error(call_2), hvd::test::Contains("needs elastic mode"));
}
