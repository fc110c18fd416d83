// SPDX-License-Identifier: Apache-2.0
// hvd::elastic::Sampler (hvd/optim/elastic_sampler.h).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

#include "hvd/hvd.h"
#include "hvd/optim/elastic_sampler.h"

namespace hvd::elastic {

Sampler::Sampler(int64_t dataset_size, bool shuffle, uint64_t seed)
    : dataset_size_(dataset_size), shuffle_(shuffle), seed_(seed) {
  reset();
}

void Sampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  processed_.clear();
  reset();
}

void Sampler::record_batch(int64_t batch_idx, int64_t batch_size) {
  const int64_t per_rank = static_cast<int64_t>(world_indices_.size()) / num_replicas_;
  const int64_t begin = batch_idx * batch_size;
  const int64_t end = std::min(begin + batch_size, per_rank);
  for (int r = 0; r < num_replicas_; ++r) {
    for (int64_t i = begin; i < end; ++i) {
      processed_.insert(world_indices_[static_cast<size_t>(r + i * num_replicas_)]);
    }
  }
}

void Sampler::record_indices(const std::vector<int64_t>& indices) {
  processed_.insert(indices.begin(), indices.end());
}

std::vector<int64_t> Sampler::get_indices(int64_t batch_idx, int64_t batch_size) const {
  const int64_t n = size();
  const int64_t begin = std::min(batch_idx * batch_size, n);
  const int64_t end = std::min(begin + batch_size, n);
  return {indices_.begin() + begin, indices_.begin() + end};
}

void Sampler::reset() {
  const bool init = hvd::is_initialized();
  reset(init ? hvd::size() : 1, init ? hvd::rank() : 0);
}

void Sampler::reset(int num_replicas, int rank) {
  num_replicas_ = num_replicas;
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  if (shuffle_) {
    const torch::Tensor perm = torch::randperm(
        dataset_size_, at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_)),
        torch::kLong);
    std::copy_n(perm.data_ptr<int64_t>(), dataset_size_, order.begin());
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order[static_cast<size_t>(i)] = i;
  }
  std::vector<int64_t> remaining;
  for (int64_t i : order) {
    if (!processed_.count(i)) remaining.push_back(i);
  }
  const size_t per_rank = (remaining.size() + static_cast<size_t>(num_replicas) - 1) /
                          static_cast<size_t>(num_replicas);
  const size_t total = per_rank * static_cast<size_t>(num_replicas);
  world_indices_ = remaining;
  for (size_t i = 0; world_indices_.size() < total; ++i) {
    world_indices_.push_back(remaining[i % remaining.size()]);
  }
  indices_.clear();
  for (size_t i = static_cast<size_t>(rank); i < total; i += static_cast<size_t>(num_replicas)) {
    indices_.push_back(world_indices_[i]);
  }
}

void Sampler::load(int64_t epoch, const std::vector<int64_t>& processed) {
  epoch_ = epoch;
  processed_ = std::set<int64_t>(processed.begin(), processed.end());
  reset();
}

}  // namespace hvd::elastic
