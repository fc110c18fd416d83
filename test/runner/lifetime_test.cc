// SPDX-License-Identifier: Apache-2.0
// [local] Handlers left on hvdrun's io_context after what they refer to is gone. Destroying an
// asio stream or timer does not drop its handlers: they run at the next run()/poll() with
// operation_aborted, or with success when the wait had completed before (a timer that expired
// in the pass that stopped the io_context: cancel() cannot recall it). A handler of a destroyed
// Subprocess, or of supervise()'s returned frame, must then touch nothing of it. The ASan build
// (scripts/run-tests.sh runs this [local] tier there) reports any such access; this binary asks
// ASan to detect stack use after return (below) for supervise()'s frame.
#include <signal.h>
#include <sys/types.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <memory>
#include <thread>

#include "hvd/runner/control_server.h"
#include "hvd/runner/subprocess.h"
#include "hvd/runner/supervisor.h"
#include "hvd_catch.h"

#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "detect_stack_use_after_return=1"; }
#endif

using namespace hvd::runner;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

void run_for(asio::io_context& io, std::chrono::milliseconds ms) {
  if (io.stopped()) io.restart();
  io.run_for(ms);
}

}  // namespace

TEST_CASE(
    "a Subprocess destroyed after its child was reaped, its pipes still open, is not "
    "touched by its pending handlers",
    "[local]") {
  asio::io_context io;
  // sh exits at once; the background sleep keeps both pipes open (the 300 ms drain is pending),
  // as a discovery script that leaves a child behind does when HostDiscovery replaces it.
  auto p = std::make_unique<Subprocess>(
      io, std::vector<std::string>{"/bin/sh", "-c", "sleep 1 & echo partial-line | tr -d '\\n'"},
      true);
  int exits = 0;
  std::string lines;
  p->on_exit([&](int) { ++exits; });
  p->on_stdout([&](const std::string& l) { lines += l; });
  p->start();
  const pid_t group = p->pid();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (p->running() && std::chrono::steady_clock::now() < until) run_for(io, 5ms);
  REQUIRE_FALSE(p->running());  // reaped, the exit handler not run yet (pipes open)
  REQUIRE(exits == 0);
  p.reset();
  run_for(io, 500ms);
  ::kill(-group, SIGKILL);  // the background sleep
  CHECK(exits == 0);
  CHECK(lines.empty());
}

TEST_CASE("a Subprocess destroyed while its child runs is not touched by its pending handlers",
          "[local]") {
  asio::io_context io;
  auto p = std::make_unique<Subprocess>(
      io, std::vector<std::string>{"/bin/sh", "-c", "printf partial; sleep 10"}, false);
  int exits = 0;
  p->on_exit([&](int) { ++exits; });
  p->start();
  run_for(io, 200ms);
  REQUIRE(p->running());
  p.reset();  // SIGKILLs and reaps the child; both reads are pending
  run_for(io, 200ms);
  CHECK(exits == 0);
}

TEST_CASE("supervise() leaves no handler on the io_context that touches its returned frame",
          "[local]") {
  asio::io_context io;
  ControlServer server(io, "lifetime-test");
  server.start();
  SuperviseConfig sc;
  sc.mpirun_argv = {"/bin/sh", "-c", "sleep 0.3"};
  sc.np = 1;
  sc.grace_s = 1;
  sc.elastic = true;
  sc.step_timeout_s = 60;  // the watchdog's timer ticks every 500 ms
  // The io thread is held from 0.1 s to 0.9 s: the child's exit (0.3 s; its reaping stops the
  // io_context) and the watchdog's tick (0.5 s) become ready in one pass, the tick queued
  // behind the stop, where cancel() cannot recall it.
  std::thread hold([&] {
    std::this_thread::sleep_for(100ms);
    asio::post(io, [] { std::this_thread::sleep_for(800ms); });
  });
  GenerationOutcome outcome;
  const int code = supervise(io, server, sc, &outcome);
  hold.join();
  CHECK(code == 0);
  CHECK(outcome.exit_code == 0);
  // The elastic driver runs the io_context again at once (elastic_job.cc); the tick's handler
  // runs there, with supervise()'s frame gone.
  io.restart();
  io.poll();
  run_for(io, 100ms);
  server.stop();
}
