// SPDX-License-Identifier: Apache-2.0
// [fault] libtorch: a collective aborted while rank 0's executor is inside it keeps its tensors.
//
// np 2 under mpiexec --enable-recovery (torch.abort_buffers.np2). Rank 1 submits an in-place Sum
// allreduce of a tensor whose pages it cannot read (PROT_NONE): the collective is negotiated on
// both ranks, rank 1 dies on the first read inside its executor, and rank 0's executor waits in
// MPI_Allreduce for data that never comes. Rank 0's peer monitor sees the death and aborts: the
// handle fails at once naming rank 1 but is not released (the executor may still write into
// the tensor), and dropping the TorchHandle and the tensor must not free the tensor's memory:
// hvd keeps it (core::keep_until_released, through the handle's own destructor) while the
// executor holds it, here for good. Prints one "FAULT-TEST PASS|FAIL" line per live rank.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "hvd/core/handle.h"
#include "hvd/torch.h"

namespace {

constexpr int64_t kFloats = 1 << 14;  // 64 KiB: four pages

std::atomic<bool> g_freed{false};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void done(int rank, bool ok, const std::string& what) {
  std::printf("FAULT-TEST %s (rank %d, abort_buffers torch): %s\n", ok ? "PASS" : "FAIL", rank,
              what.c_str());
  std::fflush(stdout);
  _exit(ok ? 0 : 1);  // rank 0's background thread stays inside MPI: no finalize
}

[[noreturn]] void victim() {
  const size_t bytes = static_cast<size_t>(kFloats) * sizeof(float);
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) done(1, false, "mmap failed");
  torch::Tensor t = torch::from_blob(p, {kFloats}, torch::kFloat32);
  std::printf("abort_buffers: rank 1 submits a tensor it cannot read; it dies in the executor\n");
  std::fflush(stdout);
  hvd::TorchHandle h = hvd::allreduce_async_(t, "abort.buffers", hvd::ReduceOp::kSum);
  std::this_thread::sleep_for(std::chrono::seconds(30));
  done(1, false, "still alive 30 s after submitting an unreadable tensor");
}

[[noreturn]] void survivor() {
  std::vector<std::string> failures;
  auto check = [&](bool cond, const std::string& what) {
    if (!cond) failures.push_back(what);
  };
  auto* data = new float[kFloats];
  for (int64_t i = 0; i < kFloats; ++i) data[i] = 1.f;
  torch::Tensor t = torch::from_blob(
      data, {kFloats},
      [](void* q) {
        g_freed = true;
        delete[] static_cast<float*>(q);
      },
      torch::kFloat32);
  const size_t kept_before = hvd::core::kept_until_released();
  const auto t0 = std::chrono::steady_clock::now();
  hvd::TorchHandle h = hvd::allreduce_async_(t, "abort.buffers", hvd::ReduceOp::kSum);
  std::string error;
  try {
    h.wait();
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double failed_s = since(t0);
  const bool finished = h.poll(), released = h.handle().released();
  check(!error.empty(), "wait() returned although rank 1 died inside the collective");
  check(error.find("rank 1") != std::string::npos, "the error does not name rank 1: " + error);
  check(failed_s < 5.0, "the failure took " + std::to_string(failed_s) + " s (bound 5 s)");
  // Finished (the abort), not released: the executor is still inside MPI_Allreduce.
  check(finished, "poll() is false after wait() threw");
  check(!released, "released() is true while the executor is still inside the collective");
  // The user lets go of both: hvd's own handle destructor must keep the tensor.
  t = torch::Tensor();
  h = hvd::TorchHandle();
  check(!g_freed, "the tensor was freed while the executor may still write it");
  check(hvd::core::kept_until_released() == kept_before + 1,
        "the dropped handle's tensors were not kept (kept_until_released " +
            std::to_string(hvd::core::kept_until_released()) + ")");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  check(!g_freed, "the tensor was freed 0.5 s later, the executor still inside");
  const auto t1 = std::chrono::steady_clock::now();
  hvd::shutdown();
  const double shutdown_s = since(t1);
  check(shutdown_s < 2.0, "shutdown took " + std::to_string(shutdown_s) + " s (bound 2 s)");
  check(!g_freed, "shutdown freed the tensor the stuck executor holds");
  std::string what = "failed " + std::to_string(static_cast<int>(failed_s * 1000)) +
                     " ms after submitting, shutdown " +
                     std::to_string(static_cast<int>(shutdown_s * 1000)) + " ms; ";
  for (const auto& f : failures) what += f + "; ";
  if (failures.empty()) what += "error: " + error.substr(0, 200);
  done(0, failures.empty(), what);
}

}  // namespace

int main() {
  hvd::init();
  const int rank = hvd::rank();
  if (hvd::size() != 2) done(rank, false, "needs exactly 2 ranks");
  // Every rank connected (the peer monitor too) before anything dies.
  torch::Tensor w = hvd::allreduce(torch::ones({2}), "abort.warmup", hvd::ReduceOp::kSum);
  if (!w.equal(torch::full({2}, 2.f))) done(rank, false, "the warm-up allreduce was wrong");
  if (rank == 1) victim();
  survivor();
}
