// SPDX-License-Identifier: Apache-2.0
// The NCCL executor's communicator creation is agreed over MPI (ops/src/nccl/comm_init.h).
// [mpi] cases run without a GPU: under HVD_TEST_FAULT=nccl_init:rank=1 (the ctest entries set
// it) rank 1 fails its preparation before touching CUDA; every rank's first device collective
// must then fail within 2 s, each with the same message naming rank 1 and why (on a host
// without a GPU the other ranks also fail their own cudaSetDevice: named too), and later ones
// at once, without a collective call. [device] cases need a CUDA device (the GPU check,
// scripts/gpu_bundle.sh) and print "skipped: no CUDA device" without one.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/core/executor.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/nccl_executor.h"
#include "hvd_catch.h"

using namespace hvd;
using ops::nccl::NcclExecutor;
using ops::nccl::NcclOptions;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// An allreduce of `n` float32 on cuda:`device` at `data` (not touched unless it runs).
struct OneAllreduce {
  core::Response r;
  core::TensorEntry e;
  OneAllreduce(void* data, int64_t n, int device) {
    r.op = core::OpType::kAllreduce;
    r.names = {"nccl_init.t"};
    r.dtype = DataType::kFloat32;
    e.request.op = core::OpType::kAllreduce;
    e.request.name = "nccl_init.t";
    e.request.dtype = DataType::kFloat32;
    e.input = TensorView(data, DataType::kFloat32, {n});
    e.input.device = Device::cuda(device);
    e.output = e.input;
  }
  Status launch(NcclExecutor& ex, std::shared_ptr<core::Completion>* pending) {
    return ex.launch(r, {&e}, pending);
  }
};

// Rank 0's copy of `s`, on every rank.
std::string rank0s(MPI_Comm comm, const std::string& s) {
  int n = static_cast<int>(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, comm);
  std::string out = s;
  out.resize(static_cast<size_t>(n));
  MPI_Bcast(out.data(), n, MPI_CHAR, 0, comm);
  return out;
}

int devices() {
  auto n = ops::nccl::usable_device_count();
  return n.ok() ? n.value() : 0;
}

}  // namespace

TEST_CASE("a rank whose NCCL set-up fails fails every rank's first device collective, naming it",
          "[mpi]") {
  const char* fault = std::getenv("HVD_TEST_FAULT");
  REQUIRE(fault != nullptr);  // set by the ctest entry
  REQUIRE(std::string(fault) == "nccl_init:rank=1");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  REQUIRE(size >= 2);
  const int ndev = devices();
  {
    NcclOptions opts;
    opts.init_timeout = std::chrono::seconds(10);
    NcclExecutor ex(comm, opts);
    std::vector<float> host(4, 1.0f);  // never read: no device collective runs
    OneAllreduce op(host.data(), 4, ndev > 0 ? rank % ndev : 0);
    std::shared_ptr<core::Completion> pending;
    MPI_Barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = op.launch(ex, &pending);
    const double took = seconds_since(t0);
    std::printf("[rank %d] first device collective failed after %.3f s: %s\n", rank, took,
                s.message().c_str());
    std::fflush(stdout);
    REQUIRE_FALSE(s.ok());
    REQUIRE(pending == nullptr);
    CHECK(took < 2.0);
    REQUIRE_THAT(s.message(),
                 test::Contains("on rank 1: injected failure (HVD_TEST_FAULT=nccl_init:rank=1)"));
    REQUIRE_THAT(s.message(), test::Contains("no rank created it"));
    // Nobody entered NCCL's bootstrap: the failure was agreed before it.
    REQUIRE_THAT(s.message(), !test::Contains("ncclCommInitRankConfig"));
    for (int r = 0; r < size; ++r) {
      if (r == 1) continue;
      const std::string named = "on rank " + std::to_string(r) + ": ";
      if (ndev == 0) {  // no GPU here: every rank failed its own preparation too
        REQUIRE_THAT(s.message(), test::Contains(named));
      } else {
        REQUIRE_THAT(s.message(), !test::Contains(named));
      }
    }
    // The same verdict on every rank.
    REQUIRE(rank0s(comm, s.message()) == s.message());

    // Later device collectives fail at once with it, without a collective (rank 1 alone too).
    if (rank == 1) {
      const auto t1 = std::chrono::steady_clock::now();
      const Status again = op.launch(ex, &pending);
      REQUIRE(seconds_since(t1) < 0.05);
      REQUIRE(again.message() == s.message());
    }
    MPI_Barrier(comm);
  }
  MPI_Comm_free(&comm);
}

TEST_CASE("with every rank ready the communicator is created and an allreduce sums", "[device]") {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int ndev = devices();
  if (ndev < size) {  // NCCL refuses two ranks on one device
    std::printf("skipped: no CUDA device for each of %d ranks (%d found)\n", size, ndev);
    MPI_Comm_free(&comm);
    return;
  }
  {
    NcclOptions opts;
    opts.test_fault = "none";
    opts.default_device = rank;
    NcclExecutor ex(comm, opts);
    REQUIRE(cudaSetDevice(rank) == cudaSuccess);
    float* d = nullptr;
    REQUIRE(cudaMalloc(&d, 4 * sizeof(float)) == cudaSuccess);
    std::vector<float> host(4, static_cast<float>(rank + 1));
    REQUIRE(cudaMemcpy(d, host.data(), 16, cudaMemcpyHostToDevice) == cudaSuccess);
    OneAllreduce op(d, 4, rank);
    std::shared_ptr<core::Completion> pending;
    const Status s = op.launch(ex, &pending);
    INFO(s.message());
    REQUIRE(s.ok());
    if (pending) REQUIRE(pending->wait().ok());
    REQUIRE(cudaMemcpy(host.data(), d, 16, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (float v : host) REQUIRE(v == static_cast<float>(size * (size + 1) / 2));
    cudaFree(d);
  }
  MPI_Comm_free(&comm);
}

TEST_CASE("a rank whose NCCL init never ends: every rank gives up at the deadline, naming it",
          "[device]") {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int ndev = devices();
  if (ndev == 0 || size < 2) {
    std::printf("skipped: needs a CUDA device and 2 ranks (%d devices, %d ranks)\n", ndev, size);
    MPI_Comm_free(&comm);
    return;
  }
  {
    // Rank 1 never starts its init (it never touches NCCL, so one GPU serves both ranks).
    NcclOptions opts;
    opts.test_fault = "nccl_init_stuck:rank=1";
    opts.init_timeout = std::chrono::seconds(3);
    NcclExecutor ex(comm, opts);
    std::vector<float> host(4, 1.0f);
    OneAllreduce op(host.data(), 4, rank % ndev);
    std::shared_ptr<core::Completion> pending;
    MPI_Barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = op.launch(ex, &pending);
    const double took = seconds_since(t0);
    std::printf("[rank %d] failed after %.3f s: %s\n", rank, took, s.message().c_str());
    std::fflush(stdout);
    REQUIRE_FALSE(s.ok());
    CHECK(took > 2.5);
    CHECK(took < 6.0);
    REQUIRE_THAT(s.message(), test::Contains("on rank 1: ncclCommInitRankConfig did not finish "
                                             "within 3.0 s"));
    REQUIRE_THAT(s.message(), test::Contains("never started"));
    REQUIRE(rank0s(comm, s.message()) == s.message());
    MPI_Barrier(comm);
  }
  MPI_Comm_free(&comm);
}
