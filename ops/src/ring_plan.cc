// SPDX-License-Identifier: Apache-2.0
// Ring allreduce planning (pure).
#include "hvd/ops/ring_plan.h"

#include <algorithm>

namespace hvd::ops {

RingChunk plan_ring_chunk(const std::vector<int64_t>& numels, int size, int chunk,
                          int64_t direct_elems, int64_t max_piece) {
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  // 128-bit products: total * size may not fit 64 bits for absurd sizes; cheap either way.
  const auto bound = [&](int c) {
    return static_cast<int64_t>(static_cast<__int128>(total) * c / size);
  };
  const int64_t begin = bound(chunk), end = bound(chunk + 1);
  RingChunk out;
  out.elems = end - begin;
  int64_t pos = 0;  // virtual offset of tensor i
  for (size_t i = 0; i < numels.size() && pos < end; pos += numels[i], ++i) {
    const int64_t lo = std::max(begin, pos), hi = std::min(end, pos + numels[i]);
    for (int64_t a = lo; a < hi; a += max_piece) {
      out.pieces.push_back({i, a - pos, std::min(max_piece, hi - a)});
    }
  }
  int64_t direct_total = 0;
  for (const RingPiece& p : out.pieces) {
    const bool d = p.count >= direct_elems;
    out.direct.push_back(d);
    if (d) direct_total += p.count;
  }
  int64_t next_direct = 0, next_packed = direct_total;
  for (size_t k = 0; k < out.pieces.size(); ++k) {
    int64_t& next = out.direct[k] ? next_direct : next_packed;
    out.staged_offset.push_back(next);
    next += out.pieces[k].count;
  }
  out.packed_elems = out.elems - direct_total;
  return out;
}

}  // namespace hvd::ops
