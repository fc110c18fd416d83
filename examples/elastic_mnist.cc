// SPDX-License-Identifier: Apache-2.0
// elastic_mnist: the MNIST MLP of mnist_mlp.cc as an elastic job (hvd::elastic, the C++
// counterpart of hvd.torch.elastic): under hvdrun --min-np, a failed rank ends the generation
// and the next one resumes from the last commit.
//
//   hvdrun -np 2 --min-np 2 build/examples/elastic_mnist [epochs] [--check]
//
// The model, the optimizer's state, the sampler's progress and the epoch live in a TorchState;
// hvd::elastic::run syncs them from rank 0 at the start (or restores the newest commit). The
// epoch's samples come from an hvd::elastic::Sampler, which remembers what was processed, so a
// resumed epoch goes on with the remaining samples. --check: exit 1 unless the last epoch's loss
// is below 1.0 (chance: 2.30) and every rank ends with rank 0's weights.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "hvd/torch.h"
#include "models.h"

int main(int argc, char** argv) {
  hvd::init();
  const int epochs = argc > 1 && argv[1][0] != '-' ? std::atoi(argv[1]) : 3;
  const bool check = argc > 1 && std::strcmp(argv[argc - 1], "--check") == 0;
  constexpr int64_t kBatch = 32, kBatchesPerCommit = 10;
  torch::manual_seed(42 + hvd::rank());  // deliberately different: the state's sync fixes it

  hvd_examples::SyntheticMnist dataset(2048);
  hvd_examples::MnistMlp model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::DistributedOptimizer optimizer(sgd, model->named_parameters());

  hvd::elastic::Sampler sampler(static_cast<int64_t>(*dataset.size()), /*shuffle=*/true, 42);
  hvd::elastic::TorchState state(model, sgd, &sampler);
  int64_t& epoch = state.field<int64_t>("epoch", 1);
  state.register_reset_callbacks({[&] {
    if (hvd::rank() == 0) std::printf("resumed at epoch %lld\n", static_cast<long long>(epoch));
  }});

  std::vector<double> losses;
  hvd::elastic::run(state, [&](hvd::elastic::TorchState& s) {
    for (; epoch <= epochs; ++epoch, sampler.set_epoch(epoch), s.commit()) {
      double loss_sum = 0;
      int64_t batches = 0;
      for (int64_t b = 0; b * kBatch < sampler.size(); ++b) {
        const std::vector<int64_t> idx = sampler.get_indices(b, kBatch);
        const torch::Tensor rows = torch::tensor(idx, torch::kLong);
        optimizer.zero_grad();
        torch::Tensor loss =
            torch::cross_entropy_loss(model->forward(dataset.images().index_select(0, rows)),
                                      dataset.labels().index_select(0, rows));
        loss.backward();
        optimizer.step();
        loss_sum += loss.item<double>();
        ++batches;
        sampler.record_batch(b, kBatch);
        if ((b + 1) % kBatchesPerCommit == 0) s.commit();
      }
      const double mean_loss =
          hvd::allreduce(
              torch::tensor(loss_sum / static_cast<double>(std::max<int64_t>(batches, 1))),
              "epoch_loss")
              .item<double>();
      losses.push_back(mean_loss);
      if (hvd::rank() == 0) {
        std::printf("epoch %lld  loss %.4f  (%d ranks, %lld batches each)\n",
                    static_cast<long long>(epoch), mean_loss, hvd::size(),
                    static_cast<long long>(batches));
        std::fflush(stdout);
      }
    }
  });

  int status = 0;
  if (check) {
    std::vector<torch::Tensor> flat;
    for (const auto& p : model->parameters()) flat.push_back(p.detach().flatten());
    const torch::Tensor mine = torch::cat(flat);
    const torch::Tensor ref = hvd::broadcast(mine, 0, "check.weights");
    const bool same = torch::equal(mine, ref);
    // Chance level is ln(10) = 2.30; after a restart `losses` holds this generation's epochs.
    const bool learned = !losses.empty() && losses.back() < 1.0;
    if (!same || !learned) {
      std::printf("rank %d: check failed: weights equal to rank 0: %d, last loss %.4f\n",
                  hvd::rank(), same, losses.empty() ? 0.0 : losses.back());
      status = 1;
    }
  }
  hvd::shutdown();
  return status;
}
