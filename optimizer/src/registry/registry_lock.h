// SPDX-License-Identifier: Apache-2.0
// The registry's lock, taken through the frontend (the Python frontend never blocks on it while
// holding the GIL), and released while the registry waits for a reduction. Removals requested
// by the thread that holds it (Python's garbage collector finalizing an optimizer inside one of
// the frontend's callbacks) are deferred and run when that thread's outermost Lock ends.
#pragma once

#include <mutex>
#include <thread>

#include "hvd/optim/grad_registry.h"

namespace hvd::optim {

class GradRegistry::Lock {
 public:
  explicit Lock(const GradRegistry& r) : r_(const_cast<GradRegistry&>(r)) { relock(); }
  ~Lock() {
    if (!held_) return;
    if (!r_.deferred_.empty() && !r_.draining_) {
      r_.draining_ = true;
      r_.drain_deferred(*this);
      r_.draining_ = false;
    }
    unlock();
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  void unlock() {
    r_.holder_ = std::thread::id();
    r_.mu_.unlock();
    held_ = false;
  }
  void relock() {
    r_.fe_.lock(r_.mu_);
    r_.holder_ = std::this_thread::get_id();
    held_ = true;
  }

 private:
  GradRegistry& r_;
  bool held_ = false;
};

}  // namespace hvd::optim
