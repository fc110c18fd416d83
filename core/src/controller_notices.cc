// SPDX-License-Identifier: Apache-2.0
// Refusal notices on rank 0 (protocol in controller.h): a call one rank refused before it knew
// the tensor fails the tensor the other ranks then wait for from that rank alone.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hvd/core/controller.h"

namespace hvd::core {
namespace {

constexpr const char* kRefused = " refused its call locally (";

// The mistake a notice names, without its rank: equal on every rank that made the same one.
std::string_view mistake(const std::string& text) {
  const size_t at = text.find(kRefused);
  return at == std::string::npos ? std::string_view(text) : std::string_view(text).substr(at);
}

}  // namespace

std::string Controller::notice_text(int global_rank, const std::string& what) {
  return "rank " + std::to_string(global_rank) + kRefused + what + ")";
}

void Controller::coordinator_take_notices(int rank, std::vector<std::string>* notices, bool sent) {
  if (notices_.empty()) notices_.resize(static_cast<size_t>(size()));
  auto& mine = notices_.at(static_cast<size_t>(rank));
  if (sent) {
    for (Notice& n : mine) n.went_on = true;  // all from earlier rounds
  }
  const auto t = now();
  for (std::string& text : *notices) {
    mine.push_back(Notice{std::move(text), coordinated_rounds_, t, false});
  }
  notices_held_ += notices->size();
}

void Controller::coordinator_drop_agreed() {
  const auto n = static_cast<size_t>(size());
  // Every rank made the same mistake: they agree, nobody waits for the refused call.
  for (size_t k = 0; notices_held_ >= n && k < notices_[0].size();) {
    const std::string_view what = mistake(notices_[0][k].text);
    std::vector<size_t> at(n, 0);
    bool everywhere = true;
    for (size_t i = 1; everywhere && i < n; ++i) {
      const auto& q = notices_[i];
      auto it = std::find_if(q.begin(), q.end(),
                             [&](const Notice& x) { return mistake(x.text) == what; });
      everywhere = it != q.end();
      if (everywhere) at[i] = static_cast<size_t>(it - q.begin());
    }
    if (!everywhere) {
      ++k;
      continue;
    }
    at[0] = k;
    for (size_t i = 0; i < n; ++i)
      notices_[i].erase(notices_[i].begin() + static_cast<std::ptrdiff_t>(at[i]));
    notices_held_ -= n;
  }
}

void Controller::coordinator_match_notices(const std::vector<int>& joined,
                                           std::vector<Response>* ready) {
  if (notices_held_ == 0 && noticed_groups_.empty()) return;
  const auto n = static_cast<size_t>(size());
  std::vector<bool> is_joined(n, false);
  for (int j : joined) is_joined[static_cast<size_t>(j)] = true;
  std::vector<std::pair<uint64_t, std::string>> order;  // oldest first
  for (const auto& [name, p] : table_) {
    if (!p.is_join) order.emplace_back(p.arrival, name);
  }
  std::sort(order.begin(), order.end());
  for (const auto& entry : order) {
    const std::string& name = entry.second;
    const Pending& p = table_.at(name);
    std::vector<int> missing;
    for (size_t i = 0; i < n; ++i) {
      if (!p.per_rank[i] && !is_joined[i]) missing.push_back(static_cast<int>(i));
    }
    if (missing.empty()) continue;
    const auto first = std::find_if(p.per_rank.begin(), p.per_rank.end(),
                                    [](const auto& q) { return q.has_value(); });
    const Request& any = **first;
    auto group = p.group.empty() ? noticed_groups_.end() : noticed_groups_.find(p.group);
    std::string error;
    if (group != noticed_groups_.end()) {
      // A later member of a group a notice failed: the same ranks, the same message.
      const auto& ranks = group->second.ranks;
      const bool same = std::all_of(missing.begin(), missing.end(), [&](int m) {
        return std::find(ranks.begin(), ranks.end(), m) != ranks.end();
      });
      if (!same) continue;
      error = group->second.error;
    } else {
      const auto t = now();
      const bool only_noticed = std::all_of(missing.begin(), missing.end(), [&](int m) {
        if (notices_.size() != n || notices_[static_cast<size_t>(m)].empty()) return false;
        const Notice& x = notices_[static_cast<size_t>(m)].front();
        return x.went_on || t - x.at >= kNoticeGrace;
      });
      if (!only_noticed) continue;
      std::string why;
      for (int m : missing) {
        auto& q = notices_[static_cast<size_t>(m)];
        why += (why.empty() ? "" : "; ") + q.front().text;
        q.pop_front();
        --notices_held_;
      }
      error = describe(any.op, name) + ": " + why + " [the call fails on every rank]";
      if (!p.group.empty()) noticed_groups_[p.group] = NoticedGroup{error, any.group_size, missing};
    }
    Response resp = response_of(any);
    resp.error = error;
    ready->push_back(std::move(resp));
    const std::string key = p.group;
    table_.erase(name);
    if (!key.empty()) {
      auto g = noticed_groups_.find(key);
      if (g != noticed_groups_.end() && --g->second.left <= 0) {
        noticed_groups_.erase(g);
        groups_.erase(key);
      }
    }
  }
}

std::string Controller::coordinator_shutdown_note(const std::vector<int32_t>& ranks) const {
  std::vector<std::pair<uint64_t, std::string>> refused;  // in arrival order
  for (const auto& [name, p] : table_) {
    for (int32_t r : ranks) {
      const auto& q = p.per_rank.at(static_cast<size_t>(r));
      if (q && !q->refused.empty()) {
        refused.emplace_back(p.arrival,
                             "rank " + std::to_string(r) + " refused its call: " + q->refused);
      }
    }
  }
  std::sort(refused.begin(), refused.end());
  std::string note;
  auto add = [&](const std::string& s) { note += (note.empty() ? "" : "; ") + s; };
  for (const auto& r : refused) add(r.second);
  for (int32_t r : ranks) {
    if (static_cast<size_t>(r) >= notices_.size()) continue;
    for (const Notice& x : notices_[static_cast<size_t>(r)]) add(x.text);
  }
  return note;
}

}  // namespace hvd::core
