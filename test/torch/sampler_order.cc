// SPDX-License-Identifier: Apache-2.0
// Prints hvd::elastic::Sampler's indices for test/torch/sampler_order_test.py, which compares
// them with Python's hvd.elastic.ElasticSampler. Each argument is one case
// "N,SEED,EPOCH,BEFORE,BATCHES,BATCH,AFTER": a sampler over N samples (shuffled, SEED) at epoch
// EPOCH in a world of BEFORE ranks records its first BATCHES batches of BATCH samples, then is
// re-partitioned over AFTER ranks. Per case: one line per rank of AFTER (its indices), then
// "--".
//
//   hvd_sampler_order CASE...
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "hvd/optim/elastic_sampler.h"

int main(int argc, char** argv) {
  for (int c = 1; c < argc; ++c) {
    std::vector<int64_t> v;
    std::istringstream in(argv[c]);
    for (std::string w; std::getline(in, w, ',');) v.push_back(std::stoll(w));
    if (v.size() != 7) {
      std::fprintf(stderr, "usage: hvd_sampler_order N,SEED,EPOCH,BEFORE,BATCHES,BATCH,AFTER...\n");
      return 2;
    }
    hvd::elastic::Sampler s(v[0], /*shuffle=*/true, static_cast<uint64_t>(v[1]));
    s.set_epoch(v[2]);
    s.reset(static_cast<int>(v[3]), 0);
    for (int64_t b = 0; b < v[4]; ++b) s.record_batch(b, v[5]);
    for (int r = 0; r < static_cast<int>(v[6]); ++r) {
      s.reset(static_cast<int>(v[6]), r);
      std::string line;
      for (int64_t i : s.indices()) line += (line.empty() ? "" : " ") + std::to_string(i);
      std::printf("%s\n", line.c_str());
    }
    std::printf("--\n");
  }
  return 0;
}
