// SPDX-License-Identifier: Apache-2.0
// Planning of the zero-copy ring allreduce (pure): which bytes of which tensor make up each
// rank's chunk of the fused tensors, and how a chunk travels as messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hvd::ops {

/// A run of contiguous elements of one tensor: `tensor` (index into the fused list), first
/// element `offset`, `count` elements.
struct RingPiece {
  size_t tensor = 0;
  int64_t offset = 0;
  int64_t count = 0;
};

/// How one chunk travels between neighbours: pieces of at least `direct_elems` elements go as
/// their own message, straight from and (allgather phase) straight into the tensor; the others
/// are packed, in order, into one message after them. `staged_offset[i]` is where piece i lies in
/// a contiguous buffer laid out in message order (direct pieces first, then the pack).
struct RingChunk {
  std::vector<RingPiece> pieces;       ///< in virtual-buffer order
  std::vector<bool> direct;            ///< per piece
  std::vector<int64_t> staged_offset;  ///< per piece, in elements
  int64_t elems = 0;                   ///< elements in the chunk
  int64_t packed_elems = 0;            ///< elements in the pack message (0: none)
};

/// The tensors of `numels` laid end to end and cut into `size` chunks of near-equal element
/// counts (chunk c = elements [total*c/size, total*(c+1)/size)); chunk c planned as above.
/// Pieces never exceed `max_piece` elements (the largest count one MPI call takes).
RingChunk plan_ring_chunk(const std::vector<int64_t>& numels, int size, int chunk,
                          int64_t direct_elems, int64_t max_piece);

}  // namespace hvd::ops
