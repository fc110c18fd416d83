// SPDX-License-Identifier: Apache-2.0
// Negotiation transport over an MPI communicator, with non-blocking calls and polite waits.
#pragma once

#include <mpi.h>

#include <functional>

#include "hvd/core/transport.h"

namespace hvd::ops {

/// Implements the controller's primitives with MPI_Iallreduce / MPI_Iallgather + MPI_Igatherv /
/// MPI_Ibcast,
/// each completed by wait_request() so a rank waiting for absent peers sleeps instead of
/// spinning, and gives up when `should_abort` reports a dead peer.
class MpiTransport : public core::Transport {
 public:
  MpiTransport(MPI_Comm comm, std::function<Status()> should_abort);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allreduce_and(std::vector<uint64_t>* words) override;
  Status gather(const std::vector<uint8_t>& mine,
                std::vector<std::vector<uint8_t>>* at_root) override;
  Status broadcast(std::vector<uint8_t>* bytes) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::function<Status()> should_abort_;
};

}  // namespace hvd::ops
