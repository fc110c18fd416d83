// SPDX-License-Identifier: Apache-2.0
// The controller's transport primitives. MPI implements them in ops/; tests use threads.
#pragma once

#include <cstdint>
#include <vector>

#include "hvd/core/status.h"

namespace hvd::core {

/// The three collectives negotiation needs, over one process set's ranks. Every call is
/// collective: all ranks of the set make the same calls in the same order. Implementations must
/// not busy-wait while peers are absent and must return an error (never hang) when the
/// runtime is aborted or a peer is known dead.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Bitwise AND of `words` over all ranks, result in place.
  virtual Status allreduce_and(std::vector<uint64_t>* words) = 0;
  /// Rank 0 receives every rank's bytes in rank order in `at_root`; others pass nullptr or ignore.
  virtual Status gather(const std::vector<uint8_t>& mine,
                        std::vector<std::vector<uint8_t>>* at_root) = 0;
  /// Rank 0's `bytes` replace everyone else's.
  virtual Status broadcast(std::vector<uint8_t>* bytes) = 0;
};

}  // namespace hvd::core
