// SPDX-License-Identifier: Apache-2.0
// Response cache: LRU map from name to bit position and negotiated parameters, grown when the
// names in use do not fit.
#include "hvd/core/cache.h"

#include <algorithm>
#include <stdexcept>

#include "hvd/core/hash.h"

namespace hvd::core {

ResponseCache::ResponseCache(int64_t capacity, int64_t max_capacity)
    : capacity_(std::max<int64_t>(capacity, 0)), max_capacity_(std::max(max_capacity, capacity_)) {
  entries_.resize(static_cast<size_t>(capacity_));
  hot_.resize(static_cast<size_t>(capacity_));
  for (int64_t b = 0; b < capacity_; ++b) free_bits_.push(static_cast<uint32_t>(b));
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
  // A name evicted before comes back: what is in use does not fit. Grow rather than evict
  // (evicting would only push out the next name the step uses). So too when the entry to evict
  // is a member of the group being cached: a group is cached whole or not at all, so evicting
  // its own members would leave it uncached at every step, however often it came back.
  if (free_bits_.empty() &&
      (evicted_before(params.name) ||
       (!params.group.empty() && entries_[oldest_].params.group == params.group))) {
    (void)grow();
  }
  std::optional<uint32_t> evicted;
  if (free_bits_.empty()) {
    evicted = oldest_;
    remember_evicted(entries_[*evicted].params.name);
    ++evictions_;
    erase(*evicted);
  }
  const uint32_t bit = free_bits_.top();
  free_bits_.pop();
  Entry& e = entries_[bit];
  if (!params.group.empty()) ++grouped_;
  e.params = params;
  e.response = response;
  hot_[bit].stamp = version_;
  hot_[bit].op = params.op;
  link_newest(bit);
  by_name_[params.name] = bit;
  return evicted;
}

void ResponseCache::remember_evicted(const std::string& name) {
  const auto keep = static_cast<size_t>(max_capacity_ - capacity_);
  if (keep == 0) return;  // cannot grow: nothing to learn
  const uint64_t h = fnv1a(name);
  evicted_order_.push_back(h);
  ++evicted_[h];
  while (evicted_order_.size() > keep) {
    auto it = evicted_.find(evicted_order_.front());
    if (--it->second == 0) evicted_.erase(it);
    evicted_order_.pop_front();
  }
}

bool ResponseCache::evicted_before(const std::string& name) const {
  return !evicted_.empty() && evicted_.count(fnv1a(name)) > 0;
}

bool ResponseCache::grow() {
  if (capacity_ >= max_capacity_) return false;
  const int64_t grown = std::min(capacity_ * 2, max_capacity_);
  entries_.resize(static_cast<size_t>(grown));
  hot_.resize(static_cast<size_t>(grown));
  for (int64_t b = capacity_; b < grown; ++b) free_bits_.push(static_cast<uint32_t>(b));
  capacity_ = grown;
  ++growths_;
  // The names evicted so far stay remembered: should the grown cache fill up before they
  // are all back, the next of them grows it again at once.
  return true;
}

void ResponseCache::erase(uint32_t bit) {
  Entry& e = entries_.at(bit);
  if (!hot_[bit].used()) return;
  ++version_;
  if (!e.params.group.empty()) --grouped_;
  by_name_.erase(e.params.name);
  unlink(bit);
  hot_[bit] = Hot{};
  e.params = Request{};
  e.response = Response{};
  free_bits_.push(bit);
}

void ResponseCache::evict(uint32_t bit) {
  if (!contains(bit)) return;
  remember_evicted(entries_[bit].params.name);
  ++evictions_;
  erase(bit);
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
