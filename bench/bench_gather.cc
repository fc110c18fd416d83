// SPDX-License-Identifier: Apache-2.0
// hvd_bench_gather: hvd allgather / alltoall of K tensors of S floats per rank vs one raw
// MPI_Allgatherv / MPI_Alltoallv of the same bytes. Medians of the slowest rank, and ratios.
// allgather* gives hvd a caller allocator that reuses its buffers, as the raw call does; plain
// allgather / alltoall let hvd allocate a fresh output every call.
//
//   mpirun -np 2 --bind-to none build/bench/hvd_bench_gather [--iters N]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/hvd.h"

namespace {

using hvd_bench::median_ms;

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: hvd_bench_gather [--iters N]\n");
      return 2;
    }
  }
  hvd::init();
  const int rank = hvd::rank(), n = hvd::size();
  struct Case {
    int k;
    int64_t s;
    const char* label;
  };
  const Case cases[] = {{64, 16 << 10, "64x16Ki"}, {1, 16 << 20, "1x16Mi"}};
  if (rank == 0) {
    std::printf("hvd_bench_gather: float32, np=%d, %d iterations, median of slowest rank\n", n,
                iters);
    std::printf("%-10s %-10s %10s %12s %12s %8s\n", "op", "case", "MiB/rank", "hvd ms", "raw ms",
                "ratio");
  }
  for (const Case& c : cases) {
    const size_t per = static_cast<size_t>(c.k * c.s);
    std::vector<std::vector<float>> ts(static_cast<size_t>(c.k),
                                       std::vector<float>(static_cast<size_t>(c.s), 1.0f));
    std::vector<float> flat(per, 1.0f), out(per * static_cast<size_t>(n));
    std::vector<hvd::Handle> hs(static_cast<size_t>(c.k));
    std::vector<std::string> names;
    for (int j = 0; j < c.k; ++j) names.push_back(std::string(c.label) + "." + std::to_string(j));
    std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));

    // allgather
    double t_hvd = median_ms(iters, [&] {
      for (int j = 0; j < c.k; ++j) {
        hs[static_cast<size_t>(j)] = hvd::allgather_async(
            hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {c.s}),
            "ag." + names[static_cast<size_t>(j)]);
      }
      for (auto& h : hs) h.wait();
    });
    // The same, with outputs in caller buffers reused across iterations (no page faults).
    std::vector<std::vector<float>> outs(static_cast<size_t>(c.k));
    double t_alloc = median_ms(iters, [&] {
      for (int j = 0; j < c.k; ++j) {
        auto& o = outs[static_cast<size_t>(j)];
        hs[static_cast<size_t>(j)] = hvd::allgather_async(
            hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {c.s}),
            "agc." + names[static_cast<size_t>(j)], {},
            [&o](const std::vector<int64_t>& shape) -> void* {
              o.resize(static_cast<size_t>(hvd::shape_numel(shape)));
              return o.data();
            });
      }
      for (auto& h : hs) h.wait();
    });
    for (int q = 0; q < n; ++q) {
      counts[static_cast<size_t>(q)] = static_cast<int>(per);
      displs[static_cast<size_t>(q)] = static_cast<int>(per) * q;
    }
    double t_raw = median_ms(iters, [&] {
      MPI_Allgatherv(flat.data(), static_cast<int>(per), MPI_FLOAT, out.data(), counts.data(),
                     displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
    });
    if (rank == 0) {
      std::printf("%-10s %-10s %10.2f %12.3f %12.3f %7.2fx\n", "allgather", c.label,
                  static_cast<double>(per * 4) / (1 << 20), t_hvd, t_raw, t_hvd / t_raw);
      std::printf("%-10s %-10s %10.2f %12.3f %12.3f %7.2fx\n", "allgather*", c.label,
                  static_cast<double>(per * 4) / (1 << 20), t_alloc, t_raw, t_alloc / t_raw);
      std::fflush(stdout);
    }

    // alltoall (equal split: S/n floats of each tensor to each rank)
    const int64_t s_even = c.s - c.s % n;
    t_hvd = median_ms(iters, [&] {
      for (int j = 0; j < c.k; ++j) {
        hs[static_cast<size_t>(j)] = hvd::alltoall_async(
            hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {s_even}),
            {}, "a2a." + names[static_cast<size_t>(j)]);
      }
      for (auto& h : hs) h.wait();
    });
    const int64_t per_even = s_even * c.k;
    for (int q = 0; q < n; ++q) {
      counts[static_cast<size_t>(q)] = static_cast<int>(per_even / n);
      displs[static_cast<size_t>(q)] = static_cast<int>(per_even / n) * q;
    }
    t_raw = median_ms(iters, [&] {
      MPI_Alltoallv(flat.data(), counts.data(), displs.data(), MPI_FLOAT, out.data(), counts.data(),
                    displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
    });
    if (rank == 0) {
      std::printf("%-10s %-10s %10.2f %12.3f %12.3f %7.2fx\n", "alltoall", c.label,
                  static_cast<double>(per_even * 4) / (1 << 20), t_hvd, t_raw, t_hvd / t_raw);
      std::fflush(stdout);
    }
  }
  hvd::shutdown();
  return 0;
}
