// SPDX-License-Identifier: Apache-2.0
// Config parsing: defaults, HVD_/HOROVOD_ spellings, strict values, unknown names.
#include "hvd/core/config.h"

#include <map>

#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;
using hvd::test::Contains;

namespace {

using Env = std::map<std::string, std::string>;

Result<Config> parse(const Env& env, std::vector<std::string>* unknown = nullptr) {
  std::vector<std::string> names;
  for (const auto& kv : env) names.push_back(kv.first);
  return Config::from_env(
      [&](const std::string& n) -> std::optional<std::string> {
        auto it = env.find(n);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      names, unknown);
}

}  // namespace

TEST_CASE("an empty environment gives the documented defaults", "[unit]") {
  std::vector<std::string> unknown;
  auto c = parse({}, &unknown);
  REQUIRE(c.ok());
  REQUIRE(c.value().fusion_threshold == 64LL * 1024 * 1024);
  REQUIRE(c.value().fusion_direct_bytes == 1024 * 1024);
  REQUIRE(c.value().cycle_time_ms == 0.0);
  REQUIRE(c.value().cache_capacity == 1024);
  REQUIRE(c.value().log_level == LogLevel::kWarning);
  REQUIRE(c.value().stall_warning_s == 60.0);
  REQUIRE(c.value().peer_monitor);
  REQUIRE(c.value().timeline.empty());
  REQUIRE(c.value().hostname.empty());
  REQUIRE(unknown.empty());
}

TEST_CASE("every HVD_ variable is parsed into its field", "[unit]") {
  auto c = parse({{"HVD_FUSION_THRESHOLD", "1000"},
                  {"HVD_FUSION_DIRECT_BYTES", "0"},
                  {"HVD_CYCLE_TIME", "2.5"},
                  {"HVD_CACHE_CAPACITY", "0"},
                  {"HVD_LOG_LEVEL", "DEBUG"},
                  {"HVD_STALL_CHECK_TIME_SECONDS", "7"},
                  {"HVD_PEER_MONITOR", "0"},
                  {"HVD_TIMELINE", "/tmp/t.json"},
                  {"HVD_HOSTNAME", "node7"}});
  REQUIRE(c.ok());
  REQUIRE(c.value().fusion_threshold == 1000);
  REQUIRE(c.value().fusion_direct_bytes == 0);
  REQUIRE(c.value().cycle_time_ms == 2.5);
  REQUIRE(c.value().cache_capacity == 0);
  REQUIRE(c.value().log_level == LogLevel::kDebug);
  REQUIRE(c.value().stall_warning_s == 7.0);
  REQUIRE_FALSE(c.value().peer_monitor);
  REQUIRE(c.value().timeline == "/tmp/t.json");
  REQUIRE(c.value().hostname == "node7");
}

TEST_CASE("HOROVOD_ spellings are accepted", "[unit]") {
  auto c = parse({{"HOROVOD_FUSION_THRESHOLD", "4096"},
                  {"HOROVOD_CYCLE_TIME", "1"},
                  {"HOROVOD_CACHE_CAPACITY", "16"},
                  {"HOROVOD_LOG_LEVEL", "error"},
                  {"HOROVOD_STALL_CHECK_TIME_SECONDS", "5"},
                  {"HOROVOD_TIMELINE", "tl.json"},
                  {"HOROVOD_HOSTNAME", "h"}});
  REQUIRE(c.ok());
  REQUIRE(c.value().fusion_threshold == 4096);
  REQUIRE(c.value().cycle_time_ms == 1.0);
  REQUIRE(c.value().cache_capacity == 16);
  REQUIRE(c.value().log_level == LogLevel::kError);
  REQUIRE(c.value().stall_warning_s == 5.0);
  REQUIRE(c.value().timeline == "tl.json");
  REQUIRE(c.value().hostname == "h");
}

TEST_CASE("the HVD_ spelling wins over HOROVOD_", "[unit]") {
  auto c = parse({{"HVD_FUSION_THRESHOLD", "1"},
                  {"HOROVOD_FUSION_THRESHOLD", "2"},
                  {"HVD_TIMELINE", "a"},
                  {"HOROVOD_TIMELINE", "b"}});
  REQUIRE(c.ok());
  REQUIRE(c.value().fusion_threshold == 1);
  REQUIRE(c.value().timeline == "a");
  // A bad HOROVOD_ value is not even looked at when HVD_ is set.
  auto d = parse({{"HVD_CACHE_CAPACITY", "3"}, {"HOROVOD_CACHE_CAPACITY", "junk"}});
  REQUIRE(d.ok());
  REQUIRE(d.value().cache_capacity == 3);
}

TEST_CASE("log levels are case-insensitive and accept warn", "[unit]") {
  const std::pair<const char*, LogLevel> cases[] = {{"trace", LogLevel::kTrace},
                                                    {"Info", LogLevel::kInfo},
                                                    {"WARN", LogLevel::kWarning},
                                                    {"warning", LogLevel::kWarning},
                                                    {"FATAL", LogLevel::kFatal}};
  for (const auto& [text, level] : cases) {
    auto c = parse({{"HVD_LOG_LEVEL", text}});
    REQUIRE(c.ok());
    REQUIRE(c.value().log_level == level);
  }
}

TEST_CASE("booleans accept 1/0/true/false/yes/no", "[unit]") {
  for (const char* t : {"1", "true", "TRUE", "yes"}) {
    auto c = parse({{"HVD_PEER_MONITOR", t}});
    REQUIRE(c.ok());
    REQUIRE(c.value().peer_monitor);
  }
  for (const char* f : {"0", "false", "FALSE", "no"}) {
    auto c = parse({{"HVD_PEER_MONITOR", f}});
    REQUIRE(c.ok());
    REQUIRE_FALSE(c.value().peer_monitor);
  }
}

TEST_CASE("bad values are rejected naming the variable and the value", "[unit]") {
  const std::pair<const char*, const char*> bad[] = {
      {"HVD_FUSION_THRESHOLD", "-1"},      {"HVD_FUSION_THRESHOLD", "64MB"},
      {"HVD_FUSION_THRESHOLD", ""},        {"HVD_FUSION_THRESHOLD", "99999999999999999999999"},
      {"HOROVOD_FUSION_THRESHOLD", "1.5"}, {"HVD_FUSION_DIRECT_BYTES", "x"},
      {"HVD_CYCLE_TIME", "-0.5"},          {"HVD_CYCLE_TIME", "nan"},
      {"HVD_CYCLE_TIME", "inf"},           {"HVD_CYCLE_TIME", "5ms"},
      {"HVD_CACHE_CAPACITY", "-3"},        {"HVD_LOG_LEVEL", "loud"},
      {"HOROVOD_LOG_LEVEL", ""},           {"HVD_STALL_CHECK_TIME_SECONDS", "soon"},
      {"HVD_PEER_MONITOR", "maybe"},
  };
  for (const auto& [name, value] : bad) {
    auto c = parse({{name, value}});
    INFO(name << "='" << value << "'");
    REQUIRE_FALSE(c.ok());
    REQUIRE(c.status().code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(c.status().message(), Contains(name));
    REQUIRE_THAT(c.status().message(), Contains(std::string("'") + value + "'"));
  }
}

TEST_CASE("a cache capacity above 2^20 is rejected", "[unit]") {
  REQUIRE(parse({{"HVD_CACHE_CAPACITY", "1048576"}}).ok());
  auto c = parse({{"HVD_CACHE_CAPACITY", "1048577"}});
  REQUIRE_FALSE(c.ok());
  REQUIRE_THAT(c.status().message(), Contains("HVD_CACHE_CAPACITY"));
}

TEST_CASE("unknown HVD_ names are reported, other names are not", "[unit]") {
  std::vector<std::string> unknown;
  auto c = parse({{"HVD_FUSION_THRESHOLD", "1"},
                  {"HVD_FUSION_TRESHOLD", "2"},  // typo
                  {"HVD_HIERARCHICAL_ALLREDUCE", "1"},
                  {"HVD_TESTHOSTS_DIR", "/x"},
                  {"HVD_TESTHOSTS_PRIVATE_TMP", "shm"},    // the fake hosts pass it to ranks
                  {"HVD_TEST_FAULT", "nccl_init:rank=1"},  // the test-only fault hook
                  {"HOROVOD_SOMETHING_ELSE", "1"},
                  {"PATH", "/bin"},
                  {"XHVD_FOO", "1"}},
                 &unknown);
  REQUIRE(c.ok());
  REQUIRE(unknown == std::vector<std::string>{"HVD_FUSION_TRESHOLD"});
}

TEST_CASE("dump lists the parsed values", "[unit]") {
  auto c = parse({{"HVD_FUSION_THRESHOLD", "777"}, {"HVD_TIMELINE", "tl.json"}});
  REQUIRE(c.ok());
  std::string d = c.value().dump();
  REQUIRE_THAT(d, Contains("HVD_FUSION_THRESHOLD=777\n"));
  REQUIRE_THAT(d, Contains("HVD_TIMELINE=tl.json\n"));
  REQUIRE_THAT(d, Contains("HVD_CACHE_CAPACITY=1024\n"));
}

TEST_CASE("huge pages are on by default, HVD_HUGE_PAGES=0 turns them off", "[unit]") {
  std::vector<std::string> unknown;
  REQUIRE(parse({}, &unknown).value().huge_pages);
  REQUIRE_FALSE(parse({{"HVD_HUGE_PAGES", "0"}}, &unknown).value().huge_pages);
  REQUIRE(parse({{"HVD_HUGE_PAGES", "1"}}, &unknown).value().huge_pages);
  REQUIRE(unknown.empty());  // a known name
  auto bad = parse({{"HVD_HUGE_PAGES", "yes please"}}, &unknown);
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.status().message(), hvd::test::Contains("HVD_HUGE_PAGES='yes please'"));
  Config c;
  c.huge_pages = false;
  REQUIRE_THAT(c.dump(), hvd::test::Contains("HVD_HUGE_PAGES=0\n"));
}

TEST_CASE("hierarchical allreduce is off by default and read from either spelling", "[unit]") {
  std::vector<std::string> unknown;
  REQUIRE_FALSE(parse({}, &unknown).value().hierarchical_allreduce);
  REQUIRE(parse({{"HVD_HIERARCHICAL_ALLREDUCE", "1"}}, &unknown).value().hierarchical_allreduce);
  REQUIRE(
      parse({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}}, &unknown).value().hierarchical_allreduce);
  REQUIRE(unknown.empty());
  auto bad = parse({{"HVD_HIERARCHICAL_ALLREDUCE", "maybe"}}, &unknown);
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.status().message(), hvd::test::Contains("HVD_HIERARCHICAL_ALLREDUCE='maybe'"));
  Config c;
  c.hierarchical_allreduce = true;
  REQUIRE_THAT(c.dump(), hvd::test::Contains("HVD_HIERARCHICAL_ALLREDUCE=1"));
}
