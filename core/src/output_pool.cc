// SPDX-License-Identifier: Apache-2.0
// Output pool: reuse of hvd-allocated output buffers across calls.
#include "hvd/core/output_pool.h"

namespace hvd::core {

std::shared_ptr<OutputPool> OutputPool::create(size_t max_idle_bytes) {
  return std::shared_ptr<OutputPool>(new OutputPool(max_idle_bytes));
}

std::shared_ptr<uint8_t> OutputPool::take(size_t bytes) {
  if (bytes == 0) bytes = 1;
  std::unique_ptr<uint8_t[]> buf;
  size_t capacity = bytes;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = idle_.lower_bound(bytes);
    if (it != idle_.end() && it->first <= 2 * bytes) {
      capacity = it->first;
      buf = std::move(it->second);
      idle_bytes_ -= capacity;
      idle_.erase(it);
      ++reused_;
    }
  }
  if (!buf) buf.reset(new uint8_t[capacity]);  // uninitialised: the collective writes it all
  // The deleter holds the pool: buffers may outlive the runtime that made them.
  auto self = shared_from_this();
  return std::shared_ptr<uint8_t>(buf.release(),
                                  [self, capacity](uint8_t* p) { self->give_back(p, capacity); });
}

void OutputPool::give_back(uint8_t* p, size_t capacity) {
  std::unique_ptr<uint8_t[]> buf(p);
  std::lock_guard<std::mutex> lk(mu_);
  if (idle_bytes_ + capacity > max_idle_) return;  // over the cap: freed here
  idle_.emplace(capacity, std::move(buf));
  idle_bytes_ += capacity;
}

size_t OutputPool::idle_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return idle_bytes_;
}

size_t OutputPool::idle_buffers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return idle_.size();
}

uint64_t OutputPool::reused() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reused_;
}

}  // namespace hvd::core
