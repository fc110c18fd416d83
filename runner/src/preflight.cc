// SPDX-License-Identifier: Apache-2.0
// Runs every host's preflight in parallel on one io_context and formats the report.
#include "hvd/runner/preflight.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>

#include "preflight_host.h"

namespace hvd::runner {

bool PreflightResult::ok() const {
  for (const auto& h : hosts) {
    if (!h.problems.empty()) return false;
  }
  return true;
}

BackgroundPreflight::BackgroundPreflight(boost::asio::io_context& io, PreflightConfig config)
    : io_(io), config_(std::move(config)), hosts_(config_.hosts.size()) {}

BackgroundPreflight::~BackgroundPreflight() = default;

void BackgroundPreflight::start() {
  for (size_t i = 0; i < config_.hosts.size(); ++i) {
    hosts_[i].host = config_.hosts[i];
    checks_.push_back(std::make_unique<detail::HostCheck>(io_, config_, hosts_[i]));
  }
  for (auto& c : checks_) c->start();
}

bool BackgroundPreflight::done() const {
  return std::all_of(checks_.begin(), checks_.end(), [](const auto& c) { return c->finished(); });
}

PreflightResult run_preflight(boost::asio::io_context& io, const PreflightConfig& config) {
  auto t0 = std::chrono::steady_clock::now();
  auto run = std::make_unique<BackgroundPreflight>(io, config);
  run->start();
  // The listener keeps `io` busy, so run until every check has finished.
  while (!run->done() && !io.stopped()) io.run_one();
  PreflightResult result;
  result.hosts = run->hosts();
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
