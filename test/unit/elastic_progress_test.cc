// SPDX-License-Identifier: Apache-2.0
// The progress reports for hvdrun's step watchdog (hvd/optim/elastic_progress.h): the file's
// format and when the watching thread reports.
#include "hvd/optim/elastic_progress.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "hvd_catch.h"

using hvd::elastic::ProgressReporter;
using namespace std::chrono_literals;

namespace {

struct TempFile {
  std::string path;
  TempFile() {
    char tmpl[] = "/tmp/hvd_progress_unit_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = tmpl;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string text() const {
    std::ifstream f(path);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  }
};

// Waits up to 5 s for the reporter to have written `n` reports.
bool reaches(const ProgressReporter& r, uint64_t n) {
  for (int i = 0; i < 500 && r.reports() < n; ++i) std::this_thread::sleep_for(10ms);
  return r.reports() == n;
}

}  // namespace

TEST_CASE("a progress report rewrites the file with the next 20-digit sequence number", "[unit]") {
  TempFile f;
  ProgressReporter r(f.path, [] { return std::nullopt; });
  REQUIRE(r.start().ok());
  r.report();
  CHECK(f.text() == "00000000000000000001\n");
  r.report();
  CHECK(f.text() == "00000000000000000002\n");
  CHECK(r.reports() == 2);
}

TEST_CASE("the reporter reports when the collective count changed, and only then", "[unit]") {
  TempFile f;
  std::atomic<int64_t> count{-1};  // -1: no runtime, nothing can complete
  ProgressReporter r(
      f.path,
      [&]() -> std::optional<uint64_t> {
        const int64_t n = count.load();
        if (n < 0) return std::nullopt;
        return static_cast<uint64_t>(n);
      },
      5ms);
  REQUIRE(r.start().ok());
  std::this_thread::sleep_for(100ms);  // 20 looks without a runtime
  CHECK(r.reports() == 0);
  count = 7;
  CHECK(reaches(r, 1));
  std::this_thread::sleep_for(100ms);  // the count stays: no report
  CHECK(r.reports() == 1);
  count = 8;
  CHECK(reaches(r, 2));
  CHECK(f.text() == "00000000000000000002\n");
  r.stop();
  count = 9;
  std::this_thread::sleep_for(50ms);
  CHECK(r.reports() == 2);  // stopped: no more looks
}

TEST_CASE("a progress file that cannot be opened is an error naming it", "[unit]") {
  ProgressReporter r("/nonexistent-hvd-dir/progress", [] { return std::nullopt; });
  const auto st = r.start();
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("/nonexistent-hvd-dir/progress") != std::string::npos);
}
