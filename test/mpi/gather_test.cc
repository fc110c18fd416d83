// SPDX-License-Identifier: Apache-2.0
// allgather / alltoall / reducescatter (and grouped forms) against values every rank computes.
#include <cmath>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd_test::Buffer;

namespace {

std::vector<DataType> moved_dtypes() {
  auto v = hvd_test::reducible_dtypes();
  v.push_back(DataType::kBool);
  return v;
}

// Element e of row k of rank r's tensor t: small, exact in every dtype (bool: parity).
double gval(DataType dt, int r, int t, int64_t k, int64_t e) {
  double v = static_cast<double>((r * 7 + t * 5 + k * 3 + e) % 50);
  return dt == DataType::kBool ? static_cast<double>(static_cast<int64_t>(v) % 2) : v;
}

int64_t gather_rows(int r, int t) { return (r + t) % 3; }  // 0, 1 or 2: zero-size included

const int64_t kCols = 3;

}  // namespace

TEST_CASE("allgather concatenates ragged first dimensions for every dtype", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  for (int rep = 0; rep < 2; ++rep) {
    struct G {
      DataType dt;
      int t;
      Buffer in;
      hvd::Handle h;
    };
    std::vector<G> gs;
    for (DataType dt : moved_dtypes()) {
      for (int t = 0; t < 3; ++t) {  // several per dtype: fused when fusion is on
        G g{dt, t, Buffer(dt, gather_rows(r, t) * kCols), {}};
        for (int64_t k = 0; k < gather_rows(r, t); ++k) {
          for (int64_t e = 0; e < kCols; ++e) g.in.set(k * kCols + e, gval(dt, r, t, k, e));
        }
        gs.push_back(std::move(g));
      }
    }
    for (auto& g : gs) {
      g.h = hvd::allgather_async(
          g.in.view({gather_rows(r, g.t), kCols}),
          std::string("ag.") + hvd::dtype_name(g.dt) + "." + std::to_string(g.t));
    }
    for (auto& g : gs) {
      INFO(hvd::dtype_name(g.dt) << " tensor " << g.t);
      REQUIRE_NOTHROW(g.h.wait());
      const hvd::TensorView& out = g.h.output();
      int64_t total = 0;
      for (int q = 0; q < n; ++q) total += gather_rows(q, g.t);
      REQUIRE(out.shape == std::vector<int64_t>{total, kCols});
      REQUIRE(out.dtype == g.dt);
      Buffer got(g.dt, total * kCols);
      if (got.size()) std::memcpy(got.view().data, out.data, out.bytes());
      int64_t row = 0;
      for (int q = 0; q < n; ++q) {
        for (int64_t k = 0; k < gather_rows(q, g.t); ++k, ++row) {
          for (int64_t e = 0; e < kCols; ++e) {
            REQUIRE(got.get(row * kCols + e) == gval(g.dt, q, g.t, k, e));
          }
        }
      }
    }
  }
}

TEST_CASE("allgather of a large tensor and through a caller's allocator", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  const int64_t len = (2 << 20) / 4 + 1;  // above the direct size: not fused
  std::vector<float> in(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) in[static_cast<size_t>(i)] = static_cast<float>(r * 3 + i % 11);
  std::vector<float> mine;
  auto h = hvd::allgather_async(hvd::TensorView(in.data(), DataType::kFloat32, {len}), "ag.big", {},
                                [&](const std::vector<int64_t>& shape) -> void* {
                                  mine.resize(static_cast<size_t>(hvd::shape_numel(shape)));
                                  return mine.data();
                                });
  h.wait();
  REQUIRE(h.output().data == mine.data());
  REQUIRE(mine.size() == static_cast<size_t>(len * n));
  for (int q = 0; q < n; ++q) {
    for (int64_t i = 0; i < len; i += 997) {
      REQUIRE(mine[static_cast<size_t>(q * len + i)] == static_cast<float>(q * 3 + i % 11));
    }
  }
}

TEST_CASE("grouped allgather completes every member with its own output", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<std::vector<int32_t>> ins(3);
  std::vector<hvd::TensorView> views;
  for (int t = 0; t < 3; ++t) {
    ins[static_cast<size_t>(t)].assign(static_cast<size_t>(gather_rows(r, t) * 2), r * 10 + t);
    views.emplace_back(ins[static_cast<size_t>(t)].data(), DataType::kInt32,
                       std::vector<int64_t>{gather_rows(r, t), 2});
  }
  auto hs = hvd::grouped_allgather_async(views, "gag");
  REQUIRE(hs.size() == 3);
  for (int t = 0; t < 3; ++t) {
    hs[static_cast<size_t>(t)].wait();
    const auto& out = hs[static_cast<size_t>(t)].output();
    const auto* p = static_cast<const int32_t*>(out.data);
    int64_t row = 0;
    for (int q = 0; q < n; ++q) {
      for (int64_t k = 0; k < gather_rows(q, t); ++k, ++row) {
        REQUIRE(p[row * 2] == q * 10 + t);
        REQUIRE(p[row * 2 + 1] == q * 10 + t);
      }
    }
    REQUIRE(out.shape[0] == row);
  }
}

namespace {
int64_t a2a_rows(int from, int to) { return (from + 2 * to) % 3; }
double a2a_val(DataType dt, int from, int to, int64_t k, int64_t e) {
  double v = static_cast<double>((from * 11 + to * 5 + k * 2 + e) % 60);
  return dt == DataType::kBool ? static_cast<double>(static_cast<int64_t>(v) % 2) : v;
}
}  // namespace

TEST_CASE("alltoall sends rows by splits and returns the received splits", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  for (DataType dt : moved_dtypes()) {
    std::vector<int64_t> splits;
    int64_t rows = 0;
    for (int j = 0; j < n; ++j) {
      splits.push_back(a2a_rows(r, j));
      rows += splits.back();
    }
    Buffer in(dt, rows * 2);
    int64_t row = 0;
    for (int j = 0; j < n; ++j) {
      for (int64_t k = 0; k < a2a_rows(r, j); ++k, ++row) {
        for (int64_t e = 0; e < 2; ++e) in.set(row * 2 + e, a2a_val(dt, r, j, k, e));
      }
    }
    INFO(hvd::dtype_name(dt));
    hvd::Handle h =
        hvd::alltoall(in.view({rows, 2}), splits, std::string("a2a.") + hvd::dtype_name(dt));
    std::vector<int64_t> expect_splits;
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      expect_splits.push_back(a2a_rows(i, r));
      total += expect_splits.back();
    }
    REQUIRE(h.received_splits() == expect_splits);
    REQUIRE(h.output().shape == std::vector<int64_t>{total, 2});
    Buffer got(dt, total * 2);
    if (got.size()) std::memcpy(got.view().data, h.output().data, h.output().bytes());
    row = 0;
    for (int i = 0; i < n; ++i) {
      for (int64_t k = 0; k < a2a_rows(i, r); ++k, ++row) {
        for (int64_t e = 0; e < 2; ++e) REQUIRE(got.get(row * 2 + e) == a2a_val(dt, i, r, k, e));
      }
    }
  }
}

TEST_CASE("alltoall without splits sends equal blocks", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<int64_t> in(static_cast<size_t>(2 * n));
  for (int j = 0; j < n; ++j) {
    in[static_cast<size_t>(2 * j)] = r * 100 + j;
    in[static_cast<size_t>(2 * j + 1)] = r * 100 + j + 50;
  }
  hvd::Handle h =
      hvd::alltoall(hvd::TensorView(in.data(), DataType::kInt64, {2 * n}), {}, "a2a.eq");
  REQUIRE(h.received_splits() == std::vector<int64_t>(static_cast<size_t>(n), 2));
  const auto* p = static_cast<const int64_t*>(h.output().data);
  for (int i = 0; i < n; ++i) {
    REQUIRE(p[2 * i] == i * 100 + r);
    REQUIRE(p[2 * i + 1] == i * 100 + r + 50);
  }
}

namespace {
int64_t rs_rows(int64_t rows, int n, int r) { return rows / n + (r < rows % n ? 1 : 0); }
int64_t rs_start(int64_t rows, int n, int r) {
  return r * (rows / n) + std::min<int64_t>(r, rows % n);
}
}  // namespace

TEST_CASE("reducescatter gives each rank its slice of the reduced rows", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  for (DataType dt : hvd_test::reducible_dtypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (int64_t rows : {int64_t(2 * n + 1), int64_t(1), int64_t(0), int64_t(7)}) {
        const int64_t cols = 3;
        Buffer in(dt, rows * cols);
        for (int64_t k = 0; k < rows; ++k) {
          for (int64_t e = 0; e < cols; ++e) in.set(k * cols + e, (r + 1) * ((k + e) % 3 + 1));
        }
        std::string name = std::string("rs.") + hvd::dtype_name(dt) + "." +
                           hvd::reduce_op_name(op) + "." + std::to_string(rows);
        INFO(name);
        hvd::Handle h = hvd::reducescatter(in.view({rows, cols}), name, op);
        const int64_t mine = rs_rows(rows, n, r), start = rs_start(rows, n, r);
        REQUIRE(h.output().shape == std::vector<int64_t>{mine, cols});
        Buffer got(dt, mine * cols);
        if (got.size()) std::memcpy(got.view().data, h.output().data, h.output().bytes());
        for (int64_t k = 0; k < mine; ++k) {
          for (int64_t e = 0; e < cols; ++e) {
            double base = static_cast<double>((start + k + e) % 3 + 1);
            double sum = base * n * (n + 1) / 2;
            double expect = op == ReduceOp::kSum         ? sum
                            : hvd::dtype_is_floating(dt) ? sum / n
                                                         : std::floor(sum / n);
            REQUIRE(got.get(k * cols + e) == expect);
          }
        }
      }
    }
  }
}

TEST_CASE("reducescatter applies prescale and postscale; grouped form", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<std::vector<double>> ins(2, std::vector<double>(static_cast<size_t>(2 * n), r + 1.0));
  std::vector<hvd::TensorView> views;
  for (auto& v : ins) views.emplace_back(v.data(), DataType::kFloat64, std::vector<int64_t>{2 * n});
  auto hs = hvd::grouped_reducescatter_async(views, "grs", ReduceOp::kSum, 2.0, 0.25);
  for (auto& h : hs) {
    h.wait();
    REQUIRE(h.output().shape == std::vector<int64_t>{2});
    const auto* p = static_cast<const double*>(h.output().data);
    for (int i = 0; i < 2; ++i) REQUIRE(p[i] == 0.5 * n * (n + 1) / 2.0);
  }
  REQUIRE(ins[0][0] == r + 1.0);  // the input stays untouched
}
