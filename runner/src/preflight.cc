// SPDX-License-Identifier: Apache-2.0
// Runs every host's preflight in parallel on one io_context and formats the report.
#include "hvd/runner/preflight.h"

#include <cstdio>
#include <memory>

#include "preflight_host.h"

namespace hvd::runner {

bool PreflightResult::ok() const {
  for (const auto& h : hosts) {
    if (!h.problems.empty()) return false;
  }
  return true;
}

PreflightResult run_preflight(boost::asio::io_context& io, const PreflightConfig& config) {
  PreflightResult result;
  auto t0 = std::chrono::steady_clock::now();
  result.hosts.resize(config.hosts.size());
  auto owned = std::make_shared<std::vector<std::unique_ptr<detail::HostCheck>>>();
  auto& checks = *owned;
  result.keep_alive = owned;
  for (size_t i = 0; i < config.hosts.size(); ++i) {
    result.hosts[i].host = config.hosts[i];
    checks.push_back(std::make_unique<detail::HostCheck>(io, config, result.hosts[i]));
  }
  for (auto& c : checks) c->start();
  // The listener keeps `io` busy, so run until every check has finished.
  auto all_done = [&] {
    for (auto& c : checks) {
      if (!c->finished()) return false;
    }
    return true;
  };
  while (!all_done() && !io.stopped()) io.run_one();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

std::string format_preflight_report(const PreflightResult& result) {
  int failed = 0;
  for (const auto& h : result.hosts) failed += h.problems.empty() ? 0 : 1;
  if (failed == 0) return "";
  char head[160];
  std::snprintf(head, sizeof head,
                "hvdrun: preflight failed on %d of %zu hosts (%.1f s); nothing was started:\n",
                failed, result.hosts.size(), result.seconds);
  std::string out = head;
  for (const auto& h : result.hosts) {
    for (const auto& p : h.problems) out += "  " + h.host + ": " + p + "\n";
  }
  return out;
}

}  // namespace hvd::runner
