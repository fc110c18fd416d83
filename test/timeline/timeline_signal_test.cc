// SPDX-License-Identifier: Apache-2.0
// [local] The timeline's file and SIGTERM: a signal while a timeline is being stopped (its last
// write on the caller's thread) leaves a complete file and ends the process at once; a
// previous handler's SA_RESETHAND, SA_NODEFER and sa_mask are honoured; events the writer
// skipped while a user's handler ran are written after it returns. Each case runs in a child
// process of its own (the handler is installed once per process, chained to the one it finds).
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <new>
#include <sstream>
#include <string>
#include <thread>

#include "hvd/core/timeline.h"
#include "hvd_catch.h"
#include "json_lite.h"

using hvd::core::Timeline;

namespace {

std::string temp_path(const std::string& tag) {
  return "/tmp/hvd_timeline_signal_" + std::to_string(::getpid()) + "_" + tag + ".json";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// `rounds` negotiation rounds (two events each) queued on `t`.
void record_rounds(Timeline* t, int rounds) {
  const auto at = Timeline::Clock::now();
  for (int i = 0; i < rounds; ++i) t->record_round(0, at, at, false, 1, 0, {});
}

struct ChildResult {
  int status = 0;
  int64_t exited_ns = 0;  // when the parent saw it end
};

// Runs `body` in a child process; its exit status, and when it ended.
ChildResult in_child(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGTERM, SIG_DFL);  // not the test framework's handler: a plain process's
    body();
    std::_Exit(0);
  }
  ChildResult r;
  REQUIRE(waitpid(pid, &r.status, 0) == pid);
  r.exited_ns = now_ns();
  return r;
}

bool killed_by_sigterm(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM; }

// Shared with the child: when it sent SIGTERM, and when it last saw the file grow.
struct Watch {
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> last_growth{0};
};

// In the child: a thread that sends the process SIGTERM as soon as `path` grows past its empty
// array (the last write has begun), then notes each time the file grows until the end.
std::thread kill_when_written(const std::string& path, Watch* w) {
  return std::thread([path, w] {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);  // delivered to the thread that writes
    struct stat st = {};
    while (::stat(path.c_str(), &st) != 0 || st.st_size <= 5) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    w->sent = now_ns();
    w->last_growth = now_ns();
    ::kill(::getpid(), SIGTERM);
    for (off_t size = st.st_size;;) {
      if (::stat(path.c_str(), &st) == 0 && st.st_size != size) {
        size = st.st_size;
        w->last_growth = now_ns();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
}

// SIGTERM while the last write of a stopping timeline runs on the stopping thread.
void sigterm_during_stop(bool handler_installed_before) {
  const std::string path = temp_path(handler_installed_before ? "stop2" : "stop1");
  constexpr int kRounds = 200000;  // 400,000 events, ~40 MB written in one pwrite
  void* mem =
      mmap(nullptr, sizeof(Watch), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  auto* watch = new (mem) Watch();
  ChildResult r = in_child([&] {
    if (handler_installed_before) {  // an earlier timeline, started and stopped
      Timeline first(temp_path("first"), 0);
      first.start();
      std::remove(temp_path("first").c_str());
    }
    auto* t = new Timeline(path, 0);  // never started: stopping it writes on this thread
    record_rounds(t, kRounds);
    std::thread killer = kill_when_written(path, watch);
    delete t;  // what stop_timeline() does to the last reference
    std::this_thread::sleep_for(std::chrono::seconds(10));  // the signal is pending: never here
    std::_Exit(5);
  });
  const int64_t sent = watch->sent, last_growth = watch->last_growth;
  munmap(mem, sizeof(Watch));
  const std::string text = read_file(path);
  std::remove(path.c_str());
  REQUIRE(sent > 0);
  CHECK(killed_by_sigterm(r.status));
  // The handler waits only for writes on other threads: once this thread's write is done, the
  // pending signal ends the process (it used to wait 2 s for the write it interrupted).
  CAPTURE((last_growth - sent) / 1000000);
  CHECK((r.exited_ns - last_growth) / 1000000 < 1000);
  REQUIRE(text.size() > 3);
  CHECK(text.compare(text.size() - 3, 3, "\n]\n") == 0);
  CHECK(count_of(text, "\"negotiation\",\"cat\"") == kRounds);
}

volatile sig_atomic_t g_calls = 0;
volatile sig_atomic_t g_term_blocked = -1, g_usr1_blocked = -1;

void counting_handler(int) { g_calls = g_calls + 1; }

void mask_probe_handler(int) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  g_term_blocked = sigismember(&now, SIGTERM);
  g_usr1_blocked = sigismember(&now, SIGUSR1);
}

void slow_handler(int) {
  timespec t{0, 300 * 1000000};  // longer than a few of the writer's flushes
  nanosleep(&t, nullptr);
}

void install(void (*fn)(int), int flags, int masked = 0) {
  struct sigaction sa = {};
  sa.sa_handler = fn;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (masked) sigaddset(&sa.sa_mask, masked);
  REQUIRE(sigaction(SIGTERM, &sa, nullptr) == 0);
}

}  // namespace

TEST_CASE("SIGTERM while stopping a timeline leaves the whole file and terminates", "[local]") {
  sigterm_during_stop(false);
}

TEST_CASE("SIGTERM while stopping a timeline ends the process without waiting on its own write",
          "[local]") {
  sigterm_during_stop(true);
}

TEST_CASE("a previous SA_RESETHAND handler runs once, then SIGTERM terminates", "[local]") {
  const std::string path = temp_path("resethand");
  ChildResult r = in_child([&] {
    install(counting_handler, SA_RESETHAND);
    Timeline t(path, 0);
    t.start();
    raise(SIGTERM);
    if (g_calls != 1) std::_Exit(3);
    raise(SIGTERM);  // the default disposition now
    std::_Exit(4);
  });
  std::remove(path.c_str());
  CHECK(killed_by_sigterm(r.status));
  CHECK_FALSE((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 3));
}

TEST_CASE("a previous handler runs with its own mask and SA_NODEFER", "[local]") {
  const std::string path = temp_path("mask");
  for (int flags : {0, SA_NODEFER}) {
    CAPTURE(flags);
    ChildResult r = in_child([&] {
      install(mask_probe_handler, flags, SIGUSR1);
      Timeline t(path, 0);
      t.start();
      raise(SIGTERM);
      const bool term_ok = g_term_blocked == (flags & SA_NODEFER ? 0 : 1);
      std::_Exit((term_ok ? 0 : 1) | (g_usr1_blocked == 1 ? 0 : 2));
    });
    REQUIRE(WIFEXITED(r.status));
    CHECK((WEXITSTATUS(r.status) & 1) == 0);  // SIGTERM blocked unless SA_NODEFER
    CHECK((WEXITSTATUS(r.status) & 2) == 0);  // the handler's sa_mask blocked
  }
  std::remove(path.c_str());
}

TEST_CASE("events the writer skipped while a user's handler ran are written after it returns",
          "[local]") {
  const std::string path = temp_path("held");
  constexpr int kRounds = 1000;  // fewer events than wake the writer early
  ChildResult r = in_child([&] {
    install(slow_handler, 0);
    {
      Timeline t(path, 0);
      t.start();
      record_rounds(&t, kRounds);
      raise(SIGTERM);  // the writer's first flush comes while the handler sleeps
      record_rounds(&t, kRounds);
    }
    std::_Exit(0);
  });
  REQUIRE(WIFEXITED(r.status));
  CHECK(WEXITSTATUS(r.status) == 0);
  const std::string text = read_file(path);
  std::remove(path.c_str());
  const hvd::test::Json trace = hvd::test::JsonParser(text).parse();
  CHECK(count_of(text, "\"negotiation\",\"cat\"") == 2 * kRounds);
  CHECK(trace.arr.size() >= 4 * kRounds);
}
