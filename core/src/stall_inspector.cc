// SPDX-License-Identifier: Apache-2.0
// The stall inspector (protocol in stall_inspector.h) and the controller's part of it.
#include "hvd/core/stall_inspector.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "hvd/core/logging.h"
#include "hvd/core/validation.h"

namespace hvd::core {
namespace {

using Seconds = std::chrono::duration<double>;

std::string ranks_phrase(const std::vector<int>& v) {
  return std::string(v.size() == 1 ? "rank " : "ranks ") + rank_ranges(v);
}

// "'a', 'b' and 3 more": at most `limit` names.
std::string names_phrase(const std::vector<std::string>& names, size_t limit = 8) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) {
    out += (i ? ", '" : "'") + names[i] + "'";
  }
  if (names.size() > limit) out += " and " + std::to_string(names.size() - limit) + " more";
  return out;
}

std::string seconds(double s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

}  // namespace

std::string stall_report(const std::vector<StalledTensor>& stalled,
                         const std::vector<std::vector<std::string>>& pending, double threshold_s) {
  std::string out = std::to_string(stalled.size()) +
                    (stalled.size() == 1 ? " tensor has" : " tensors have") + " waited " +
                    seconds(threshold_s) + "+ s for ranks that have not submitted " +
                    (stalled.size() == 1 ? "it: " : "them: ");
  for (size_t i = 0; i < stalled.size(); ++i) {
    const StalledTensor& t = stalled[i];
    out += (i ? "; '" : "'") + t.name + "' submitted by " + ranks_phrase(t.submitted) +
           ", missing on " + ranks_phrase(t.missing);
    // Missing ranks with the same pending names are named together.
    std::map<std::vector<std::string>, std::vector<int>> by_names;
    std::vector<int> unknown;
    for (int r : t.missing) {
      if (r >= 0 && static_cast<size_t>(r) < pending.size()) {
        by_names[pending[static_cast<size_t>(r)]].push_back(r);
      } else {
        unknown.push_back(r);
      }
    }
    std::string instead;
    for (const auto& [names, who] : by_names) {
      instead += (instead.empty() ? "" : "; ") + ranks_phrase(who) +
                 (names.empty() ? " has nothing pending"
                                : (who.size() == 1 ? " has " : " have ") + names_phrase(names) +
                                      " pending instead");
    }
    if (!unknown.empty()) {
      instead +=
          (instead.empty() ? "" : "; ") + ranks_phrase(unknown) + ": pending names not known";
    }
    if (!instead.empty()) out += " (" + instead + ")";
  }
  return out;
}

StallInspector::StallInspector(const Config& c) {
  if (c.stall_check_disable) return;
  warning_s_ = c.stall_warning_s;
  shutdown_s_ = c.stall_shutdown_s;
}

double StallInspector::threshold_s() const {
  if (warning_s_ > 0 && shutdown_s_ > 0) return std::min(warning_s_, shutdown_s_);
  return std::max(warning_s_, shutdown_s_);
}

std::chrono::milliseconds StallInspector::heartbeat() const {
  const double t = threshold_s();
  if (t <= 0) return std::chrono::milliseconds(0);
  // A quarter of the threshold, at most 1 s: a stall is seen soon after it passes the
  // threshold, and an idle job costs one small round per second per rank.
  const double ms = std::min(t * 250.0, 1000.0);
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(ms)));
}

void StallInspector::check(Controller* c) {
  const double threshold = threshold_s();
  if (c->rank() != 0 || threshold <= 0 || stopped_) return;
  using Clock = std::chrono::steady_clock;
  const auto now = c->now();
  const bool answered = asked_ && c->pending_names_fresh();
  // Look a few times per threshold (a stall is seen soon after it passes it), and at once when
  // the pending names asked for have come.
  if (!answered && asked_) return;
  if (!answered && last_check_ != Clock::time_point{} &&
      now - last_check_ < Seconds(threshold) / 4) {
    return;
  }
  last_check_ = now;
  const auto stalled = c->stalled(threshold);
  if (stalled.empty()) {
    asked_ = false;
    return;
  }
  const bool warn = warning_s_ > 0 && (last_warning_ == Clock::time_point{} ||
                                       now - last_warning_ >= Seconds(warning_s_));
  double oldest = 0;
  for (const auto& t : stalled) oldest = std::max(oldest, t.waited_s);
  const bool stop = shutdown_s_ > 0 && oldest >= shutdown_s_;
  if (!warn && !stop) return;
  if (!answered) {  // first the missing ranks' pending names: they come after the next round
    c->request_pending_names();
    asked_ = true;
    return;
  }
  asked_ = false;
  const std::string report = stall_report(stalled, c->pending_names(), threshold);
  if (stop) {
    stopped_ = true;
    c->stop_every_rank("stall: " + report + "; HVD_STALL_SHUTDOWN_TIME_SECONDS=" +
                       seconds(shutdown_s_) + " passed, every rank stops");
  }
  if (warn || stop) {
    last_warning_ = now;
    HVD_LOG(Warning) << report
                     << (stop ? "; stopping every rank (HVD_STALL_SHUTDOWN_TIME_SECONDS=" +
                                    seconds(shutdown_s_) + ")"
                              : std::string(" (a rank may be stuck, or not calling these "
                                            "collectives in the same order; set "
                                            "HVD_STALL_CHECK_TIME_SECONDS=0 to silence this)"));
  }
}

// ---- the controller's part ----

void Controller::set_stall_threshold(double s) {
  stall_threshold_s_ = s;
  pending_since_.assign(s > 0 ? pending_.size() : 0, std::chrono::steady_clock::time_point{});
}

void Controller::stop_every_rank(const std::string& why) {
  if (local_error_.empty()) local_error_ = why;
}

void Controller::demote_stale_cached() {
  const auto t = now();
  const Seconds threshold(stall_threshold_s_);
  if (last_demote_scan_ != std::chrono::steady_clock::time_point{} &&
      t - last_demote_scan_ < threshold / 4) {
    return;
  }
  last_demote_scan_ = t;
  for (uint32_t b = 0; b < pending_.size() && b < pending_since_.size(); ++b) {
    if (pending_[b] && t - pending_since_[b] >= threshold) invalid_bits_.insert(b);
  }
}

Status Controller::exchange_pending_names() {
  std::vector<Request> mine;
  auto add = [&mine](const TensorEntry* e) {
    Request r;
    r.op = e->request.op;
    r.name = e->request.name;
    mine.push_back(std::move(r));
  };
  for (const TensorEntry* e : uncached_) add(e);
  for (const TensorEntry* e : pending_) {
    if (e) add(e);
  }
  for (const auto& kv : sent_) add(kv.second);
  std::vector<const Request*> ptrs;
  for (const Request& r : mine) ptrs.push_back(&r);
  std::vector<std::vector<uint8_t>> all;
  HVD_RETURN_IF_ERROR(transport_->gather(serialize_requests(ptrs, false), &all));
  if (rank() != 0) return Status::OK();
  pending_names_.assign(static_cast<size_t>(size()), {});
  for (size_t i = 0; i < all.size() && i < pending_names_.size(); ++i) {
    auto parsed = parse_request_list(all[i].data(), all[i].size());
    if (!parsed.ok()) continue;  // reported as "nothing pending"; the report is advice only
    for (const Request& r : parsed.value().requests) pending_names_[i].push_back(r.name);
    std::sort(pending_names_[i].begin(), pending_names_[i].end());
  }
  want_pending_names_ = false;
  names_collected_ = true;
  return Status::OK();
}

}  // namespace hvd::core
