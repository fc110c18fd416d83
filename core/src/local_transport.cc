// SPDX-License-Identifier: Apache-2.0
// In-process transport for tests: a generation-counted rendezvous of N threads.
#include "hvd/core/local_transport.h"

#include <cstring>

namespace hvd::core {

LocalHub::LocalHub(int size) : size_(size), slots_(static_cast<size_t>(size)) {}

Status LocalHub::exchange(int rank, std::vector<uint8_t> mine,
                          std::vector<std::vector<uint8_t>>* all) {
  std::unique_lock<std::mutex> lk(mu_);
  if (aborted_) return peer_failure("local hub aborted");
  slots_[static_cast<size_t>(rank)] = std::move(mine);
  uint64_t gen = generation_;
  if (++arrived_ == size_) {
    result_ = std::move(slots_);
    slots_.assign(static_cast<size_t>(size_), {});
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lk, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) return peer_failure("local hub aborted");
  }
  *all = result_;  // every rank copies the round's buffers before the next round can start
  return Status::OK();
}

void LocalHub::abort() {
  std::lock_guard<std::mutex> lk(mu_);
  aborted_ = true;
  cv_.notify_all();
}

Status LocalTransport::allreduce_and(std::vector<uint64_t>* words) {
  ++and_calls;
  std::vector<uint8_t> mine(words->size() * 8);
  std::memcpy(mine.data(), words->data(), mine.size());
  std::vector<std::vector<uint8_t>> all;
  HVD_RETURN_IF_ERROR(hub_->exchange(rank_, std::move(mine), &all));
  for (const auto& b : all) {
    if (b.size() != words->size() * 8) return internal_error("local allreduce_and: size mismatch");
    for (size_t i = 0; i < words->size(); ++i) {
      uint64_t w;
      std::memcpy(&w, b.data() + i * 8, 8);
      (*words)[i] &= w;
    }
  }
  return Status::OK();
}

Status LocalTransport::gather(const std::vector<uint8_t>& mine,
                              std::vector<std::vector<uint8_t>>* at_root) {
  ++gather_calls;
  std::vector<std::vector<uint8_t>> all;
  HVD_RETURN_IF_ERROR(hub_->exchange(rank_, mine, &all));
  if (rank_ == 0 && at_root) *at_root = std::move(all);
  return Status::OK();
}

Status LocalTransport::broadcast(std::vector<uint8_t>* bytes) {
  std::vector<std::vector<uint8_t>> all;
  HVD_RETURN_IF_ERROR(hub_->exchange(rank_, rank_ == 0 ? *bytes : std::vector<uint8_t>{}, &all));
  *bytes = std::move(all[0]);
  return Status::OK();
}

}  // namespace hvd::core
