// SPDX-License-Identifier: Apache-2.0
// Elastic mode's planning, no I/O: what to do after a generation of the job ended.
//
// Open MPI 4.1 cannot shrink a live job, so `hvdrun --min-np N` runs the job in generations,
// each one mpirun. The ranks keep their last committed state in HVD_ELASTIC_STATE_DIR (host
// memory, /dev/shm) and the next generation resumes from it (bindings/python/hvd/common/
// elastic.py). A generation succeeds only when every rank exited 0 and rank 0 reported
// completion (DONE, wire.h); anything else is a failure, and the job restarts until
// --reset-limit restarts were made.
#pragma once

#include <string>
#include <vector>

#include "hvd/runner/env_forward.h"

namespace hvd::runner {

// How one generation ended.
struct GenerationOutcome {
  int exit_code = 0;        // supervise()'s code: 0, the first failed rank's code, 128+signal
  bool rank0_done = false;  // rank 0's program returned from @hvd.elastic.run
  int signal = 0;           // hvdrun itself got SIGINT/SIGTERM/SIGHUP (no restart then)
  int failed_rank = -1;     // the rank that failed first (-1: none, or mpirun alone failed)
};

// A rank's exit code asking for a new generation (hvd.elastic.RESTART_EXIT_CODE): it left
// after HorovodInternalError or HostsUpdatedInterrupt, not because its host failed.
inline constexpr int kExitElasticRestart = 75;

// Whether a rank's exit `later_code`, reported after the generation's first failure
// `first_code` while hvdrun stops the ranks, is the real cause and replaces it: the survivors of
// a rank's death see it through MPI and leave with kExitElasticRestart, and that exit can reach
// hvdrun before the dead rank's own. A later death by a signal other than the TERM that hvdrun
// sends (and SIGPIPE, a consequence of a peer's death) is that cause, as long as hvdrun has not
// sent KILL itself (`kill_sent`).
bool supersedes_restart_request(int first_code, int later_code, bool kill_sent);

enum class NextStep { kSucceed, kRestart, kGiveUp };

struct ElasticDecision {
  NextStep step = NextStep::kGiveUp;
  int exit_code = 0;    // hvdrun's exit code for kSucceed/kGiveUp
  std::string message;  // one line for the user ("" for kSucceed)
};

// `resets_done`: restarts made so far; `reset_limit`: -1 = none.
ElasticDecision decide_after_generation(const GenerationOutcome& outcome, int resets_done,
                                        int reset_limit);

// The variables every rank of generation `generation` (0, 1, ...) gets.
std::vector<EnvVar> elastic_env(const std::string& state_dir, int generation);

}  // namespace hvd::runner
