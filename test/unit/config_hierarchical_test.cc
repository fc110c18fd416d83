// SPDX-License-Identifier: Apache-2.0
// HVD_HIERARCHICAL_ALLREDUCE (and Horovod's spelling) reaches Config; bad values are errors.
#include <catch2/catch.hpp>
#include <map>

#include "hvd/core/config.h"

using namespace hvd;
using namespace hvd::core;

namespace {

Result<Config> parse_env(const std::map<std::string, std::string>& env,
                         std::vector<std::string>* unknown) {
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

TEST_CASE("hierarchical allreduce is off by default and read from either spelling", "[unit]") {
  std::vector<std::string> unknown;
  REQUIRE_FALSE(parse_env({}, &unknown).value().hierarchical_allreduce);
  REQUIRE(
      parse_env({{"HVD_HIERARCHICAL_ALLREDUCE", "1"}}, &unknown).value().hierarchical_allreduce);
  REQUIRE(parse_env({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}}, &unknown)
              .value()
              .hierarchical_allreduce);
  REQUIRE(unknown.empty());
  auto bad = parse_env({{"HVD_HIERARCHICAL_ALLREDUCE", "maybe"}}, &unknown);
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.status().message(), Catch::Contains("HVD_HIERARCHICAL_ALLREDUCE='maybe'"));
  Config c;
  c.hierarchical_allreduce = true;
  REQUIRE_THAT(c.dump(), Catch::Contains("HVD_HIERARCHICAL_ALLREDUCE=1"));
}
