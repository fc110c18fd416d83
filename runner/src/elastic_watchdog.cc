// SPDX-License-Identifier: Apache-2.0
// The step watchdog's rules (elastic_watchdog.h).
#include "hvd/runner/elastic_watchdog.h"

#include <algorithm>
#include <cstdio>

namespace hvd::runner {

void StepWatchdog::started(int rank, const std::string& host) { ranks_[rank].host = host; }

void StepWatchdog::progress(int rank, double now) {
  if (!armed_at_) armed_at_ = now;
  auto& r = ranks_[rank];
  r.last = std::max(r.last.value_or(now), now);
}

void StepWatchdog::finished(int rank) { ranks_[rank].finished = true; }

std::optional<Stall> StepWatchdog::check(double now) const {
  if (timeout_s_ <= 0 || !armed_at_) return std::nullopt;
  Stall stall;
  stall.silent_s = -1;
  for (const auto& [rank, r] : ranks_) {
    if (r.finished) continue;
    const double silent = now - r.last.value_or(*armed_at_);
    // One rank that reported within the timeout (rank-local work calling report_progress(),
    // the others waiting for it in their next collective) keeps the generation alive.
    if (silent <= timeout_s_) return std::nullopt;
    stall.ranks.push_back(rank);
    stall.silent_s = stall.silent_s < 0 ? silent : std::min(stall.silent_s, silent);
  }
  if (stall.ranks.empty()) return std::nullopt;
  return stall;
}

std::string StepWatchdog::host_of(int rank) const {
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? "" : it->second.host;
}

std::string describe_stall(const Stall& stall, const StepWatchdog& watchdog) {
  std::string who;
  for (size_t i = 0; i < stall.ranks.size() && i < 8; ++i) {
    const int r = stall.ranks[i];
    who += (i ? ", " : "") + std::to_string(r) + " (" + watchdog.host_of(r) + ")";
  }
  if (stall.ranks.size() > 8) who += ", ... (" + std::to_string(stall.ranks.size()) + " ranks)";
  char times[96];
  std::snprintf(times, sizeof times, " made no progress for %.1f s (--elastic-step-timeout %g",
                stall.silent_s, watchdog.timeout_s());
  return std::string("hvdrun: elastic: rank") + (stall.ranks.size() > 1 ? "s " : " ") + who +
         times +
         "; progress is a completed collective, a commit or a call of "
         "hvd.elastic.report_progress() (C++: hvd::elastic::report_progress()), which long "
         "rank-local work such as validation on one rank, a checkpoint or a compilation must "
         "call at least once per timeout); treating it as a failure and stopping all ranks";
}

}  // namespace hvd::runner
