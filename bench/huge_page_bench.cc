// SPDX-License-Identifier: Apache-2.0
// huge_page_bench: one in-place MPI_Allreduce (float32 sum) of S bytes on memory from malloc
// against the same on a core::HostBuffer (2 MiB-aligned, advised MADV_HUGEPAGE: what hvd's
// executor buffers and gradient buckets use), in rounds that alternate the two (each round
// reverses the order). A round's figure is hvd_bench::median_ms (the median over iterations of
// the slowest rank's time), then the median round.
//
//   mpirun -np 2 --bind-to none --mca mpi_yield_when_idle 1 hvd_huge_page_bench
//       [--sizes 262144,1048576,4194304,16777216,67108864] [--rounds 5]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/core/host_buffer.h"

namespace {

using hvd_bench::median;

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<size_t> sizes = {256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::stringstream in(argv[++i]);
      std::string s;
      while (std::getline(in, s, ',')) sizes.push_back(std::stoull(s));
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      if (rank == 0)
        std::fprintf(stderr, "usage: hvd_huge_page_bench [--sizes S,...] [--rounds R]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (rank == 0) {
    int np = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    std::printf(
        "MPI_Allreduce in place, float32 sum, np %d, %d rounds (ms, slowest rank, median "
        "round; huge pages %s)\n",
        np, rounds, hvd::core::HostBuffer::huge_pages_enabled() ? "on" : "off (HVD_HUGE_PAGES=0)");
    std::printf("%12s %12s %12s %8s  rounds (malloc/HostBuffer)\n", "bytes", "malloc", "HostBuffer",
                "ratio");
  }
  for (size_t bytes : sizes) {
    const int count = static_cast<int>(bytes / sizeof(float));
    auto* plain = static_cast<float*>(std::malloc(bytes));
    std::memset(plain, 0, bytes);
    hvd::core::HostBuffer huge(bytes);
    std::memset(huge.data(), 0, bytes);
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / bytes, 10, 400));
    std::vector<double> a, b;
    std::string each;
    for (int r = 0; r < rounds; ++r) {
      auto* hp = reinterpret_cast<float*>(huge.data());
      auto time = [&](float* p) {
        return hvd_bench::median_ms(iters, [&] {
          MPI_Allreduce(MPI_IN_PLACE, p, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        });
      };
      if (r % 2 == 0) {
        a.push_back(time(plain));
        b.push_back(time(hp));
      } else {
        b.push_back(time(hp));
        a.push_back(time(plain));
      }
      char buf[64];
      std::snprintf(buf, sizeof buf, " %.3f/%.3f", a.back(), b.back());
      each += buf;
    }
    if (rank == 0) {
      std::printf("%12zu %12.3f %12.3f %7.2fx %s\n", bytes, median(a), median(b),
                  median(a) / median(b), each.c_str());
    }
    std::free(plain);
  }
  MPI_Finalize();
  return 0;
}
