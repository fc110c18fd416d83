// SPDX-License-Identifier: Apache-2.0
// [local] --host-discovery-script polling (runner/src/discovery.h) with real scripts.
#include "discovery.h"

#include <boost/asio/io_context.hpp>
#include <chrono>

#include "hvd_catch.h"

using namespace hvd::runner;
namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST_CASE(
    "a discovery run whose script ends just before the next tick, leaving a child that "
    "holds its output open, still counts",
    "[local]") {
  asio::io_context io;
  // The script ends 0.9 s after each launch; its background sleep keeps the pipes open until
  // the 300 ms drain after the reaping closes them, past the 1 s tick. A run reaped but not yet
  // finished was replaced at that tick (its output lost, every second anew): hosts never came.
  HostDiscovery d(io, "sleep 0.9; echo hostA:2; sleep 1 &", 1);
  d.start();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (d.runs() == 0 && std::chrono::steady_clock::now() < until) io.run_for(20ms);
  REQUIRE(d.runs() >= 1);
  REQUIRE(d.hosts().size() == 1);
  CHECK(d.hosts()[0].name == "hostA");
  CHECK(d.hosts()[0].slots == 2);
}
