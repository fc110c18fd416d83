// SPDX-License-Identifier: Apache-2.0
// Elastic mode's planning (elastic.h).
#include "hvd/runner/elastic.h"

#include <csignal>

#include "hvd/runner/errors.h"
#include "hvd/runner/wire.h"

namespace hvd::runner {

bool supersedes_restart_request(int first_code, int later_code, bool kill_sent) {
  if (first_code != kExitElasticRestart || kill_sent) return false;
  if (later_code <= kExitSignalBase || later_code >= kExitSignalBase + 65) return false;
  const int sig = later_code - kExitSignalBase;
  return sig != SIGTERM && sig != SIGPIPE;
}

ElasticDecision decide_after_generation(const GenerationOutcome& o, int resets_done,
                                        int reset_limit) {
  if (o.signal != 0) {
    return {NextStep::kGiveUp, kExitSignalBase + o.signal,
            "hvdrun: elastic: stopped by a signal; not restarting"};
  }
  if (o.exit_code == 0 && o.rank0_done) return {NextStep::kSucceed, kExitOk, ""};
  const std::string why =
      o.exit_code == 0              ? "every rank exited 0 but rank 0 never reported completion"
      : o.exit_code == kExitStalled ? "a rank stopped making progress (--elastic-step-timeout)"
                                    : "a rank failed (" + describe_exit_code(o.exit_code) + ")";
  const int code = o.exit_code == 0 ? kExitLaunch : o.exit_code;
  if (reset_limit >= 0 && resets_done >= reset_limit) {
    return {NextStep::kGiveUp, code,
            "hvdrun: elastic: " + why + " and the job was already restarted " +
                std::to_string(resets_done) + " time(s) (--reset-limit " +
                std::to_string(reset_limit) + "); giving up"};
  }
  return {NextStep::kRestart, code,
          "hvdrun: elastic: " + why + "; starting generation " + std::to_string(resets_done + 1) +
              " from the last commit"};
}

std::vector<EnvVar> elastic_env(const std::string& state_dir, int generation) {
  return {{"HVD_ELASTIC_STATE_DIR", state_dir},
          {"HVD_ELASTIC_GENERATION", std::to_string(generation)}};
}

}  // namespace hvd::runner
