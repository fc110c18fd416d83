// SPDX-License-Identifier: Apache-2.0
// [fault] helpers: the victim rank SIGKILLs itself from a second thread while the workload
// runs; the survivors time how long their pending call took to fail, check that the error names
// the dead rank, time shutdown(), and print one "FAULT-TEST PASS|FAIL" line each.
#pragma once

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>

#include "hvd/hvd.h"

namespace hvd::fault {

// Wall-clock seconds (CLOCK_REALTIME, shared by every process on the host).
inline double wall_s() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// On the victim: after `delay_ms`, writes the time to `stamp` and SIGKILLs this process.
inline void kill_self_after(int delay_ms, const std::string& stamp) {
  std::thread([delay_ms, stamp] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    {
      std::ofstream f(stamp);
      f.precision(17);
      f << wall_s() << "\n";
    }
    ::kill(::getpid(), SIGKILL);
  }).detach();
}

// Runs `step` until it throws (the victim's death) on every rank but `victim`, which dies in
// it after a seeded random delay. `after` (optional) runs on each survivor once its call
// failed, before shutdown(): a non-empty answer fails the test with it. Returns the process
// exit code.
inline int run(const char* mode, const std::function<void(int iteration)>& step,
               const std::string& stamp, int min_ms = 100, int max_ms = 400,
               const std::function<std::string()>& after = {}) {
  const int r = hvd::rank(), n = hvd::size(), victim = n - 1;
  const unsigned seed = static_cast<unsigned>(std::random_device{}());
  std::mt19937 rng(seed);
  const int delay = std::uniform_int_distribution<int>(min_ms, max_ms)(rng);
  step(-1);  // warm-up: every rank is up and connected
  if (r == victim) {
    std::printf("FAULT-TEST victim rank %d (%s): SIGKILL after %d ms (seed %u)\n", r, mode, delay,
                seed);
    std::fflush(stdout);
    kill_self_after(delay, stamp);
  }
  std::string error;
  int iterations = 0;
  try {
    for (;; ++iterations) step(iterations);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double failed_at = wall_s();
  double died_at = 0;
  for (int i = 0; i < 100 && died_at == 0; ++i) {  // the victim wrote it just before dying
    std::ifstream f(stamp);
    if (!(f >> died_at)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double detect_ms = (failed_at - died_at) * 1000.0;
  const std::string after_error = after ? after() : "";
  const auto t0 = std::chrono::steady_clock::now();
  hvd::shutdown();
  const double shutdown_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::string want = "rank " + std::to_string(victim) + " (pid ";
  const bool named = error.find(want) != std::string::npos;
  const bool ok =
      named && died_at > 0 && detect_ms < 5000 && shutdown_ms < 1000 && after_error.empty();
  std::printf(
      "FAULT-TEST %s (rank %d, %s): %d iterations, failed %.1f ms after the death, shutdown %.1f "
      "ms%s%s: %s\n",
      ok ? "PASS" : "FAIL", r, mode, iterations, detect_ms, shutdown_ms,
      after_error.empty() ? "" : "; ", after_error.c_str(), error.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace hvd::fault
