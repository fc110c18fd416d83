// SPDX-License-Identifier: Apache-2.0
// Models and deterministic synthetic data shared by the examples and test/torch (header-only).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

namespace hvd_examples {

/// MNIST-shaped synthetic classification data: images of 1x28x28 pixels, labels from a fixed
/// random linear "teacher", so the task is learnable. Sample i is the same on every rank and run.
class SyntheticMnist : public torch::data::datasets::Dataset<SyntheticMnist> {
 public:
  explicit SyntheticMnist(int64_t size, uint64_t seed = 1234) {
    auto gen = at::detail::createCPUGenerator(seed);
    images_ = at::randn({size, 1, 28, 28}, gen);
    teacher_ = at::randn({28 * 28, 10}, gen);
    labels_ = images_.reshape({size, 28 * 28}).matmul(teacher_).argmax(1);
  }
  torch::data::Example<> get(size_t i) override {
    const auto k = static_cast<int64_t>(i);
    return {images_[k], labels_[k]};
  }
  torch::optional<size_t> size() const override { return images_.size(0); }
  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& labels() const { return labels_; }

 private:
  torch::Tensor images_, labels_, teacher_;
};

/// A small MLP classifier: 784 -> 128 -> 64 -> 10.
struct MnistMlpImpl : torch::nn::Module {
  MnistMlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 64))),
        fc3(register_module("fc3", torch::nn::Linear(64, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x.reshape({x.size(0), 28 * 28});
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);  // logits
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(MnistMlp);

/// One encoder shared by three decoders (A, B, C), each reconstructing its own view of the
/// input. Optimizers 1 and 2 both hold the encoder.
struct SharedAutoencoderImpl : torch::nn::Module {
  static torch::nn::Sequential mlp(int64_t in, int64_t hidden, int64_t out) {
    return torch::nn::Sequential(torch::nn::Linear(in, hidden), torch::nn::Tanh(),
                                 torch::nn::Linear(hidden, out));
  }
  explicit SharedAutoencoderImpl(int64_t dim = 32, int64_t code = 8)
      : encoder(register_module("encoder", mlp(dim, 24, code))),
        dec_a(register_module("dec_a", mlp(code, 24, dim))),
        dec_b(register_module("dec_b", mlp(code, 24, dim))),
        dec_c(register_module("dec_c", mlp(code, 24, dim))) {}
  /// Sum of the three reconstruction losses (A: x, B: reversed x, C: x squared).
  torch::Tensor loss(const torch::Tensor& x) {
    torch::Tensor z = encoder->forward(x);
    return torch::mse_loss(dec_a->forward(z), x) + torch::mse_loss(dec_b->forward(z), x.flip(1)) +
           torch::mse_loss(dec_c->forward(z), x * x);
  }
  torch::nn::Sequential encoder, dec_a, dec_b, dec_c;
};
TORCH_MODULE(SharedAutoencoder);

/// `n` deterministic samples of dimension `dim` lying near an 8-dimensional subspace.
inline torch::Tensor autoencoder_data(int64_t n, int64_t dim = 32, uint64_t seed = 99) {
  auto gen = at::detail::createCPUGenerator(seed);
  torch::Tensor basis = at::randn({8, dim}, gen) / 3.0;
  return at::randn({n, 8}, gen).matmul(basis) + 0.01 * at::randn({n, dim}, gen);
}

/// Rows [rank*n/size, (rank+1)*n/size) of `batch`: this rank's share of a global batch.
inline torch::Tensor shard(const torch::Tensor& batch, int rank, int size) {
  const int64_t n = batch.size(0) / size;
  return batch.narrow(0, rank * n, n);
}

}  // namespace hvd_examples
