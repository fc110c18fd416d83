// SPDX-License-Identifier: Apache-2.0
// hvd::elastic::Sampler's partitions (hvd/optim/elastic_sampler.h): every sample once per epoch,
// the remaining samples after a resize, a deterministic reshuffle per epoch.
#include <map>
#include <set>
#include <vector>

#include "hvd/optim/elastic_sampler.h"
#include "hvd_catch.h"

using namespace hvd::elastic;

namespace {

// Every rank's indices of the rest of the epoch, for a world of n ranks.
std::vector<std::vector<int64_t>> partition(Sampler s, int n) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < n; ++r) {
    s.reset(n, r);
    out.push_back(s.indices());
  }
  return out;
}

}  // namespace

TEST_CASE("the sampler gives every sample once per epoch, padded to equal shares", "[unit]") {
  for (int n : {1, 2, 3, 4}) {
    Sampler s(10, /*shuffle=*/true, /*seed=*/5);
    const auto parts = partition(s, n);
    std::map<int64_t, int> seen;
    for (const auto& p : parts) {
      CHECK(p.size() == static_cast<size_t>((10 + n - 1) / n));
      for (int64_t i : p) ++seen[i];
    }
    CHECK(seen.size() == 10);
    int total = 0;
    for (const auto& [i, count] : seen) total += count;
    CHECK(total == ((10 + n - 1) / n) * n);  // the repeats are the padding
  }
  Sampler plain(6, /*shuffle=*/false);
  plain.reset(2, 1);
  CHECK(plain.indices() == std::vector<int64_t>{1, 3, 5});
}

TEST_CASE("after recorded batches a resized world gets exactly the remaining samples", "[unit]") {
  Sampler s(24, /*shuffle=*/true, /*seed=*/1);
  s.set_epoch(3);
  s.reset(4, 0);
  const std::vector<int64_t> first_epoch_order = s.indices();
  std::set<int64_t> done;
  for (int r = 0; r < 4; ++r) {  // batches 0 and 1 (2 samples each) of every rank
    s.reset(4, r);
    for (int b = 0; b < 2; ++b) {
      for (int64_t i : s.get_indices(b, 2)) done.insert(i);
    }
  }
  s.reset(4, 0);
  s.record_batch(0, 2);
  s.record_batch(1, 2);
  CHECK(s.processed() == done);
  CHECK(done.size() == 16);
  // The job resumes on 3 ranks: together they get the 8 other samples, each once.
  Sampler resumed(24, true, 1);
  resumed.load(3, std::vector<int64_t>(done.begin(), done.end()));
  std::set<int64_t> rest;
  for (const auto& p : partition(resumed, 3)) {
    CHECK(p.size() == 3);  // 8 over 3 ranks: 3 each, one repeat
    for (int64_t i : p) {
      CHECK_FALSE(done.count(i));
      rest.insert(i);
    }
  }
  CHECK(rest.size() == 8);
  // A new epoch reshuffles (seed + epoch), deterministically.
  resumed.set_epoch(4);
  Sampler again(24, true, 1);
  again.set_epoch(4);
  resumed.reset(4, 0);
  again.reset(4, 0);
  CHECK(resumed.indices() == again.indices());
  CHECK(resumed.indices() != first_epoch_order);
}
