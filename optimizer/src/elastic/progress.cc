// SPDX-License-Identifier: Apache-2.0
// hvd::elastic::ProgressReporter and report_progress (hvd/optim/elastic_progress.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>

#include "hvd/core/private_dir.h"
#include "hvd/hvd.h"
#include "hvd/optim/elastic_progress.h"
#include "hvd/optim/elastic_store.h"

namespace hvd::elastic {

ProgressReporter::ProgressReporter(std::string path, Count count, std::chrono::milliseconds poll)
    : path_(std::move(path)), count_(std::move(count)), poll_(poll) {}

ProgressReporter::~ProgressReporter() {
  stop();
  if (fd_ >= 0) ::close(fd_);
}

Status ProgressReporter::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) return Status::OK();
  fd_ = core::open_private_file(path_, O_WRONLY | O_CREAT, 0600);  // in the state directory
  if (fd_ < 0) {
    return internal_error("hvd.elastic: cannot open the progress file '" + path_ +
                          "': " + std::strerror(errno));
  }
  thread_ = std::thread([this] { watch(); });
  return Status::OK();
}

void ProgressReporter::report_commit(uint64_t commit_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commit_ = static_cast<int64_t>(commit_id);
  }
  report();
}

void ProgressReporter::report() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  char line[64];
  const int n =
      std::snprintf(line, sizeof(line), "%020llu %020lld\n",
                    static_cast<unsigned long long>(++seq_), static_cast<long long>(commit_));
  // Fixed width, written in place: the reader never sees a truncated file. A failed write only
  // means the watchdog sees no progress this time.
  [[maybe_unused]] const ssize_t w = ::pwrite(fd_, line, static_cast<size_t>(n), 0);
}

void ProgressReporter::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t ProgressReporter::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

void ProgressReporter::watch() {
  std::optional<uint64_t> last;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, poll_, [this] { return stopping_; })) return;
    }
    const std::optional<uint64_t> n = count_();
    if (n && n != last) {
      last = n;
      report();
    }
  }
}

namespace {

std::optional<uint64_t> completed_collectives() {
  if (!hvd::is_initialized()) return std::nullopt;
  try {
    return hvd::runtime_stats().responses;
  } catch (const hvd::Error&) {  // shut down in the meantime
    return std::nullopt;
  }
}

// The process's reporter (started by the first report), or null outside elastic mode.
ProgressReporter* process_reporter() {
  static std::mutex mu;
  static std::unique_ptr<ProgressReporter> reporter;  // joined at exit, before the runtime goes
  std::lock_guard<std::mutex> lock(mu);
  if (!reporter) {
    const std::string path = environment().progress_file;
    if (path.empty()) return nullptr;
    auto r = std::make_unique<ProgressReporter>(path, completed_collectives);
    throw_if_error(r->start());
    reporter = std::move(r);
  }
  return reporter.get();
}

}  // namespace

void report_progress() {
  if (ProgressReporter* r = process_reporter()) r->report();
}

void report_commit(uint64_t commit_id) {
  if (ProgressReporter* r = process_reporter()) r->report_commit(commit_id);
}

bool is_fatal_error(const std::exception& e) {
  if (const auto* hvd_error = dynamic_cast<const hvd::Error*>(&e)) {
    return hvd_error->code() == StatusCode::kInvalidArgument ||
           hvd_error->code() == StatusCode::kMismatch ||
           hvd_error->code() == StatusCode::kElasticState;
  }
  return dynamic_cast<const std::logic_error*>(&e) != nullptr;
}

void end_job_for_fatal_error(int rank, const char* type, const char* what) {
  if (environment().state_dir.empty()) return;
  std::fprintf(stderr,
               "hvd.elastic: rank %d: %s: %s; a restart cannot fix this error: ending the job "
               "(exit %d)\n",
               rank, type, what, kFatalExitCode);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kFatalExitCode);
}

}  // namespace hvd::elastic
