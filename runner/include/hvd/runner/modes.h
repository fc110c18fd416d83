// SPDX-License-Identifier: Apache-2.0
// hvdrun's entry points: the launcher and its hidden helper modes.
#pragma once

#include <string>
#include <vector>

namespace hvd::runner {

// `hvdrun [options] program args...`; returns the process exit code.
int run_launcher(const std::vector<std::string>& args);

// Hidden: `hvdrun --agent --connect A:P[,A:P] --cwd DIR --path PATH --program PROG
// [--state-base DIR]`, started over ssh by the preflight, which writes the job token as the
// first line of its stdin. Prints an AgentReport; exit 0 (2 without a token).
int run_agent(const std::vector<std::string>& args);

// Hidden: `hvdrun --rank-wrapper A:P[,A:P] GRACE_S GENERATION HEARTBEAT_S -- program args`, what
// mpirun starts for every rank, with the job token in $HVD_JOB_TOKEN. Reports to the master, runs
// the program, relays TERM/KILL.
int run_rank_wrapper(const std::vector<std::string>& args);

// `hvdrun --check-build`: what this build has; prints it and returns 0.
int run_check_build();

}  // namespace hvd::runner
