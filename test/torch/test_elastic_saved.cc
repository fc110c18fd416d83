// SPDX-License-Identifier: Apache-2.0
// [mpi] hvd::elastic::TorchState's saved form with each optimizer libtorch ships (SGD, Adam,
// AdamW, Adagrad, RMSprop: saved field by field) and one saved as its archive (a subclass): a
// restore in memory, a second restore after training on, and a snapshot payload loaded by a
// fresh TorchState (the next generation) all continue exactly as training without the detour.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "hvd/torch.h"

// libtorch pulls in glog, whose CHECK macro would shadow Catch's: include Catch last.
#undef CHECK
#include "hvd_catch.h"

using hvd::test::Contains;

namespace {

namespace optim = torch::optim;

// An optimizer TorchState does not know field by field (a subclass may keep more state).
struct MySGD : optim::SGD {
  using optim::SGD::SGD;
};

struct Net {
  torch::nn::Linear model{nullptr};
  std::unique_ptr<optim::Optimizer> opt;
  Net(const std::string& kind, int seed) {
    torch::manual_seed(seed);
    model = torch::nn::Linear(3, 2);
    model->to(torch::kFloat64);
    auto params = model->parameters();
    if (kind == "sgd") {
      opt =
          std::make_unique<optim::SGD>(params, optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
    } else if (kind == "adam") {
      opt = std::make_unique<optim::Adam>(params, optim::AdamOptions(0.01).amsgrad(true));
    } else if (kind == "adamw") {
      opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions(0.01));
    } else if (kind == "adagrad") {
      opt = std::make_unique<optim::Adagrad>(params, optim::AdagradOptions(0.1));
    } else if (kind == "rmsprop") {
      opt = std::make_unique<optim::RMSprop>(
          params, optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
    } else {
      opt = std::make_unique<MySGD>(params, optim::SGDOptions(0.1).momentum(0.5));
    }
  }
  void step(double x) {
    opt->step([&] {
      opt->zero_grad();
      torch::Tensor loss = model->forward(torch::full({4, 3}, x, torch::kFloat64)).pow(2).sum();
      loss.backward();
      return loss;
    });
  }
  void set_lr(double lr) {
    for (auto& group : opt->param_groups()) group.options().set_lr(lr);
  }
  bool same_params(const Net& other) const {
    const auto a = model->parameters(), b = other.model->parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      if (!torch::equal(a[i], b[i])) return false;
    }
    return true;
  }
};

}  // namespace

TEST_CASE(
    "TorchState restores each libtorch optimizer's state and options, in memory and from "
    "its snapshot payload",
    "[mpi]") {
  const std::string kind = GENERATE("sgd", "adam", "adamw", "adagrad", "rmsprop", "subclass");
  INFO("optimizer " << kind);
  Net ref(kind, 7);  // the training without a detour: steps 1, 2, 3, 4
  for (double x : {1.0, 2.0, 3.0, 4.0}) ref.step(x);

  Net net(kind, 7);
  hvd::elastic::TorchState state(net.model, *net.opt);
  net.step(1.0);
  net.step(2.0);
  state.commit();  // not in elastic mode: memory only (and the host-update check)
  const std::string payload = state.saved_bytes();
  net.step(5.0);
  net.set_lr(123.0);  // options are restored too
  REQUIRE_FALSE(net.same_params(ref));
  state.restore();
  net.step(3.0);
  net.step(4.0);
  CHECK(net.same_params(ref));
  // Training after the restore changed the optimizer's state in place; the commit is intact.
  state.restore();
  net.step(3.0);
  net.step(4.0);
  CHECK(net.same_params(ref));
  // A commit after that reuses the saved tensors and still restores its own values.
  state.restore();
  net.step(3.0);
  state.commit();
  net.step(9.0);
  state.restore();
  net.step(4.0);
  CHECK(net.same_params(ref));

  // The next generation: another instance loads the payload and goes on from it.
  Net next(kind, 99);
  hvd::elastic::TorchState resumed(next.model, *next.opt);
  resumed.load_saved_bytes(payload);
  resumed.restore();
  next.step(3.0);
  next.step(4.0);
  CHECK(next.same_params(ref));
}

TEST_CASE("a TorchState payload of another optimizer, cut short or foreign is an error saying so",
          "[mpi]") {
  Net sgd("sgd", 1);
  sgd.step(1.0);
  hvd::elastic::TorchState saved(sgd.model, *sgd.opt);
  const std::string payload = saved.saved_bytes();

  Net adam("adam", 1);
  hvd::elastic::TorchState other(adam.model, *adam.opt);
  other.load_saved_bytes(payload);
  CHECK_THROWS_WITH(other.restore(), Contains("not the committed one's kind (adam)"));
  CHECK_THROWS_WITH(other.load_saved_bytes(payload.substr(0, payload.size() / 2)),
                    Contains("truncated"));
  CHECK_THROWS_WITH(other.load_saved_bytes("PK\x03\x04 a zip archive"),
                    Contains("not a TorchState of this hvd version"));
}
