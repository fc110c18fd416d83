// SPDX-License-Identifier: Apache-2.0
// [local] HVD_TIMELINE: rank 0 writes one Chrome-trace event per executed response.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

TEST_CASE("the timeline records every executed collective on rank 0 as a JSON array", "[local]") {
  const std::string path = "/tmp/hvd_timeline_test_" + std::to_string(::getpid()) + ".json";
  Config cfg;
  cfg.timeline = path;
  {
    Cluster c(2, cfg);
    c.start_all();
    std::vector<Tensor<float>> a, b;
    for (int r = 0; r < 2; ++r) {
      a.emplace_back(std::vector<float>{1.0f, 2.0f});
      b.emplace_back(std::vector<float>{3.0f});
    }
    std::vector<Handle> hs;
    for (int r = 0; r < 2; ++r) {
      hs.push_back(submit(c[r], "tl.first", a[static_cast<size_t>(r)]));
      hs.push_back(submit(c[r], "tl.second", b[static_cast<size_t>(r)]));
    }
    for (auto& h : hs) await_ok(h, "timeline allreduce");
    REQUIRE(c.shutdown_all());
  }
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::remove(path.c_str());
  REQUIRE(text.rfind("[\n", 0) == 0);
  REQUIRE(text.find("\n]\n") == text.size() - 3);
  REQUIRE(text.find("\"cat\":\"allreduce\"") != std::string::npos);
  REQUIRE(text.find("\"ph\":\"X\"") != std::string::npos);
  // Both tensors appear (as the name of their own event or inside a fused one's count).
  const bool first = text.find("\"name\":\"tl.first\"") != std::string::npos;
  const bool second = text.find("\"name\":\"tl.second\"") != std::string::npos;
  const bool fused = text.find("\"tensors\":2") != std::string::npos;
  REQUIRE(first);
  REQUIRE((second || fused));
}
