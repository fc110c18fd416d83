// SPDX-License-Identifier: Apache-2.0
// The registry's lock, taken through the frontend (the Python frontend never blocks on it while
// holding the GIL), and released while the registry waits for a reduction.
#pragma once

#include <mutex>

#include "hvd/optim/grad_registry.h"

namespace hvd::optim {

class GradRegistry::Lock {
 public:
  explicit Lock(const GradRegistry& r) : fe_(r.fe_), mu_(r.mu_) { relock(); }
  ~Lock() {
    if (held_) mu_.unlock();
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  void unlock() {
    mu_.unlock();
    held_ = false;
  }
  void relock() {
    fe_.lock(mu_);
    held_ = true;
  }

 private:
  GradFrontend& fe_;
  std::mutex& mu_;
  bool held_ = false;
};

}  // namespace hvd::optim
