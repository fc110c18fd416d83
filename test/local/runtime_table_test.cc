// SPDX-License-Identifier: Apache-2.0
// [local] the tensor table: a slot per name reused between collectives, idle slots dropped when
// the table is full, stale response-cache hints.
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::test;

namespace {

// `names` on every rank at once (rank r contributes r + 1 + i for element i), then checked.
void sum_batch(Cluster& c, const std::vector<std::string>& names, size_t len) {
  const int n = c.size();
  std::vector<std::vector<Tensor<int32_t>>> t(static_cast<size_t>(n));
  std::vector<Handle> hs;
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      std::vector<int32_t> v(len);
      for (size_t i = 0; i < len; ++i) v[i] = r + 1 + static_cast<int32_t>(i + k);
      t[static_cast<size_t>(r)].emplace_back(v);
    }
  }
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      hs.push_back(submit(c[r], names[k], t[static_cast<size_t>(r)][k]));
    }
  }
  for (auto& h : hs) await_ok(h, "batch");
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < names.size(); ++k) {
      for (size_t i = 0; i < len; ++i) {
        const int32_t want = n * (n + 1) / 2 + n * static_cast<int32_t>(i + k);
        if (t[static_cast<size_t>(r)][k].out[i] != want) {
          FAIL(names[k] << " element " << i << " on rank " << r << ": "
                        << t[static_cast<size_t>(r)][k].out[i] << " != " << want);
        }
      }
    }
  }
}

std::vector<std::string> numbered(const std::string& prefix, int from, int count) {
  std::vector<std::string> out;
  for (int i = from; i < from + count; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

}  // namespace

TEST_CASE("a name's slot serves later collectives of other shapes, dtypes and ops", "[local]") {
  Cluster c(2);
  c.start_all();
  sum_batch(c, {"w"}, 4);
  sum_batch(c, {"w"}, 4);   // cached
  sum_batch(c, {"w"}, 40);  // new shape: renegotiated in the same slot
  Tensor<float> f0({1.5f, 2.5f}), f1({0.5f, 0.5f});
  run_both(c, "w", f0, f1);
  REQUIRE(f0.out == std::vector<float>{2.0f, 3.0f});
  Opts b;
  b.op = OpType::kBroadcast;
  b.root = 1;
  Tensor<int32_t> b0({0, 0, 0}), b1({7, 8, 9});
  run_both(c, "w", b0, b1, b);
  REQUIRE(b0.out == std::vector<int32_t>{7, 8, 9});
  sum_batch(c, {"w"}, 4);
}

TEST_CASE("more names than the table keeps: idle slots are dropped, nothing is lost", "[local]") {
  Cluster c(2);
  c.start_all();
  // 9,000 distinct names (the table keeps 8,192) in batches, then the first names again.
  for (int from = 0; from < 9000; from += 1500) sum_batch(c, numbered("n.", from, 1500), 3);
  sum_batch(c, numbered("n.", 0, 100), 3);
}

TEST_CASE("stale cache hints after evictions still find the right entries", "[local]") {
  Config cfg;
  cfg.cache_capacity = 3;  // five names cycling through three bits
  Cluster c(3, cfg);
  c.start_all();
  for (int round = 0; round < 4; ++round) {
    for (int k = 0; k < 5; ++k)
      sum_batch(c, {"h." + std::to_string(k)}, 2 + static_cast<size_t>(k));
    sum_batch(c, numbered("h.", 0, 5), 2);  // renegotiated: the shapes changed
  }
}
