// SPDX-License-Identifier: Apache-2.0
// [mpi] DistributedOptimizer with op kAdasum against a reference written here: each rank steps a
// copy of the model with plain libtorch on its own data, the ranks' deltas are gathered
// (hvd::allgather) and combined with the recursive Adasum rule implemented below in double, and
// the copy's parameters become old + that combination. Also: backward_passes_per_step, a
// learning rate that diverges with Sum and converges with Adasum, and the refusals.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "hvd/torch.h"

// libtorch pulls in glog, whose CHECK macro would shadow Catch's: include Catch last.
#undef CHECK
#include "hvd_catch.h"

using hvd::test::Contains;
namespace optim = torch::optim;

namespace {

using Vec = std::vector<double>;

/// Adasum of two vectors: (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b.
Vec adasum_pair(const Vec& a, const Vec& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double ca = aa > 0 ? 1.0 - dot / (2.0 * aa) : 1.0;
  const double cb = bb > 0 ? 1.0 - dot / (2.0 * bb) : 1.0;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

/// The recursive rule over the ranks' vectors in rank order (a power-of-two count): ranks 2i and
/// 2i+1 first, then neighbouring pairs of results, and so on.
Vec adasum_reference(std::vector<Vec> level) {
  while (level.size() > 1) {
    std::vector<Vec> next;
    for (size_t i = 0; i < level.size(); i += 2)
      next.push_back(adasum_pair(level[i], level[i + 1]));
    level = std::move(next);
  }
  return level.front();
}

/// Every rank's value of `t` (flattened, as double), in rank order.
std::vector<Vec> gathered(const torch::Tensor& t, const std::string& name) {
  torch::Tensor all =
      hvd::allgather(t.detach().reshape({1, -1}).contiguous(), name).to(torch::kDouble);
  std::vector<Vec> out;
  for (int64_t r = 0; r < all.size(0); ++r) {
    torch::Tensor row = all[r].contiguous();
    out.emplace_back(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
  }
  return out;
}

torch::nn::Sequential mlp() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(4, 6), torch::nn::Tanh(), torch::nn::Linear(6, 2));
}

/// This rank's batch `k` of a regression task.
std::pair<torch::Tensor, torch::Tensor> batch(int k) {
  torch::manual_seed(100 * k + hvd::rank());
  return {torch::randn({4, 4}), torch::randn({4, 2})};
}

/// One step of the reference: the local step of `opt` on the summed gradients of `batches`,
/// then each parameter = old + the Adasum of the ranks' deltas.
void reference_step(torch::nn::Sequential& ref, optim::Optimizer& opt,
                    const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches,
                    const std::string& tag) {
  std::vector<torch::Tensor> old;
  for (const auto& p : ref->parameters()) old.push_back(p.detach().clone());
  opt.zero_grad();
  for (const auto& [x, y] : batches) torch::mse_loss(ref->forward(x), y).backward();
  opt.step();
  torch::NoGradGuard no_grad;
  auto params = ref->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    Vec c = adasum_reference(gathered(params[i] - old[i], tag + "." + std::to_string(i)));
    torch::Tensor delta = torch::tensor(c, torch::kDouble).reshape(params[i].sizes());
    params[i].copy_(old[i] + delta.to(params[i].scalar_type()));
  }
}

void require_close(torch::nn::Sequential& a, torch::nn::Sequential& b, double tol) {
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double diff = (pa[i].value() - pb[i].value()).abs().max().item<double>();
    INFO("rank " << hvd::rank() << ", parameter " << pa[i].key() << ": max difference " << diff);
    CHECK(diff <= tol);
  }
}

hvd::DistributedOptimizerOptions adasum() {
  return hvd::DistributedOptimizerOptions().op(hvd::ReduceOp::kAdasum);
}

}  // namespace

TEST_CASE("Adasum: two SGD steps equal local steps combined by the reference rule", "[mpi]") {
  for (double momentum : {0.0, 0.9}) {
    auto model = mlp(), ref = mlp();
    optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(momentum));
    optim::SGD ref_sgd(ref->parameters(), optim::SGDOptions(0.1).momentum(momentum));
    hvd::DistributedOptimizer opt(sgd, model->named_parameters(), adasum());
    for (int k = 0; k < 2; ++k) {
      auto [x, y] = batch(k);
      opt.zero_grad();
      torch::mse_loss(model->forward(x), y).backward();
      opt.step();
      reference_step(ref, ref_sgd, {{x, y}}, "ref.sgd." + std::to_string(k));
      INFO("momentum " << momentum << ", step " << k);
      require_close(model, ref, 1e-6);
    }
  }
}

TEST_CASE("Adasum: Adam steps locally and its deltas are combined", "[mpi]") {
  auto model = mlp(), ref = mlp();
  optim::Adam adam(model->parameters(), optim::AdamOptions(0.01));
  optim::Adam ref_adam(ref->parameters(), optim::AdamOptions(0.01));
  hvd::DistributedOptimizer opt(adam, model->named_parameters(), adasum());
  for (int k = 0; k < 2; ++k) {
    auto [x, y] = batch(10 + k);
    opt.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt.step();
    reference_step(ref, ref_adam, {{x, y}}, "ref.adam." + std::to_string(k));
    require_close(model, ref, 1e-6);
  }
}

TEST_CASE("Adasum: backward_passes_per_step 2 steps once on the summed gradients", "[mpi]") {
  auto model = mlp(), ref = mlp();
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.5));
  optim::SGD ref_sgd(ref->parameters(), optim::SGDOptions(0.1).momentum(0.5));
  hvd::DistributedOptimizer opt(sgd, model->named_parameters(),
                                adasum().backward_passes_per_step(2));
  for (int k = 0; k < 2; ++k) {
    std::vector<std::pair<torch::Tensor, torch::Tensor>> batches = {batch(20 + 2 * k),
                                                                    batch(21 + 2 * k)};
    opt.zero_grad();
    for (const auto& [x, y] : batches) torch::mse_loss(model->forward(x), y).backward();
    opt.step();
    reference_step(ref, ref_sgd, batches, "ref.bpps." + std::to_string(k));
    require_close(model, ref, 1e-6);
  }
}

TEST_CASE("Adasum: each param group keeps its own hyperparameters", "[mpi]") {
  auto make = [](torch::nn::Sequential& m) {
    std::vector<optim::OptimizerParamGroup> groups;
    groups.emplace_back(m[0]->parameters());
    groups.emplace_back(m[2]->parameters(),
                        std::make_unique<optim::SGDOptions>(optim::SGDOptions(0.02).momentum(0.9)));
    return std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions(0.1));
  };
  auto model = mlp(), ref = mlp();
  auto sgd = make(model), ref_sgd = make(ref);
  hvd::DistributedOptimizer opt(*sgd, model->named_parameters(), adasum());
  for (int k = 0; k < 2; ++k) {
    auto [x, y] = batch(60 + k);
    opt.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt.step();
    reference_step(ref, *ref_sgd, {{x, y}}, "ref.groups." + std::to_string(k));
    require_close(model, ref, 1e-6);
  }
}

TEST_CASE("Adasum: fp16 compression sends the delta as 16-bit floats", "[mpi]") {
  auto model = mlp(), ref = mlp();
  optim::SGD sgd(model->parameters(), 0.1);
  optim::SGD ref_sgd(ref->parameters(), 0.1);
  hvd::DistributedOptimizer opt(sgd, model->named_parameters(),
                                adasum().compression(hvd::Compression::kFp16));
  auto [x, y] = batch(50);
  opt.zero_grad();
  torch::mse_loss(model->forward(x), y).backward();
  opt.step();
  reference_step(ref, ref_sgd, {{x, y}}, "ref.fp16");
  require_close(model, ref, 2e-3);
}

TEST_CASE("Adasum: parameters keep their value until step(); misuse is refused", "[mpi]") {
  auto model = mlp();
  optim::SGD sgd(model->parameters(), 0.5);
  hvd::DistributedOptimizer opt(sgd, model->named_parameters(), adasum());
  CHECK_THAT(opt.parameter_names().front(), Catch::Matchers::StartsWith("adasum.0.weight"));
  CHECK_THROWS_WITH(opt.skip_synchronize(), Contains("skip_synchronize() is not supported"));
  std::vector<torch::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
  auto [x, y] = batch(30);
  opt.zero_grad();
  torch::mse_loss(model->forward(x), y).backward();
  auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(params[i], before[i]));
  if (hvd::size() > 1) {
    CHECK_THROWS_WITH(torch::mse_loss(model->forward(x), y).backward(),
                      Contains("more than backward_passes_per_step (1) times"));
    CHECK_THROWS_WITH(opt.zero_grad(), Contains("call step() first"));
  }
  opt.step();
  bool moved = false;
  for (size_t i = 0; i < params.size(); ++i) moved = moved || !torch::equal(params[i], before[i]);
  CHECK(moved);
  opt.zero_grad();
}

namespace {

/// A noiseless linear regression shard of rank r: y = x w_true.
std::pair<torch::Tensor, torch::Tensor> regression(int r) {
  torch::manual_seed(500 + r);
  torch::Tensor x = torch::randn({64, 8});
  return {x, x.matmul(torch::linspace(-1.0, 1.0, 8).reshape({8, 1}))};
}

double full_loss(const torch::Tensor& w) {
  double sum = 0;
  for (int r = 0; r < hvd::size(); ++r) {
    auto [x, y] = regression(r);
    sum += torch::mse_loss(x.matmul(w.t()), y).item<double>();
  }
  return sum / hvd::size();
}

torch::Tensor train_regression(hvd::ReduceOp op, double lr, bool distributed = true) {
  torch::nn::Linear lin(torch::nn::LinearOptions(8, 1).bias(false));
  {
    torch::NoGradGuard no_grad;
    lin->weight.zero_();
  }
  optim::SGD sgd(lin->parameters(), lr);
  std::unique_ptr<hvd::DistributedOptimizer> opt;
  if (distributed) {
    opt = std::make_unique<hvd::DistributedOptimizer>(sgd, lin->named_parameters(),
                                                      hvd::DistributedOptimizerOptions().op(op));
  }
  auto [x, y] = regression(hvd::rank());
  for (int k = 0; k < 30; ++k) {
    sgd.zero_grad();
    torch::mse_loss(lin->forward(x), y).backward();
    if (opt) {
      opt->step();
    } else {
      sgd.step();
    }
  }
  return lin->weight.detach().clone();
}

}  // namespace

TEST_CASE("Adasum: a learning rate that diverges with Sum converges with Adasum", "[mpi]") {
  // lr * curvature < 2 converges on one shard; Sum over n ranks multiplies the step by about n.
  double curvature = 0;
  for (int r = 0; r < hvd::size(); ++r) {
    torch::Tensor x = regression(r).first;
    torch::Tensor h = 2.0 * x.t().matmul(x) / x.size(0);
    curvature = std::max(curvature, std::get<0>(torch::linalg_eigh(h)).max().item<double>());
  }
  const double lr = 1.2 / curvature;
  const double start = full_loss(torch::zeros({1, 8}));
  torch::Tensor w = train_regression(hvd::ReduceOp::kAdasum, lr);
  if (hvd::size() == 1) {
    CHECK(torch::equal(w, train_regression(hvd::ReduceOp::kSum, lr, false)));
    return;
  }
  const double with_adasum = full_loss(w);
  const double with_sum = full_loss(train_regression(hvd::ReduceOp::kSum, lr));
  INFO("rank " << hvd::rank() << ": loss from " << start << ": Adasum " << with_adasum << ", Sum "
               << with_sum);
  CHECK(std::isfinite(with_adasum));
  CHECK(with_adasum < 1e-3 * start);
  CHECK((!std::isfinite(with_sum) || with_sum > start));
}

TEST_CASE("Adasum: a process set that is not a power of two is refused on every rank",
          "[mpi][multirank]") {
  if (hvd::size() < 3) {
    WARN("skipped: needs a process set of 3 ranks; this run has " << hvd::size());
    return;
  }
  hvd::ProcessSet ps = hvd::add_process_set({0, 1, 2});
  {
    auto model = mlp();
    optim::SGD sgd(model->parameters(), 0.1);
    CHECK_THROWS_WITH(
        hvd::DistributedOptimizer(sgd, model->named_parameters(), adasum().process_set(ps)),
        Contains("power-of-two number of ranks") && Contains("it has 3 (ranks 0, 1, 2)"));
  }
  hvd::remove_process_set(ps);
}

TEST_CASE("Adasum: a process set of ranks 1 and 3 combines their steps, the others step alone",
          "[mpi][multirank]") {
  if (hvd::size() < 4) {
    WARN("skipped: needs 4 ranks; this run has " << hvd::size());
    return;
  }
  hvd::ProcessSet ps = hvd::add_process_set({1, 3});
  {
    auto model = mlp(), ref = mlp();
    optim::SGD sgd(model->parameters(), 0.1);
    optim::SGD ref_sgd(ref->parameters(), 0.1);
    hvd::DistributedOptimizer opt(sgd, model->named_parameters(), adasum().process_set(ps));
    auto [x, y] = batch(40);
    opt.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt.step();
    std::vector<torch::Tensor> old;
    for (const auto& p : ref->parameters()) old.push_back(p.detach().clone());
    ref_sgd.zero_grad();
    torch::mse_loss(ref->forward(x), y).backward();
    ref_sgd.step();
    torch::NoGradGuard no_grad;
    auto params = ref->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      auto deltas = gathered(params[i] - old[i], "ref.set." + std::to_string(i));
      if (hvd::rank() == 1 || hvd::rank() == 3) {
        Vec c = adasum_reference({deltas[1], deltas[3]});
        params[i].copy_(old[i] + torch::tensor(c, torch::kDouble)
                                     .reshape(params[i].sizes())
                                     .to(params[i].scalar_type()));
      }
    }
    require_close(model, ref, 1e-6);
  }
  hvd::remove_process_set(ps);
}

TEST_CASE("Adasum: wire names do not depend on which optimizers a rank keeps alive", "[mpi]") {
  // An old optimizer alive on rank 0 only (held by a logger, say), destroyed on the others: the
  // new one over the same names gets the same wire names on every rank (names are given out in
  // registration order, never reused) and its step completes.
  auto model = mlp();
  optim::SGD old_sgd(model->parameters(), 0.1);
  std::optional<hvd::DistributedOptimizer> old;
  old.emplace(old_sgd, model->named_parameters(), adasum());
  if (hvd::rank() != 0) old.reset();
  auto fresh = mlp();
  optim::SGD sgd(fresh->parameters(), 0.1);
  hvd::DistributedOptimizer opt(sgd, fresh->named_parameters(), adasum());
  std::string joined;
  for (const auto& n : opt.parameter_names()) joined += n + "|";
  INFO("rank " << hvd::rank() << ": " << joined);
  auto codes = torch::zeros({256}, torch::kInt64);
  for (size_t i = 0; i < joined.size() && i < 256; ++i) codes[static_cast<int64_t>(i)] = joined[i];
  auto lo = hvd::allreduce(codes, "test.adasum.wires.min", hvd::ReduceOp::kMin);
  auto hi = hvd::allreduce(codes, "test.adasum.wires.max", hvd::ReduceOp::kMax);
  REQUIRE(torch::equal(lo, codes));
  REQUIRE(torch::equal(hi, codes));
  auto [x, y] = batch(40);
  opt.zero_grad();
  torch::mse_loss(fresh->forward(x), y).backward();
  opt.step();
  for (const auto& p : fresh->parameters()) CHECK(std::isfinite(p.sum().item<double>()));
  old.reset();
}
