// SPDX-License-Identifier: Apache-2.0
// Progress reports for hvdrun's step watchdog (runner/include/hvd/runner/elastic_watchdog.h),
// in one place for libtorch programs (hvd::elastic::run, State::commit) and Python programs
// (hvd.elastic calls report_progress through the extension).
//
// Under hvdrun's elastic mode the rank wrapper names a file in HVD_ELASTIC_PROGRESS_FILE, polls
// it twice a second and tells hvdrun each time its content changed. A rank reports progress,
// i.e. rewrites the file in place with a growing sequence number and its last commit id
// ("<seq> <commit id>", each 20 characters, commit id -1 before any; then a newline):
// - when the elastic run starts (this arms the watchdog for the generation),
// - at every commit (report_commit: hvdrun counts generations that failed before a new commit,
//   --max-restarts-without-progress),
// - at every explicit report_progress() call: long rank-local work (validation on one rank, a
//   checkpoint, a compilation) calls it to say it is alive, while the other ranks wait for it,
// - whenever a collective completed since the last look: a thread started by the first report
//   compares the runtime's count of executed responses every kProgressPoll.
//
// A rank that is stopped (SIGSTOP), cut off (a network partition) or deadlocked completes no
// collective, and neither do its peers, which wait for it in theirs: their files stop changing
// and hvdrun stops the generation after --elastic-step-timeout seconds. A long step counts as
// progress as long as its collectives complete (every gradient's allreduce does); computing
// for longer than the timeout without any collective or commit does not.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "hvd/core/status.h"

namespace hvd::elastic {

/// Whether `e`, out of an elastic run, is an error a restart cannot fix: an hvd::Error of code
/// kInvalidArgument or kMismatch (every rank gets the same at the same step again) or
/// kElasticState (the committed state cannot be trusted or kept), or a std::logic_error
/// (std::invalid_argument, std::out_of_range, ...: the program's own bug).
bool is_fatal_error(const std::exception& e);

/// In hvdrun's elastic mode (HVD_ELASTIC_STATE_DIR set): prints "hvd.elastic: rank R: `type`:
/// `what`; a restart cannot fix this error: ending the job (exit 76)" and ends the process with
/// kFatalExitCode (hvd/optim/elastic_store.h; hvdrun then ends the job with exit code 1 instead
/// of starting a new generation), without running destructors or atexit handlers (hvd's
/// shutdown would wait for peers blocked in a collective). Outside elastic mode it returns: the
/// caller rethrows.
void end_job_for_fatal_error(int rank, const char* type, const char* what);

/// How often the watching thread looks at the runtime's collective count.
inline constexpr std::chrono::milliseconds kProgressPoll{500};

/// Writes progress reports to one file; a thread started by start() reports whenever `count`
/// (the collectives completed so far; nullopt: none can complete now) changed.
class ProgressReporter {
 public:
  using Count = std::function<std::optional<uint64_t>()>;
  ProgressReporter(std::string path, Count count, std::chrono::milliseconds poll = kProgressPoll);
  ~ProgressReporter();  ///< stop()
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  /// Opens (creates) the file and starts the watching thread; the error names the path.
  [[nodiscard]] Status start();
  /// Writes the next sequence number (and the last commit id). Thread-safe.
  void report();
  /// Records `commit_id` as the last commit, then report(). Thread-safe.
  void report_commit(uint64_t commit_id);
  /// Ends the watching thread; the file stays. Idempotent.
  void stop();
  /// Reports written so far.
  uint64_t reports() const;

 private:
  void watch();

  const std::string path_;
  const Count count_;
  const std::chrono::milliseconds poll_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int fd_ = -1;
  uint64_t seq_ = 0;
  int64_t commit_ = -1;
  std::thread thread_;
};

/// Tells hvdrun's step watchdog that this rank made progress (top of this file); no-op outside
/// elastic mode (no HVD_ELASTIC_PROGRESS_FILE). Long rank-local work (validation on one rank,
/// a checkpoint, a compilation) calls it at least once per --elastic-step-timeout. The first
/// call starts the process's reporter, which watches the global process set's completed
/// collectives. Thread-safe; throws hvd::Error when the file cannot be opened.
void report_progress();
/// report_progress(), also telling hvdrun that this rank made commit `commit_id` (State::commit
/// and Python's commit() call it).
void report_commit(uint64_t commit_id);

}  // namespace hvd::elastic
