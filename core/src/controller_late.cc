// SPDX-License-Identifier: Apache-2.0
// Late ranks, for the timeline: which ranks rank 0 waited for.
//
// Names negotiated through rank 0's table tell it who is missing while a rank's loop takes part
// in rounds, but not when the late rank's loop is idle (rank 0 then waits inside the round's
// collective, and the request arrives in the same round), and a cached name is negotiated by
// one bit of the round's AND, which says that some rank is missing, not which. So every rank
// notes, for each of its entries a round made ready, how long before the round's end it
// submitted it: durations on each rank's own clock, comparable across hosts because every rank
// leaves the round's collective at about the same moment. When rank 0 (with its timeline on)
// waited at least kLateQueryMin for a tensor, the next round's flags ask every rank for those
// ages of the round before, gathered to rank 0. The late ranks are the last to submit: at least
// half as late as the latest, and at least 50 us and a tenth of rank 0's wait after rank 0 (the
// rest of rank 0's wait, if any, went to the late rank's loop reaching the round: a loaded
// host). Rounds where rank 0 waited for nothing cost one vector append per tensor.
#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "hvd/core/controller.h"

namespace hvd::core {
namespace {

uint64_t name_hash(const std::string& name) { return std::hash<std::string>{}(name); }

}  // namespace

void Controller::note_ready(const std::string& name, std::chrono::microseconds ago) {
  ready_ages_.push_back(ReadyAge{name_hash(name), ago.count()});
}

void Controller::query_late(const std::string& name, std::chrono::microseconds ago) {
  late_query_.push_back(LateQuery{name, ago.count()});
}

Status Controller::exchange_late_ranks() {
  std::vector<uint8_t> mine(last_ages_.size() * sizeof(ReadyAge));
  if (!mine.empty()) std::memcpy(mine.data(), last_ages_.data(), mine.size());
  std::vector<std::vector<uint8_t>> all;
  HVD_RETURN_IF_ERROR(transport_->gather(mine, &all));
  if (rank() != 0) return Status::OK();
  // Per asked name, per rank: its age (-1: not reported, e.g. a joined rank). Host order, as
  // the rest of the wire format (every rank runs on the same kind of host).
  std::unordered_map<uint64_t, std::vector<int64_t>> ages;
  for (const LateQuery& q : late_query_) ages[name_hash(q.name)].assign(all.size(), -1);
  for (size_t r = 0; r < all.size(); ++r) {
    for (size_t at = 0; at + sizeof(ReadyAge) <= all[r].size(); at += sizeof(ReadyAge)) {
      ReadyAge a{};
      std::memcpy(&a, all[r].data() + at, sizeof a);
      auto it = ages.find(a.name_hash);
      if (it != ages.end()) it->second[r] = a.ago_us;
    }
  }
  for (const LateQuery& q : late_query_) {
    const std::vector<int64_t>& per_rank = ages[name_hash(q.name)];
    StalledTensor t{q.name, {}, {}, static_cast<double>(q.ago_us) * 1e-6};
    int64_t max_lag = 0;  // how much later than rank 0 the last rank submitted
    for (int64_t a : per_rank) {
      if (a >= 0) max_lag = std::max(max_lag, q.ago_us - a);
    }
    const int64_t margin = std::max<int64_t>({50, q.ago_us / 10, max_lag / 2});
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const bool late = per_rank[r] >= 0 && q.ago_us - per_rank[r] >= margin;
      (late ? t.missing : t.submitted).push_back(static_cast<int>(r));
    }
    if (!t.missing.empty()) late_found_.push_back(std::move(t));
  }
  late_query_.clear();
  return Status::OK();
}

}  // namespace hvd::core
