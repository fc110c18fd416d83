// SPDX-License-Identifier: Apache-2.0
// The last rank (or rank 0, with argument "first") exits without shutdown(); every survivor's
// pending allreduce must fail, naming it with its pid and host.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

int main(int argc, char** argv) {
  hvd::init();
  const int r = hvd::rank(), n = hvd::size();
  const int victim = argc > 1 && std::strcmp(argv[1], "first") == 0 ? 0 : n - 1;
  std::vector<float> x(1024, 1.0f);
  hvd::TensorView v(x.data(), hvd::DataType::kFloat32, {1024});
  hvd::allreduce(v, "warmup", hvd::ReduceOp::kSum);  // everyone is up and connected
  if (r == victim) {
    // Let every survivor see its warmup complete first (the death must hit "after_death").
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fflush(stdout);
    _exit(3);  // dies without hvd::shutdown()
  }
  auto t0 = std::chrono::steady_clock::now();
  hvd::Handle h = hvd::allreduce_async(v, "after_death", hvd::ReduceOp::kSum);
  hvd::Status s = h.wait_status();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::string want = "rank " + std::to_string(victim) + " (pid ";
  bool ok = !s.ok() && s.code() == hvd::StatusCode::kPeerFailure &&
            s.message().find(want) != std::string::npos &&
            s.message().find("after_death") != std::string::npos;
  // Later calls fail at once with the same cause instead of hanging.
  bool later_ok = false;
  try {
    hvd::allreduce(v, "later", hvd::ReduceOp::kSum);
  } catch (const hvd::Error& e) {
    later_ok = std::string(e.what()).find(want) != std::string::npos;
  }
  std::printf("DEAD-RANK-TEST %s (rank %d): %.1f ms: %s%s\n", ok && later_ok ? "PASS" : "FAIL", r,
              ms, s.message().c_str(), later_ok ? "" : " [later call did not fail clearly]");
  std::fflush(stdout);
  hvd::shutdown();
  return 0;
}
