// SPDX-License-Identifier: Apache-2.0
// A hang guard for the libtorch tests: a call that should fail or finish but blocks aborts the
// process (the test fails with a message) instead of hanging the test run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "hvd/torch.h"

/// Aborts the process, naming `what` and this rank, unless destroyed within `seconds`.
class Watchdog {
 public:
  Watchdog(const char* what, int seconds)
      : t_([this, what, seconds] {
          std::unique_lock<std::mutex> lk(mu_);
          if (!cv_.wait_for(lk, std::chrono::seconds(seconds), [this] { return done_; })) {
            std::fprintf(stderr, "rank %d: '%s' still blocked after %d s\n", hvd::rank(), what,
                         seconds);
            std::abort();
          }
        }) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread t_;
};
