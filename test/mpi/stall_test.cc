// SPDX-License-Identifier: Apache-2.0
// Run with HVD_STALL_CHECK_TIME_SECONDS=1: every rank but one (the last, or rank 0 with argument
// "first") submits an allreduce; the missing rank submits it only after 3 s, idle meanwhile.
// Rank 0 must have logged the stall, naming the tensor, who submitted it and who did not.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/core/logging.h"
#include "hvd/hvd.h"

int main(int argc, char** argv) {
  std::mutex mu;
  std::vector<std::string> warnings;
  hvd::core::set_log_sink([&](hvd::core::LogLevel level, const std::string& m) {
    std::lock_guard<std::mutex> lk(mu);
    if (level == hvd::core::LogLevel::kWarning) warnings.push_back(m);
  });
  hvd::init();
  const int r = hvd::rank(), n = hvd::size();
  const int missing = argc > 1 && std::strcmp(argv[1], "first") == 0 ? 0 : n - 1;
  std::vector<float> x(16, 1.0f);
  hvd::TensorView v(x.data(), hvd::DataType::kFloat32, {16});
  hvd::allreduce(v, "warmup", hvd::ReduceOp::kSum);
  if (r == missing) std::this_thread::sleep_for(std::chrono::seconds(3));
  hvd::allreduce(v, "stalled.grad", hvd::ReduceOp::kSum);
  bool ok = true;
  std::string detail;
  if (r == 0) {
    std::string submitted;
    for (int i = 0; i < n; ++i) {
      if (i != missing) submitted += (submitted.empty() ? "" : ",") + std::to_string(i);
    }
    const std::string expect = "'stalled.grad' submitted by rank" + std::string(n > 2 ? "s " : " ");
    const std::string tail = ", missing on rank " + std::to_string(missing);
    std::lock_guard<std::mutex> lk(mu);
    int found = 0;
    for (const auto& w : warnings) {
      if (w.find(expect) != std::string::npos && w.find(tail) != std::string::npos) ++found;
      detail += " | " + w;
    }
    // Threshold 1 s, 3 s stall: reported, and at most once per second.
    ok = found >= 1 && found <= 3;
    detail = std::to_string(found) + " matching warnings" + detail;
  }
  std::printf("STALL-TEST %s (rank %d): %s\n", ok ? "PASS" : "FAIL", r, detail.c_str());
  std::fflush(stdout);
  hvd::core::set_log_sink(nullptr);
  hvd::shutdown();
  return ok ? 0 : 1;
}
