// SPDX-License-Identifier: Apache-2.0
// Elastic mode's planning, no I/O: what to do after a generation of the job ended.
//
// Open MPI 4.1 cannot shrink a live job, so `hvdrun --min-np N` runs the job in generations,
// each one mpirun. The ranks keep their last committed state in HVD_ELASTIC_STATE_DIR (host
// memory, /dev/shm) and the next generation resumes from it (bindings/python/hvd/common/
// elastic.py). A generation succeeds only when every rank exited 0 and rank 0 reported
// completion (DONE, wire.h); anything else is a failure, and the job restarts, except when a
// restart cannot help (decide_after_generation): a rank that exited kExitElasticFatal, a run of
// generations that failed before any new commit (--max-restarts-without-progress) or
// --reset-limit restarts made.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/runner/env_forward.h"

namespace hvd::runner {

// How one generation ended.
struct GenerationOutcome {
  int exit_code = 0;          // supervise()'s code: 0, the first failed rank's code, 128+signal
  bool rank0_done = false;    // rank 0's program returned from @hvd.elastic.run
  int signal = 0;             // hvdrun itself got SIGINT/SIGTERM/SIGHUP (no restart then)
  int failed_rank = -1;       // the rank that failed first (-1: none, or mpirun alone failed)
  std::string failed_host{};  // its host ("" when unknown)
  // The failure the give-up messages quote: the failed rank's, or, when that rank only asked
  // for a restart (kExitElasticRestart), the first rank that failed otherwise after it (the
  // cause: e.g. a Python exception whose rank's shutdown reached the others first).
  int error_rank = -1;         // -1: the failed rank's own
  std::string error_host{};    // the cause's host
  int error_code = 0;          // the cause's exit code (kExitLaunch: its wrapper vanished first)
  std::string last_error{};    // the quoted rank's last line on stderr ("" when none was seen)
  int64_t last_commit = -1;    // the highest commit id any rank reported (BEAT; -1: none)
  bool hosts_changed = false;  // the ranks left for hvdrun's host change (HOSTS), not a failure
};

// A rank's exit code asking for a new generation (hvd.elastic.RESTART_EXIT_CODE): it left
// after HorovodInternalError or HostsUpdatedInterrupt, not because its host failed.
inline constexpr int kExitElasticRestart = 75;
// A rank's exit code saying that a restart cannot fix its error (hvd.elastic.FATAL_EXIT_CODE,
// hvd::elastic::kFatalExitCode): an invalid argument, a mismatch between the ranks' collectives,
// a ValueError/TypeError from the program (C++: std::logic_error), an elastic state error. The
// rank printed the error; hvdrun ends the job with kExitFatalError.
inline constexpr int kExitElasticFatal = 76;
// hvdrun's exit code after kExitElasticFatal: 1, what a job without elastic mode gives when its
// program ends with an uncaught Python exception (the interpreter's exit code).
inline constexpr int kExitFatalError = 1;

// Whether a rank's exit `later_code`, reported after the generation's first failure
// `first_code` while hvdrun stops the ranks, is the real cause and replaces it: the survivors of
// a rank's death see it through MPI and leave with kExitElasticRestart, and that exit can reach
// hvdrun before the dead rank's own. A later death by a signal other than the TERM that hvdrun
// sends (and SIGPIPE, a consequence of a peer's death) is that cause, as long as hvdrun has not
// sent KILL itself (`kill_sent`). A later kExitElasticFatal always replaces a restart request:
// the survivors of a rank that ended the job for good see its exit as a failed collective.
// It also replaces a lost wrapper (kExitLaunch: mpirun's abort after the fatal exit can kill
// another rank's wrapper, whose closed connection may reach hvdrun first).
bool supersedes_restart_request(int first_code, int later_code, bool kill_sent);

// Whether a rank's exit `later_code`, reported `after_s` seconds after another rank's wrapper
// vanished without reporting an exit (hvdrun's "lost contact", taken as the first failure), is
// the real first failure and replaces it. mpirun aborts the job when a rank dies and kills the
// other ranks' wrappers; when hvdrun reads that closed connection before the dead rank's EXIT
// (both ready at once), the lost wrapper is the consequence, not the cause. A death by a signal
// other than TERM and PIPE (KILL only while hvdrun has not sent it, `kill_sent`) counts when it
// arrives within min(1 s, grace / 2) of the loss: a wrapper kills its rank with KILL itself a
// grace period after a TERM, so a later KILL may be the consequence of hvdrun's own stop.
// kExitElasticFatal always counts. Plain exit codes never do (a rank may exit 1 because its
// peer vanished).
bool supersedes_lost_rank(int later_code, bool kill_sent, double after_s, double grace_s);

// Whether a rank's exit `later_code`, reported after a restart request (kExitElasticRestart)
// began stopping the generation, is a failure of its own worth quoting as the restart's cause
// (GenerationOutcome::error_rank): any non-zero code but another restart request, hvdrun's TERM
// (or KILL once sent) and SIGPIPE.
bool explains_restart_request(int later_code, bool kill_sent);

enum class NextStep { kSucceed, kRestart, kGiveUp };

struct ElasticDecision {
  NextStep step = NextStep::kGiveUp;
  int exit_code = 0;    // hvdrun's exit code for kSucceed/kGiveUp
  std::string message;  // one line for the user ("" for kSucceed)
};

// When to stop restarting (hvdrun's options).
struct RestartLimits {
  int reset_limit = -1;  // --reset-limit: restarts in all; -1 = no limit
  // --max-restarts-without-progress: restarts in a row after generations that failed before
  // any new commit; the next such failure ends the job. -1 = no limit.
  int max_without_progress = 3;
};

// What the job's earlier generations did; decide_after_generation updates it.
struct JobProgress {
  int resets_done = 0;       // restarts made so far
  int64_t last_commit = -1;  // the highest commit id reported so far (-1: none)
  int failed_in_a_row = 0;   // generations in a row, up to the last, that failed before a new
                             // commit (a generation ended by a host change does not count)
};

// After a generation: succeed, restart or give up, in this order of precedence:
// - a signal to hvdrun: give up (128 + signal);
// - every rank exited 0 and rank 0 completed: succeed;
// - a rank exited kExitElasticFatal: give up with kExitFatalError (a restart runs into the same
//   error);
// - the generation failed before any new commit (its last_commit is not above progress's) and
//   limits.max_without_progress restarts in a row already followed such generations: give up,
//   naming the last commit, the failed rank and its last error line;
// - --reset-limit restarts made: give up;
// - otherwise restart. Give-ups exit with the failed rank's code (kExitLaunch for an early
//   exit 0). `progress` is updated for the next generation whatever the decision.
ElasticDecision decide_after_generation(const GenerationOutcome& outcome, JobProgress& progress,
                                        const RestartLimits& limits);

// The variables every rank of generation `generation` (0, 1, ...) gets.
std::vector<EnvVar> elastic_env(const std::string& state_dir, int generation);

}  // namespace hvd::runner
