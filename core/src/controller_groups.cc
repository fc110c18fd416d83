// SPDX-License-Identifier: Apache-2.0
// Grouped allreduces through the response cache: a group is cached whole or not at all, and
// its cached members run only once every member is ready on every rank (as a group that goes
// through rank 0 does). The caches of all ranks change alike (the same responses are put, the
// same bits erased, in the same order), so every rank evicts and holds back the same members.
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hvd/core/controller.h"

namespace hvd::core {

void Controller::drop_partial_groups() {
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> cached;  // group: members, size
  const auto capacity = static_cast<uint32_t>(cache_.capacity());
  for (uint32_t b = 0; b < capacity; ++b) {
    if (!cache_.contains(b) || cache_.at(b).group.empty()) continue;
    auto& c = cached[cache_.at(b).group];
    ++c.first;
    c.second = cache_.at(b).group_size;
  }
  for (uint32_t b = 0; b < capacity && cache_.grouped() > 0; ++b) {
    if (!cache_.contains(b) || cache_.at(b).group.empty()) continue;
    const auto& c = cached[cache_.at(b).group];
    if (c.first == c.second) continue;
    // A member evicted (capacity, a contradicting rank, a stall) or never cached: the next
    // call of the group would find some members cached and others not, and wait forever for
    // the missing ones to become ready through the cache. Evicted, not just erased: when the
    // group comes back to a full cache, the cache grows (it did not fit).
    cache_.evict(b);
    if (TensorEntry* e = take_pending(b)) uncached_.push_back(e);
  }
}

void Controller::hold_incomplete_groups(std::vector<uint32_t>* ready) {
  // group: its members ready everywhere. The keys are the cached requests' own strings (the
  // cache does not change here), and a group's members usually come one after another: the
  // last group's count is tried first, without hashing its name again.
  std::unordered_map<std::string_view, int64_t> members;
  std::string_view last;
  int64_t* last_count = nullptr;
  auto count = [&](const std::string& group) -> int64_t& {
    if (last_count == nullptr || group != last) {
      last = group;
      last_count = &members[last];
    }
    return *last_count;
  };
  for (uint32_t b : *ready) {
    const Request& p = cache_.at(b);
    if (!p.group.empty()) ++count(p.group);
  }
  if (members.empty()) return;
  size_t kept = 0;
  for (uint32_t b : *ready) {
    const Request& p = cache_.at(b);
    // The rest of the group is still on its way on some rank: all wait in pending_.
    if (!p.group.empty() && count(p.group) < p.group_size) continue;
    (*ready)[kept++] = b;
  }
  ready->resize(kept);
}

}  // namespace hvd::core
