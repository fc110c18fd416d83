// SPDX-License-Identifier: Apache-2.0
// Repeated allgather / alltoall / reducescatter under one name: served from the response cache
// while nothing changes, renegotiated when one rank's rows or splits change, values right
// throughout; hvd-owned outputs stay valid while their handle is held.
#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;

namespace {

// Rows rank r contributes in step `it`: changes on one rank every third step, zero included.
int64_t rows_at(int r, int it) { return (r == 1 && it % 3 == 2) ? 0 : r + 1 + (it / 3) % 2; }

float val(int r, int it, int64_t i) { return static_cast<float>(r * 1000 + it * 10 + i); }

}  // namespace

TEST_CASE("a repeated allgather stays right as one rank's rows change between steps", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<hvd::Handle> kept;  // outputs of earlier steps must survive later ones
  std::vector<std::vector<float>> kept_expect;
  for (int it = 0; it < 9; ++it) {
    std::vector<float> in;
    for (int64_t i = 0; i < rows_at(r, it) * 2; ++i) in.push_back(val(r, it, i));
    hvd::Handle h = hvd::allgather(
        hvd::TensorView(in.data(), DataType::kFloat32, {rows_at(r, it), 2}), "cache.ag");
    std::vector<float> expect;
    int64_t total = 0;
    for (int q = 0; q < n; ++q) {
      total += rows_at(q, it);
      for (int64_t i = 0; i < rows_at(q, it) * 2; ++i) expect.push_back(val(q, it, i));
    }
    INFO("step " << it);
    REQUIRE(h.output().shape == std::vector<int64_t>{total, 2});
    const auto* p = static_cast<const float*>(h.output().data);
    REQUIRE(std::vector<float>(p, p + total * 2) == expect);
    if (it % 4 == 0) {
      kept.push_back(h);
      kept_expect.push_back(expect);
    }
  }
  for (size_t k = 0; k < kept.size(); ++k) {
    const auto* p = static_cast<const float*>(kept[k].output().data);
    REQUIRE(std::vector<float>(p, p + kept_expect[k].size()) == kept_expect[k]);
  }
}

TEST_CASE("a repeated alltoall stays right as the splits change between steps", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  for (int it = 0; it < 6; ++it) {
    // Rank i sends (i + j + it / 2) % 3 rows to rank j: the splits change every other step.
    auto split = [&](int i, int j) { return static_cast<int64_t>((i + j + it / 2) % 3); };
    std::vector<int64_t> splits;
    std::vector<float> in;
    int64_t rows = 0;
    for (int j = 0; j < n; ++j) {
      splits.push_back(split(r, j));
      for (int64_t k = 0; k < split(r, j); ++k) in.push_back(val(r, it, rows++));
    }
    hvd::Handle h =
        hvd::alltoall(hvd::TensorView(in.data(), DataType::kFloat32, {rows}), splits, "cache.a2a");
    std::vector<float> expect;
    std::vector<int64_t> got;
    for (int i = 0; i < n; ++i) {
      int64_t first = 0;
      for (int j = 0; j < r; ++j) first += split(i, j);
      for (int64_t k = 0; k < split(i, r); ++k) expect.push_back(val(i, it, first + k));
      got.push_back(split(i, r));
    }
    INFO("step " << it);
    REQUIRE(h.received_splits() == got);
    const auto* p = static_cast<const float*>(h.output().data);
    REQUIRE(std::vector<float>(p, p + h.output().numel()) == expect);
  }
}
