// SPDX-License-Identifier: Apache-2.0
// Elastic mode's planning (elastic.h).
#include "hvd/runner/elastic.h"

#include <algorithm>
#include <csignal>

#include "hvd/runner/errors.h"
#include "hvd/runner/wire.h"

namespace hvd::runner {

namespace {

// A rank's death by a signal of its own: any but the TERM hvdrun sends and SIGPIPE (a
// consequence of a peer's death). The caller rules out hvdrun's own KILL.
bool died_by_own_signal(int code) {
  if (code <= kExitSignalBase || code >= kExitSignalBase + 65) return false;
  const int sig = code - kExitSignalBase;
  return sig != SIGTERM && sig != SIGPIPE;
}

}  // namespace

bool supersedes_restart_request(int first_code, int later_code, bool kill_sent) {
  if (first_code == kExitLaunch) return later_code == kExitElasticFatal;
  if (first_code != kExitElasticRestart) return false;
  if (later_code == kExitElasticFatal) return true;
  return !kill_sent && died_by_own_signal(later_code);
}

bool supersedes_lost_rank(int later_code, bool kill_sent, double after_s, double grace_s) {
  if (later_code == kExitElasticFatal) return true;
  return !kill_sent && after_s < std::min(1.0, grace_s / 2) && died_by_own_signal(later_code);
}

bool explains_restart_request(int later_code, bool kill_sent) {
  if (later_code == 0 || later_code == kExitElasticRestart) return false;
  const int sig = later_code > kExitSignalBase ? later_code - kExitSignalBase : 0;
  return sig != SIGTERM && sig != SIGPIPE && !(kill_sent && sig == SIGKILL);
}

namespace {

// "rank 1 on host a: exit code 1: ValueError: bad" (the error line when one was seen).
std::string describe_failure(const GenerationOutcome& o) {
  const bool cause = o.error_rank >= 0;
  const int rank = cause ? o.error_rank : o.failed_rank;
  const int code = cause ? o.error_code : o.exit_code;
  const std::string& host = cause ? o.error_host : o.failed_host;
  std::string who = rank < 0 ? std::string("mpirun") : "rank " + std::to_string(rank);
  if (!host.empty()) who += " on host " + host;
  std::string what = code == 0 ? "exited 0 without completing" : describe_exit_code(code);
  if (code == kExitStalled) what = "no progress (--elastic-step-timeout)";
  if (cause && code == kExitLaunch) what = "its wrapper ended before it reported an exit code";
  return who + ": " + what + (o.last_error.empty() ? "" : ": " + o.last_error);
}

}  // namespace

ElasticDecision decide_after_generation(const GenerationOutcome& o, JobProgress& progress,
                                        const RestartLimits& limits) {
  const bool new_commit = o.last_commit > progress.last_commit;
  progress.last_commit = std::max(progress.last_commit, o.last_commit);
  if (o.signal != 0) {
    return {NextStep::kGiveUp, kExitSignalBase + o.signal,
            "hvdrun: elastic: stopped by a signal; not restarting"};
  }
  if (o.exit_code == 0 && o.rank0_done) return {NextStep::kSucceed, kExitOk, ""};
  if (o.exit_code == kExitElasticFatal) {
    return {NextStep::kGiveUp, kExitFatalError,
            "hvdrun: elastic: rank " + std::to_string(o.failed_rank) +
                (o.failed_host.empty() ? "" : " on host " + o.failed_host) +
                " ended with an error a restart cannot fix (exit code 76: an invalid argument, "
                "ranks disagreeing about a collective, a ValueError or TypeError, an elastic "
                "state error; its message is above); not restarting, exit code " +
                std::to_string(kExitFatalError)};
  }
  const int resets_done = progress.resets_done;
  if (o.hosts_changed) {
    progress.failed_in_a_row = 0;
  } else {
    progress.failed_in_a_row = new_commit ? 0 : progress.failed_in_a_row + 1;
  }
  const std::string why =
      o.exit_code == 0              ? "every rank exited 0 but rank 0 never reported completion"
      : o.exit_code == kExitStalled ? "a rank stopped making progress (--elastic-step-timeout)"
                                    : "a rank failed (" + describe_exit_code(o.exit_code) + ")";
  // The cause's code when a survivor's restart request (75) reached hvdrun before it: the job
  // then ends with the code of the rank that really failed, whichever exit came first.
  const int code = o.exit_code == 0                         ? kExitLaunch
                   : o.error_rank >= 0 && o.error_code != 0 ? o.error_code
                                                            : o.exit_code;
  if (limits.reset_limit >= 0 && resets_done >= limits.reset_limit) {
    return {NextStep::kGiveUp, code,
            "hvdrun: elastic: " + why + " and the job was already restarted " +
                std::to_string(resets_done) + " time(s) (--reset-limit " +
                std::to_string(limits.reset_limit) + "); giving up"};
  }
  if (limits.max_without_progress >= 0 && progress.failed_in_a_row > limits.max_without_progress) {
    const int n = progress.failed_in_a_row, k = limits.max_without_progress;
    const std::string which = n == 1 ? "a generation" : std::to_string(n) + " generations in a row";
    const std::string each = n == 1 ? "it" : "every one";
    const std::string commit =
        progress.last_commit < 0 ? "no commit was made yet: " + each + " failed before the first"
                                 : "the last commit is " + std::to_string(progress.last_commit) +
                                       ": " + each + " resumed from it and failed before the next";
    return {NextStep::kGiveUp, code,
            "hvdrun: elastic: " + which + " failed before any new commit (" + commit +
                "); the last failure: " + describe_failure(o) + "; not restarting after " +
                std::to_string(k) + (k == 1 ? " restart" : " restarts") +
                " without progress (--max-restarts-without-progress " + std::to_string(k) + ")"};
  }
  ++progress.resets_done;
  return {NextStep::kRestart, code,
          "hvdrun: elastic: " + why + "; starting generation " + std::to_string(resets_done + 1) +
              " from the last commit"};
}

std::vector<EnvVar> elastic_env(const std::string& state_dir, int generation) {
  return {{"HVD_ELASTIC_STATE_DIR", state_dir},
          {"HVD_ELASTIC_GENERATION", std::to_string(generation)}};
}

}  // namespace hvd::runner
