// SPDX-License-Identifier: Apache-2.0
// [local] stall warnings: rank 0 reports a tensor some ranks submitted and others did not, once
// per HVD_STALL_CHECK_TIME_SECONDS, even while the missing rank's loop sleeps for lack of work.
// The stall clock is injected: the test moves it instead of sleeping the threshold. The
// thresholds are 1-2 s of that clock, so an idle loop's heartbeat (a quarter of the threshold,
// real time) is 250 ms and each case takes about a second.
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

// A fake stall clock the test moves.
struct FakeClock {
  std::shared_ptr<std::atomic<int64_t>> ns =
      std::make_shared<std::atomic<int64_t>>(int64_t{1000} * 1000 * 1000 * 1000);
  core::StallClock clock() const {
    auto p = ns;
    return
        [p] { return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(p->load())); };
  }
  void advance(double s) const { *ns += static_cast<int64_t>(s * 1e9); }
};

// `n` ranks, all but `missing` submit "grad"; the stall clock only moves when the test says.
void stall_is_reported(int n, int missing, const std::string& submitted) {
  Config cfg;
  cfg.stall_warning_s = 1;
  FakeClock fake;
  StallLog log;
  Cluster c(n, cfg, false, nullptr, fake.clock());
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

  fake.advance(0.5);  // under the threshold: nothing to report
  REQUIRE_FALSE(log.wait_for(1, 1.0));

  fake.advance(0.51);  // 1.01 s
  REQUIRE(log.wait_for(1, 10));
  const std::string expect =
      "'grad' submitted by " + submitted + ", missing on rank " + std::to_string(missing);
  INFO(log.lines().front());
  REQUIRE(log.lines().front().find(expect) != std::string::npos);
  REQUIRE(log.lines().front().find("waited 1+ s") != std::string::npos);

  // Once per interval: more rounds at the same time add nothing; the next interval warns again.
  REQUIRE_FALSE(log.wait_for(2, 1.0));
  fake.advance(1.01);
  REQUIRE(log.wait_for(2, 10));
  REQUIRE(log.lines()[1].find(expect) != std::string::npos);

  // The missing rank catches up: the collective completes everywhere.
  hs[static_cast<size_t>(missing)] = submit(c[missing], "grad", t[static_cast<size_t>(missing)]);
  for (int r = 0; r < n; ++r) await_ok(hs[static_cast<size_t>(r)], "grad");
  REQUIRE(t[0].out == std::vector<int32_t>(4, n * (n + 1) / 2));
}

// Waits (real time) until rank 0 ran `n` more full rounds than `from`.
void await_full_rounds(Cluster& c, uint64_t from, uint64_t n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (c[0].stats().full_rounds.load() < from + n &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(c[0].stats().full_rounds.load() >= from + n);
}

}  // namespace

TEST_CASE("the stall report names what each missing rank has pending instead", "[local]") {
  // Diverging control flow: ranks 0 and 2 wait in 'x', rank 1 in 'y'.
  Config cfg;
  cfg.stall_warning_s = 1;
  FakeClock fake;
  StallLog log;
  Cluster c(3, cfg, false, nullptr, fake.clock());
  std::vector<Tensor<int32_t>> t;
  for (int r = 0; r < 3; ++r) t.emplace_back(std::vector<int32_t>(4, r + 1));
  std::vector<Handle> hs;
  for (int r = 0; r < 3; ++r)
    hs.push_back(submit(c[r], r == 1 ? "y" : "x", t[static_cast<size_t>(r)]));
  c.start_all();
  await_full_rounds(c, 0, 1);
  fake.advance(1.01);
  REQUIRE(log.wait_for(1, 10));
  const std::string line = log.lines().front();
  INFO(line);
  CHECK(line.find("2 tensors have waited 1+ s") != std::string::npos);
  CHECK(line.find("'x' submitted by ranks 0,2, missing on rank 1 (rank 1 has 'y' pending "
                  "instead)") != std::string::npos);
  CHECK(line.find("'y' submitted by rank 1, missing on ranks 0,2 (ranks 0,2 have 'x' pending "
                  "instead)") != std::string::npos);
  // Resolve the divergence so that the cluster shuts down cleanly.
  hs.push_back(submit(c[1], "x", t[1]));
  for (int r : {0, 2}) hs.push_back(submit(c[r], "y", t[static_cast<size_t>(r)]));
  for (auto& h : hs) await_ok(h, "x/y");
}

TEST_CASE("HVD_STALL_SHUTDOWN_TIME_SECONDS fails every pending handle with the report", "[local]") {
  Config cfg;
  cfg.stall_warning_s = 1;
  cfg.stall_shutdown_s = 2;
  FakeClock fake;
  StallLog log;
  Cluster c(4, cfg, false, nullptr, fake.clock());
  std::vector<Tensor<float>> t;
  for (int r = 0; r < 4; ++r) t.emplace_back(std::vector<float>(8, 1.0f));
  std::vector<Handle> hs;
  for (int r = 0; r < 4; ++r) {
    if (r != 3) hs.push_back(submit(c[r], "x", t[static_cast<size_t>(r)]));
  }
  c.start_all();
  await_full_rounds(c, 0, 1);
  fake.advance(1.01);  // a warning, nothing fails
  REQUIRE(log.wait_for(1, 10));
  INFO(log.lines().front());
  CHECK(log.lines().front().find("stopping every rank") == std::string::npos);
  // Rounds go on after the warning and fail nothing: checked after two more rounds, not at once
  // (a stop would fail the handles with the next round).
  const uint64_t seen = c[0].stats().rounds.load();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (c[0].stats().rounds.load() < seen + 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(c[0].stats().rounds.load() >= seen + 2);
  for (auto& h : hs) CHECK_FALSE(h.poll());
  fake.advance(1.0);  // 2.01 s: every rank stops
  for (auto& h : hs) {
    Status s = await(h, "x");
    INFO(s.message());
    CHECK_FALSE(s.ok());
    CHECK(s.message().find("'x' submitted by ranks 0-2, missing on rank 3 (rank 3 has nothing "
                           "pending)") != std::string::npos);
    CHECK(s.message().find("HVD_STALL_SHUTDOWN_TIME_SECONDS=2") != std::string::npos);
  }
  // Rank 3 too: its next call fails with the same report instead of hanging.
  Handle late = submit(c[3], "x", t[3]);
  Status s = await(late, "x on rank 3");
  CHECK(s.message().find("missing on rank 3") != std::string::npos);
}

TEST_CASE("a stalled cached tensor is reported after at most twice the threshold", "[local]") {
  Config cfg;
  cfg.stall_warning_s = 1;
  FakeClock fake;
  StallLog log;
  Cluster c(2, cfg, false, nullptr, fake.clock());
  std::vector<Tensor<int32_t>> t;
  for (int r = 0; r < 2; ++r) t.emplace_back(std::vector<int32_t>(4, r + 1));
  c.start_all();
  for (int round = 0; round < 2; ++round) {  // the second time 'grad' goes through the cache
    std::vector<Handle> hs;
    for (int r = 0; r < 2; ++r) hs.push_back(submit(c[r], "grad", t[static_cast<size_t>(r)]));
    for (auto& h : hs) await_ok(h, "grad");
  }
  const uint64_t full = c[0].stats().full_rounds.load();
  Handle h = submit(c[0], "grad", t[0]);  // rank 1 never submits it this time
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(c[0].stats().full_rounds.load() == full);  // a cache hit: rank 0's table never saw it
  fake.advance(1.01);  // rank 0's cached request is re-sent through the coordinator
  await_full_rounds(c, full, 1);
  fake.advance(1.01);
  REQUIRE(log.wait_for(1, 10));
  INFO(log.lines().front());
  CHECK(log.lines().front().find("'grad' submitted by rank 0, missing on rank 1 (rank 1 has "
                                 "nothing pending)") != std::string::npos);
  Handle h1 = submit(c[1], "grad", t[1]);
  await_ok(h, "grad");
  await_ok(h1, "grad");
  CHECK(t[0].out == std::vector<int32_t>(4, 3));
}

TEST_CASE("HVD_STALL_CHECK_DISABLE=1 turns the stall inspector off", "[local]") {
  Config cfg;
  cfg.stall_warning_s = 1;
  cfg.stall_shutdown_s = 1.01;
  cfg.stall_check_disable = true;
  FakeClock fake;
  StallLog log;
  Cluster c(2, cfg, false, nullptr, fake.clock());
  Tensor<int32_t> t0(std::vector<int32_t>(4, 1)), t1(std::vector<int32_t>(4, 2));
  Handle h0 = submit(c[0], "grad", t0);
  c.start_all();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  fake.advance(3);
  REQUIRE_FALSE(log.wait_for(1, 1.0));
  CHECK_FALSE(h0.poll());
  Handle h1 = submit(c[1], "grad", t1);
  await_ok(h0, "grad");
  await_ok(h1, "grad");
}

TEST_CASE("rank 0 reports a stall while it is the missing rank and its loop sleeps", "[local]") {
  stall_is_reported(2, 0, "rank 1");
}

TEST_CASE("rank 0 reports a stall on another rank once per interval", "[local]") {
  stall_is_reported(4, 2, "ranks 0-1,3");
}
