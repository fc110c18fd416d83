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
  /// `h` completes with `s` (and `pending`, device work still running). A batch's handles
  /// share one outcome: an item is a handle and the outcome's index.
  void add(std::shared_ptr<HandleState> h, const Status& s,
           const std::shared_ptr<Completion>& pending = nullptr) {
    if (outcomes_.empty() || !outcomes_.back().same(s, pending)) {
      outcomes_.push_back({s, pending, s.ok() && !pending});
    }
    items_.push_back({std::move(h), outcomes_.size() - 1});
  }
  // Every handle is settled before the first is woken (HandleState::settle).
  void complete() {
    for (size_t k = 0; k < items_.size(); ++k) {
      Item& i = items_[k];
      const Outcome& o = outcomes_[i.outcome];
      // HandleState::settle's common case, inline: OK, no device work, nobody waiting or
      // called back: the state alone changes, and there is nothing to wake.
      if (o.quiet && i.handle->complete_quietly()) {
        i.handle.reset();
        continue;
      }
      std::function<void(const Status&)> cb;
      if (!i.handle->settle(o.status, o.pending, &cb)) {
        i.handle.reset();  // completed before: nothing to wake
      } else if (cb) {
        callbacks_.emplace_back(k, std::move(cb));
      }
    }
    static const std::function<void(const Status&)> kNone;
    size_t next = 0;  // callbacks_ is in item order
    for (size_t k = 0; k < items_.size(); ++k) {
      if (!items_[k].handle) continue;
      const bool has = next < callbacks_.size() && callbacks_[next].first == k;
      items_[k].handle->wake(has ? callbacks_[next++].second : kNone);
    }
    items_.clear();
    outcomes_.clear();
    callbacks_.clear();
  }

 private:
  struct Outcome {
    Status status;
    std::shared_ptr<Completion> pending;
    bool quiet;  // OK without device work: settle() would only set the state
    bool same(const Status& s, const std::shared_ptr<Completion>& p) const {
      return p == pending && s.code() == status.code() && s.message() == status.message();
    }
  };
  struct Item {
    std::shared_ptr<HandleState> handle;
    size_t outcome;
  };
  std::vector<Item> items_;
  std::vector<Outcome> outcomes_;
  std::vector<std::pair<size_t, std::function<void(const Status&)>>> callbacks_;
};

}  // namespace hvd::core::detail
