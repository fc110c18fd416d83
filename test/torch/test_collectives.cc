// SPDX-License-Identifier: Apache-2.0
// [mpi] collectives on torch::Tensor, broadcast_parameters / broadcast_object, and
// broadcast_optimizer_state round trips for every libtorch optimizer.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>

#include "hvd/torch.h"
#include "models.h"
#include "watchdog.h"

// libtorch pulls in glog, whose CHECK macro would shadow Catch's: include Catch last.
#undef CHECK
#include "hvd_catch.h"

using hvd::test::Contains;

namespace {

torch::Tensor ranked(c10::ScalarType t) {
  return torch::full({3, 4}, hvd::rank() + 1, torch::TensorOptions().dtype(t));
}
double mean_rank_plus_one() { return (hvd::size() + 1) / 2.0; }
double sum_rank_plus_one() { return hvd::size() * (hvd::size() + 1) / 2.0; }

}  // namespace

TEST_CASE("torch allreduce averages out of place and in place", "[mpi]") {
  torch::Tensor t = ranked(torch::kFloat);
  torch::Tensor out = hvd::allreduce(t, "t.avg");
  CHECK(torch::allclose(out, torch::full({3, 4}, mean_rank_plus_one())));
  CHECK(torch::equal(t, ranked(torch::kFloat)));  // input untouched
  hvd::allreduce_(t, "t.avg.inplace");
  CHECK(torch::allclose(t, torch::full({3, 4}, mean_rank_plus_one())));
}

TEST_CASE("torch allreduce maps every reducible dtype", "[mpi]") {
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kInt,
                  torch::kLong, torch::kShort, torch::kChar, torch::kByte}) {
    INFO("dtype " << c10::toString(dt));
    torch::Tensor out =
        hvd::allreduce(ranked(dt), std::string("dt.") + c10::toString(dt), hvd::ReduceOp::kSum);
    CHECK(out.scalar_type() == dt);
    CHECK(torch::allclose(out.to(torch::kDouble),
                          torch::full({3, 4}, sum_rank_plus_one(), torch::kDouble)));
  }
}

TEST_CASE("torch broadcast moves bool and float tensors from the root", "[mpi]") {
  const int root = hvd::size() - 1;
  torch::Tensor b = torch::full({5}, hvd::rank() == root, torch::kBool);
  hvd::broadcast_(b, root, "b.bool");
  CHECK(b.all().item<bool>());
  torch::Tensor f = ranked(torch::kFloat);
  torch::Tensor g = hvd::broadcast(f, root, "b.float");
  CHECK(torch::equal(g, torch::full({3, 4}, root + 1, torch::kFloat)));
  CHECK(torch::equal(f, ranked(torch::kFloat)));
}

TEST_CASE("torch allreduce works on non-contiguous tensors in place", "[mpi]") {
  torch::Tensor base = ranked(torch::kFloat).t();  // [4, 3], not contiguous
  REQUIRE_FALSE(base.is_contiguous());
  auto h = hvd::allreduce_async_(base, "noncontig", hvd::ReduceOp::kSum);
  torch::Tensor r = hvd::synchronize(h);
  CHECK(r.is_same(base));
  CHECK(torch::allclose(base, torch::full({4, 3}, sum_rank_plus_one())));
}

TEST_CASE("torch async handle keeps its tensors alive", "[mpi]") {
  hvd::TorchHandle h;
  {
    torch::Tensor tmp = ranked(torch::kDouble) * 2;
    h = hvd::allreduce_async(tmp, "alive", hvd::ReduceOp::kSum);
  }  // the caller's tensor is gone; the handle still holds input and output
  torch::Tensor out = h.wait();
  CHECK(torch::allclose(out, torch::full({3, 4}, 2 * sum_rank_plus_one(), torch::kDouble)));
  CHECK(h.poll());
}

TEST_CASE("torch grouped allreduce reduces tensors of several dtypes together", "[mpi]") {
  std::vector<torch::Tensor> ts = {ranked(torch::kFloat), ranked(torch::kDouble).reshape({12}),
                                   ranked(torch::kLong)};
  auto outs = hvd::grouped_allreduce(ts, "grouped", hvd::ReduceOp::kSum);
  REQUIRE(outs.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(outs[i].sizes() == ts[i].sizes());
    CHECK(torch::allclose(outs[i].to(torch::kDouble),
                          torch::full_like(outs[i], sum_rank_plus_one(), torch::kDouble)));
  }
  hvd::grouped_allreduce_(ts, "grouped.inplace");
  CHECK(torch::allclose(ts[0], torch::full({3, 4}, mean_rank_plus_one())));
}

TEST_CASE("torch adapters reject what hvd cannot move", "[mpi]") {
  torch::Tensor c = torch::zeros({2}, torch::kComplexFloat);
  CHECK_THROWS_WITH(hvd::allreduce(c, "complex"), Contains("complex") && Contains("not supported"));
  CHECK_THROWS_WITH(hvd::optim::to_view(ranked(torch::kFloat).t(), "w"),
                    Contains("w") && Contains("contiguous"));
  CHECK_THROWS_WITH(hvd::allreduce(torch::ones({2}, torch::kBool), "boolsum"), Contains("bool"));
  CHECK(hvd::optim::to_hvd_dtype(torch::kBFloat16) == hvd::DataType::kBFloat16);
  CHECK(hvd::optim::to_torch_dtype(hvd::DataType::kFloat16) == torch::kHalf);
}

namespace {

/// Runs `wrong` on the last rank and `right` on the others: every rank's call must fail within
/// 2 s, the others' naming the last rank and `reason`.
void torch_one_rank_wrong(const char* label, const std::function<void()>& right,
                          const std::function<void()>& wrong, const std::string& reason) {
  const int r = hvd::rank(), last = hvd::size() - 1;
  std::string err;
  const auto t0 = std::chrono::steady_clock::now();
  {
    Watchdog dog(label, 20);
    try {
      (r == last ? wrong : right)();
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  INFO(label << " on rank " << r << ": " << err);
  CHECK_THAT(err, Contains(reason));
  if (r != last) CHECK_THAT(err, Contains("refused on rank " + std::to_string(last)));
  CHECK(ms < 2000);
  auto slowest = hvd::allreduce(torch::tensor({ms}, torch::kDouble), "", hvd::ReduceOp::kMax);
  if (r == 0) {
    std::printf("[torch %s] np %d: every rank failed within %.1f ms\n", label, hvd::size(),
                slowest.item<double>());
  }
}

}  // namespace

TEST_CASE("a bad torch tensor on one rank fails every rank's call at once", "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);  // [multirank]: np = 1 runs exclude it
  const torch::Tensor good = torch::ones({4});
  const torch::Tensor complex = torch::zeros({4}, torch::kComplexFloat);
  const torch::Tensor sparse = torch::ones({4}).to_sparse();
  const torch::Tensor meta = torch::empty({4}, torch::TensorOptions().device(torch::kMeta));
  const torch::Tensor undefined;
  for (const std::string name : {"bad.x", ""}) {  // named and automatic names
    torch_one_rank_wrong(
        "complex allreduce", [&] { hvd::optim::allreduce(good, name); },
        [&] { hvd::optim::allreduce(complex, name); }, "ComplexFloat");
    torch_one_rank_wrong(
        "sparse allreduce_", [&] { hvd::optim::allreduce_(good.clone(), name); },
        [&] { hvd::optim::allreduce_(sparse, name); }, "sparse");
    torch_one_rank_wrong(
        "undefined broadcast", [&] { hvd::optim::broadcast(good, 0, name); },
        [&] { hvd::optim::broadcast(undefined, 0, name); }, "undefined");
    torch_one_rank_wrong(
        "meta allgather", [&] { hvd::optim::allgather(good, name); },
        [&] { hvd::optim::allgather(meta, name); }, "meta");
    torch_one_rank_wrong(
        "complex grouped member",
        [&] {
          hvd::optim::grouped_allreduce({good, good}, name);
        },
        [&] {
          hvd::optim::grouped_allreduce({good, complex}, name);
        },
        "tensor 1: torch dtype ComplexFloat");
    torch_one_rank_wrong(
        "empty allgather group", [&] { hvd::optim::grouped_allgather({good}, name); },
        [&] { hvd::optim::grouped_allgather(std::vector<torch::Tensor>{}, name); },
        "an empty list of tensors");
    torch_one_rank_wrong(
        "empty reducescatter group", [&] { hvd::optim::grouped_reducescatter({good}, name); },
        [&] { hvd::optim::grouped_reducescatter(std::vector<torch::Tensor>{}, name); },
        "an empty list of tensors");
    torch_one_rank_wrong(
        "sparse alltoall", [&] { hvd::optim::alltoall(good, std::vector<int64_t>{}, name); },
        [&] { hvd::optim::alltoall(sparse, std::vector<int64_t>{}, name); }, "sparse");
    torch_one_rank_wrong(
        "meta reducescatter", [&] { hvd::optim::reducescatter(good, name); },
        [&] { hvd::optim::reducescatter(meta, name); }, "meta");
  }
  auto sum = hvd::optim::allreduce(torch::ones({2}), "bad.after", hvd::ReduceOp::kSum);
  CHECK(sum[0].item<float>() == hvd::size());  // the job goes on
}

TEST_CASE("broadcast_parameters gives every rank the root's module", "[mpi]") {
  torch::manual_seed(100 + hvd::rank());  // different initialisation per rank
  hvd_examples::MnistMlp model;
  hvd::broadcast_parameters(*model, 0);
  for (const auto& p : model->named_parameters()) {
    torch::Tensor max = hvd::allreduce(p.value(), "chk.max." + p.key(), hvd::ReduceOp::kMax);
    torch::Tensor min = hvd::allreduce(p.value(), "chk.min." + p.key(), hvd::ReduceOp::kMin);
    INFO(p.key());
    CHECK(torch::equal(max, min));
  }
  CHECK(model->fc1->weight.requires_grad());
}

namespace {
struct Pod {
  int32_t a;
  double b;
};
}  // namespace

TEST_CASE("broadcast_object sends plain and pickled values", "[mpi]") {
  const bool root = hvd::rank() == 0;
  CHECK(hvd::broadcast_object<int64_t>(root ? 42 : -1, 0) == 42);
  Pod p = hvd::broadcast_object(root ? Pod{7, 2.5} : Pod{0, 0}, 0, "pod");
  CHECK(p.a == 7);
  CHECK(p.b == 2.5);
  CHECK(hvd::broadcast_object(std::string(root ? "epoch-3" : ""), 0) == "epoch-3");
  auto v = hvd::broadcast_object(root ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{}, 0);
  CHECK(v == std::vector<int64_t>({1, 2, 3}));
  torch::Tensor t = hvd::broadcast_object(root ? torch::arange(4) : torch::zeros({1}), 0);
  CHECK(torch::equal(t, torch::arange(4)));
}

namespace {

using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>, double)>;

torch::Tensor mlp_loss(hvd_examples::MnistMlp& model, const hvd_examples::SyntheticMnist& data,
                       int64_t offset) {
  return torch::cross_entropy_loss(model->forward(data.images().narrow(0, offset, 16)),
                                   data.labels().narrow(0, offset, 16));
}

/// Root takes two steps (others none), the state is broadcast, then every rank takes the same
/// step from the same parameters: identical results prove state and options arrived.
void check_round_trip(const std::string& name, const OptimizerFactory& make) {
  INFO("optimizer " << name);
  torch::manual_seed(7);
  hvd_examples::MnistMlp model;
  hvd_examples::SyntheticMnist data(64);
  // lr differs per rank until the options are broadcast.
  auto opt = make(model->parameters(), 0.01 * (hvd::rank() + 1));
  auto closure = [&] {
    opt->zero_grad();
    torch::Tensor l = mlp_loss(model, data, 0);
    l.backward();
    return l;
  };
  if (hvd::rank() == 0) {
    for (int64_t s = 0; s < 2; ++s) opt->step(closure);
  }
  const double root_lr = hvd::broadcast_object(opt->param_groups()[0].options().get_lr(), 0);
  hvd::broadcast_parameters(*model, 0);
  hvd::broadcast_optimizer_state(*opt, 0);
  CHECK(opt->param_groups()[0].options().get_lr() == root_lr);
  const size_t root_states = hvd::broadcast_object<size_t>(opt->state().size(), 0);
  CHECK(root_states > 0);
  CHECK(opt->state().size() == root_states);
  opt->step(closure);
  for (const auto& p : model->named_parameters()) {
    torch::Tensor root_value = hvd::broadcast(p.value().detach(), 0, "rt." + name + "." + p.key());
    INFO("parameter " << p.key());
    CHECK(torch::equal(p.value(), root_value));
  }
}

}  // namespace

TEST_CASE("broadcast_optimizer_state round trips every libtorch optimizer", "[mpi]") {
  using namespace torch::optim;
  check_round_trip("sgd", [](std::vector<torch::Tensor> ps, double lr) {
    return std::make_unique<SGD>(ps,
                                 SGDOptions(lr).momentum(0.9).weight_decay(1e-4).nesterov(true));
  });
  check_round_trip("adam", [](std::vector<torch::Tensor> ps, double lr) {
    return std::make_unique<Adam>(
        ps,
        AdamOptions(lr).betas({0.8 + 0.01 * hvd::rank(), 0.99}).weight_decay(1e-3).amsgrad(true));
  });
  check_round_trip("adamw", [](std::vector<torch::Tensor> ps, double lr) {
    return std::make_unique<AdamW>(ps, AdamWOptions(lr).eps(1e-6 * (hvd::rank() + 1)));
  });
  check_round_trip("adagrad", [](std::vector<torch::Tensor> ps, double lr) {
    return std::make_unique<Adagrad>(ps, AdagradOptions(lr).lr_decay(1e-3));
  });
  check_round_trip("rmsprop", [](std::vector<torch::Tensor> ps, double lr) {
    return std::make_unique<RMSprop>(ps, RMSpropOptions(lr).momentum(0.5).centered(true));
  });
  check_round_trip("lbfgs", [](std::vector<torch::Tensor> ps, double lr) {
    return std::make_unique<LBFGS>(ps, LBFGSOptions(lr * 10).max_iter(4).history_size(5));
  });
}
