// SPDX-License-Identifier: Apache-2.0
// Response cache: names negotiated before get a bit position, so later rounds agree on readiness
// with one bitwise-AND allreduce instead of a gather at the coordinator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvd/core/message.h"

namespace hvd::core {

/// Every rank holds an identical cache: entries are only added, touched and evicted while
/// executing the round's response list, which is the same on every rank. Least recently used
/// entries are evicted first; a freed bit is reused by the next insertion (lowest free bit).
class ResponseCache {
 public:
  explicit ResponseCache(int64_t capacity);

  enum class Lookup { kMiss, kHit, kMismatch };
  /// kHit: the name is cached with identical parameters (bit set in *bit);
  /// kMismatch: cached with different parameters (bit in *bit; the entry must be invalidated).
  Lookup lookup(const Request& r, uint32_t* bit) const;
  /// Same, trying bit `hint` first (where this name was cached before): no hashing when the
  /// entry is still there.
  Lookup lookup(const Request& r, int64_t hint, uint32_t* bit) const;

  /// Caches a successfully negotiated request (this rank's parameters) with the response it got.
  /// Returns the bit that was evicted to make room, if any.
  ///
  /// For allgather, alltoall and reducescatter the parameters differ between ranks (first
  /// dimension, splits) and the response carries what every rank agreed (rank_rows): a hit on
  /// every rank means every rank submits what it submitted when that response was negotiated,
  /// so the cached response is still the one the coordinator would build.
  std::optional<uint32_t> put(const Request& params, const Response& response = Response{});
  /// Marks an entry as just used (LRU order).
  void touch(uint32_t bit) {
    Hot& h = hot_.at(bit);
    if (h.used()) h.last_used = ++clock_;
  }
  void erase(uint32_t bit);
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
  int64_t capacity() const { return capacity_; }
  size_t size() const { return by_name_.size(); }
  /// Entries of grouped requests (members of a grouped allreduce).
  size_t grouped() const { return grouped_; }
  /// Number of 64-bit words needed for a bit vector over all positions.
  size_t num_words() const { return static_cast<size_t>((capacity_ + 63) / 64); }

 private:
  struct Entry {
    Request params;
    Response response;
  };
  /// What every round reads or writes of each ready entry, kept apart from the entries (over
  /// 400 bytes each): the rounds of a burst touch 24 contiguous bytes per entry.
  struct Hot {
    uint64_t last_used = 0;  // clock_ when last put or touched: the lowest goes first
    uint64_t stamp = 0;      // version_ of its put; 0: the bit is free
    OpType op = OpType::kAllreduce;
    bool used() const { return stamp != 0; }
  };
  /// The least recently used entry (a scan: only a full cache evicts, in a full round).
  uint32_t least_recent() const;
  int64_t capacity_;
  std::vector<Entry> entries_;  // indexed by bit
  std::vector<Hot> hot_;        // indexed by bit
  std::unordered_map<std::string, uint32_t> by_name_;
  uint64_t clock_ = 0;               // counts puts and touches (a touch is one store, no list)
  uint64_t version_ = 0;             // counts puts and erasures
  std::vector<uint32_t> free_bits_;  // kept sorted descending; back() is lowest
  size_t grouped_ = 0;               // entries whose params.group is set
};

}  // namespace hvd::core
