// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the [mpi] tier: every rank runs the same test cases in the same order.
//
// Each test case has a deadline (HVD_TEST_DEADLINE_SECONDS, default 120): ranks that fall out
// of step would otherwise wait for each other until CTest's timeout, with nothing saying
// which test hung. Past the deadline the rank prints the test's name and exits, and mpirun
// ends the others.
#define CATCH_CONFIG_RUNNER
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "hvd/hvd.h"
#include "hvd_catch.h"

namespace {

class Watchdog {
 public:
  Watchdog() {
    const char* s = std::getenv("HVD_TEST_DEADLINE_SECONDS");
    if (s && std::atof(s) > 0) limit_ = std::chrono::duration<double>(std::atof(s));
    thread_ = std::thread([this] { run(); });
    thread_.detach();  // lives until the process exits
  }
  void arm(const std::string& test) {
    std::lock_guard<std::mutex> lk(mu_);
    test_ = test;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(limit_);
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return armed_; });
      if (cv_.wait_until(lk, deadline_, [&] { return !armed_; })) continue;
      const int rank = hvd::is_initialized() ? hvd::rank() : -1;
      std::fprintf(stderr,
                   "[rank %d] test case '%s' passed its deadline of %.0f s: the ranks fell out "
                   "of step (or it hangs); exiting so that mpirun ends the job\n",
                   rank, test_.c_str(), limit_.count());
      std::fflush(stderr);
      std::_Exit(124);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  std::string test_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::duration<double> limit_{120.0};
  std::thread thread_;
};

Watchdog& watchdog() {
  static Watchdog* w = new Watchdog();  // never destroyed: its thread may still wait
  return *w;
}

struct Deadline : hvd::test::EventListenerBase {
  using hvd::test::EventListenerBase::EventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override { watchdog().arm(info.name); }
  void testCaseEnded(Catch::TestCaseStats const& /*stats*/) override { watchdog().disarm(); }
};

}  // namespace

CATCH_REGISTER_LISTENER(Deadline)

int main(int argc, char** argv) {
  hvd::init();
  int rc = Catch::Session().run(argc, argv);
  hvd::shutdown();
  return rc;
}
