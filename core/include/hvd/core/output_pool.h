// SPDX-License-Identifier: Apache-2.0
// Reusable host buffers for outputs hvd allocates (allgather, alltoall, reducescatter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace hvd::core {

/// A pool of host buffers for outputs whose size negotiation decides. A buffer taken from the
/// pool is owned by whoever holds the returned pointer (the handle, while the user keeps it);
/// when the last owner drops it, it goes back to the pool instead of to the allocator, so the
/// next output of a similar size reuses memory that is already mapped (a fresh 128 MiB
/// allocation costs its page faults on every call: glibc returns such blocks to the kernel).
///
/// Idle buffers are kept up to `max_idle_bytes` in total; beyond that a returned buffer is
/// freed. The pool may be destroyed before its buffers: each buffer keeps the pool alive.
/// Thread-safe.
class OutputPool : public std::enable_shared_from_this<OutputPool> {
 public:
  /// Default cap on idle memory kept for reuse.
  static constexpr size_t kDefaultMaxIdleBytes = size_t{1} << 30;

  static std::shared_ptr<OutputPool> create(size_t max_idle_bytes = kDefaultMaxIdleBytes);

  /// A buffer of at least `bytes` (uninitialised): an idle one of `bytes` up to 2 x `bytes`
  /// when there is one (the smallest such), else a new allocation of exactly `bytes`.
  std::shared_ptr<uint8_t> take(size_t bytes);

  size_t idle_bytes() const;
  size_t idle_buffers() const;
  /// Buffers handed out so far that were reused rather than allocated (for tests, benchmarks).
  uint64_t reused() const;

 private:
  explicit OutputPool(size_t max_idle_bytes) : max_idle_(max_idle_bytes) {}
  void give_back(uint8_t* p, size_t capacity);

  mutable std::mutex mu_;
  std::multimap<size_t, std::unique_ptr<uint8_t[]>> idle_;  // capacity -> buffer
  size_t idle_bytes_ = 0;
  size_t max_idle_;
  uint64_t reused_ = 0;
};

}  // namespace hvd::core
