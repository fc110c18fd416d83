// SPDX-License-Identifier: Apache-2.0
// Ring allreduce planning: chunk boundaries, pieces, direct/packed split and staging layout.
#include "hvd/ops/ring_plan.h"

#include "hvd_catch.h"

using hvd::ops::plan_ring_chunk;
using hvd::ops::RingChunk;

namespace {

int64_t sum_counts(const RingChunk& c) {
  int64_t n = 0;
  for (const auto& p : c.pieces) n += p.count;
  return n;
}

}  // namespace

TEST_CASE("ring chunks cover the tensors exactly once, in order", "[unit]") {
  const std::vector<int64_t> numels = {0, 5, 40000, 100, 150001, 3, 90007, 1};
  int64_t total = 0;
  for (int64_t n : numels) total += n;
  for (int size : {1, 2, 3, 4, 7}) {
    std::vector<int64_t> covered(numels.size(), 0);
    int64_t chunk_total = 0;
    size_t last_tensor = 0;
    int64_t last_end = 0;
    for (int c = 0; c < size; ++c) {
      RingChunk ch = plan_ring_chunk(numels, size, c, 1000, 1LL << 30);
      REQUIRE(ch.elems == sum_counts(ch));
      REQUIRE(ch.elems == total * (c + 1) / size - total * c / size);
      chunk_total += ch.elems;
      for (const auto& p : ch.pieces) {
        REQUIRE(p.count > 0);
        REQUIRE(p.offset + p.count <= numels[p.tensor]);
        // Consecutive pieces continue where the previous one ended.
        if (p.tensor == last_tensor) REQUIRE(p.offset == last_end);
        if (p.tensor != last_tensor) REQUIRE(p.offset == 0);
        last_tensor = p.tensor;
        last_end = p.offset + p.count;
        covered[p.tensor] += p.count;
      }
    }
    REQUIRE(chunk_total == total);
    for (size_t i = 0; i < numels.size(); ++i) REQUIRE(covered[i] == numels[i]);
  }
}

TEST_CASE("ring chunk: direct pieces first in the staging layout, the pack after", "[unit]") {
  // Two ranks over {10, 3000, 20, 4000}: chunk 0 = [0, 3515), chunk 1 = [3515, 7030).
  const std::vector<int64_t> numels = {10, 3000, 20, 4000};
  RingChunk c0 = plan_ring_chunk(numels, 2, 0, 1000, 1LL << 30);
  REQUIRE(c0.pieces.size() == 4);
  CHECK(c0.pieces[3].tensor == 3);
  CHECK(c0.pieces[3].count == 485);
  CHECK(c0.direct == std::vector<bool>{false, true, false, false});
  // Direct: tensor 1 (3000) at 0. Packed after it: 10, 20, 485.
  CHECK(c0.staged_offset == std::vector<int64_t>{3000, 0, 3010, 3030});
  CHECK(c0.packed_elems == 515);
  RingChunk c1 = plan_ring_chunk(numels, 2, 1, 1000, 1LL << 30);
  REQUIRE(c1.pieces.size() == 1);
  CHECK(c1.pieces[0].offset == 485);
  CHECK(c1.pieces[0].count == 3515);
  CHECK(c1.direct == std::vector<bool>{true});
  CHECK(c1.packed_elems == 0);
}

TEST_CASE("ring pieces never exceed the largest count of one MPI call", "[unit]") {
  RingChunk c = plan_ring_chunk({10, 2500}, 1, 0, 100, 1000);
  REQUIRE(c.pieces.size() == 4);
  CHECK(c.pieces[1].count == 1000);
  CHECK(c.pieces[2].offset == 1000);
  CHECK(c.pieces[3].count == 500);
  CHECK(c.elems == 2510);
}

TEST_CASE("ring chunks of empty and tiny batches", "[unit]") {
  RingChunk empty = plan_ring_chunk({0, 0}, 2, 1, 10, 1000);
  CHECK(empty.pieces.empty());
  CHECK(empty.elems == 0);
  // Fewer elements than ranks: some chunks are empty.
  CHECK(plan_ring_chunk({2}, 4, 0, 10, 1000).elems == 0);
  CHECK(plan_ring_chunk({2}, 4, 1, 10, 1000).elems == 1);
  CHECK(plan_ring_chunk({2}, 4, 3, 10, 1000).elems == 1);
}
