// SPDX-License-Identifier: Apache-2.0
// The libtorch API from an installed hvd: three SGD steps of a linear model through
// hvd::DistributedOptimizer, each rank on its own shard, must give exactly the weights of the
// same model trained in one process on every rank's data (which each rank builds itself).
// Prints "OK rank R of N" on success.
#include <torch/torch.h>

#include <cstdio>

#include "hvd/torch.h"

namespace {
torch::Tensor shard_x(int r) { return torch::arange(8, torch::kFloat32).reshape({2, 4}) + r; }
torch::Tensor shard_y(int r) { return torch::full({2, 1}, 0.5 * r + 1.0); }
}  // namespace

int main() {
  hvd::init();
  const int rank = hvd::rank();
  const int size = hvd::size();
  torch::manual_seed(100 + rank);  // different initial weights on every rank
  torch::nn::Linear model(4, 1);
  hvd::broadcast_parameters(*model, 0);
  torch::nn::Linear reference(4, 1);
  {
    torch::NoGradGuard no_grad;
    reference->weight.copy_(model->weight);
    reference->bias.copy_(model->bias);
  }
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  hvd::DistributedOptimizer opt(sgd, model->named_parameters());
  torch::optim::SGD ref_sgd(reference->parameters(), torch::optim::SGDOptions(0.01));

  std::vector<torch::Tensor> xs, ys;
  for (int r = 0; r < size; ++r) {
    xs.push_back(shard_x(r));
    ys.push_back(shard_y(r));
  }
  const torch::Tensor all_x = torch::cat(xs), all_y = torch::cat(ys);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    torch::mse_loss(model->forward(shard_x(rank)), shard_y(rank)).backward();
    opt.step();
    ref_sgd.zero_grad();
    torch::mse_loss(reference->forward(all_x), all_y).backward();
    ref_sgd.step();
  }
  const double diff = (model->weight - reference->weight).abs().max().item<double>();
  if (!(diff < 1e-5)) {
    std::fprintf(stderr, "rank %d: weights differ from the one-process reference by %g\n", rank,
                 diff);
    return 1;
  }
  std::printf("OK rank %d of %d (max difference %g)\n", rank, size, diff);
  hvd::shutdown();
  return 0;
}
