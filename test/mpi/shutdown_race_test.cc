// SPDX-License-Identifier: Apache-2.0
// Collectives and queries racing hvd::shutdown() on other threads get results or the
// documented errors, never freed memory (run under ASan by the sanitizer pass).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

namespace {

std::mutex mu;
std::vector<std::string> problems;

void problem(const std::string& p) {
  std::lock_guard<std::mutex> lk(mu);
  problems.push_back(p);
}

// True when `what` is one of the errors a call racing shutdown() may get.
bool expected_error(const std::string& what) {
  return what.find("after hvd::shutdown()") != std::string::npos ||
         what.find("shut down") != std::string::npos ||
         what.find("shutting down") != std::string::npos;
}

}  // namespace

int main() {
  hvd::init();
  const int n = hvd::size(), me = hvd::rank();
  std::atomic<int> ok{0}, refused{0};
  auto user = [&](int k) {
    for (int i = 0;; ++i) {
      try {
        (void)hvd::is_initialized();
        if (hvd::size() != n || hvd::rank() != me) problem("rank()/size() changed");
        std::vector<float> v(3, static_cast<float>(me + 1));
        hvd::allreduce(hvd::TensorView(v.data(), hvd::DataType::kFloat32, {3}),
                       "race." + std::to_string(k) + "." + std::to_string(i), hvd::ReduceOp::kSum);
        if (v[0] != static_cast<float>(n * (n + 1) / 2))
          problem("wrong sum " + std::to_string(v[0]));
        ++ok;
      } catch (const hvd::Error& e) {
        const std::string what = e.what();
        if (!expected_error(what)) problem("unexpected error: " + what);
        ++refused;
        if (what.find("after hvd::shutdown()") != std::string::npos) return;
      }
    }
  };
  std::vector<std::thread> users;
  for (int k = 0; k < 3; ++k) users.emplace_back(user, k);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ok.load() < 30 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  hvd::shutdown();  // the users are still calling
  for (auto& t : users) t.join();
  if (ok.load() == 0) problem("no collective completed before the shutdown");
  for (const auto& p : problems) std::printf("SHUTDOWN-RACE FAIL: %s\n", p.c_str());
  std::printf("SHUTDOWN-RACE %s (rank %d: %d ok, %d refused)\n", problems.empty() ? "PASS" : "FAIL",
              me, ok.load(), refused.load());
  return problems.empty() ? 0 : 1;
}
