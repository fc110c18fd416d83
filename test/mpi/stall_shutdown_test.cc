// SPDX-License-Identifier: Apache-2.0
// Run with HVD_STALL_CHECK_TIME_SECONDS=1 HVD_STALL_SHUTDOWN_TIME_SECONDS=2: rank 1 never
// submits 'x' (it waits in 'y' instead, the usual diverging control flow). Every rank's wait
// must fail with the stall report, naming 'x', the missing rank and what it has pending
// instead, within the shutdown time (plus a heartbeat), and shutdown() must be quick.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "hvd/hvd.h"

int main() {
  hvd::init();
  const int r = hvd::rank(), n = hvd::size();
  std::vector<float> x(16, 1.0f);
  hvd::TensorView v(x.data(), hvd::DataType::kFloat32, {16});
  hvd::allreduce(v, "warmup", hvd::ReduceOp::kSum);
  const auto t0 = std::chrono::steady_clock::now();
  hvd::Handle h = hvd::allreduce_async(v, r == 1 ? "y" : "x", hvd::ReduceOp::kSum);
  hvd::Status s = h.wait_status();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string others;  // every rank but 1
  for (int i = 0; i < n; ++i) {
    if (i != 1) others += (others.empty() ? "" : ",") + std::to_string(i);
  }
  if (n == 4) others = "0,2-3";
  const std::string want_x = "'x' submitted by rank" + std::string(n > 2 ? "s " : " ") + others +
                             ", missing on rank 1 (rank 1 has 'y' pending instead)";
  const std::string want_y =
      "'y' submitted by rank 1, missing on rank" + std::string(n > 2 ? "s " : " ") + others;
  const bool ok = !s.ok() && s.message().find(want_x) != std::string::npos &&
                  s.message().find(want_y) != std::string::npos &&
                  s.message().find("HVD_STALL_SHUTDOWN_TIME_SECONDS=2") != std::string::npos &&
                  waited >= 1.5 && waited < 5.0;
  const auto t1 = std::chrono::steady_clock::now();
  hvd::shutdown();
  const double shut = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const bool pass = ok && shut < 2.0;
  std::printf("STALL-SHUTDOWN-TEST %s (rank %d): failed after %.2f s, shutdown %.3f s: %s\n",
              pass ? "PASS" : "FAIL", r, waited, shut, s.message().c_str());
  std::fflush(stdout);
  return pass ? 0 : 1;
}
