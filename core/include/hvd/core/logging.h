// SPDX-License-Identifier: Apache-2.0
// HVD_LOG(level) << ...: one line to stderr, prefixed with rank (and host), filtered by level.
#pragma once

#include <functional>
#include <sstream>
#include <string>

#include "hvd/core/config.h"

namespace hvd::core {

/// Process-wide log settings, set by the runtime at init.
void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_prefix(const std::string& prefix);  ///< e.g. "[hvd rank 1 host a]"
/// Test hook: every line written also goes to `sink` (level, message without prefix), called
/// under the log's lock; null removes it.
using LogSink = std::function<void(LogLevel level, const std::string& message)>;
void set_log_sink(LogSink sink);

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace hvd::core

#define HVD_LOG(level)                                              \
  if (::hvd::core::LogLevel::k##level < ::hvd::core::log_level()) { \
  } else                                                            \
    ::hvd::core::LogLine(::hvd::core::LogLevel::k##level)
