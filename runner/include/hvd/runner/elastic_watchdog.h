// SPDX-License-Identifier: Apache-2.0
// Elastic mode's step watchdog, no I/O: which ranks stopped making progress.
//
// A rank can stop without dying (SIGSTOP, a network partition, a deadlock): its process and
// its wrapper's connection stay up, so nothing else would notice. Each rank's program reports
// progress (a collective completed or a commit made; optimizer/include/hvd/optim/
// elastic_progress.h, for Python and libtorch programs alike) through its wrapper to hvdrun
// (BEAT, wire.h). The watchdog arms at the first report of any rank of the generation; from then
// on, when no rank that is still running has reported for longer than the step timeout, those
// ranks are stalled, and hvdrun handles it like a death (the generation is stopped and the next
// one resumes from the last commit). One rank reporting is enough: a rank that does long
// rank-local work (validation on rank 0 alone, a checkpoint, a compilation) calls
// hvd.elastic.report_progress() / hvd::elastic::report_progress() while the others wait for it
// in their next collective, where they report nothing. A stopped or deadlocked rank stops the
// others in that same collective, so every rank falls silent. What this cannot see: a rank
// stuck while the others keep completing collectives among themselves (a process set without
// it), or one that calls report_progress() in an endless loop; the first is found once the
// others need it. Before the first report (Python
// and torch starting, hvd.init)
// nothing is watched, and a program that never reports (not using @hvd.elastic.run or
// hvd::elastic::run) is never stopped by the watchdog.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hvd::runner {

struct Stall {
  std::vector<int> ranks;  // the running ranks, all silent for longer than the timeout, ascending
  double silent_s = 0;     // how long the job has been silent: the shortest silence among them
};

// Times are seconds on any one monotonic clock (the caller's: tests need not sleep).
class StepWatchdog {
 public:
  // `timeout_s` <= 0 disables the watchdog (check() never reports a stall).
  explicit StepWatchdog(double timeout_s) : timeout_s_(timeout_s) {}

  // Rank `rank` started (its wrapper said HELLO).
  void started(int rank, const std::string& host);
  // Rank `rank` reported progress at `now`; the first report of any rank arms the watchdog.
  void progress(int rank, double now);
  // Rank `rank` completed or exited: it is no longer watched.
  void finished(int rank);

  // The stalled ranks at `now`: every running rank when none reported within the timeout;
  // nullopt when one did.
  std::optional<Stall> check(double now) const;

  bool armed() const { return armed_at_.has_value(); }
  double timeout_s() const { return timeout_s_; }
  // The host of a started rank ("" when unknown).
  std::string host_of(int rank) const;

 private:
  struct Rank {
    std::string host;
    std::optional<double> last;
    bool finished = false;
  };
  double timeout_s_;
  std::optional<double> armed_at_;
  std::map<int, Rank> ranks_;
};

// One line for the user: which ranks, how long, the timeout and what counts as progress (naming
// hvd.elastic.report_progress() and hvd::elastic::report_progress()).
std::string describe_stall(const Stall& stall, const StepWatchdog& watchdog);

}  // namespace hvd::runner
