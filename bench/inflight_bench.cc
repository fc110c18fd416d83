// SPDX-License-Identifier: Apache-2.0
// hvd_inflight_bench: throughput with many collectives in flight. Each iteration submits K
// allreduces of S floats with distinct names (hvd::allreduce_async) before waiting for any, then
// waits for all; the same K names come back every iteration, as in a training loop. Prints the
// median over iterations of the slowest rank's time and collectives per second.
//
//   mpirun -np 2 --bind-to none build/bench/hvd_inflight_bench [--iters N] [--size S]
//       [--ks 1000,4000,...] [--budget SECONDS] [--fresh]
//
// --fresh gives every iteration new names (nothing cached, the table keeps growing);
// --budget stops a case early once its iterations took that long (a slow case still reports).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/hvd.h"

namespace {

using hvd_bench::now_ms;

std::vector<int> parse_ks(const char* s) {
  std::vector<int> ks;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) ks.push_back(std::atoi(item.c_str()));
  return ks;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 5;
  int64_t size = 16;
  double budget_s = 60;
  bool fresh = false;
  std::vector<int> ks = {1000, 4000, 8000, 16000, 32000, 50000};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--size") && i + 1 < argc) {
      size = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--ks") && i + 1 < argc) {
      ks = parse_ks(argv[++i]);
    } else if (!std::strcmp(argv[i], "--budget") && i + 1 < argc) {
      budget_s = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--fresh")) {
      fresh = true;
    } else {
      std::fprintf(stderr,
                   "usage: hvd_inflight_bench [--iters N] [--size S] [--ks K1,K2,...] "
                   "[--budget SECONDS] [--fresh]\n");
      return 2;
    }
  }
  hvd::init();
  const int rank = hvd::rank();
  if (rank == 0) {
    std::printf(
        "hvd_inflight_bench: K allreduces (Sum, %lld float32) in flight, then wait all; np=%d, "
        "%s names, median of slowest rank over up to %d iterations (+1 warm-up)\n",
        static_cast<long long>(size), hvd::size(), fresh ? "fresh" : "repeated", iters);
    std::printf("%8s %6s %12s %14s %10s\n", "K", "iters", "median ms", "collectives/s", "vs first");
  }
  double first_rate = 0;
  int round = 0;
  for (int k : ks) {
    std::vector<std::vector<float>> ts(static_cast<size_t>(k),
                                       std::vector<float>(static_cast<size_t>(size), 1.0f));
    std::vector<hvd::Handle> hs(static_cast<size_t>(k));
    std::vector<double> times;
    double spent = 0;
    for (int it = 0; it < iters + 1; ++it) {
      std::vector<std::string> names;
      names.reserve(static_cast<size_t>(k));
      const std::string prefix =
          "k" + std::to_string(k) + (fresh ? "." + std::to_string(round++) : std::string()) + ".";
      for (int j = 0; j < k; ++j) names.push_back(prefix + std::to_string(j));
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_ms();
      for (int j = 0; j < k; ++j) {
        hs[static_cast<size_t>(j)] = hvd::allreduce_async(
            hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {size}),
            names[static_cast<size_t>(j)], hvd::ReduceOp::kSum);
      }
      for (auto& h : hs) h.wait();
      double dt = now_ms() - t0, worst = 0;
      MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      spent += worst / 1000;
      if (it > 0) times.push_back(worst);
      if (spent > budget_s && !times.empty()) break;  // same decision on every rank
    }
    if (times.empty()) continue;
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    const double rate = k / (med / 1000);
    if (first_rate == 0) first_rate = rate;
    if (rank == 0) {
      std::printf("%8d %6zu %12.2f %14.0f %9.2fx\n", k, times.size(), med, rate, first_rate / rate);
      std::fflush(stdout);
    }
  }
  hvd::shutdown();
  return 0;
}
