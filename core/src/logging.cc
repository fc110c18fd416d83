// SPDX-License-Identifier: Apache-2.0
// Logging sink.
#include "hvd/core/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <utility>

namespace hvd::core {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::mutex g_mu;
std::string g_prefix = "[hvd]";  // guarded by g_mu
LogSink g_sink;                  // guarded by g_mu
const char* kNames[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_prefix = prefix;
}

void set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_sink = std::move(sink);
}

LogLine::~LogLine() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_sink) g_sink(level_, os_.str());
  std::fprintf(stderr, "%s %s: %s\n", g_prefix.c_str(), kNames[static_cast<int>(level_)],
               os_.str().c_str());
}

}  // namespace hvd::core
