// SPDX-License-Identifier: Apache-2.0
// Response cache: names negotiated before get a bit position, so later rounds agree on readiness
// with one bitwise-AND allreduce instead of a gather at the coordinator.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvd/core/message.h"

namespace hvd::core {

/// Every rank holds an identical cache: entries are only added, touched, evicted and the
/// cache grown while executing the round's response list, which is the same on every rank, and
/// each of those is a function of that list alone. Least recently used entries are evicted
/// first (O(1): a list through the bits, most recent last); a freed bit is reused by the next
/// insertion (lowest free bit).
///
/// Growth: the names of the last max_capacity() - capacity() evictions are remembered (as
/// 64-bit hashes). Putting one of them again into a full cache means the names in use do not
/// fit (a step with more tensors than entries evicts its own names cyclically, and nothing
/// would ever hit): the capacity then doubles, up to max_capacity(). Names used once (never
/// put again) never make it grow. So too when the entry to evict belongs to the group being
/// put: a grouped allreduce is cached whole or not at all (Controller), so a group larger than
/// the cache would otherwise never be cached.
class ResponseCache {
 public:
  /// `max_capacity` (raised to `capacity` when below it) bounds growth.
  explicit ResponseCache(int64_t capacity, int64_t max_capacity = kDefaultMaxCapacity);
  static constexpr int64_t kDefaultMaxCapacity = 1 << 16;

  enum class Lookup { kMiss, kHit, kMismatch };
  /// kHit: the name is cached with identical parameters (bit set in *bit);
  /// kMismatch: cached with different parameters (bit in *bit; the entry must be invalidated).
  Lookup lookup(const Request& r, uint32_t* bit) const;
  /// Same, trying bit `hint` first (where this name was cached before): no hashing when the
  /// entry is still there.
  Lookup lookup(const Request& r, int64_t hint, uint32_t* bit) const;

  /// Caches a successfully negotiated request (this rank's parameters) with the response it got.
  /// Returns the bit that was evicted to make room, if any (never after growing).
  ///
  /// For allgather, alltoall and reducescatter the parameters differ between ranks (first
  /// dimension, splits) and the response carries what every rank agreed (rank_rows): a hit on
  /// every rank means every rank submits what it submitted when that response was negotiated,
  /// so the cached response is still the one the coordinator would build.
  std::optional<uint32_t> put(const Request& params, const Response& response = Response{});
  /// Marks an entry as just used (LRU order). O(1); a free bit is ignored.
  void touch(uint32_t bit) {
    Hot& h = hot_.at(bit);
    if (!h.used() || bit == newest_) return;
    unlink(bit);
    link_newest(bit);
  }
  void erase(uint32_t bit);
  /// erase() of an entry pushed out for want of room (a member of a group not wholly cached):
  /// its name counts as evicted, so its return into a full cache grows it (see the class).
  void evict(uint32_t bit);
  bool contains(uint32_t bit) const { return bit < hot_.size() && hot_[bit].used(); }
  /// The parameters cached under `bit`.
  const Request& at(uint32_t bit) const;
  /// The response cached with the parameters under `bit`.
  const Response& response_at(uint32_t bit) const;

  /// Changes whenever an entry is added, replaced or erased (not when touched).
  uint64_t version() const { return version_; }
  /// Names what `bit` holds now: a value no other put() gave, 0 when the bit is free. Equal
  /// stamps at two moments: the same entry, unchanged in between.
  uint64_t stamp(int64_t bit) const {
    return bit >= 0 && bit < capacity_ ? hot_[static_cast<size_t>(bit)].stamp : 0;
  }
  /// The op cached under `bit` (which must be in use).
  OpType op_at(uint32_t bit) const { return hot_.at(bit).op; }
  /// Bit positions now (grows, never shrinks); the initial capacity() until a step did not fit.
  int64_t capacity() const { return capacity_; }
  int64_t max_capacity() const { return max_capacity_; }
  /// Times the capacity doubled.
  int growths() const { return growths_; }
  /// Entries evicted to make room (not erased for other reasons).
  uint64_t evictions() const { return evictions_; }
  size_t size() const { return by_name_.size(); }
  /// Entries of grouped requests (members of a grouped allreduce).
  size_t grouped() const { return grouped_; }
  /// Number of 64-bit words needed for a bit vector over all positions.
  size_t num_words() const { return static_cast<size_t>((capacity_ + 63) / 64); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Entry {
    Request params;
    Response response;
  };
  /// What every round reads or writes of each ready entry, kept apart from the entries (over
  /// 400 bytes each): the rounds of a burst touch 24 contiguous bytes per entry.
  struct Hot {
    uint64_t stamp = 0;                     // version_ of its put; 0: the bit is free
    uint32_t older = kNone, newer = kNone;  // the LRU list (used bits only)
    OpType op = OpType::kAllreduce;
    bool used() const { return stamp != 0; }
  };
  void unlink(uint32_t bit) {
    Hot& h = hot_[bit];
    (h.older == kNone ? oldest_ : hot_[h.older].newer) = h.newer;
    (h.newer == kNone ? newest_ : hot_[h.newer].older) = h.older;
    h.older = h.newer = kNone;
  }
  void link_newest(uint32_t bit) {
    Hot& h = hot_[bit];
    h.older = newest_;
    h.newer = kNone;
    (newest_ == kNone ? oldest_ : hot_[newest_].newer) = bit;
    newest_ = bit;
  }
  /// Remembers an evicted name (the last max_capacity_ - capacity_ of them).
  void remember_evicted(const std::string& name);
  bool evicted_before(const std::string& name) const;
  /// Doubles the capacity (bounded by max_capacity_); false when it cannot grow.
  bool grow();

  int64_t capacity_;
  int64_t max_capacity_;
  std::vector<Entry> entries_;  // indexed by bit
  std::vector<Hot> hot_;        // indexed by bit
  std::unordered_map<std::string, uint32_t> by_name_;
  uint32_t oldest_ = kNone, newest_ = kNone;  // the LRU list's ends
  uint64_t version_ = 0;                      // counts puts and erasures
  /// Free bits, lowest on top: every rank reuses the same one.
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> free_bits_;
  size_t grouped_ = 0;  // entries whose params.group is set
  /// Hashes of the names of the last evictions, oldest first, and how often each is there.
  std::deque<uint64_t> evicted_order_;
  std::unordered_map<uint64_t, uint32_t> evicted_;
  int growths_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace hvd::core
