// SPDX-License-Identifier: Apache-2.0
// Handles to complete once the runtime's lock is released (private to core).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "hvd/core/handle.h"

namespace hvd::core::detail {

// Handles collected under mu_ and completed after releasing it: completion runs callbacks,
// which may submit or wait (the lock contract in runtime.h).
class Finished {
 public:
  Finished() = default;
  explicit Finished(size_t expected) { items_.reserve(expected); }
  void add(std::shared_ptr<HandleState> h, Status s,
           std::shared_ptr<Completion> pending = nullptr) {
    items_.push_back({std::move(h), std::move(s), std::move(pending), nullptr, false});
  }
  // Every handle is settled before the first is woken (HandleState::settle).
  void complete() {
    for (auto& i : items_) {
      i.settled = i.handle->settle(std::move(i.status), std::move(i.pending), &i.callback);
    }
    for (auto& i : items_) {
      if (i.settled) i.handle->wake(i.callback);
    }
    items_.clear();
  }

 private:
  struct Item {
    std::shared_ptr<HandleState> handle;
    Status status;
    std::shared_ptr<Completion> pending;
    std::function<void(const Status&)> callback;
    bool settled = false;
  };
  std::vector<Item> items_;
};

}  // namespace hvd::core::detail
