// SPDX-License-Identifier: Apache-2.0
// Typed runtime configuration, read once from HVD_* (or Horovod's HOROVOD_*) variables.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hvd/core/status.h"

namespace hvd::core {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

struct Config {
  /// Largest fused buffer in bytes (HVD_FUSION_THRESHOLD).
  int64_t fusion_threshold = 64LL << 20;
  /// Tensors at least this big are reduced in place, never copied into the fusion buffer
  /// (HVD_FUSION_DIRECT_BYTES).
  int64_t fusion_direct_bytes = 1LL << 20;
  /// Extra wait in ms after the first new request of an idle period, to batch more
  /// (HVD_CYCLE_TIME).
  double cycle_time_ms = 0.0;
  /// Response cache entries; 0 disables the cache (HVD_CACHE_CAPACITY).
  int64_t cache_capacity = 1024;
  LogLevel log_level = LogLevel::kWarning;
  /// Seconds before a tensor waiting for other ranks is reported (HVD_STALL_CHECK_TIME_SECONDS).
  double stall_warning_s = 60.0;
  /// Seconds after which a stalled tensor fails every pending handle on every rank with the
  /// stall report; 0 = never (HVD_STALL_SHUTDOWN_TIME_SECONDS).
  double stall_shutdown_s = 0.0;
  /// Turns the stall inspector off: no report, no shutdown, no idle heartbeat
  /// (HVD_STALL_CHECK_DISABLE=1).
  bool stall_check_disable = false;
  /// Disable the peer-liveness monitor (HVD_PEER_MONITOR=0).
  bool peer_monitor = true;
  /// Path of the Chrome-trace timeline, empty = none (HVD_TIMELINE).
  std::string timeline;
  /// Every rank writes a timeline (HVD_TIMELINE_ALL_RANKS), each to its own file (see
  /// Timeline::path_for_rank); otherwise rank 0 only.
  bool timeline_all_ranks = false;
  /// The timeline marks the start of every negotiation round, also those that agree on
  /// nothing (HVD_TIMELINE_MARK_CYCLES; Horovod's mark_cycles).
  bool timeline_mark_cycles = false;
  /// Host name used in log prefixes (HVD_HOSTNAME, set by hvdrun).
  std::string hostname;
  /// GPU allreduce as NCCL reduce-scatter inside each node, MPI allreduce across nodes, NCCL
  /// allgather inside the node (HVD_HIERARCHICAL_ALLREDUCE=1).
  bool hierarchical_allreduce = false;
  /// Host buffers that MPI moves (the executor's, the optimizer's gradient buckets) are advised
  /// transparent huge pages (core::HostBuffer; HVD_HUGE_PAGES=0 turns the advice off).
  bool huge_pages = true;

  /// Reads the variables through `lookup` (getenv in production). Bad values are errors naming
  /// the variable; unknown HVD_* names are returned in `unknown` for a warning.
  using Lookup = std::function<std::optional<std::string>(const std::string&)>;
  static Result<Config> from_env(const Lookup& lookup, const std::vector<std::string>& all_names,
                                 std::vector<std::string>* unknown);
  /// Reads the process environment (the only getenv in hvd).
  static Result<Config> from_process_env(std::vector<std::string>* unknown);
  /// One line per variable, for logs.
  std::string dump() const;
};

}  // namespace hvd::core
