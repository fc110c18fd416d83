// SPDX-License-Identifier: Apache-2.0
// In-process transport: N threads act as N ranks (the [local] test tier).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "hvd/core/transport.h"

namespace hvd::core {

/// Meeting point of N in-process ranks. exchange() is an all-to-all of byte buffers: every rank
/// deposits its bytes and receives everyone's, in rank order. Waits block on a condition
/// variable (no spinning); abort() wakes and fails every current and later call.
class LocalHub {
 public:
  explicit LocalHub(int size);
  int size() const { return size_; }
  Status exchange(int rank, std::vector<uint8_t> mine, std::vector<std::vector<uint8_t>>* all);
  void abort();

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<std::vector<uint8_t>> slots_;
  std::vector<std::vector<uint8_t>> result_;
  bool aborted_ = false;
};

/// One rank's view of a LocalHub.
class LocalTransport : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  Status allreduce_and(std::vector<uint64_t>* words) override;
  Status gather(const std::vector<uint8_t>& mine,
                std::vector<std::vector<uint8_t>>* at_root) override;
  Status broadcast(std::vector<uint8_t>* bytes) override;
  LocalHub& hub() { return *hub_; }
  /// Counts calls, for tests of the fast path.
  std::atomic<int> and_calls{0}, gather_calls{0};

 private:
  std::shared_ptr<LocalHub> hub_;
  int rank_;
};

}  // namespace hvd::core
