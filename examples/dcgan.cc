// SPDX-License-Identifier: Apache-2.0
// dcgan: a small DCGAN (the shape of PyTorch's C++ DCGAN example, 16x16 images) trained
// data-parallel with two DistributedOptimizers, one for the generator and one for the
// discriminator, on synthetic images (soft diagonal stripes with a random phase).
//
//   mpirun -np 2 build/examples/dcgan [epochs]
//
// Written as plain libtorch: both models name their parameters "net.0.weight", ... and each
// optimizer gets its model's own named_parameters() (hvd makes the names unique on the wire);
// the discriminator takes two backward passes per step (real, then fake batch) and its
// gradients accumulate as in one process; the generator's loss back-propagates through the
// discriminator too, whose gradients its next zero_grad() discards. No prefixes, no
// backward_passes_per_step, no freezing.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "hvd/torch.h"

namespace {

constexpr int64_t kLatent = 16;

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : net(register_module(
            "net",
            torch::nn::Sequential(
                torch::nn::ConvTranspose2d(
                    torch::nn::ConvTranspose2dOptions(kLatent, 32, 4).bias(false)),
                torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                torch::nn::ConvTranspose2d(
                    torch::nn::ConvTranspose2dOptions(32, 16, 4).stride(2).padding(1).bias(false)),
                torch::nn::BatchNorm2d(16), torch::nn::ReLU(),
                torch::nn::ConvTranspose2d(
                    torch::nn::ConvTranspose2dOptions(16, 1, 4).stride(2).padding(1).bias(false)),
                torch::nn::Tanh()))) {}
  torch::Tensor forward(const torch::Tensor& z) { return net->forward(z); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Generator);

struct DiscriminatorImpl : torch::nn::Module {
  DiscriminatorImpl()
      : net(register_module(
            "net", torch::nn::Sequential(
                       torch::nn::Conv2d(
                           torch::nn::Conv2dOptions(1, 16, 4).stride(2).padding(1).bias(false)),
                       torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                       torch::nn::Conv2d(
                           torch::nn::Conv2dOptions(16, 32, 4).stride(2).padding(1).bias(false)),
                       torch::nn::BatchNorm2d(32),
                       torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                       torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 4).bias(false)),
                       torch::nn::Sigmoid()))) {}
  torch::Tensor forward(const torch::Tensor& x) { return net->forward(x).reshape({-1}); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Discriminator);

/// n deterministic 1x16x16 images in [-1, 1]: diagonal stripes with a random phase.
torch::Tensor stripes(int64_t n) {
  auto gen = at::detail::createCPUGenerator(2024);
  torch::Tensor phase = at::rand({n, 1, 1, 1}, gen) * 2 * M_PI;
  torch::Tensor ramp = torch::arange(16, torch::kFloat);
  torch::Tensor diag = (ramp.reshape({1, 1, 16, 1}) + ramp.reshape({1, 1, 1, 16})) * 0.6;
  return torch::sin(diag + phase);
}

}  // namespace

int main(int argc, char** argv) {
  hvd::init();
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 3;
  const int64_t batch_size = 32;
  torch::manual_seed(1 + hvd::rank());  // noise differs per rank; weights are broadcast

  torch::Tensor images = stripes(1024);
  Generator generator;
  Discriminator discriminator;
  hvd::broadcast_parameters(*generator, 0);
  hvd::broadcast_parameters(*discriminator, 0);
  torch::optim::Adam g_adam(generator->parameters(),
                            torch::optim::AdamOptions(2e-3).betas({0.5, 0.999}));
  torch::optim::Adam d_adam(discriminator->parameters(),
                            torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));
  hvd::broadcast_optimizer_state(g_adam, 0);
  hvd::broadcast_optimizer_state(d_adam, 0);
  hvd::DistributedOptimizer g_opt(g_adam, generator->named_parameters());
  hvd::DistributedOptimizer d_opt(d_adam, discriminator->named_parameters());

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    torch::data::samplers::DistributedRandomSampler sampler(images.size(0), hvd::size(),
                                                            hvd::rank());
    sampler.set_epoch(epoch);
    double d_sum = 0, g_sum = 0;
    int64_t batches = 0;
    while (auto idx = sampler.next(batch_size)) {
      std::vector<int64_t> rows(idx->begin(), idx->end());
      torch::Tensor real = images.index_select(0, torch::tensor(rows));
      const int64_t b = real.size(0);

      // Discriminator: real batch (labels smoothed to 0.9), then generated batch.
      d_opt.zero_grad();
      torch::Tensor d_real =
          torch::binary_cross_entropy(discriminator->forward(real), torch::full({b}, 0.9));
      d_real.backward();
      torch::Tensor fake = generator->forward(torch::randn({b, kLatent, 1, 1}));
      torch::Tensor d_fake =
          torch::binary_cross_entropy(discriminator->forward(fake.detach()), torch::zeros({b}));
      d_fake.backward();
      d_opt.step();

      // Generator: make the discriminator call its samples real.
      g_opt.zero_grad();
      torch::Tensor g_loss =
          torch::binary_cross_entropy(discriminator->forward(fake), torch::ones({b}));
      g_loss.backward();
      g_opt.step();

      d_sum += (d_real + d_fake).item<double>();
      g_sum += g_loss.item<double>();
      ++batches;
    }
    torch::Tensor means = hvd::allreduce(
        torch::tensor({d_sum / static_cast<double>(batches), g_sum / static_cast<double>(batches)}),
        "epoch_losses");
    if (hvd::rank() == 0) {
      std::printf("epoch %d  loss_D %.4f  loss_G %.4f  (%d ranks)\n", epoch,
                  means[0].item<double>(), means[1].item<double>(), hvd::size());
      std::fflush(stdout);
    }
  }
  hvd::shutdown();
  return 0;
}
