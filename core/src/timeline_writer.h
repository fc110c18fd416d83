// SPDX-License-Identifier: Apache-2.0
// The timeline's file: a writer thread that keeps a JSON array valid after every flush.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hvd::core {

/// Appends JSON values (one per line) to an array in `path`. The file always ends in "\n]\n":
/// each flush writes ",\n<lines>\n]\n" over the previous closing bracket in one pwrite(), and a
/// SIGTERM handler lets a pwrite in progress finish before the process dies (see timeline.h).
class TimelineWriter {
 public:
  /// Installs the process's SIGTERM handler the first time, opens (truncates) `path` and writes
  /// an empty array; ok() tells whether that worked.
  explicit TimelineWriter(const std::string& path);
  /// close().
  ~TimelineWriter();
  TimelineWriter(const TimelineWriter&) = delete;
  TimelineWriter& operator=(const TimelineWriter&) = delete;
  bool ok() const { return fd_ >= 0; }
  /// Starts the thread that writes what push() queues, every kFlushMs or sooner when much is
  /// queued.
  void start();
  /// Queues one JSON value (no trailing comma or newline); never touches the disk. Dropped
  /// (and counted) while a million lines wait.
  void push(std::string line);
  /// Writes what is queued, stops the thread, closes the file. Idempotent.
  void close();
  uint64_t dropped() const;

  static constexpr int kFlushMs = 50;

 private:
  void run();
  /// Writes `held_` and `lines` over the closing bracket (writer thread, or close() after it
  /// stopped), with SIGTERM blocked on this thread; keeps them in `held_` instead while a
  /// SIGTERM handler runs. Leaves `lines` unspecified.
  void write_lines(std::vector<std::string>* lines);

  int fd_ = -1;
  int64_t close_pos_ = 0;          // offset of the "\n]\n" that ends the file
  bool empty_ = true;              // no value written yet (no comma before the next)
  std::vector<std::string> held_;  // skipped while a SIGTERM handler ran (the writing thread's)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> queue_;
  bool stop_ = false;
  uint64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace hvd::core
