// SPDX-License-Identifier: Apache-2.0
// autoencoder_shared: one encoder, three decoders (A, B, C), three optimizers — optimizers 1
// and 2 both hold the encoder. Written the natural way: every DistributedOptimizer gets the
// model's own parameter names and steps on its own; the shared encoder is reduced once per
// backward pass and both optimizers apply the same averaged gradient. (In Horovod this needs
// distinct name prefixes plus synchronize()/skip_synchronize() on the optimizers.)
//
//   mpirun -np 2 build/examples/autoencoder_shared [epochs]
#include <cstdio>
#include <cstdlib>

#include "hvd/torch.h"
#include "models.h"

int main(int argc, char** argv) {
  hvd::init();
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 5;
  const int64_t batch_size = 32;
  torch::manual_seed(7);

  torch::Tensor data = hvd_examples::autoencoder_data(1024);
  hvd_examples::SharedAutoencoder model;
  hvd::broadcast_parameters(*model, 0);
  auto params = [](std::initializer_list<torch::nn::Module*> ms) {
    std::vector<torch::Tensor> out;
    for (auto* m : ms) {
      for (auto& p : m->parameters()) out.push_back(p);
    }
    return out;
  };
  torch::nn::Module* encoder = model->encoder.ptr().get();
  torch::optim::SGD opt_a(params({encoder, model->dec_a.ptr().get()}),
                          torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::Adam opt_b(params({encoder, model->dec_b.ptr().get()}),
                           torch::optim::AdamOptions(1e-3));
  torch::optim::SGD opt_c(params({model->dec_c.ptr().get()}), torch::optim::SGDOptions(0.05));
  const auto names = model->named_parameters();
  hvd::DistributedOptimizer d_a(opt_a, names), d_b(opt_b, names), d_c(opt_c, names);

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    torch::data::samplers::DistributedRandomSampler sampler(data.size(0), hvd::size(), hvd::rank());
    sampler.set_epoch(epoch);
    double loss_sum = 0;
    int64_t batches = 0;
    while (auto idx = sampler.next(batch_size)) {
      std::vector<int64_t> rows(idx->begin(), idx->end());
      torch::Tensor x = data.index_select(0, torch::tensor(rows));
      d_a.zero_grad();
      d_b.zero_grad();
      d_c.zero_grad();
      torch::Tensor loss = model->loss(x);
      loss.backward();
      d_a.step();
      d_b.step();
      d_c.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    torch::Tensor mean =
        hvd::allreduce(torch::tensor(loss_sum / static_cast<double>(batches)), "epoch_loss");
    if (hvd::rank() == 0) {
      std::printf("epoch %d  reconstruction loss (A+B+C) %.5f  (%d ranks)\n", epoch,
                  mean.item<double>(), hvd::size());
      std::fflush(stdout);
    }
  }
  hvd::shutdown();
  return 0;
}
