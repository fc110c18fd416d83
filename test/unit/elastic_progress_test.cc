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
#include <stdexcept>
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

TEST_CASE("a progress report rewrites the file with the next sequence number and the last commit",
          "[unit]") {
  TempFile f;
  ProgressReporter r(f.path, [] { return std::nullopt; });
  REQUIRE(r.start().ok());
  r.report();
  CHECK(f.text() == "00000000000000000001 -0000000000000000001\n");
  r.report();
  CHECK(f.text() == "00000000000000000002 -0000000000000000001\n");
  CHECK(r.reports() == 2);
  // A commit is reported with its id, and every report after it carries that id: an explicit
  // report (rank-local work saying it is alive) is a new sequence number too.
  r.report_commit(12);
  CHECK(f.text() == "00000000000000000003 00000000000000000012\n");
  r.report();
  CHECK(f.text() == "00000000000000000004 00000000000000000012\n");
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
  CHECK(f.text() == "00000000000000000002 -0000000000000000001\n");
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

TEST_CASE("errors a restart cannot fix: invalid argument, mismatch, state, logic_error", "[unit]") {
  using hvd::elastic::is_fatal_error;
  CHECK(is_fatal_error(hvd::Error(hvd::invalid_argument("bad root"))));
  CHECK(is_fatal_error(hvd::Error(hvd::mismatch("allreduce 'w': shapes differ"))));
  CHECK(is_fatal_error(hvd::Error(hvd::elastic_state_error("snapshot not authentic"))));
  CHECK(is_fatal_error(std::invalid_argument("batch size 0")));
  CHECK(is_fatal_error(std::out_of_range("index 7")));
  // A lost peer, a backend failure, a shut-down runtime: a new generation can get past them.
  CHECK_FALSE(is_fatal_error(hvd::Error(hvd::peer_failure("rank 1 died"))));
  CHECK_FALSE(is_fatal_error(hvd::Error(hvd::internal_error("MPI_Allreduce failed"))));
  CHECK_FALSE(is_fatal_error(hvd::Error(hvd::aborted("shut down"))));
  CHECK_FALSE(is_fatal_error(std::runtime_error("disk full")));
}
