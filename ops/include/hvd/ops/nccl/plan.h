// SPDX-License-Identifier: Apache-2.0
// Pure planning of the NCCL executor's data movement: where tensors sit in the fusion buffer,
// which pieces the batched copy kernel moves for allgather / alltoall / reducescatter, how the
// copy kernel's grid is shaped, how averages scale. No CUDA here: every build compiles it and
// the [unit] tests check it (including multi-rank layouts, replayed on host memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd::ops::nccl {

/// One tensor's piece of a batched copy: `count` elements from `src` to `dst` (device
/// pointers). A null `src` writes zeros (a joined rank's stand-in contribution).
struct CopyDesc {
  const void* src;
  void* dst;
  int64_t count;
};

/// How elements are scaled on the way: floating types are multiplied by `factor` (float16 and
/// bfloat16 through float); integers are divided by `divisor` when it is > 1 (Average of
/// integers truncates, as on the host), else multiplied in double and truncated when
/// `factor` != 1.
struct Scale {
  double factor = 1.0;
  int64_t divisor = 1;
  bool identity() const { return factor == 1.0 && divisor <= 1; }
};

/// The scaling the host executor applies for `factor` (integers: an exact 1/n divides).
Scale make_scale(DataType t, double factor);

/// Tensors laid end to end in a fusion buffer: element offsets, each on a 16-byte boundary
/// (the padding is reduced too, and ignored); `padded` = `total` rounded up to a multiple of
/// `multiple` elements (hierarchical allreduce splits the buffer into that many equal chunks).
struct FusedLayout {
  std::vector<int64_t> offset;
  int64_t total = 0, padded = 0;
};
FusedLayout fused_layout(const std::vector<int64_t>& numels, size_t esize, int64_t multiple = 1);

/// Allgather of k tensors over n ranks. Rank j's block of the gathered buffer holds its rows of
/// tensor 0, then of tensor 1, ...; blocks are laid out rank by rank. With one tensor the
/// input and output are used directly (no pack, no unpack).
struct AllgatherPlan {
  size_t n = 1, k = 0, rank = 0, esize = 1;
  std::vector<int64_t> rank_rows, numels;  // [i * n + j]: rows of tensor i on rank j
  std::vector<size_t> count, displ;        // bytes of each rank's block, and where it starts
  std::vector<int64_t> out_rows;           // dim 0 of each output
  std::vector<size_t> out_bytes;
  size_t total = 0;    // bytes of the gathered buffer
  bool equal = false;  // every rank sends the same bytes (one ncclAllGather)

  bool packed() const { return k > 1; }
  /// Copies of this rank's rows of every tensor (src[i]; null = zeros) into `send`.
  std::vector<CopyDesc> pack(const std::vector<const void*>& src, void* send) const;
  /// Copies from the gathered buffer `recv` into each output (dst[i]; null: not copied).
  std::vector<CopyDesc> unpack(const void* recv, const std::vector<void*>& dst) const;
};
Result<AllgatherPlan> plan_allgather(const std::vector<int64_t>& rank_rows,
                                     const std::vector<int64_t>& numels, int size, int rank,
                                     size_t esize);

/// Alltoall of one tensor: bytes to and from each peer, with offsets in the input and output.
struct AlltoallPlan {
  std::vector<size_t> send_bytes, send_off, recv_bytes, recv_off;
  std::vector<int64_t> received;  // rows from each rank (the handle's received splits)
  int64_t recv_rows = 0;
};
/// `rank_rows[j * size + m]`: rows rank j sends to rank m; `row`: elements per row.
Result<AlltoallPlan> plan_alltoall(const std::vector<int64_t>& rank_rows, int64_t row, int size,
                                   int rank, size_t esize);

/// Reducescatter of one tensor of `rows` rows of `row` elements: every rank's slice is padded
/// to `block` elements so that one ncclReduceScatter of `block` hands rank j slot j.
struct ReducescatterPlan {
  int size = 1;
  int64_t rows = 0, row = 0, block = 0;
  int64_t my_rows = 0, mine = 0;  // this rank's output rows and elements
  /// Copies of each rank's rows of `src` (null = zeros) into its slot of `buf`.
  std::vector<CopyDesc> pack(const void* src, void* buf, size_t esize) const;
};
ReducescatterPlan plan_reducescatter(int64_t rows, int64_t row, int size, int rank);

/// Launch shape of the batched copy kernel: blockIdx.y walks the pieces (at most 65,535 rows of
/// blocks, striding beyond), blocks along x stride over a piece; about 64Ki blocks in all.
struct CopyGrid {
  unsigned x = 1, y = 1;
};
constexpr int kCopyThreads = 256;
CopyGrid copy_grid(int pieces, int64_t max_count, size_t esize, bool pure_copy);

}  // namespace hvd::ops::nccl
