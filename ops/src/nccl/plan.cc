// SPDX-License-Identifier: Apache-2.0
// Pure planning of the NCCL executor's data movement (see plan.h). Built in every build.
#include "hvd/ops/nccl/plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "hvd/ops/mpi_executor.h"

namespace hvd::ops::nccl {

Scale make_scale(DataType t, double factor) {
  Scale s;
  s.factor = factor;
  if (!dtype_is_floating(t) && factor < 1.0 && factor > 0.0) {
    const double inv = 1.0 / factor, r = std::round(inv);
    if (r >= 2.0 && std::fabs(inv - r) < 1e-9) {
      s.factor = 1.0;
      s.divisor = static_cast<int64_t>(r);
    }
  }
  return s;
}

FusedLayout fused_layout(const std::vector<int64_t>& numels, size_t esize, int64_t multiple) {
  const auto align = static_cast<int64_t>(16 / std::min<size_t>(std::max<size_t>(esize, 1), 16));
  FusedLayout l;
  l.offset.resize(numels.size());
  for (size_t i = 0; i < numels.size(); ++i) {
    l.offset[i] = l.total;
    l.total += (numels[i] + align - 1) / align * align;
  }
  const int64_t m = std::max<int64_t>(multiple, 1);
  l.padded = (l.total + m - 1) / m * m;
  return l;
}

Result<AllgatherPlan> plan_allgather(const std::vector<int64_t>& rank_rows,
                                     const std::vector<int64_t>& numels, int size, int rank,
                                     size_t esize) {
  AllgatherPlan p;
  p.n = static_cast<size_t>(size);
  p.k = numels.size();
  p.rank = static_cast<size_t>(rank);
  p.esize = esize;
  if (size < 1 || rank < 0 || rank >= size || rank_rows.size() != p.n * p.k) {
    return internal_error("allgather: malformed response (" + std::to_string(rank_rows.size()) +
                          " row counts for " + std::to_string(p.k) + " tensors on " +
                          std::to_string(size) + " ranks)");
  }
  p.rank_rows = rank_rows;
  p.numels = numels;
  p.count.assign(p.n, 0);
  p.displ.assign(p.n, 0);
  p.out_rows.assign(p.k, 0);
  p.out_bytes.assign(p.k, 0);
  for (size_t i = 0; i < p.k; ++i) {
    for (size_t j = 0; j < p.n; ++j) {
      const int64_t rows = rank_rows[i * p.n + j];
      p.out_rows[i] += rows;
      p.count[j] += static_cast<size_t>(rows * numels[i]) * esize;
    }
    p.out_bytes[i] = static_cast<size_t>(p.out_rows[i] * numels[i]) * esize;
  }
  for (size_t j = 1; j < p.n; ++j) p.displ[j] = p.displ[j - 1] + p.count[j - 1];
  p.total = p.displ[p.n - 1] + p.count[p.n - 1];
  p.equal = std::all_of(p.count.begin(), p.count.end(), [&](size_t c) { return c == p.count[0]; });
  return p;
}

std::vector<CopyDesc> AllgatherPlan::pack(const std::vector<const void*>& src, void* send) const {
  std::vector<CopyDesc> out;
  out.reserve(k);
  size_t pos = 0;
  for (size_t i = 0; i < k; ++i) {
    const int64_t elems = rank_rows[i * n + rank] * numels[i];
    out.push_back({src[i], static_cast<uint8_t*>(send) + pos, elems});
    pos += static_cast<size_t>(elems) * esize;
  }
  return out;
}

std::vector<CopyDesc> AllgatherPlan::unpack(const void* recv, const std::vector<void*>& dst) const {
  std::vector<CopyDesc> out;
  out.reserve(n * k);
  std::vector<size_t> written(k, 0);
  size_t pos = 0;
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) {
      const int64_t elems = rank_rows[i * n + j] * numels[i];
      const size_t b = static_cast<size_t>(elems) * esize;
      if (b && dst[i]) {
        out.push_back({static_cast<const uint8_t*>(recv) + pos,
                       static_cast<uint8_t*>(dst[i]) + written[i], elems});
      }
      written[i] += b;
      pos += b;
    }
  }
  return out;
}

Result<AlltoallPlan> plan_alltoall(const std::vector<int64_t>& rank_rows, int64_t row, int size,
                                   int rank, size_t esize) {
  const auto n = static_cast<size_t>(size), me = static_cast<size_t>(rank);
  if (size < 1 || rank < 0 || rank >= size || rank_rows.size() != n * n) {
    return internal_error("alltoall: malformed response (" + std::to_string(rank_rows.size()) +
                          " row counts for " + std::to_string(size) + " ranks)");
  }
  AlltoallPlan p;
  p.send_bytes.resize(n);
  p.send_off.resize(n);
  p.recv_bytes.resize(n);
  p.recv_off.resize(n);
  p.received.resize(n);
  size_t so = 0, ro = 0;
  for (size_t j = 0; j < n; ++j) {
    p.send_bytes[j] = static_cast<size_t>(rank_rows[me * n + j] * row) * esize;
    p.recv_bytes[j] = static_cast<size_t>(rank_rows[j * n + me] * row) * esize;
    p.send_off[j] = so;
    p.recv_off[j] = ro;
    so += p.send_bytes[j];
    ro += p.recv_bytes[j];
    p.received[j] = rank_rows[j * n + me];
    p.recv_rows += p.received[j];
  }
  return p;
}

ReducescatterPlan plan_reducescatter(int64_t rows, int64_t row, int size, int rank) {
  ReducescatterPlan p;
  p.size = size;
  p.rows = rows;
  p.row = row;
  p.block = (rows + size - 1) / size * row;
  p.my_rows = reducescatter_rows(rows, size, rank);
  p.mine = p.my_rows * row;
  return p;
}

std::vector<CopyDesc> ReducescatterPlan::pack(const void* src, void* buf, size_t esize) const {
  std::vector<CopyDesc> out;
  out.reserve(static_cast<size_t>(size));
  for (int j = 0; j < size; ++j) {
    const int64_t start = reducescatter_start(rows, size, j) * row;
    const int64_t cnt = reducescatter_rows(rows, size, j) * row;
    const void* s =
        src ? static_cast<const uint8_t*>(src) + static_cast<size_t>(start) * esize : nullptr;
    out.push_back({s, static_cast<uint8_t*>(buf) + static_cast<size_t>(j * block) * esize, cnt});
  }
  return out;
}

CopyGrid copy_grid(int pieces, int64_t max_count, size_t esize, bool pure_copy) {
  constexpr int kMaxBlocksY = 65535;
  constexpr int64_t kMaxBlocksTotal = 1 << 16;
  CopyGrid g;
  if (pieces <= 0 || max_count <= 0) return g;
  // Threads along x cover the largest piece (16 bytes per thread for copies, one element for
  // scaled copies), capped so that the grid stays around 64Ki blocks; blocks then stride.
  const int64_t per_thread = pure_copy ? 16 : static_cast<int64_t>(esize);
  const int64_t bytes = max_count * static_cast<int64_t>(esize);
  const int64_t want_x = (bytes + kCopyThreads * per_thread - 1) / (kCopyThreads * per_thread);
  const int y = std::min(pieces, kMaxBlocksY);
  const int64_t cap_x = std::max<int64_t>(1, kMaxBlocksTotal / y);
  g.x = static_cast<unsigned>(std::max<int64_t>(1, std::min(want_x, cap_x)));
  g.y = static_cast<unsigned>(y);
  return g;
}

}  // namespace hvd::ops::nccl
