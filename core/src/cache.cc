// SPDX-License-Identifier: Apache-2.0
// Response cache: LRU map from name to bit position and negotiated parameters.
#include "hvd/core/cache.h"

#include <algorithm>
#include <stdexcept>

namespace hvd::core {

ResponseCache::ResponseCache(int64_t capacity) : capacity_(capacity < 0 ? 0 : capacity) {
  entries_.resize(static_cast<size_t>(capacity_));
  hot_.resize(static_cast<size_t>(capacity_));
  free_bits_.reserve(static_cast<size_t>(capacity_));
  for (int64_t b = capacity_ - 1; b >= 0; --b) free_bits_.push_back(static_cast<uint32_t>(b));
}

ResponseCache::Lookup ResponseCache::lookup(const Request& r, uint32_t* bit) const {
  auto it = by_name_.find(r.name);
  if (it == by_name_.end()) return Lookup::kMiss;
  *bit = it->second;
  // same_params ignores the rank, so no copy of the request is needed.
  return entries_[it->second].params.same_params(r) ? Lookup::kHit : Lookup::kMismatch;
}

ResponseCache::Lookup ResponseCache::lookup(const Request& r, int64_t hint, uint32_t* bit) const {
  if (hint >= 0 && hint < capacity_) {
    const Entry& e = entries_[static_cast<size_t>(hint)];
    const bool used = hot_[static_cast<size_t>(hint)].used();
    // same_params compares the names too: a hit costs one comparison of them, not two.
    if (used && e.params.same_params(r)) {
      *bit = static_cast<uint32_t>(hint);
      return Lookup::kHit;
    }
    if (used && e.params.name == r.name) {
      *bit = static_cast<uint32_t>(hint);
      return Lookup::kMismatch;
    }
  }
  return lookup(r, bit);
}

std::optional<uint32_t> ResponseCache::put(const Request& params, const Response& response) {
  if (capacity_ == 0) return std::nullopt;
  ++version_;
  auto it = by_name_.find(params.name);
  if (it != by_name_.end()) {  // re-negotiated with new parameters: replace in place
    grouped_ += static_cast<size_t>(!params.group.empty()) -
                static_cast<size_t>(!entries_[it->second].params.group.empty());
    entries_[it->second].params = params;
    entries_[it->second].response = response;
    hot_[it->second].stamp = version_;
    hot_[it->second].op = params.op;
    touch(it->second);
    return std::nullopt;
  }
  std::optional<uint32_t> evicted;
  if (free_bits_.empty()) {
    evicted = least_recent();
    erase(*evicted);
  }
  uint32_t bit = free_bits_.back();
  free_bits_.pop_back();
  Entry& e = entries_[bit];
  if (!params.group.empty()) ++grouped_;
  e.params = params;
  e.response = response;
  hot_[bit] = Hot{++clock_, version_, params.op};
  by_name_[params.name] = bit;
  return evicted;
}

uint32_t ResponseCache::least_recent() const {
  uint32_t best = 0;
  uint64_t oldest = UINT64_MAX;
  for (size_t b = 0; b < hot_.size(); ++b) {
    if (hot_[b].used() && hot_[b].last_used < oldest) {
      oldest = hot_[b].last_used;
      best = static_cast<uint32_t>(b);
    }
  }
  return best;
}

void ResponseCache::erase(uint32_t bit) {
  Entry& e = entries_.at(bit);
  if (!hot_[bit].used()) return;
  ++version_;
  if (!e.params.group.empty()) --grouped_;
  by_name_.erase(e.params.name);
  hot_[bit] = Hot{};
  e.params = Request{};
  e.response = Response{};
  // Keep free bits sorted descending so the lowest free bit is reused first on every rank.
  auto pos = std::lower_bound(free_bits_.begin(), free_bits_.end(), bit, std::greater<>());
  free_bits_.insert(pos, bit);
}

const Request& ResponseCache::at(uint32_t bit) const {
  if (!contains(bit)) throw std::out_of_range("hvd: response cache bit not in use");
  return entries_[bit].params;
}

const Response& ResponseCache::response_at(uint32_t bit) const {
  if (!contains(bit)) throw std::out_of_range("hvd: response cache bit not in use");
  return entries_[bit].response;
}

}  // namespace hvd::core
