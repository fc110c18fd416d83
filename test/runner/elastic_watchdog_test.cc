// SPDX-License-Identifier: Apache-2.0
// [unit] the step watchdog: which ranks count as stalled, on an injected clock.
#include "hvd/runner/elastic_watchdog.h"

#include "hvd_catch.h"

using namespace hvd::runner;

TEST_CASE("the watchdog waits for the first progress report before watching", "[unit]") {
  StepWatchdog w(10);
  w.started(0, "a");
  w.started(1, "b");
  CHECK_FALSE(w.check(1000).has_value());  // Python and torch may take long to start
  CHECK_FALSE(w.armed());
  w.progress(0, 1000);
  CHECK(w.armed());
  CHECK_FALSE(w.check(1010).has_value());
  // Rank 1 never reported and rank 0 not since 1000: the job is silent.
  auto s = w.check(1010.5);
  REQUIRE(s.has_value());
  CHECK(s->ranks == std::vector<int>{0, 1});
  CHECK(s->silent_s == Approx(10.5));
}

TEST_CASE("one rank reporting keeps the job alive; when all fall silent, it stalls", "[unit]") {
  StepWatchdog w(5);
  w.started(0, "a");
  w.started(1, "b");
  // Rank 0 does rank-local work and reports (report_progress()) every second until t = 40;
  // rank 1 waits for it in a collective and reports nothing after t = 10.
  for (int t = 0; t <= 100; ++t) {
    if (t <= 40) w.progress(0, t);
    if (t <= 10) w.progress(1, t);
    auto s = w.check(t + 0.5);
    if (t < 45) {
      CHECK_FALSE(s.has_value());
    } else {
      REQUIRE(s.has_value());
      CHECK(s->ranks == std::vector<int>{0, 1});
      CHECK(s->silent_s == Approx(t + 0.5 - 40));
    }
  }
  auto s = w.check(100.5);
  REQUIRE(s.has_value());
  const std::string line = describe_stall(*s, w);
  CHECK_THAT(line, hvd::test::Contains("ranks 0 (a), 1 (b) made no progress for 60.5 s"));
  CHECK_THAT(line, hvd::test::Contains("--elastic-step-timeout 5"));
  CHECK_THAT(line, hvd::test::Contains("hvd.elastic.report_progress()"));
  CHECK_THAT(line, hvd::test::Contains("hvd::elastic::report_progress()"));
  CHECK_THAT(line, hvd::test::Contains("rank-local work"));
}

TEST_CASE("finished ranks are not watched; a timeout of 0 disables the watchdog", "[unit]") {
  StepWatchdog w(5);
  w.started(0, "a");
  w.started(1, "a");
  w.progress(0, 0);
  w.progress(1, 0);
  w.finished(1);  // rank 1 returned from @hvd.elastic.run; rank 0 still writes its results
  w.progress(0, 9);
  CHECK_FALSE(w.check(10).has_value());
  auto s = w.check(20);
  REQUIRE(s.has_value());
  CHECK(s->ranks == std::vector<int>{0});

  StepWatchdog off(0);
  off.started(0, "a");
  off.progress(0, 0);
  CHECK_FALSE(off.check(1e9).has_value());
}

TEST_CASE("a late report from an earlier time does not move a rank's progress back", "[unit]") {
  StepWatchdog w(5);
  w.started(0, "a");
  w.progress(0, 10);
  w.progress(0, 8);
  CHECK_FALSE(w.check(14.9).has_value());
  CHECK(w.check(15.1).has_value());
}
