// SPDX-License-Identifier: Apache-2.0
// The timeline's writer thread and its SIGTERM handler.
//
// Why the file is valid JSON on SIGTERM: it ends in "\n]\n" after every flush (the new events
// and the bracket go over the old bracket in one pwrite), so it is invalid only while a pwrite
// runs. The handler closes that window: it raises `g_terminating`, then waits (at most 2 s)
// until no pwrite is in flight; a writer checks the flag after announcing its write and skips
// the write when it is set (both sides use sequentially consistent atomics, so one of them
// always sees the other). Then the handler hands the signal to the disposition it replaced:
// the default one (terminate) by re-raising, a user's handler by calling it (and the timeline
// resumes if that handler returns). Writer threads block SIGTERM, so the handler never waits
// on its own thread. Events still queued (at most kFlushMs of them) are lost.
#include "timeline_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <mutex>

namespace hvd::core {
namespace {

constexpr size_t kMaxQueued = 1 << 20;
constexpr size_t kWakeAt = 4096;  // lines queued that wake the writer before kFlushMs

std::atomic<int> g_terminating{0};
std::atomic<int> g_writes_in_flight{0};
struct sigaction g_previous {};
std::once_flag g_install_once;

void on_sigterm(int sig, siginfo_t* info, void* ctx) {
  const int saved_errno = errno;
  g_terminating.store(1);
  for (int i = 0; i < 2000 && g_writes_in_flight.load() > 0; ++i) {
    timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);  // async-signal-safe
  }
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) {
      g_previous.sa_sigaction(sig, info, ctx);
      g_terminating.store(0);
    }
  } else if (g_previous.sa_handler == SIG_DFL) {
    // Terminate as without us: the signal is blocked while this handler runs, so the re-raised
    // one is delivered, with the default action, as the handler returns.
    signal(sig, SIG_DFL);
    raise(sig);
  } else if (g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    g_terminating.store(0);
  } else {
    g_terminating.store(0);
  }
  errno = saved_errno;
}

void install_sigterm_handler() {
  std::call_once(g_install_once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigterm;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &g_previous);
  });
}

// Writes all of `data` at `pos` (retrying short writes); false on an error.
bool pwrite_all(int fd, const std::string& data, int64_t pos) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done,
                         static_cast<off_t>(pos + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

TimelineWriter::TimelineWriter(const std::string& path)
    : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
  if (fd_ < 0) return;
  if (!pwrite_all(fd_, "[\n\n]\n", 0)) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  close_pos_ = 2;
}

TimelineWriter::~TimelineWriter() { close(); }

void TimelineWriter::start() {
  if (fd_ < 0 || thread_.joinable()) return;
  install_sigterm_handler();
  thread_ = std::thread([this] { run(); });
}

void TimelineWriter::push(std::string line) {
  std::lock_guard<std::mutex> lk(mu_);
  if (queue_.size() >= kMaxQueued || fd_ < 0) {
    ++dropped_;
    return;
  }
  queue_.push_back(std::move(line));
  if (queue_.size() == kWakeAt) cv_.notify_one();
}

uint64_t TimelineWriter::dropped() const {
  std::lock_guard<std::mutex> lk(mu_);
  return dropped_;
}

void TimelineWriter::run() {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);  // the handler waits for this thread's writes
  std::vector<std::string> batch;
  for (;;) {
    bool stop = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(kFlushMs),
                   [&] { return stop_ || queue_.size() >= kWakeAt; });
      batch.swap(queue_);
      stop = stop_;
    }
    write_lines(batch);
    batch.clear();
    if (stop) return;
  }
}

void TimelineWriter::write_lines(const std::vector<std::string>& lines) {
  if (lines.empty() || fd_ < 0) return;
  std::string out;
  size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size() + 2;
  out.reserve(bytes + 4);
  bool first = empty_;
  for (const auto& l : lines) {
    out += first ? "\n" : ",\n";
    out += l;
    first = false;
  }
  const size_t body = out.size();
  out += "\n]\n";
  g_writes_in_flight.fetch_add(1);
  if (g_terminating.load() == 0 && pwrite_all(fd_, out, close_pos_)) {
    close_pos_ += static_cast<int64_t>(body);
    empty_ = false;
  }
  g_writes_in_flight.fetch_sub(1);
}

void TimelineWriter::close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::vector<std::string> rest;
  {
    std::lock_guard<std::mutex> lk(mu_);
    rest.swap(queue_);
  }
  write_lines(rest);  // events queued before start() or after the thread's last look
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace hvd::core
