// SPDX-License-Identifier: Apache-2.0
// hvd_idle_cost: what an initialised but idle hvd costs a CPU-bound training process.
//  1. CPU time used by the whole process while idle for --idle-seconds (target < 2% of a core).
//  2. A compute-bound loop on every rank, timed before and after hvd::init() (target <= 3%).
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "hvd/hvd.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// ~0.2 s of floating-point work that the compiler cannot drop.
double compute_ms() {
  auto t0 = std::chrono::steady_clock::now();
  volatile double acc = 0;
  std::vector<double> v(4096);
  for (int rep = 0; rep < 6000; ++rep) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i + rep)) * 1.0001;
    double s = 0;
    for (double x : v) s += x;
    acc = acc + s;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

using hvd_bench::median;

}  // namespace

int main(int argc, char** argv) {
  double idle_s = 10;
  int reps = 9;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--idle-seconds") && i + 1 < argc)
      idle_s = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
  }
  int provided = 0;  // hvd::init() then uses the caller's MPI (and leaves it to finalise)
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  std::vector<double> before, after;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    before.push_back(compute_ms());
  }
  hvd::init();
  MPI_Barrier(MPI_COMM_WORLD);
  double c0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
  double idle_cpu = cpu_seconds() - c0;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    after.push_back(compute_ms());
  }
  double mb = median(before), ma = median(after);
  double worst_pct = 0, pct = 100.0 * idle_cpu / idle_s, slow = 100.0 * (ma / mb - 1.0),
         worst_slow = 0;
  MPI_Reduce(&pct, &worst_pct, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&slow, &worst_slow, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("hvd_idle_cost: np=%d\n", hvd::size());
    std::printf("  idle CPU over %.0f s: %.3f%% of one core (worst rank; target < 2%%)\n", idle_s,
                worst_pct);
    std::printf(
        "  compute loop median: %.1f ms without hvd, %.1f ms with hvd idle: %+.2f%% "
        "(worst rank; target <= 3%%)\n",
        mb, ma, worst_slow);
  }
  hvd::shutdown();
  MPI_Finalize();
  return 0;
}
