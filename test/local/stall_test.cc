// SPDX-License-Identifier: Apache-2.0
// [local] stall warnings: rank 0 reports a tensor some ranks submitted and others did not, once
// per HVD_STALL_CHECK_TIME_SECONDS, even while the missing rank's loop sleeps for lack of work.
// The stall clock is injected: the test moves it instead of sleeping the threshold.
#include "hvd/core/logging.h"
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

// Collects the stall warnings logged while it lives.
class StallLog {
 public:
  StallLog() {
    core::set_log_sink([this](core::LogLevel level, const std::string& m) {
      if (level != core::LogLevel::kWarning || m.find("waited") == std::string::npos) return;
      std::lock_guard<std::mutex> lk(mu_);
      lines_.push_back(m);
    });
  }
  ~StallLog() { core::set_log_sink(nullptr); }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lk(mu_);
    return lines_;
  }
  // Waits (real time) until `n` warnings were logged; false after `seconds`.
  bool wait_for(size_t n, double seconds) const {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (lines().size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return lines().size() >= n;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

// `n` ranks, all but `missing` submit "grad"; the stall clock only moves when the test says.
void stall_is_reported(int n, int missing, const std::string& submitted) {
  Config cfg;
  cfg.stall_warning_s = 60;
  auto fake = std::make_shared<std::atomic<int64_t>>(int64_t{1000} * 1000 * 1000 * 1000);
  core::StallClock clock = [fake] {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(fake->load()));
  };
  auto advance = [fake](int s) { *fake += int64_t{s} * 1000 * 1000 * 1000; };
  StallLog log;
  Cluster c(n, cfg, false, nullptr, clock);
  std::vector<Tensor<int32_t>> t;
  for (int r = 0; r < n; ++r) t.emplace_back(std::vector<int32_t>(4, r + 1));
  std::vector<Handle> hs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (r != missing) hs[static_cast<size_t>(r)] = submit(c[r], "grad", t[static_cast<size_t>(r)]);
  }
  c.start_all();
  // Rank 0 has seen the request once a full round ran (the missing rank's idle loop took part).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (c[0].stats().full_rounds.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(c[0].stats().full_rounds.load() > 0);

  advance(30);  // under the threshold: nothing to report
  REQUIRE_FALSE(log.wait_for(1, 1.5));

  advance(31);  // 61 s
  REQUIRE(log.wait_for(1, 10));
  const std::string expect =
      "'grad' submitted by " + submitted + ", missing on rank " + std::to_string(missing);
  INFO(log.lines().front());
  REQUIRE(log.lines().front().find(expect) != std::string::npos);
  REQUIRE(log.lines().front().find("60+ s") != std::string::npos);

  // Once per interval: more rounds at the same time add nothing; the next interval warns again.
  REQUIRE_FALSE(log.wait_for(2, 2.5));
  advance(61);
  REQUIRE(log.wait_for(2, 10));
  REQUIRE(log.lines()[1].find(expect) != std::string::npos);

  // The missing rank catches up: the collective completes everywhere.
  hs[static_cast<size_t>(missing)] = submit(c[missing], "grad", t[static_cast<size_t>(missing)]);
  for (int r = 0; r < n; ++r) await_ok(hs[static_cast<size_t>(r)], "grad");
  REQUIRE(t[0].out == std::vector<int32_t>(4, n * (n + 1) / 2));
}

}  // namespace

TEST_CASE("rank 0 reports a stall while it is the missing rank and its loop sleeps", "[local]") {
  stall_is_reported(2, 0, "rank 1");
}

TEST_CASE("rank 0 reports a stall on another rank once per interval", "[local]") {
  stall_is_reported(4, 2, "ranks 0-1,3");
}
