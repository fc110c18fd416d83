// SPDX-License-Identifier: Apache-2.0
// Timing helpers shared by the MPI benchmarks: medians of the slowest rank per iteration.
#pragma once

#include <dirent.h>
#include <mpi.h>
#include <sys/types.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <utility>
#include <vector>

namespace hvd_bench {

/// CPU time (ns) of thread `tid` of this process: the kernel's per-thread CPU clock, what
/// CLOCK_THREAD_CPUTIME_ID reads inside that thread (Linux: MAKE_THREAD_CPUCLOCK(tid, SCHED)).
inline double thread_cpu_ns(pid_t tid) {
  const clockid_t id = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

/// This process's thread ids (Linux: /proc/self/task).
inline std::vector<pid_t> thread_ids() {
  std::vector<pid_t> out;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// The threads hvd::init() started (call before init, then started() after it): the busiest
/// of them over a measurement is the background thread (the others idle). Works with any hvd
/// build, so bench-compare can read it from old revisions too.
class LoopThread {
 public:
  void before_init() { before_ = thread_ids(); }
  void after_init() {
    for (pid_t t : thread_ids()) {
      if (!std::binary_search(before_.begin(), before_.end(), t)) started_.push_back(t);
    }
  }
  /// CPU ns of every thread init() started, to pass back to busiest_delta().
  std::vector<double> sample() const {
    std::vector<double> v;
    for (pid_t t : started_) v.push_back(thread_cpu_ns(t));
    return v;
  }
  /// The largest per-thread CPU increase between two samples (ns).
  static double busiest_delta(const std::vector<double>& a, const std::vector<double>& b) {
    double best = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) best = std::max(best, b[i] - a[i]);
    return best;
  }

 private:
  std::vector<pid_t> before_, started_;
};

/// CPU ns of the calling thread.
inline double self_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The median (the upper one of an even count) of `v`; 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Runs `body` iters + 3 times between barriers; the first 3 warm up (and fill hvd's response
/// cache). Returns the median over iterations of the slowest rank's time.
inline double median_ms(int iters, const std::function<void()>& body) {
  std::vector<double> t;
  for (int i = 0; i < iters + 3; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_ms();
    body();
    double dt = now_ms() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 3) t.push_back(worst);
  }
  return median(std::move(t));
}

}  // namespace hvd_bench
