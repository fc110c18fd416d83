// SPDX-License-Identifier: Apache-2.0
// [local] allreduce and broadcast through N runtimes: values, ordering, fusion.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

// Rank r's value at index i of tensor k, distinct across ranks, tensors and indexes.
float fval(int r, int k, size_t i) { return static_cast<float>(r * 100 + k * 10) + 0.5f * i; }
int32_t ival(int r, int k, size_t i) {
  return (r % 2 ? -1 : 1) * (r * 7 + k * 3 + static_cast<int32_t>(i));
}

}  // namespace

TEST_CASE("allreduce Sum/Average/Min/Max of float32 and int32 across 3 ranks", "[local]") {
  const int n = 3;
  const size_t len = 5;
  Cluster c(n);
  c.start_all();
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};
  for (ReduceOp op : ops) {
    const std::string tag = reduce_op_name(op);
    std::vector<Tensor<float>> f;
    std::vector<Tensor<int32_t>> ints;
    for (int r = 0; r < n; ++r) {
      std::vector<float> fv;
      std::vector<int32_t> iv;
      for (size_t i = 0; i < len; ++i) {
        fv.push_back(fval(r, 1, i));
        iv.push_back(ival(r, 2, i));
      }
      f.emplace_back(fv);
      ints.emplace_back(iv);
    }
    std::vector<Handle> hs;
    for (int r = 0; r < n; ++r) {
      Opts o;
      o.reduce = op;
      hs.push_back(submit(c[r], "f." + tag, f[static_cast<size_t>(r)], o));
      hs.push_back(submit(c[r], "i." + tag, ints[static_cast<size_t>(r)], o));
    }
    for (auto& h : hs) await_ok(h, tag);
    for (size_t i = 0; i < len; ++i) {
      // Independent expectation, computed from the generators.
      double fs = 0, fmin = 1e30, fmax = -1e30;
      int64_t is = 0, imin = INT32_MAX, imax = INT32_MIN;
      for (int r = 0; r < n; ++r) {
        fs += fval(r, 1, i);
        fmin = std::min<double>(fmin, fval(r, 1, i));
        fmax = std::max<double>(fmax, fval(r, 1, i));
        is += ival(r, 2, i);
        imin = std::min<int64_t>(imin, ival(r, 2, i));
        imax = std::max<int64_t>(imax, ival(r, 2, i));
      }
      double fe = op == ReduceOp::kSum       ? fs
                  : op == ReduceOp::kAverage ? fs / n
                  : op == ReduceOp::kMin     ? fmin
                                             : fmax;
      int64_t ie = op == ReduceOp::kSum       ? is
                   : op == ReduceOp::kAverage ? is / n
                   : op == ReduceOp::kMin     ? imin
                                              : imax;
      for (int r = 0; r < n; ++r) {
        INFO(tag << " rank " << r << " index " << i);
        REQUIRE(f[static_cast<size_t>(r)].out[i] == Approx(fe));
        REQUIRE(ints[static_cast<size_t>(r)].out[i] == ie);
      }
    }
  }
}

TEST_CASE("allreduce applies the negotiated prescale and postscale", "[local]") {
  Cluster c(2);
  c.start_all();
  Tensor<double> a({1.0, 2.0}), b({3.0, 4.0});
  Opts o;
  o.prescale = 0.5;
  o.postscale = 10.0;
  for (int round = 0; round < 2; ++round) {  // the second round comes from the cache
    run_both(c, "scaled", a, b, o);
    REQUIRE(a.out == std::vector<double>{20.0, 30.0});  // 10 * (0.5*1 + 0.5*3), ...
    REQUIRE(b.out == a.out);
    a.out.assign(2, 0.0);
    b.out.assign(2, 0.0);
  }
}

TEST_CASE("integer allreduce applies prescale and postscale as the MPI executor does", "[local]") {
  // As ops::scale_in_place: integers scaled through double and truncated; an Average divides
  // by the ranks (integer division when the factor is 1 / an integer).
  Cluster c(2);
  c.start_all();
  Tensor<int32_t> a({1, 5}), b({2, 7});
  Opts o;
  o.prescale = 2.0;
  o.postscale = 3.0;
  run_both(c, "iscaled", a, b, o);
  REQUIRE(a.out == std::vector<int32_t>{18, 72});  // 3 * (2*1 + 2*2), 3 * (2*5 + 2*7)
  REQUIRE(b.out == a.out);
  Tensor<int64_t> x({4, 9}), y({8, 3});
  Opts avg;
  avg.reduce = ReduceOp::kAverage;
  avg.prescale = 0.5;
  avg.postscale = 2.0;
  run_both(c, "iscaled.avg", x, y, avg);
  REQUIRE(x.out == std::vector<int64_t>{6, 5});  // (2 + 4) * 2 / 2, (int(4.5)=4 + 1) * 2 / 2
  REQUIRE(y.out == x.out);
}

TEST_CASE("out-of-order submission across ranks completes with correct values", "[local]") {
  const int n = 3;
  Cluster c(n);
  c.start_all();
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  std::vector<std::vector<Tensor<float>>> t(n);
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      t[static_cast<size_t>(r)].emplace_back(
          std::vector<float>{fval(r, static_cast<int>(k), 0), fval(r, static_cast<int>(k), 1)});
    }
  }
  // Rank 0 submits a,b,c,d; rank 1 d,c,b,a; rank 2 b,d,a,c. Each rank waits for nothing
  // between submissions, so every rank's first request is one the others submit last.
  const std::vector<std::vector<size_t>> order = {{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}};
  std::vector<Handle> hs;
  for (int r = 0; r < n; ++r) {
    for (size_t k : order[static_cast<size_t>(r)]) {
      hs.push_back(submit(c[r], names[k], t[static_cast<size_t>(r)][k]));
    }
  }
  for (auto& h : hs) await_ok(h, "out-of-order allreduce");
  for (size_t k = 0; k < names.size(); ++k) {
    for (size_t i = 0; i < 2; ++i) {
      float expect = 0;
      for (int r = 0; r < n; ++r) expect += fval(r, static_cast<int>(k), i);
      for (int r = 0; r < n; ++r) {
        INFO("tensor " << names[k] << " rank " << r);
        REQUIRE(t[static_cast<size_t>(r)][k].out[i] == expect);
      }
    }
  }
  // Every rank executed the same batches in the same order.
  for (int r = 1; r < n; ++r) {
    REQUIRE(c.executors[static_cast<size_t>(r)]->batches() == c.executors[0]->batches());
  }
}

TEST_CASE("ready small allreduces are fused into one execution", "[local]") {
  Cluster c(2);
  std::vector<std::vector<Tensor<float>>> t(2);
  std::vector<Handle> hs;
  // Submitted before start(): the first round sees all four on both ranks.
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 4; ++k) {
      t[static_cast<size_t>(r)].emplace_back(std::vector<float>(3, fval(r, k, 0)));
    }
    for (int k = 0; k < 4; ++k) {
      hs.push_back(
          submit(c[r], "g" + std::to_string(k), t[static_cast<size_t>(r)][static_cast<size_t>(k)]));
    }
  }
  c.start_all();
  for (auto& h : hs) await_ok(h, "fused allreduce");
  for (int k = 0; k < 4; ++k) {
    float expect = fval(0, k, 0) + fval(1, k, 0);
    for (int r = 0; r < 2; ++r) {
      REQUIRE(t[static_cast<size_t>(r)][static_cast<size_t>(k)].out ==
              std::vector<float>(3, expect));
    }
  }
  using Batches = std::vector<std::vector<std::string>>;
  REQUIRE(c.executors[0]->batches() == Batches{{"g0", "g1", "g2", "g3"}});
  REQUIRE(c[0].stats().fused_batches == 1);
}

TEST_CASE("fusion threshold 0 runs every tensor on its own", "[local]") {
  Config cfg;
  cfg.fusion_threshold = 0;
  Cluster c(2, cfg);
  std::vector<Tensor<int32_t>> t;
  for (int i = 0; i < 6; ++i) t.emplace_back(std::vector<int32_t>{i});
  std::vector<Handle> hs;
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) {
      hs.push_back(submit(c[r], "t" + std::to_string(k), t[static_cast<size_t>(r * 3 + k)]));
    }
  }
  c.start_all();
  for (auto& h : hs) await_ok(h, "unfused allreduce");
  for (int k = 0; k < 3; ++k) REQUIRE(t[static_cast<size_t>(k)].out[0] == k + (3 + k));
  using Batches = std::vector<std::vector<std::string>>;
  REQUIRE(c.executors[1]->batches() == Batches{{"t0"}, {"t1"}, {"t2"}});
}

TEST_CASE("broadcast copies the root's tensor to every rank", "[local]") {
  const int n = 3;
  Cluster c(n);
  c.start_all();
  for (int root = 0; root < n; ++root) {
    for (int round = 0; round < 2; ++round) {  // fresh, then through the cache
      std::vector<Tensor<int64_t>> t;
      for (int r = 0; r < n; ++r) t.emplace_back(std::vector<int64_t>{r * 1000LL, -r * 1LL, 7});
      Opts o;
      o.op = OpType::kBroadcast;
      o.root = root;
      std::vector<Handle> hs;
      const std::string name = "bcast.root" + std::to_string(root);
      for (int r = 0; r < n; ++r) hs.push_back(submit(c[r], name, t[static_cast<size_t>(r)], o));
      for (auto& h : hs) await_ok(h, name);
      for (int r = 0; r < n; ++r) {
        INFO("root " << root << " rank " << r << " round " << round);
        REQUIRE(t[static_cast<size_t>(r)].out ==
                std::vector<int64_t>{root * 1000LL, -root * 1LL, 7});
      }
    }
  }
}

TEST_CASE("many rounds of mixed traffic stay consistent", "[local]") {
  const int n = 4;
  Cluster c(n);
  c.start_all();
  for (int iter = 0; iter < 30; ++iter) {
    const int count = 1 + iter % 5;
    std::vector<std::vector<Tensor<int32_t>>> t(n);
    std::vector<Handle> hs;
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < count; ++k) {
        t[static_cast<size_t>(r)].emplace_back(
            std::vector<int32_t>(static_cast<size_t>(1 + k), ival(r, k + iter, 0)));
      }
      for (int j = 0; j < count; ++j) {
        // A rotation, reversed on odd ranks: a different order per rank and iteration.
        int k = (r % 2 ? count - 1 - j : j + r + iter) % count;
        hs.push_back(submit(c[r], "mix" + std::to_string(k),
                            t[static_cast<size_t>(r)][static_cast<size_t>(k)]));
      }
    }
    for (auto& h : hs) await_ok(h, "iteration " + std::to_string(iter));
    for (int k = 0; k < count; ++k) {
      int32_t expect = 0;
      for (int r = 0; r < n; ++r) expect += ival(r, k + iter, 0);
      for (int r = 0; r < n; ++r) {
        INFO("iteration " << iter << " tensor " << k << " rank " << r);
        REQUIRE(t[static_cast<size_t>(r)][static_cast<size_t>(k)].out ==
                std::vector<int32_t>(static_cast<size_t>(1 + k), expect));
      }
    }
  }
}
