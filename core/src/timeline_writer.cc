// SPDX-License-Identifier: Apache-2.0
// The timeline's writer thread and its SIGTERM handler.
//
// Why the file is valid JSON on SIGTERM: it ends in "\n]\n" after every flush (the new events
// and the bracket go over the old bracket in one pwrite), so it is invalid only while a pwrite
// runs. The handler closes that window: it raises `g_terminating`, then waits (at most 2 s)
// until no pwrite is in flight; a writer checks the flag after announcing its write and skips
// the write when it is set (both sides use sequentially consistent atomics, so one of them
// always sees the other). Every write (the writer thread's, close()'s on the caller's thread,
// the constructor's) runs with SIGTERM blocked on its thread, so the handler never waits on its
// own thread: a SIGTERM for that thread waits until its write is done. The handler is installed
// before the first write. Then the handler hands the signal to the disposition it replaced, as
// the kernel would have: the default one (terminate) by re-raising; a user's handler by calling
// it with its sa_mask (and SIGTERM itself unless SA_NODEFER) blocked, dropping back to the
// default disposition first under SA_RESETHAND. The timeline resumes if that handler returns;
// batches the writer skipped meanwhile are kept and written with the next. Events still queued
// when the process dies (at most kFlushMs of them) are lost.
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
struct sigaction g_previous = {};
std::once_flag g_install_once;

// The previous disposition's handler, run as the kernel would have run it (see the top).
void call_previous(const struct sigaction& prev, int sig, siginfo_t* info, void* ctx) {
  if (prev.sa_flags & SA_RESETHAND) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    g_previous = dfl;  // the next SIGTERM terminates, after the file is safe
  }
  sigset_t mask, old;
  pthread_sigmask(SIG_BLOCK, &prev.sa_mask, &old);
  if (prev.sa_flags & SA_NODEFER) {
    sigemptyset(&mask);
    sigaddset(&mask, sig);
    pthread_sigmask(SIG_UNBLOCK, &mask, nullptr);
  }
  if (prev.sa_flags & SA_SIGINFO) {
    prev.sa_sigaction(sig, info, ctx);
  } else {
    prev.sa_handler(sig);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void on_sigterm(int sig, siginfo_t* info, void* ctx) {
  const int saved_errno = errno;
  g_terminating.store(1);
  for (int i = 0; i < 2000 && g_writes_in_flight.load() > 0; ++i) {
    timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);  // async-signal-safe
  }
  const struct sigaction prev = g_previous;
  const bool has_handler = (prev.sa_flags & SA_SIGINFO)
                               ? prev.sa_sigaction != nullptr
                               : prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN;
  if (has_handler) {
    call_previous(prev, sig, info, ctx);
  } else if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler == SIG_DFL) {
    // Terminate as without us: the signal is blocked while this handler runs, so the re-raised
    // one is delivered, with the default action, as the handler returns.
    // g_terminating stays set: no write may start before the process is gone.
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved_errno;
    return;
  }
  g_terminating.store(0);
  errno = saved_errno;
}

void install_sigterm_handler() {
  std::call_once(g_install_once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = on_sigterm;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &g_previous);
  });
}

/// Blocks SIGTERM on this thread for its lifetime (a write in progress ends before the handler
/// runs here).
class SigtermBlocked {
 public:
  SigtermBlocked() {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, &old_);
  }
  ~SigtermBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SigtermBlocked(const SigtermBlocked&) = delete;
  SigtermBlocked& operator=(const SigtermBlocked&) = delete;

 private:
  sigset_t old_;
};

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

TimelineWriter::TimelineWriter(const std::string& path) {
  install_sigterm_handler();
  SigtermBlocked blocked;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
  SigtermBlocked blocked;  // the whole thread: the handler waits for its writes
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
    write_lines(&batch);
    batch.clear();
    if (stop) return;
  }
}

void TimelineWriter::write_lines(std::vector<std::string>* lines) {
  if (fd_ < 0 || (lines->empty() && held_.empty())) return;
  if (!held_.empty()) {  // skipped while a user's SIGTERM handler ran: they go first
    lines->insert(lines->begin(), std::make_move_iterator(held_.begin()),
                  std::make_move_iterator(held_.end()));
    held_.clear();
  }
  std::string out;
  size_t bytes = 0;
  for (const auto& l : *lines) bytes += l.size() + 2;
  out.reserve(bytes + 4);
  bool first = empty_;
  for (const auto& l : *lines) {
    out += first ? "\n" : ",\n";
    out += l;
    first = false;
  }
  const size_t body = out.size();
  out += "\n]\n";
  SigtermBlocked blocked;
  g_writes_in_flight.fetch_add(1);
  if (g_terminating.load() != 0) {
    held_.swap(*lines);  // written after the handler returned, if the process lives on
  } else if (pwrite_all(fd_, out, close_pos_)) {
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
  write_lines(&rest);  // events queued before start() or after the thread's last look
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace hvd::core
