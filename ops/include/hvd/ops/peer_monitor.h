// SPDX-License-Identifier: Apache-2.0
// Peer liveness: notices a rank that exits without hvd::shutdown() and tells every other rank.
#pragma once

#include <mpi.h>

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvd/core/status.h"

namespace hvd::ops {

/// Every rank keeps one TCP connection to rank 0 (addresses exchanged over MPI at init). A
/// process that dies has its sockets closed by the kernel, so its peer sees end-of-file at once
/// without a goodbye; rank 0 then relays "rank k died" to all others. A host that vanishes
/// without closing sockets is caught by TCP keepalive (about 16 s). MPI itself gives no such
/// signal: a collective waiting for a dead rank would wait forever.
class PeerMonitor {
 public:
  PeerMonitor() = default;
  ~PeerMonitor();
  /// Collective over `comm`: connects every rank to rank 0 and starts the watcher thread.
  Status start(MPI_Comm comm, const std::string& host);
  /// Called once, from the watcher thread, when a peer is found dead.
  void on_failure(std::function<void(const Status&)> cb);
  /// OK while every peer is alive.
  Status failure() const;
  /// Says goodbye to the peers (a clean exit) and stops the watcher.
  void stop();

 private:
  void watch();
  void fail(const Status& s);

  int rank_ = 0, size_ = 1;
  std::string host_;
  struct Peer {
    int fd = -1;
    int rank = -1;
    std::string host;
    long pid = 0;
    bool bye = false;
    std::string inbox;
  };
  std::vector<Peer> peers_;  // rank 0: one per other rank; others: rank 0 only
  int wake_[2] = {-1, -1};
  std::thread thread_;
  mutable std::mutex mu_;
  Status failure_;
  std::function<void(const Status&)> callback_;
};

}  // namespace hvd::ops
