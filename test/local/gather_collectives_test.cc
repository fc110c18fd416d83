// SPDX-License-Identifier: Apache-2.0
// [local] allgather, alltoall and reducescatter through N runtimes: uneven first dimensions
// (zero included), fusion, grouped forms, caller allocators, the response cache.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

// Value of rank r, row i, column c: distinct everywhere, exact in every dtype used.
template <typename T>
T gval(int r, int64_t i, int64_t c) {
  return static_cast<T>(r * 50 + i * 3 + c + 1);
}

// Rows rank r contributes to allgather: {2, 0, 3, 1, ...} (rank 1 contributes nothing).
int64_t ag_rows(int r) { return r == 1 ? 0 : (r % 3) + 1 + (r == 0 ? 1 : 0); }

template <typename T>
std::vector<T> ag_input(int r, int64_t cols) {
  std::vector<T> v;
  for (int64_t i = 0; i < ag_rows(r); ++i) {
    for (int64_t c = 0; c < cols; ++c) v.push_back(gval<T>(r, i, c));
  }
  return v;
}

// Concatenation of every rank's rows, in rank order, from the generator.
template <typename T>
std::vector<T> ag_expect(int n, int64_t cols) {
  std::vector<T> v;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < ag_rows(r); ++i) {
      for (int64_t c = 0; c < cols; ++c) v.push_back(gval<T>(r, i, c));
    }
  }
  return v;
}

template <typename T>
void allgather_round(Cluster& c, const std::string& name, int64_t cols) {
  const int n = c.size();
  std::vector<Tensor<T>> t;
  for (int r = 0; r < n; ++r) t.emplace_back(ag_input<T>(r, cols));
  std::vector<Handle> hs;
  for (int r = 0; r < n; ++r) {
    Opts o;
    o.op = OpType::kAllgather;
    o.shape = std::vector<int64_t>{ag_rows(r), cols};
    hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)], o));
  }
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += ag_rows(r);
  for (int r = 0; r < n; ++r) {
    const Handle& h = hs[static_cast<size_t>(r)];
    await_ok(h, name);
    INFO(name << " on rank " << r);
    REQUIRE(h.output().shape == std::vector<int64_t>{total, cols});
    REQUIRE(output_of<T>(h) == ag_expect<T>(n, cols));
  }
}

// Rows rank i sends to rank j: zero on the diagonal for odd i.
int64_t split(int i, int j, int n) { return (i % 2 && i == j) ? 0 : (i + 2 * j) % n + 1; }

}  // namespace

TEST_CASE("allgather concatenates uneven first dimensions, zero rows included", "[local]") {
  for (int n : {1, 2, 4}) {
    Cluster c(n);
    c.start_all();
    allgather_round<float>(c, "ag.f32." + std::to_string(n), 3);
    allgather_round<int64_t>(c, "ag.i64." + std::to_string(n), 1);
    allgather_round<uint8_t>(c, "ag.u8." + std::to_string(n), 2);
    allgather_round<double>(c, "ag.f64." + std::to_string(n), 2);
  }
}

TEST_CASE("allgather where every rank contributes zero rows gives an empty output", "[local]") {
  Cluster c(3);
  c.start_all();
  std::vector<Tensor<float>> t(3, Tensor<float>(std::vector<float>{}));
  std::vector<Handle> hs;
  Opts o;
  o.op = OpType::kAllgather;
  o.shape = std::vector<int64_t>{0, 4};
  for (int r = 0; r < 3; ++r) hs.push_back(submit(c[r], "ag.empty", t[static_cast<size_t>(r)], o));
  for (auto& h : hs) {
    await_ok(h, "ag.empty");
    REQUIRE(h.output().shape == std::vector<int64_t>{0, 4});
  }
}

TEST_CASE("allgathers ready together are fused into one execution", "[local]") {
  const int n = 3;
  Cluster c(n);  // stepped: every rank submits everything before the one round
  std::vector<std::vector<Tensor<int32_t>>> t(n);
  std::vector<Handle> hs;
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 4; ++k) {
      t[static_cast<size_t>(r)].emplace_back(ag_input<int32_t>(r + k, 2));
    }
  }
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 4; ++k) {
      Opts o;
      o.op = OpType::kAllgather;
      o.shape = std::vector<int64_t>{ag_rows(r + k), 2};
      hs.push_back(submit(c[r], "fa" + std::to_string(k),
                          t[static_cast<size_t>(r)][static_cast<size_t>(k)], o));
    }
  }
  REQUIRE(c.step_all());
  REQUIRE(c.executors[0]->batches() ==
          std::vector<std::vector<std::string>>{{"fa0", "fa1", "fa2", "fa3"}});
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 4; ++k) {
      const Handle& h = hs[static_cast<size_t>(r * 4 + k)];
      REQUIRE(h.poll());
      REQUIRE(h.wait_status().ok());
      std::vector<int32_t> expect;
      for (int q = 0; q < n; ++q) {
        auto part = ag_input<int32_t>(q + k, 2);
        expect.insert(expect.end(), part.begin(), part.end());
      }
      INFO("rank " << r << " tensor " << k);
      REQUIRE(output_of<int32_t>(h) == expect);
    }
  }
}

TEST_CASE("allgather writes into the caller's allocator", "[local]") {
  Cluster c(2);
  c.start_all();
  std::vector<std::vector<float>> bufs(2);
  std::vector<Tensor<float>> t;
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) t.emplace_back(ag_input<float>(r == 0 ? 0 : 2, 2));
  for (int r = 0; r < 2; ++r) {
    Opts o;
    o.op = OpType::kAllgather;
    o.shape = std::vector<int64_t>{ag_rows(r == 0 ? 0 : 2), 2};
    auto* buf = &bufs[static_cast<size_t>(r)];
    o.allocator = [buf](const std::vector<int64_t>& shape) -> void* {
      buf->resize(static_cast<size_t>(shape_numel(shape)));
      return buf->data();
    };
    hs.push_back(submit(c[r], "ag.alloc", t[static_cast<size_t>(r)], o));
  }
  std::vector<float> expect = ag_input<float>(0, 2), second = ag_input<float>(2, 2);
  expect.insert(expect.end(), second.begin(), second.end());
  for (int r = 0; r < 2; ++r) {
    await_ok(hs[static_cast<size_t>(r)], "ag.alloc");
    REQUIRE(hs[static_cast<size_t>(r)].output().data == bufs[static_cast<size_t>(r)].data());
    REQUIRE(bufs[static_cast<size_t>(r)] == expect);
  }
}

TEST_CASE("hvd-allocated outputs are reused once their handles are dropped", "[local]") {
  Cluster c(2);
  c.start_all();
  for (int it = 0; it < 3; ++it) {
    std::vector<Tensor<float>> t;
    std::vector<Handle> hs;
    for (int r = 0; r < 2; ++r) t.emplace_back(std::vector<float>(1000, float(r + it)));
    Opts o;
    o.op = OpType::kAllgather;
    for (int r = 0; r < 2; ++r) hs.push_back(submit(c[r], "ag.pool", t[static_cast<size_t>(r)], o));
    for (int r = 0; r < 2; ++r) {
      await_ok(hs[static_cast<size_t>(r)], "ag.pool");
      auto out = output_of<float>(hs[static_cast<size_t>(r)]);
      REQUIRE(out.size() == 2000);
      REQUIRE(out[0] == float(it));
      REQUIRE(out[1999] == float(1 + it));
    }
  }  // handles dropped each iteration: their outputs go back to the pool
  REQUIRE(c[0].output_pool().reused() >= 2);
  REQUIRE(c[0].output_pool().idle_buffers() <= 1);
}

TEST_CASE("repeated allgather, alltoall and reducescatter are served from the cache", "[local]") {
  const int n = 3;
  Cluster c(n);
  c.start_all();
  auto gathers = [&] { return c.gathers()[0]; };
  allgather_round<float>(c, "cached.ag", 2);
  const int after_first = gathers();
  for (int it = 0; it < 3; ++it) allgather_round<float>(c, "cached.ag", 2);
  REQUIRE(gathers() == after_first);  // bit-vector rounds only

  // One rank changes its first dimension: renegotiated, and the values follow.
  std::vector<Tensor<float>> t;
  std::vector<Handle> hs;
  for (int r = 0; r < n; ++r) t.emplace_back(std::vector<float>(r == 2 ? 3u : 2u, float(r)));
  for (int r = 0; r < n; ++r) {
    Opts o;
    o.op = OpType::kAllgather;
    o.shape = std::vector<int64_t>{r == 2 ? 3 : 2, 1};
    hs.push_back(submit(c[r], "cached.ag", t[static_cast<size_t>(r)], o));
  }
  for (auto& h : hs) {
    await_ok(h, "cached.ag changed");
    REQUIRE(output_of<float>(h) == std::vector<float>{0, 0, 1, 1, 2, 2, 2});
  }
  REQUIRE(gathers() > after_first);

  for (int it = 0; it < 3; ++it) {
    std::vector<Tensor<int32_t>> a, s;
    std::vector<Handle> ha, hr;
    for (int r = 0; r < n; ++r) {
      a.emplace_back(std::vector<int32_t>(6, r));
      s.emplace_back(std::vector<int32_t>(4, r + 1));
    }
    for (int r = 0; r < n; ++r) {
      Opts o;
      o.op = OpType::kAlltoall;
      o.splits = std::vector<int64_t>{1, 2, 3};
      ha.push_back(submit(c[r], "cached.a2a", a[static_cast<size_t>(r)], o));
      Opts q;
      q.op = OpType::kReducescatter;
      hr.push_back(submit(c[r], "cached.rs", s[static_cast<size_t>(r)], q));
    }
    for (int r = 0; r < n; ++r) {
      await_ok(ha[static_cast<size_t>(r)], "cached.a2a");
      await_ok(hr[static_cast<size_t>(r)], "cached.rs");
      std::vector<int32_t> e(static_cast<size_t>(3 * (r + 1)));
      for (size_t i = 0; i < e.size(); ++i)
        e[i] = static_cast<int32_t>(i / static_cast<size_t>(r + 1));
      REQUIRE(output_of<int32_t>(ha[static_cast<size_t>(r)]) == e);
      REQUIRE(output_of<int32_t>(hr[static_cast<size_t>(r)]) ==
              std::vector<int32_t>(r == 0 ? 2u : 1u, 6));
    }
    if (it == 0) REQUIRE(gathers() > 0);
  }
  const int settled = gathers();
  std::vector<Tensor<int32_t>> s;
  std::vector<Handle> hr;
  for (int r = 0; r < n; ++r) s.emplace_back(std::vector<int32_t>(4, 1));
  Opts q;
  q.op = OpType::kReducescatter;
  for (int r = 0; r < n; ++r) hr.push_back(submit(c[r], "cached.rs", s[static_cast<size_t>(r)], q));
  for (auto& h : hr) await_ok(h, "cached.rs again");
  REQUIRE(gathers() == settled);
}

TEST_CASE("alltoall sends rows by splits, zero splits included, and reports what it got",
          "[local]") {
  for (int n : {1, 2, 3, 4}) {
    Cluster c(n);
    c.start_all();
    const int64_t cols = 2;
    std::vector<Tensor<double>> t;
    std::vector<Handle> hs;
    for (int i = 0; i < n; ++i) {
      std::vector<double> v;
      int64_t row = 0;
      for (int j = 0; j < n; ++j) {
        for (int64_t k = 0; k < split(i, j, n); ++k, ++row) {
          for (int64_t col = 0; col < cols; ++col) v.push_back(gval<double>(i, row, col));
        }
      }
      t.emplace_back(v);
    }
    for (int i = 0; i < n; ++i) {
      Opts o;
      o.op = OpType::kAlltoall;
      int64_t rows = 0;
      for (int j = 0; j < n; ++j) {
        o.splits.push_back(split(i, j, n));
        rows += split(i, j, n);
      }
      o.shape = std::vector<int64_t>{rows, cols};
      hs.push_back(submit(c[i], "a2a", t[static_cast<size_t>(i)], o));
    }
    for (int j = 0; j < n; ++j) {
      const Handle& h = hs[static_cast<size_t>(j)];
      await_ok(h, "a2a");
      // Independently: from each sender i, the rows it addressed to j, in sender order.
      std::vector<double> expect;
      std::vector<int64_t> got;
      for (int i = 0; i < n; ++i) {
        int64_t first = 0;
        for (int q = 0; q < j; ++q) first += split(i, q, n);
        for (int64_t k = 0; k < split(i, j, n); ++k) {
          for (int64_t col = 0; col < cols; ++col)
            expect.push_back(gval<double>(i, first + k, col));
        }
        got.push_back(split(i, j, n));
      }
      INFO("np " << n << " rank " << j);
      REQUIRE(output_of<double>(h) == expect);
      REQUIRE(h.received_splits() == got);
      REQUIRE(h.output().shape[1] == cols);
    }
  }
}

TEST_CASE("alltoall without splits sends equal blocks", "[local]") {
  const int n = 3;
  Cluster c(n);
  c.start_all();
  std::vector<Tensor<int64_t>> t;
  std::vector<Handle> hs;
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> v;
    for (int k = 0; k < 2 * n; ++k) v.push_back(gval<int64_t>(i, k, 0));
    t.emplace_back(v);
  }
  Opts o;
  o.op = OpType::kAlltoall;
  for (int i = 0; i < n; ++i) hs.push_back(submit(c[i], "a2a.even", t[static_cast<size_t>(i)], o));
  for (int j = 0; j < n; ++j) {
    await_ok(hs[static_cast<size_t>(j)], "a2a.even");
    std::vector<int64_t> expect;
    for (int i = 0; i < n; ++i) {
      expect.push_back(gval<int64_t>(i, 2 * j, 0));
      expect.push_back(gval<int64_t>(i, 2 * j + 1, 0));
    }
    REQUIRE(output_of<int64_t>(hs[static_cast<size_t>(j)]) == expect);
    REQUIRE(hs[static_cast<size_t>(j)].received_splits() == std::vector<int64_t>(n, 2));
  }
}

TEST_CASE("reducescatter gives the first R%N ranks one extra row; fewer rows than ranks",
          "[local]") {
  const int n = 3;
  Cluster c(n);
  c.start_all();
  for (int64_t rows : {7, 6, 2, 0}) {
    const int64_t cols = 2;
    const std::string name = "rs." + std::to_string(rows);
    std::vector<Tensor<int32_t>> ti;
    std::vector<Tensor<float>> tf;
    for (int r = 0; r < n; ++r) {
      std::vector<int32_t> vi;
      std::vector<float> vf;
      for (int64_t i = 0; i < rows * cols; ++i) {
        vi.push_back(gval<int32_t>(r, i, 0));
        vf.push_back(gval<float>(r, i, 1));
      }
      ti.emplace_back(vi);
      tf.emplace_back(vf);
    }
    std::vector<Handle> hi, hf;
    for (int r = 0; r < n; ++r) {
      Opts o;
      o.op = OpType::kReducescatter;
      o.shape = std::vector<int64_t>{rows, cols};
      o.reduce = ReduceOp::kSum;
      hi.push_back(submit(c[r], name + ".sum", ti[static_cast<size_t>(r)], o));
      o.reduce = ReduceOp::kAverage;
      o.prescale = 2.0;
      o.postscale = 0.5;
      hf.push_back(submit(c[r], name + ".avg", tf[static_cast<size_t>(r)], o));
    }
    // Slices worked out by hand: 7 -> 3,2,2; 6 -> 2,2,2; 2 -> 1,1,0; 0 -> 0,0,0.
    const std::vector<std::vector<int64_t>> table = {{3, 2, 2}, {2, 2, 2}, {1, 1, 0}, {0, 0, 0}};
    const auto& counts = table[rows == 7 ? 0 : rows == 6 ? 1 : rows == 2 ? 2 : 3];
    int64_t start = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t mine = counts[static_cast<size_t>(r)];
      await_ok(hi[static_cast<size_t>(r)], name);
      await_ok(hf[static_cast<size_t>(r)], name);
      std::vector<int32_t> ei;
      std::vector<float> ef;
      for (int64_t i = start * cols; i < (start + mine) * cols; ++i) {
        int32_t si = 0;
        double sf = 0;
        for (int q = 0; q < n; ++q) {
          si += gval<int32_t>(q, i, 0);
          sf += gval<float>(q, i, 1);
        }
        ei.push_back(si);
        ef.push_back(static_cast<float>(sf * 2.0 / n * 0.5));
      }
      INFO(name << " rank " << r);
      REQUIRE(hi[static_cast<size_t>(r)].output().shape == std::vector<int64_t>{mine, cols});
      REQUIRE(output_of<int32_t>(hi[static_cast<size_t>(r)]) == ei);
      auto got = output_of<float>(hf[static_cast<size_t>(r)]);
      REQUIRE(got.size() == ef.size());
      for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(ef[i]));
      start += mine;
    }
  }
}

TEST_CASE("grouped allgather and reducescatter complete every member together", "[local]") {
  const int n = 2;
  Cluster c(n);
  c.start_all();
  std::vector<std::vector<Tensor<float>>> t(n);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 3; ++k) {
      t[static_cast<size_t>(r)].emplace_back(
          std::vector<float>(static_cast<size_t>(2 * (k + r)), float(10 * r + k)));
    }
  }
  std::vector<Handle> hs;
  auto opts = [](OpType op, int k, int r) {
    Opts o;
    o.op = op;
    o.group = op == OpType::kAllgather ? "gag" : "grs";
    o.group_size = 3;
    o.shape = std::vector<int64_t>{static_cast<int64_t>(k + r), 2};
    return o;
  };
  // Rank 0 submits all three allgather members; rank 1 holds back the last one for a while.
  for (int k = 0; k < 3; ++k) {
    hs.push_back(submit(c[0], "gag." + std::to_string(k), t[0][static_cast<size_t>(k)],
                        opts(OpType::kAllgather, k, 0)));
  }
  for (int k = 0; k < 2; ++k) {
    hs.push_back(submit(c[1], "gag." + std::to_string(k), t[1][static_cast<size_t>(k)],
                        opts(OpType::kAllgather, k, 1)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (auto& h : hs) REQUIRE_FALSE(h.poll());
  hs.push_back(submit(c[1], "gag.2", t[1][2], opts(OpType::kAllgather, 2, 1)));
  for (auto& h : hs) await_ok(h, "grouped allgather");
  for (int k = 0; k < 3; ++k) {
    std::vector<float> expect(static_cast<size_t>(2 * k), float(k));
    expect.insert(expect.end(), static_cast<size_t>(2 * (k + 1)), float(10 + k));
    REQUIRE(output_of<float>(hs[static_cast<size_t>(k)]) == expect);
  }

  // grouped reducescatter: every member reduced and sliced.
  std::vector<Tensor<float>> rs;
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 3; ++k) rs.emplace_back(std::vector<float>(4, float(r + k)));
  }
  std::vector<Handle> hr;
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 3; ++k) {
      Opts o = opts(OpType::kReducescatter, 0, 2);
      hr.push_back(submit(c[r], "grs." + std::to_string(k), rs[static_cast<size_t>(r * 3 + k)], o));
    }
  }
  for (size_t i = 0; i < hr.size(); ++i) {
    await_ok(hr[i], "grouped reducescatter");
    const int k = static_cast<int>(i % 3);
    REQUIRE(output_of<float>(hr[i]) == std::vector<float>(2, float(1 + 2 * k)));
  }
}
