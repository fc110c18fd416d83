// SPDX-License-Identifier: Apache-2.0
// Timeline: a Chrome-trace (chrome://tracing, Perfetto) record of what the runtime executed.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "hvd/core/message.h"

namespace hvd::core {

/// Appends one complete event ("ph":"X") per executed response to a JSON array file: name =
/// first tensor, args = op, tensor count, bytes, status. Written by rank 0 of the global set
/// (HVD_TIMELINE / hvdrun --timeline-filename). The array is closed at destruction; viewers
/// also accept a file cut short by a crash.
class Timeline {
 public:
  /// Opens `path` for writing; ok() tells whether that worked.
  explicit Timeline(const std::string& path);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  bool ok() const { return f_ != nullptr; }
  using Clock = std::chrono::steady_clock;
  void record(const Response& r, int64_t bytes, Clock::time_point start, Clock::time_point end,
              bool success);

 private:
  std::mutex mu_;
  std::FILE* f_ = nullptr;
  Clock::time_point origin_ = Clock::now();
  bool first_ = true;
};

}  // namespace hvd::core
