// SPDX-License-Identifier: Apache-2.0
// hvd_gpu_bench [--device cuda] [--iters N]: device-buffer allreduce (Sum) through hvd (K
// tensors of S floats, fused by hvd) against one raw ncclAllReduce of the same bytes (nccl_ms)
// and K raw calls, one per tensor (ncclK_ms). Prints median times, algorithm bandwidth
// (bytes / time) and the ratio hvd / one raw call. Run under mpirun, one GPU
// per rank; without a CUDA device it prints "skipped: no CUDA device" and exits 0.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/hvd.h"

namespace {

struct Case {
  int k;
  int64_t s;
  const char* label;
};

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

using hvd_bench::median;

#define BENCH_CHECK(x)                                                             \
  do {                                                                             \
    if (!(x)) {                                                                    \
      std::fprintf(stderr, "hvd_gpu_bench: %s failed at line %d\n", #x, __LINE__); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                \
    }                                                                              \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  int iters_arg = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters_arg = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc && std::strcmp(argv[++i], "cuda")) {
      std::fprintf(stderr, "hvd_gpu_bench measures --device cuda only\n");
      return 2;
    }
  }
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (rank == 0) std::printf("skipped: no CUDA device\n");
    hvd::shutdown();
    return 0;
  }
  const int dev = hvd::local_rank() % ndev;
  BENCH_CHECK(cudaSetDevice(dev) == cudaSuccess);
  ncclUniqueId id;
  if (rank == 0) BENCH_CHECK(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  BENCH_CHECK(ncclCommInitRank(&comm, size, id, rank) == ncclSuccess);
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);

  const Case cases[] = {{1, 1 << 20, "1x1Mi"},
                        {64, 16 << 10, "64x16Ki"},
                        {16, 1 << 20, "16x1Mi"},
                        {1024, 256, "1024x256"},
                        {1, 256 << 20, "1x256Mi"}};
  if (rank == 0) {
    std::printf("np=%d device=cuda:%d (median of N; algbw = bytes / time)\n", size, dev);
    std::printf("%-10s %10s %5s %10s %10s %10s %11s %11s %7s\n", "case", "MiB", "N", "hvd_ms",
                "nccl_ms", "ncclK_ms", "hvd_GB/s", "nccl_GB/s", "ratio");
  }
  int round = 0;
  for (const Case& c : cases) {
    const size_t bytes = static_cast<size_t>(c.k) * static_cast<size_t>(c.s) * sizeof(float);
    const int iters = iters_arg > 0
                          ? iters_arg
                          : static_cast<int>(std::clamp<size_t>((4ULL << 30) / bytes, 5, 50));
    std::vector<void*> bufs(static_cast<size_t>(c.k));
    for (auto& b : bufs) {
      BENCH_CHECK(cudaMalloc(&b, static_cast<size_t>(c.s) * sizeof(float)) == cudaSuccess);
      BENCH_CHECK(cudaMemset(b, 0, static_cast<size_t>(c.s) * sizeof(float)) == cudaSuccess);
    }
    void* raw = nullptr;
    BENCH_CHECK(cudaMalloc(&raw, bytes) == cudaSuccess);
    BENCH_CHECK(cudaMemset(raw, 0, bytes) == cudaSuccess);
    BENCH_CHECK(cudaDeviceSynchronize() == cudaSuccess);

    std::vector<double> th, tr, tk;
    for (int it = -2; it < iters; ++it) {  // two warm-up rounds
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now_ms();
      std::vector<hvd::Handle> hs;
      hs.reserve(bufs.size());
      for (size_t i = 0; i < bufs.size(); ++i) {
        hs.push_back(hvd::allreduce_async(
            hvd::TensorView(bufs[i], hvd::DataType::kFloat32, {c.s}, hvd::Device::cuda(dev)),
            "b" + std::to_string(round) + "." + std::to_string(i)));
      }
      for (auto& h : hs) h.wait();
      double t1 = now_ms();
      MPI_Barrier(MPI_COMM_WORLD);
      double t2 = now_ms();
      BENCH_CHECK(ncclAllReduce(raw, raw, bytes / sizeof(float), ncclFloat32, ncclSum, comm,
                                stream) == ncclSuccess);
      BENCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      double t3 = now_ms();
      if (it >= 0) {
        th.push_back(t1 - t0);
        tr.push_back(t3 - t2);
      }
    }
    ++round;
    const double mh = median(th), mr = median(tr), mk = median(tk);
    if (rank == 0) {
      std::printf("%-10s %10.2f %5d %10.3f %10.3f %10.3f %11.2f %11.2f %7.2f\n", c.label,
                  static_cast<double>(bytes) / (1 << 20), iters, mh, mr, mk,
                  static_cast<double>(bytes) / mh / 1e6, static_cast<double>(bytes) / mr / 1e6,
                  mh / mr);
      std::fflush(stdout);
    }
    for (auto& b : bufs) cudaFree(b);
    cudaFree(raw);
  }
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  hvd::shutdown();
  return 0;
}
