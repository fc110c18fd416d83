// SPDX-License-Identifier: Apache-2.0
// The one place that knows which Catch2 the tests build against: 2.x (Debian 12: one header)
// or 3.x (Debian 13: a header per part and a compiled library). Tests include this header and
// write Approx, hvd::test::Contains (a substring matcher) and hvd::test::EventListenerBase.
#pragma once

#include <string>

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_case_info.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/interfaces/catch_interfaces_reporter.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <catch2/reporters/catch_reporter_event_listener.hpp>
#include <catch2/reporters/catch_reporter_registrars.hpp>

using Catch::Approx;

namespace hvd::test {
inline auto Contains(const std::string& text, Catch::CaseSensitive cs = Catch::CaseSensitive::Yes) {
  return Catch::Matchers::ContainsSubstring(text, cs);
}
using EventListenerBase = Catch::EventListenerBase;
}  // namespace hvd::test

#else
#include <catch2/catch.hpp>

namespace hvd::test {
inline auto Contains(const std::string& text,
                     Catch::CaseSensitive::Choice cs = Catch::CaseSensitive::Yes) {
  return Catch::Matchers::Contains(text, cs);
}
#ifdef CATCH_CONFIG_RUNNER  // Catch2 2 declares its listeners only where main is
using EventListenerBase = Catch::TestEventListenerBase;
#endif
}  // namespace hvd::test
#endif
