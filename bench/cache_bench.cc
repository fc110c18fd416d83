// SPDX-License-Identifier: Apache-2.0
// hvd_cache_bench: cost per tensor of a step of K small allreduces (16 floats each, distinct
// names, all submitted then all waited) for K = 256, 1,000, 2,000 and 4,000, in the cached
// steady state: the same K names every step, after warm-up steps. With the response cache
// working at every K the cost per tensor stays flat; a cache smaller than K that thrashes
// sends every tensor through rank 0 every step ("full/step" > 0). Prints per K: the median
// step time (slowest rank), microseconds per tensor, and negotiation rounds and full
// (coordinator) rounds per step on rank 0. --grouped: each step is one grouped allreduce of the
// K tensors instead (a group is cached whole or not at all).
//
//   mpirun -np 2 --bind-to none build/bench/hvd_cache_bench [--iters N] [--warmup N]
//     [--sizes K,K,...] [--grouped]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/hvd.h"

int main(int argc, char** argv) {
  int iters = 30;
  int warmup = 5;
  std::vector<int> sizes = {256, 1000, 2000, 4000};
  bool grouped = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc) {
      warmup = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--grouped")) {
      grouped = true;
    } else if (!std::strcmp(argv[i], "--sizes") && i + 1 < argc) {
      sizes.clear();
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ",")) {
        sizes.push_back(std::atoi(p));
      }
    } else {
      std::fprintf(stderr,
                   "usage: hvd_cache_bench [--iters N] [--warmup N] [--sizes K,...] "
                   "[--grouped]\n");
      return 2;
    }
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  hvd::init();
  const int rank = hvd::rank();
  if (rank == 0) {
    std::printf(
        "hvd_cache_bench: K allreduces of 16 floats per step%s, np=%d, %d steps after %d "
        "warm-up, median of slowest rank\n",
        grouped ? " (one grouped allreduce)" : "", hvd::size(), iters, warmup);
    std::printf("%8s %12s %14s %12s %12s\n", "tensors", "step ms", "us/tensor", "rounds/step",
                "full/step");
  }
  constexpr int64_t kLen = 16;
  for (int k : sizes) {
    std::vector<std::vector<float>> ts(static_cast<size_t>(k), std::vector<float>(kLen, 1.0f));
    std::vector<std::string> names;
    for (int j = 0; j < k; ++j) {
      names.push_back("cache." + std::to_string(k) + ".layer" + std::to_string(j) + ".weight");
    }
    std::vector<hvd::Handle> hs(static_cast<size_t>(k));
    std::vector<hvd::TensorView> views;
    for (auto& t : ts)
      views.emplace_back(t.data(), hvd::DataType::kFloat32, std::vector<int64_t>{kLen});
    const std::string group = "cache." + std::to_string(k) + ".group";
    auto step = [&] {
      if (grouped) {
        hvd::grouped_allreduce_async(views, group, hvd::ReduceOp::kSum).wait();
        return;
      }
      for (int j = 0; j < k; ++j) {
        hs[static_cast<size_t>(j)] = hvd::allreduce_async(
            hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {kLen}),
            names[static_cast<size_t>(j)], hvd::ReduceOp::kSum);
      }
      for (auto& h : hs) h.wait();
    };
    for (int i = 0; i < warmup; ++i) step();
    const hvd::RuntimeStats st0 = hvd::runtime_stats();
    // median_ms runs 3 warm-up steps of its own before the `iters` it times.
    const double ms = hvd_bench::median_ms(iters, step);
    const hvd::RuntimeStats st1 = hvd::runtime_stats();
    const double full = static_cast<double>(st1.full_rounds - st0.full_rounds) / (iters + 3);
    const double rounds = static_cast<double>(st1.rounds - st0.rounds) / (iters + 3);
    if (rank == 0) {
      std::printf("%8d %12.3f %14.3f %12.2f %12.2f\n", k, ms, ms * 1e3 / k, rounds, full);
      std::fflush(stdout);
    }
  }
  hvd::shutdown();
  MPI_Finalize();
  return 0;
}
