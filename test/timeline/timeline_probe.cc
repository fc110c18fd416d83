// SPDX-License-Identifier: Apache-2.0
// A small training-like job for the timeline tests (test/timeline/timeline_test.py): each step
// submits 8 gradients (6 of 4 KiB, 2 of 64 KiB: fused, through the fusion buffer), rank 1 submits
// the last one 3 ms late, and each rank "computes" 2 ms between steps.
//   timeline_probe STEPS [error]   STEPS = 0: run until killed; "error": after 3 steps a
//   collective whose shapes differ between ranks fails, and the process exits 3 without
//   shutdown().
// Writes its pid to $HVD_PROBE_PID_DIR/pid.<rank> when that variable is set (the test's SIGTERM
// goes to one rank).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 10;
  const bool error = argc > 2 && std::string(argv[2]) == "error";
  hvd::init();
  const int rank = hvd::rank();
  if (const char* dir = std::getenv("HVD_PROBE_PID_DIR")) {
    if (FILE* f = std::fopen((std::string(dir) + "/pid." + std::to_string(rank)).c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
      std::fclose(f);
    }
  }
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < 8; ++i) grads.emplace_back(i < 6 ? 1024 : 16384, 1.0f);
  for (long s = 0; steps == 0 || s < steps; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // forward + backward
    std::vector<hvd::Handle> hs;
    for (int i = 0; i < 8; ++i) {
      if (i == 7 && rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      auto& g = grads[static_cast<size_t>(i)];
      hs.push_back(hvd::allreduce_async(
          hvd::TensorView(g.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(g.size())}),
          "grad." + std::to_string(i), hvd::ReduceOp::kAverage));
    }
    for (auto& h : hs) h.wait();
    if (error && s == 3) {
      std::vector<float> bad(static_cast<size_t>(4 + rank), 1.0f);
      try {
        hvd::allreduce(hvd::TensorView(bad.data(), hvd::DataType::kFloat32,
                                       {static_cast<int64_t>(bad.size())}),
                       "bad");
      } catch (const std::exception& e) {
        std::printf("rank %d: expected error: %s\n", rank, e.what());
        std::fflush(stdout);
        std::exit(3);
      }
    }
  }
  hvd::shutdown();
  return 0;
}
