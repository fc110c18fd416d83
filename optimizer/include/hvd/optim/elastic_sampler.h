// SPDX-License-Identifier: Apache-2.0
// hvd::elastic::Sampler: the C++ counterpart of hvd.elastic.ElasticSampler. It hands each rank
// its share of an epoch's sample indices and remembers which samples the epoch has processed,
// so that a job resumed (possibly with another world size) goes on with the remaining samples
// only, re-partitioned over the ranks it has now: every sample once per epoch, plus the
// repeats that give every rank the same number of samples.
//
//   hvd::elastic::Sampler sampler(dataset_size, /*shuffle=*/true, /*seed=*/0);
//   hvd::elastic::TorchState state(model, optimizer, &sampler);   // saved at every commit
//   for (int64_t b = 0; b * kBatch < sampler.size(); ++b) {
//     auto idx = sampler.get_indices(b, kBatch);  ... train on idx ...
//     sampler.record_batch(b, kBatch);             // batch b of every rank is done
//   }
//   sampler.set_epoch(epoch + 1);
//
// record_batch(b, n) records batch b of *every* rank (the partition is deterministic), so one
// rank's committed state knows the whole job's progress. The shuffle is libtorch's randperm
// with a CPU generator seeded seed + epoch, as Python's hvd.elastic.ElasticSampler (and
// PyTorch's DistributedSampler) do: the same seed, epoch and world give the same indices in a
// libtorch and a Python program (test/torch/sampler_order_test.py).
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace hvd::elastic {

class Sampler {
 public:
  /// Samples 0 .. dataset_size-1. The partition uses hvd::size()/hvd::rank() when hvd is
  /// initialized (a single rank otherwise), taken at construction, set_epoch() and reset().
  explicit Sampler(int64_t dataset_size, bool shuffle = true, uint64_t seed = 0);

  /// Starts epoch `epoch`: nothing processed yet, a new shuffle.
  void set_epoch(int64_t epoch);
  /// Marks batch `batch_idx` (of `batch_size` samples per rank) of every rank processed.
  void record_batch(int64_t batch_idx, int64_t batch_size);
  /// Marks these sample indices processed.
  void record_indices(const std::vector<int64_t>& indices);
  /// This rank's sample indices of batch `batch_idx` (the last batch may be shorter).
  std::vector<int64_t> get_indices(int64_t batch_idx, int64_t batch_size) const;
  /// Re-partitions this epoch's unprocessed samples over the current ranks.
  void reset();
  /// Same as reset() for `num_replicas` ranks as rank `rank` (for tests and planning).
  void reset(int num_replicas, int rank);

  /// This rank's indices for the rest of the epoch, in order.
  const std::vector<int64_t>& indices() const { return indices_; }
  /// How many samples this rank gets in the rest of the epoch (Python's len(sampler)).
  int64_t size() const { return static_cast<int64_t>(indices_.size()); }
  int64_t epoch() const { return epoch_; }
  const std::set<int64_t>& processed() const { return processed_; }
  /// Restores (epoch, processed indices) as saved by a TorchState, then reset().
  void load(int64_t epoch, const std::vector<int64_t>& processed);

 private:
  int64_t dataset_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  std::set<int64_t> processed_;
  int num_replicas_ = 1;
  std::vector<int64_t> world_indices_;  // padded; rank r takes r, r + R, r + 2R, ...
  std::vector<int64_t> indices_;
};

}  // namespace hvd::elastic
