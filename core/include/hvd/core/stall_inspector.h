// SPDX-License-Identifier: Apache-2.0
// The stall inspector: rank 0's report of tensors some ranks submitted and others have not.
//
// Protocol (on top of the negotiation rounds in controller.h):
//  - Rank 0's coordinator table stamps each name when its first request arrives. A cached
//    request (which never reaches rank 0) that stays pending for the threshold is evicted from
//    the cache on every rank through the round's "invalid" bits, so it is re-sent to rank 0 and
//    timed there from then on (a stalled cached tensor is reported after up to twice the
//    threshold).
//  - Once some name has waited the threshold, rank 0 sets the "pending names" flag word of the
//    next round's AND; after that round every rank sends rank 0 the names it has pending (one
//    extra gather, only then). Rank 0 then logs one report: each stalled tensor, the ranks that
//    submitted it, the ranks missing and what each missing rank has pending instead.
//  - HVD_STALL_SHUTDOWN_TIME_SECONDS: once a name has waited that long, rank 0 stops every rank
//    at the next round with the report; every pending handle fails with it.
// Idle ranks take part in an empty round every heartbeat() so that all of this happens while
// the missing rank's loop has nothing to do.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "hvd/core/config.h"
#include "hvd/core/controller.h"

namespace hvd::core {

/// The report of `stalled` (non-empty, from Controller::stalled()), with `pending[r]` the
/// names rank r had pending when asked (empty vector: none; a missing rank beyond
/// `pending.size()` is reported as "not known"). `threshold_s` is the age every tensor listed
/// has reached. One line, no trailing advice.
std::string stall_report(const std::vector<StalledTensor>& stalled,
                         const std::vector<std::vector<std::string>>& pending, double threshold_s);

/// Rank 0's side of the stall inspector (see the file comment). Not thread-safe: the
/// background thread owns it.
class StallInspector {
 public:
  StallInspector() = default;
  /// Off when HVD_STALL_CHECK_DISABLE=1 or both times are 0.
  explicit StallInspector(const Config& c);
  /// The age at which a tensor counts as stalled (the smaller of the positive times; 0: off).
  double threshold_s() const;
  /// How long an idle loop sleeps before joining an empty round (zero: off).
  std::chrono::milliseconds heartbeat() const;
  /// Rank 0, after each round: looks at the coordinator's table a few times per threshold,
  /// asks every rank for its pending names when something has stalled, then logs the report
  /// (at most once per HVD_STALL_CHECK_TIME_SECONDS) and, past
  /// HVD_STALL_SHUTDOWN_TIME_SECONDS, stops every rank with it (Controller::stop_every_rank).
  void check(Controller* c);

 private:
  double warning_s_ = 0, shutdown_s_ = 0;
  std::chrono::steady_clock::time_point last_check_{}, last_warning_{};
  bool asked_ = false;    // pending names requested, not yet used
  bool stopped_ = false;  // stop_every_rank() called
};

}  // namespace hvd::core
