// SPDX-License-Identifier: Apache-2.0
// The runtime of one process: the tensor table, the background thread, negotiation, execution.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hvd/core/config.h"
#include "hvd/core/controller.h"
#include "hvd/core/executor.h"
#include "hvd/core/handle.h"
#include "hvd/core/transport.h"

namespace hvd::core {

/// What a backend contributes to a runtime.
struct RuntimeParts {
  std::unique_ptr<Transport> transport;     ///< negotiation over the global process set
  std::unique_ptr<Executor> host_executor;  ///< host-memory collectives
  std::unique_ptr<Executor> device_executor;///< device collectives; null when not built
  std::string no_device_reason = "this build of hvd has no GPU support (HVD_WITH_NCCL=OFF)";
};

/// User threads call enqueue(); only the background thread talks to the transport and the
/// executors. `run_once()` runs one cycle on the caller's thread, for tests that step it.
class Runtime {
 public:
  Runtime(Config config, RuntimeParts parts);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Starts the background thread.
  void start();
  /// Submits a collective; never blocks on other ranks. Bad requests give a failed handle.
  Handle enqueue(TensorEntry entry);
  /// Finishes or fails everything in flight, stops the background thread. Idempotent.
  void shutdown();
  /// Fails every pending handle and every later call with `s` (fatal transport error, dead peer).
  void abort(const Status& s);
  /// One negotiation round plus execution. Returns false once the runtime has stopped.
  bool run_once();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Config& config() const { return config_; }
  /// Counters for tests and benchmarks.
  struct Stats {
    std::atomic<uint64_t> rounds{0}, full_rounds{0}, responses{0}, fused_batches{0};
  };
  const Stats& stats() const { return stats_; }
  /// Set when the runtime stopped for good (shutdown agreed or aborted): the reason.
  Status stopped_status() const;
  bool stopped() const;

 private:
  void loop();
  bool wait_for_work(std::vector<Request>* fresh, bool* want_shutdown);
  void check_stalls();
  void execute(const Response& r);
  std::string key(int32_t ps, const std::string& name) const;

  Config config_;
  RuntimeParts parts_;
  Controller controller_;
  int rank_, size_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;                          // keys of newly enqueued entries
  std::unordered_map<std::string, TensorEntry> table_;     // key -> entry
  bool shutdown_requested_ = false;
  bool stopped_ = false;
  Status stop_status_;
  std::thread thread_;
  bool loop_exited_ = false;
  std::condition_variable exit_cv_;
  std::chrono::steady_clock::time_point last_stall_check_{};
  Stats stats_;
};

}  // namespace hvd::core
