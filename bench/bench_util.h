// SPDX-License-Identifier: Apache-2.0
// Timing helpers shared by the MPI benchmarks: medians of the slowest rank per iteration.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace hvd_bench {

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace hvd_bench
