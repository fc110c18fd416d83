// SPDX-License-Identifier: Apache-2.0
// mnist_mlp: data-parallel training of a small MLP classifier on synthetic MNIST-shaped data.
//
//   mpirun -np 2 build/examples/mnist_mlp [epochs]
//
// Each rank starts from different random weights; broadcast_parameters and
// broadcast_optimizer_state make them identical, DistributedRandomSampler gives each rank its
// share of every epoch, and DistributedOptimizer averages gradients during backward.
#include <cstdio>
#include <cstdlib>

#include "hvd/torch.h"
#include "models.h"

int main(int argc, char** argv) {
  hvd::init();
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 3;
  const int64_t batch_size = 32;
  torch::manual_seed(42 + hvd::rank());  // deliberately different: the broadcast fixes it

  hvd_examples::SyntheticMnist dataset(2048);
  const size_t n = *dataset.size();
  hvd_examples::MnistMlp model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::broadcast_parameters(*model, 0);
  hvd::broadcast_optimizer_state(sgd, 0);
  hvd::DistributedOptimizer optimizer(sgd, model->named_parameters());

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    torch::data::samplers::DistributedRandomSampler sampler(n, hvd::size(), hvd::rank());
    sampler.set_epoch(epoch);
    auto loader = torch::data::make_data_loader(
        dataset.map(torch::data::transforms::Stack<>()), std::move(sampler),
        torch::data::DataLoaderOptions().batch_size(batch_size));
    double loss_sum = 0;
    int64_t batches = 0;
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      torch::Tensor loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    torch::Tensor mean_loss =
        hvd::allreduce(torch::tensor(loss_sum / static_cast<double>(batches)), "epoch_loss");
    torch::NoGradGuard no_grad;
    const double accuracy = model->forward(dataset.images())
                                .argmax(1)
                                .eq(dataset.labels())
                                .to(torch::kDouble)
                                .mean()
                                .item<double>();
    if (hvd::rank() == 0) {
      std::printf("epoch %d  loss %.4f  accuracy %.3f  (%d ranks, %lld batches each)\n", epoch,
                  mean_loss.item<double>(), accuracy, hvd::size(), static_cast<long long>(batches));
      std::fflush(stdout);
    }
  }
  hvd::shutdown();
  return 0;
}
