// SPDX-License-Identifier: Apache-2.0
// [mpi] DistributedOptimizer: equivalence with single-process training (mnist_mlp, shared
// autoencoder with three optimizers, natural and Horovod style, and each optimizer zeroing,
// back-propagating and stepping in turn), zero_grad() discarding reductions in flight, overlap of
// reductions with backward, reduction options, unused parameters, and the error messages.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "hvd/torch.h"
#include "models.h"
#include "watchdog.h"

// libtorch pulls in glog, whose CHECK macro would shadow Catch's: include Catch last.
#undef CHECK
#include "hvd_catch.h"

using hvd::test::Contains;
using hvd_examples::shard;
namespace optim = torch::optim;

namespace {

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-30);
}

void require_identical_across_ranks(const torch::nn::Module& m, const std::string& tag) {
  for (const auto& p : m.named_parameters()) {
    torch::Tensor root = hvd::broadcast(p.value().detach(), 0, "same." + tag + "." + p.key());
    INFO("parameter " << p.key() << " at " << tag);
    REQUIRE(torch::equal(p.value(), root));
  }
}

void require_close(const torch::nn::Module& a, const torch::nn::Module& b, double tol) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO("parameter " << pa[i].key());
    CHECK(rel_diff(pa[i].value(), pb[i].value()) <= tol);
  }
}

std::vector<torch::Tensor> params_of(std::initializer_list<torch::nn::Module*> ms) {
  std::vector<torch::Tensor> out;
  for (auto* m : ms) {
    for (auto& p : m->parameters()) out.push_back(p);
  }
  return out;
}

hvd::NamedParameters prefixed_modules(
    const std::string& prefix,
    std::initializer_list<std::pair<std::string, torch::nn::Module*>> ms) {
  hvd::NamedParameters out;
  for (const auto& [name, m] : ms) {
    for (const auto& p : m->named_parameters())
      out.emplace_back(prefix + name + "." + p.key(), p.value());
  }
  return out;
}

/// Counts gradient reductions submitted while alive.
struct SubmitCounter {
  std::mutex mu;
  std::vector<std::string> names;
  SubmitCounter() {
    hvd::optim::detail::set_submit_observer([this](const std::string& n, const hvd::Handle&) {
      std::lock_guard<std::mutex> lk(mu);
      names.push_back(n);
    });
  }
  ~SubmitCounter() { hvd::optim::detail::set_submit_observer(nullptr); }
  size_t take() {
    std::lock_guard<std::mutex> lk(mu);
    size_t n = names.size();
    names.clear();
    return n;
  }
};

}  // namespace

TEST_CASE("N ranks on 1/N of every batch match one process on the whole batch: mnist_mlp",
          "[mpi]") {
  const int64_t B = 32, K = 6;
  hvd_examples::SyntheticMnist data(B * K);
  torch::manual_seed(1);
  hvd_examples::MnistMlp model;
  torch::manual_seed(1);
  hvd_examples::MnistMlp ref;
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD ref_sgd(ref->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  hvd::DistributedOptimizer opt(sgd, model->named_parameters());
  for (int64_t k = 0; k < K; ++k) {
    torch::Tensor x = data.images().narrow(0, k * B, B), y = data.labels().narrow(0, k * B, B);
    opt.zero_grad();
    torch::cross_entropy_loss(model->forward(shard(x, hvd::rank(), hvd::size())),
                              shard(y, hvd::rank(), hvd::size()))
        .backward();
    opt.step();
    ref_sgd.zero_grad();
    torch::cross_entropy_loss(ref->forward(x), y).backward();
    ref_sgd.step();
    require_identical_across_ranks(*model, "mnist." + std::to_string(k));
  }
  require_close(*model, *ref, 1e-5);
}

namespace {

/// Trains the shared autoencoder K steps with three optimizers (1: encoder + A, SGD; 2: encoder
/// + B, Adam; 3: C, SGD) and checks it against one process on the whole batch.
void run_shared_autoencoder(bool horovod_style, bool view = false) {
  const int64_t B = 16, K = 5;
  torch::Tensor data = hvd_examples::autoencoder_data(B * K);
  torch::manual_seed(2);
  hvd_examples::SharedAutoencoder m;
  torch::manual_seed(2);
  hvd_examples::SharedAutoencoder r;
  auto* enc = m->encoder.ptr().get();
  optim::SGD o1(params_of({enc, m->dec_a.ptr().get()}), optim::SGDOptions(0.05).momentum(0.9));
  optim::Adam o2(params_of({enc, m->dec_b.ptr().get()}), optim::AdamOptions(1e-2));
  optim::SGD o3(params_of({m->dec_c.ptr().get()}), optim::SGDOptions(0.05));
  optim::SGD r1(params_of({r->encoder.ptr().get(), r->dec_a.ptr().get()}),
                optim::SGDOptions(0.05).momentum(0.9));
  optim::Adam r2(params_of({r->encoder.ptr().get(), r->dec_b.ptr().get()}),
                 optim::AdamOptions(1e-2));
  optim::SGD r3(params_of({r->dec_c.ptr().get()}), optim::SGDOptions(0.05));

  auto named = m->named_parameters();
  std::unique_ptr<hvd::DistributedOptimizer> d1, d2, d3;
  const auto opts = hvd::DistributedOptimizerOptions().gradient_as_bucket_view(view);
  if (horovod_style) {  // distinct prefixes per optimizer, explicit synchronize()
    d1 = std::make_unique<hvd::DistributedOptimizer>(
        o1, prefixed_modules("opt1.", {{"enc", enc}, {"a", m->dec_a.ptr().get()}}), opts);
    d2 = std::make_unique<hvd::DistributedOptimizer>(
        o2, prefixed_modules("opt2.", {{"enc", enc}, {"b", m->dec_b.ptr().get()}}), opts);
    d3 = std::make_unique<hvd::DistributedOptimizer>(
        o3, prefixed_modules("opt3.", {{"c", m->dec_c.ptr().get()}}), opts);
  } else {  // the natural way: the model's names for all three
    d1 = std::make_unique<hvd::DistributedOptimizer>(o1, named, opts);
    d2 = std::make_unique<hvd::DistributedOptimizer>(o2, named, opts);
    d3 = std::make_unique<hvd::DistributedOptimizer>(o3, named, opts);
  }
  SubmitCounter submits;
  for (int64_t k = 0; k < K; ++k) {
    torch::Tensor x = data.narrow(0, k * B, B);
    d1->zero_grad();
    d2->zero_grad();
    d3->zero_grad();
    m->loss(shard(x, hvd::rank(), hvd::size())).backward();
    if (horovod_style) {
      d1->synchronize();
      d2->synchronize();
      d3->synchronize();
      {
        auto g = d1->skip_synchronize();
        d1->step();
      }
      {
        auto g = d2->skip_synchronize();
        d2->step();
      }
      {
        auto g = d3->skip_synchronize();
        d3->step();
      }
    } else {
      d1->step();
      d2->step();
      d3->step();
    }
    // One reduction per parameter, shared or not; with bucket views (after the first step lays
    // them out) one per bucket of the unshared decoders and one per shared encoder parameter.
    const size_t shared = enc->parameters().size();
    if (!view || k == 0) {
      CHECK(submits.take() == named.size());
    } else {
      CHECK(submits.take() == shared + 3);  // a bucket per decoder
      for (auto* d : {d1.get(), d2.get()}) {
        auto b = d->bucket_names();
        CHECK(std::count(b.begin(), b.end(), std::string()) == static_cast<long>(shared));
      }
    }
    r1.zero_grad();
    r2.zero_grad();
    r3.zero_grad();
    r->loss(x).backward();
    r1.step();
    r2.step();
    r3.step();
    require_identical_across_ranks(*m, "ae." + std::to_string(k));
  }
  require_close(*m, *r, 1e-5);
}

}  // namespace

TEST_CASE("shared encoder with three optimizers matches one process, no renaming", "[mpi]") {
  run_shared_autoencoder(false);
}

TEST_CASE("shared encoder in Horovod style (prefixes, synchronize) gives the same result",
          "[mpi]") {
  run_shared_autoencoder(true);
}

TEST_CASE("shared encoder with gradient_as_bucket_view: shared parameters are not bucketed",
          "[mpi]") {
  run_shared_autoencoder(false, true);
  run_shared_autoencoder(true, true);
}

namespace {
struct DeepImpl : torch::nn::Module {
  DeepImpl() {
    for (int i = 0; i < 4; ++i) {
      layers.push_back(register_module("l" + std::to_string(i), torch::nn::Linear(64, 64)));
    }
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Deep);
}  // namespace

TEST_CASE("gradient reductions start during backward, before it returns", "[mpi]") {
  torch::manual_seed(3);
  Deep model;
  optim::SGD sgd(model->parameters(), 0.01);
  hvd::DistributedOptimizer opt(sgd, model->named_parameters());
  std::mutex mu;
  std::vector<std::string> events;
  std::vector<hvd::Handle> handles;
  auto log = [&](const std::string& e) {
    std::lock_guard<std::mutex> lk(mu);
    events.push_back(e);
  };
  hvd::optim::detail::set_submit_observer([&](const std::string& n, const hvd::Handle& h) {
    log("submit " + n);
    std::lock_guard<std::mutex> lk(mu);
    handles.push_back(h);
  });
  bool first_done_during_backward = false;
  torch::Tensor x = torch::randn({8, 64});
  torch::Tensor h = torch::relu(model->layers[0]->forward(x));
  // Runs in the middle of backward (after the later layers' gradients, before layer 0's): it
  // waits up to 10 s for the first reduction, which must already be in flight.
  h.register_hook([&](torch::Tensor g) {
    log("slow hook");
    hvd::Handle first;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!handles.empty()) first = handles.front();
    }
    for (int i = 0; i < 1000 && first.valid() && !first.poll(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    first_done_during_backward = first.valid() && first.poll();
    return g;
  });
  for (int i = 1; i < 4; ++i) h = torch::relu(model->layers[i]->forward(h));
  h.pow(2).mean().backward();
  log("backward returned");
  hvd::optim::detail::set_submit_observer(nullptr);
  opt.step();

  auto pos = [&](const std::string& e) {
    return std::find(events.begin(), events.end(), e) - events.begin();
  };
  REQUIRE(events.size() == 8 + 2);
  CHECK(events.front().rfind("submit ", 0) == 0);  // the first event is a submission
  CHECK(pos("slow hook") > 0);                     // ... before the middle of backward
  CHECK(pos("backward returned") == 9);            // all 8 submitted during backward
  CHECK(first_done_during_backward);               // and the first one finished there
}

TEST_CASE("reduction options give the independently computed gradients", "[mpi]") {
  struct Config {
    const char* what;
    hvd::DistributedOptimizerOptions options;
    double tol;
  };
  using O = hvd::DistributedOptimizerOptions;
  std::vector<Config> configs = {
      {"average", O(), 1e-6},
      {"sum", O().op(hvd::ReduceOp::kSum), 1e-6},
      {"fp16", O().compression(hvd::Compression::kFp16), 2e-3},
      {"bf16", O().compression(hvd::Compression::kBf16), 2e-2},
      {"predivide", O().gradient_predivide_factor(4.0), 1e-6},
      {"num_groups", O().num_groups(2), 1e-6},
      {"groups", O().groups({{"fc1.weight", "fc3.bias"}, {"fc2.weight", "fc2.bias"}}), 1e-6},
      {"two passes", O().backward_passes_per_step(2), 1e-6},
  };
  hvd_examples::SyntheticMnist data(16 * hvd::size(), 77);
  torch::Tensor x = shard(data.images(), hvd::rank(), hvd::size());
  torch::Tensor y = shard(data.labels(), hvd::rank(), hvd::size());
  for (const auto& c : configs) {
    INFO("config " << c.what);
    torch::manual_seed(5);
    hvd_examples::MnistMlp model;
    torch::manual_seed(5);
    hvd_examples::MnistMlp ref;
    optim::SGD sgd(model->parameters(), 0.1);
    hvd::DistributedOptimizer opt(sgd, model->named_parameters(), c.options);
    const int passes = c.options.backward_passes_per_step_;
    for (int p = 0; p < passes; ++p) {
      const int64_t n = x.size(0) / passes;
      torch::cross_entropy_loss(model->forward(x.narrow(0, p * n, n)), y.narrow(0, p * n, n))
          .backward();
      torch::cross_entropy_loss(ref->forward(x.narrow(0, p * n, n)), y.narrow(0, p * n, n))
          .backward();
    }
    opt.synchronize();
    for (const auto& p : ref->named_parameters()) {
      torch::Tensor expect = hvd::allreduce(
          p.value().grad(), std::string("expect.") + c.what + "." + p.key(), c.options.op_);
      INFO("parameter " << p.key());
      CHECK(rel_diff(model->named_parameters()[p.key()].grad(), expect) <= c.tol);
    }
    opt.step();
  }
}

TEST_CASE("parameters without a gradient on some ranks get zeros and nobody hangs", "[mpi]") {
  torch::manual_seed(6);
  torch::nn::Linear trunk(4, 4), even(4, 1), odd(4, 1);
  using Net = std::vector<torch::nn::Linear>;  // trunk, even, odd
  auto named_of = [](const Net& net) {
    hvd::NamedParameters n;
    const char* pre[] = {"trunk", "even", "odd"};
    for (size_t k = 0; k < net.size(); ++k) {
      for (const auto& p : net[k]->named_parameters()) {
        n.emplace_back(std::string(pre[k]) + "." + p.key(), p.value());
      }
    }
    return n;
  };
  // This rank's backward: the trunk, then the head of its parity.
  auto backward = [](Net net) {
    torch::Tensor h = net[0]->forward(torch::ones({2, 4}) * (hvd::rank() + 1));
    net[hvd::rank() % 2 == 0 ? 1 : 2]->forward(h).sum().backward();
  };
  const Net real{trunk, even, odd};
  const hvd::NamedParameters named = named_of(real);
  std::vector<torch::Tensor> all;
  for (auto& p : named) all.push_back(p.second);
  for (bool view : {false, true}) {
    INFO("gradient_as_bucket_view " << view);
    optim::SGD sgd(all, 0.1);
    hvd::DistributedOptimizer opt(sgd, named,
                                  hvd::DistributedOptimizerOptions().gradient_as_bucket_view(view));
    for (int step = 0; step < 3; ++step) {
      // This rank's own gradients, from copies no hook watches: the real ones are reduced in
      // place as backward produces them, possibly before backward returns.
      Net copy;
      for (const auto& m : real) {
        copy.emplace_back(std::dynamic_pointer_cast<torch::nn::LinearImpl>(m->clone()));
      }
      backward(copy);
      std::vector<torch::Tensor> local;
      for (auto& p : named_of(copy))
        local.push_back(p.second.grad().defined() ? p.second.grad() : torch::zeros_like(p.second));
      opt.zero_grad();
      backward(real);
      opt.synchronize();
      for (size_t i = 0; i < named.size(); ++i) {
        torch::Tensor expect = hvd::allreduce(local[i], "unused.expect." + named[i].first);
        INFO("parameter " << named[i].first << " step " << step);
        CHECK(rel_diff(named[i].second.grad(), expect) <= 1e-6);
      }
      opt.step();
    }
  }
}

TEST_CASE("names colliding across optimizers are made unique; within one they are an error",
          "[mpi]") {
  torch::Tensor a = torch::randn({4, 3}, torch::requires_grad());
  torch::Tensor b = torch::randn({2}, torch::requires_grad());
  optim::SGD s1(std::vector<torch::Tensor>{a}, 0.1), s2(std::vector<torch::Tensor>{b}, 0.1);
  hvd::DistributedOptimizer first(s1, hvd::NamedParameters{{"w", a}},
                                  hvd::DistributedOptimizerOptions().label("first"));
  {
    hvd::DistributedOptimizer second(s2, hvd::NamedParameters{{"w", b}},
                                     hvd::DistributedOptimizerOptions().label("second"));
    CHECK(first.parameter_names() == std::vector<std::string>{"grad.w"});
    CHECK(second.parameter_names() == std::vector<std::string>{"grad.w#2"});
    optim::SGD s3(std::vector<torch::Tensor>{a}, 0.2);  // the same tensor: the same reduction
    hvd::DistributedOptimizer third(s3, hvd::NamedParameters{{"w", a}});
    CHECK(third.parameter_names() == std::vector<std::string>{"grad.w"});
  }
  optim::SGD s4(std::vector<torch::Tensor>{a, b}, 0.2);
  CHECK_THROWS_WITH(hvd::DistributedOptimizer(s4, hvd::NamedParameters{{"v", a}, {"v", b}}),
                    Contains("two different tensors") && Contains("'v'") && Contains("[4, 3]") &&
                        Contains("[2]"));
  CHECK_THROWS_WITH(hvd::DistributedOptimizer(s4, hvd::NamedParameters{{"v", a}}),
                    Contains("not in named_parameters"));
}

TEST_CASE("two backward passes before step() accumulate as in one process, Sum and Average",
          "[mpi]") {
  for (auto op : {hvd::ReduceOp::kAverage, hvd::ReduceOp::kSum}) {
    for (bool module_zero : {false, true}) {
      torch::manual_seed(21);
      torch::nn::Linear lin(3, 2), ref(3, 2);
      {
        torch::NoGradGuard g;
        for (size_t i = 0; i < lin->parameters().size(); ++i)
          ref->parameters()[i].copy_(lin->parameters()[i]);
      }
      optim::SGD sgd(lin->parameters(), 0.02), ref_sgd(ref->parameters(), 0.02);
      hvd::DistributedOptimizer opt(sgd, lin->named_parameters(),
                                    hvd::DistributedOptimizerOptions().op(op));
      SubmitCounter counter;
      const int64_t n = 2;
      torch::Tensor x = torch::arange(hvd::size() * n * 3, torch::kFloat).reshape({-1, 3}) / 30;
      torch::Tensor mine = x.slice(0, hvd::rank() * n, (hvd::rank() + 1) * n);
      const double scale = op == hvd::ReduceOp::kSum ? hvd::size() : 1.0;
      for (int step = 0; step < 20; ++step) {
        if (module_zero) {
          lin->zero_grad();
        } else {
          opt.zero_grad();
        }
        lin->forward(mine).pow(2).mean().backward();
        lin->forward(mine * 0.5).pow(2).mean().backward();
        opt.step();
        CHECK(counter.take() == 4);  // one reduction per parameter per pass
        ref_sgd.zero_grad();
        (scale * ref->forward(x).pow(2).mean()).backward();
        (scale * ref->forward(x * 0.5).pow(2).mean()).backward();
        ref_sgd.step();
      }
      for (size_t i = 0; i < lin->parameters().size(); ++i) {
        CHECK((lin->parameters()[i] - ref->parameters()[i]).abs().max().item<float>() <= 1e-6);
      }
    }
  }
}

TEST_CASE("gradients sharing one version counter are not taken for changed while in flight",
          "[mpi]") {
  // Autograd leaves the gradients of parameters reached through one torch.cat with one version
  // counter between them: each in-place accumulation (from the second step on), and each result
  // written into one of them (adding what a first pass set aside), bumps all their versions.
  // Rank 1 comes late, so rank 0's reductions are still in flight at its step(): such a bump
  // must not count as a change of another gradient (which would drop it, silently).
  for (int passes : {1, 2}) {
    const int64_t k = 8;
    std::vector<torch::Tensor> ps;
    for (int64_t i = 0; i < k; ++i) ps.push_back(torch::zeros({3}, torch::requires_grad()));
    optim::SGD sgd(ps, 1.0);
    hvd::DistributedOptimizer opt(sgd, hvd::NamedParameters{},
                                  hvd::DistributedOptimizerOptions()
                                      .op(hvd::ReduceOp::kSum)
                                      .label("shared_version." + std::to_string(passes)));
    const torch::Tensor c = torch::arange(k * 3, torch::kFloat) + 1;
    const int steps = 3;
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      if (hvd::rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      for (int pass = 0; pass < passes; ++pass) {
        (torch::cat(ps).dot(c) * static_cast<float>(hvd::rank() + 1)).backward();
      }
      REQUIRE_NOTHROW(opt.step());
    }
    // Each pass's gradient, summed over the ranks: c * (1 + 2 + ... + size).
    const float ranks_sum = static_cast<float>(hvd::size() * (hvd::size() + 1) / 2);
    const torch::Tensor want = -static_cast<float>(steps * passes) * ranks_sum * c;
    INFO("backward passes per step: " << passes);
    CHECK((torch::cat(ps).detach() - want).abs().max().item<float>() <= 1e-3);
  }
}

TEST_CASE("a module used in different backward passes on different ranks: no hang, one result",
          "[mpi]") {
  // Issue 37 item 1: rank 0 uses the expert in both passes before step(), the others only in
  // the second. Used to block every rank inside backward.
  for (int run = 0; run < 4; ++run) {
    const int bpps = 1 + run % 2;
    const bool view = run >= 2;
    INFO("backward_passes_per_step " << bpps << ", gradient_as_bucket_view " << view);
    Watchdog guard("uneven backward passes", 20);
    torch::manual_seed(31);
    torch::nn::Linear trunk(3, 4), expert(4, 4), rtrunk(3, 4), rexpert(4, 4);
    {
      torch::NoGradGuard g;
      for (size_t i = 0; i < 2; ++i) {
        rtrunk->parameters()[i].copy_(trunk->parameters()[i]);
        rexpert->parameters()[i].copy_(expert->parameters()[i]);
      }
    }
    optim::SGD sgd(params_of({trunk.get(), expert.get()}), 0.05);
    optim::SGD ref_sgd(params_of({rtrunk.get(), rexpert.get()}), 0.05);
    hvd::DistributedOptimizer opt(
        sgd, prefixed_modules("asym.", {{"trunk", trunk.get()}, {"expert", expert.get()}}),
        hvd::DistributedOptimizerOptions().backward_passes_per_step(bpps).gradient_as_bucket_view(
            view));
    const int64_t n = 2;
    torch::Tensor x = torch::arange(hvd::size() * n * 3, torch::kFloat).reshape({-1, 3}) / 20;
    auto uses = [](int rank, int pass) { return rank == 0 || pass == 1; };
    auto loss = [](torch::nn::Linear& t, torch::nn::Linear& e, const torch::Tensor& in, bool use) {
      torch::Tensor h = torch::tanh(t->forward(in));
      if (use) h = h + torch::tanh(e->forward(h));
      return h.pow(2).mean();
    };
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      ref_sgd.zero_grad();
      for (int pass = 0; pass < 2; ++pass) {
        torch::Tensor in = x * (1.0 + pass + step);
        loss(trunk, expert, in.slice(0, hvd::rank() * n, (hvd::rank() + 1) * n),
             uses(hvd::rank(), pass))
            .backward();
        torch::Tensor total = torch::zeros({});
        for (int r = 0; r < hvd::size(); ++r)
          total = total + loss(rtrunk, rexpert, in.slice(0, r * n, (r + 1) * n), uses(r, pass));
        (total / hvd::size()).backward();
      }
      opt.step();
      ref_sgd.step();
      require_identical_across_ranks(*trunk, "asym.trunk." + std::to_string(step));
      require_identical_across_ranks(*expert, "asym.expert." + std::to_string(step));
    }
    require_close(*expert, *rexpert, 1e-5);
    require_close(*trunk, *rtrunk, 1e-5);
  }
}

TEST_CASE("an optimizer on a rank outside its process set steps locally", "[mpi]") {
  hvd::ProcessSet ps = hvd::add_process_set({0});
  {
    torch::manual_seed(22);
    torch::nn::Linear lin(3, 2);
    optim::SGD sgd(lin->parameters(), 0.1);
    hvd::DistributedOptimizer opt(sgd, lin->named_parameters(),
                                  hvd::DistributedOptimizerOptions().process_set(ps));
    SubmitCounter counter;
    torch::Tensor x = torch::full({2, 3}, 1.0 + hvd::rank());
    torch::Tensor before = lin->weight.detach().clone();
    opt.zero_grad();
    lin->forward(x).sum().backward();
    torch::Tensor g = lin->weight.grad().clone();
    opt.step();
    CHECK(counter.take() == (hvd::rank() == 0 ? 2u : 0u));
    CHECK(torch::allclose(lin->weight, before - 0.1 * g));  // its own gradient, on every rank
  }
  hvd::remove_process_set(ps);
}

namespace {

/// Reconstruction loss `which` (0: A, x; 1: B, reversed x; 2: C, x squared) of the shared
/// autoencoder: the three terms of SharedAutoencoder::loss, each trained by its own optimizer.
torch::Tensor reconstruction(hvd_examples::SharedAutoencoder& m, int which,
                             const torch::Tensor& x) {
  torch::Tensor z = m->encoder->forward(x);
  if (which == 0) return torch::mse_loss(m->dec_a->forward(z), x);
  if (which == 1) return torch::mse_loss(m->dec_b->forward(z), x.flip(1));
  return torch::mse_loss(m->dec_c->forward(z), x * x);
}

}  // namespace

TEST_CASE(
    "three optimizers each zeroing, back-propagating and stepping in turn match one process, "
    "though another loss's backward left the encoder's reduction in flight",
    "[mpi]") {
  const int64_t B = 8 * hvd::size(), K = 4;
  torch::Tensor data = hvd_examples::autoencoder_data(B * K).to(torch::kDouble);
  torch::manual_seed(12);
  hvd_examples::SharedAutoencoder m;
  torch::manual_seed(12);
  hvd_examples::SharedAutoencoder r;
  m->to(torch::kDouble);
  r->to(torch::kDouble);
  // opt1: encoder + A (SGD, momentum), opt2: encoder + B (Adam), opt3: C only (SGD).
  auto make = [](hvd_examples::SharedAutoencoder& a) {
    auto* enc = a->encoder.ptr().get();
    std::vector<std::unique_ptr<optim::Optimizer>> o;
    o.push_back(std::make_unique<optim::SGD>(params_of({enc, a->dec_a.ptr().get()}),
                                             optim::SGDOptions(0.05).momentum(0.9)));
    o.push_back(std::make_unique<optim::Adam>(params_of({enc, a->dec_b.ptr().get()}),
                                              optim::AdamOptions(1e-2)));
    o.push_back(
        std::make_unique<optim::SGD>(params_of({a->dec_c.ptr().get()}), optim::SGDOptions(0.05)));
    return o;
  };
  auto mine = make(m), ref = make(r);
  auto named = m->named_parameters();
  std::vector<std::unique_ptr<hvd::DistributedOptimizer>> d;
  for (auto& o : mine) d.push_back(std::make_unique<hvd::DistributedOptimizer>(*o, named));
  const size_t per_loss = m->encoder->parameters().size() + m->dec_a->parameters().size();
  SubmitCounter submits;
  for (int64_t k = 0; k < K; ++k) {
    torch::Tensor x = data.narrow(0, k * B, B);
    for (int i = 0; i < 3; ++i) {
      INFO("step " << k << ", optimizer " << i + 1);
      // Loss 3 reaches the encoder, whose reduction then waits for opt1.zero_grad().
      REQUIRE_NOTHROW(d[i]->zero_grad());
      reconstruction(m, i, shard(x, hvd::rank(), hvd::size())).backward();
      d[i]->step();
      ref[i]->zero_grad();
      reconstruction(r, i, x).backward();
      ref[i]->step();
    }
    CHECK(submits.take() == 3 * per_loss);  // the encoder's gradient is reduced in every loss
    require_identical_across_ranks(*m, "ae3." + std::to_string(k));
  }
  require_close(*m, *r, 1e-10);
}

TEST_CASE(
    "zero_grad right after backward discards it; the next backward and step match one "
    "process",
    "[mpi]") {
  struct Config {
    const char* what;
    hvd::DistributedOptimizerOptions options;
  };
  using O = hvd::DistributedOptimizerOptions;
  // In flight (one by one, or as fusion groups), or partially accumulated, when zero_grad() runs.
  const std::vector<Config> configs = {{"plain", O()},
                                       {"num_groups", O().num_groups(2)},
                                       {"two passes", O().backward_passes_per_step(2)}};
  const int64_t B = 4 * hvd::size(), K = 3;
  torch::Tensor data = hvd_examples::autoencoder_data(B * 3 * K, 32, 7).to(torch::kDouble);
  auto loss = [](torch::nn::Sequential& net, const torch::Tensor& x) {
    return torch::mse_loss(net->forward(x), x.flip(1));
  };
  for (const auto& c : configs) {
    INFO("config " << c.what);
    torch::manual_seed(13);
    auto net = hvd_examples::SharedAutoencoderImpl::mlp(32, 16, 32);
    torch::manual_seed(13);
    auto ref = hvd_examples::SharedAutoencoderImpl::mlp(32, 16, 32);
    net->to(torch::kDouble);
    ref->to(torch::kDouble);
    optim::SGD sgd(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    optim::SGD ref_sgd(ref->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    hvd::DistributedOptimizer opt(sgd, net->named_parameters(), c.options);
    const int passes = c.options.backward_passes_per_step_;
    for (int64_t k = 0; k < K; ++k) {
      // Global batches: one discarded, then `passes` accumulated.
      auto batch = [&](int64_t j) { return data.narrow(0, (3 * k + j) * B, B); };
      INFO("step " << k);
      opt.zero_grad();
      loss(net, shard(batch(0), hvd::rank(), hvd::size())).backward();
      REQUIRE_NOTHROW(opt.zero_grad());
      for (int p = 1; p <= passes; ++p) {
        loss(net, shard(batch(p), hvd::rank(), hvd::size())).backward();
      }
      opt.step();
      ref_sgd.zero_grad();
      loss(ref, batch(0)).backward();
      ref_sgd.zero_grad();
      for (int p = 1; p <= passes; ++p) loss(ref, batch(p)).backward();
      ref_sgd.step();
      require_identical_across_ranks(*net, std::string("zg.") + c.what + std::to_string(k));
    }
    require_close(*net, *ref, 1e-10);
  }
}

TEST_CASE("step() inside skip_synchronize() before synchronize() says to synchronize", "[mpi]") {
  torch::manual_seed(8);
  torch::nn::Linear lin(3, 2);
  optim::SGD sgd(lin->parameters(), 0.1);
  hvd::DistributedOptimizer opt(sgd, lin->named_parameters(),
                                hvd::DistributedOptimizerOptions().label("lin"));
  lin->forward(torch::ones({1, 3})).sum().backward();
  {
    auto guard = opt.skip_synchronize();
    CHECK_THROWS_WITH(opt.step(), Contains("step() of 'lin'") && Contains("in flight") &&
                                      (Contains("'weight'") || Contains("'bias'")) &&
                                      Contains("call synchronize() before this step()"));
    opt.synchronize();
    CHECK_NOTHROW(opt.step());
  }
  CHECK_NOTHROW(opt.zero_grad());
}

TEST_CASE("backward_passes_per_step misuse is reported", "[mpi]") {
  torch::manual_seed(9);
  torch::nn::Linear lin(3, 2);
  optim::SGD sgd(lin->parameters(), 0.1);
  auto loss = [&] { return lin->forward(torch::ones({1, 3})).sum(); };
  CHECK_THROWS_WITH(
      hvd::DistributedOptimizer(sgd, lin->named_parameters(),
                                hvd::DistributedOptimizerOptions().backward_passes_per_step(0)),
      Contains("backward_passes_per_step must be >= 1, got 0"));
  {
    hvd::DistributedOptimizer opt(sgd, lin->named_parameters());
    loss().backward();
    CHECK_NOTHROW(loss().backward());  // accumulation, as in plain libtorch
    opt.step();
  }
  CHECK_THROWS_WITH(
      hvd::DistributedOptimizer(
          sgd, lin->named_parameters(),
          hvd::DistributedOptimizerOptions().op(hvd::ReduceOp::kSum).gradient_predivide_factor(2)),
      Contains("only supported with op Average"));
}

namespace {

/// MnistMlp's parameters trained K steps by `o` (a fresh model, seed 9), the gradients after the
/// last synchronize() in `grads`; `view_checks` asserts bucket views along the way.
std::vector<torch::Tensor> train_mnist(const hvd::DistributedOptimizerOptions& o, int64_t K,
                                       std::vector<torch::Tensor>* grads, bool view_checks) {
  const int passes = o.backward_passes_per_step_;
  hvd_examples::SyntheticMnist data(8 * hvd::size() * passes * K, 41);
  torch::manual_seed(9);
  hvd_examples::MnistMlp model;
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  hvd::DistributedOptimizer opt(sgd, model->named_parameters(), o);
  const auto params = model->parameters();
  const int64_t B = 8 * hvd::size();
  for (int64_t k = 0; k < K; ++k) {
    opt.zero_grad();
    if (k == 2) {
      for (auto p : params) p.mutable_grad() = torch::Tensor();  // zero_grad(set_to_none)
    }
    for (int p = 0; p < passes; ++p) {
      const int64_t at = (k * passes + p) * B;
      torch::Tensor x = shard(data.images().narrow(0, at, B), hvd::rank(), hvd::size());
      torch::Tensor y = shard(data.labels().narrow(0, at, B), hvd::rank(), hvd::size());
      torch::cross_entropy_loss(model->forward(x), y).backward();
    }
    if (view_checks && k >= 1) {
      // Laid out at the first step: each .grad is a view of its bucket's buffer, re-attached by
      // the pre-hook after the set_to_none of step 2 (the pass accumulated into the view).
      const auto names = opt.bucket_names();
      REQUIRE(names.size() == params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        INFO("parameter " << i << " step " << k << " bucket " << names[i]);
        REQUIRE(!names[i].empty());
        REQUIRE(params[i].grad().defined());
        for (size_t j = 0; j < params.size(); ++j) {
          const bool together = names[i] == names[j];
          CHECK(params[i].grad().is_alias_of(params[j].grad()) == together);
        }
      }
      std::set<std::string> distinct(names.begin(), names.end());
      CHECK(distinct.size() == 2);  // 16 KiB buckets: fc3 and fc2, then fc1
    }
    opt.synchronize();
    if (k + 1 == K) {
      for (auto& p : params) grads->push_back(p.grad().clone());
    }
    auto g = opt.skip_synchronize();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : params) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("gradient_as_bucket_view: the same training as without, .grad views of buckets",
          "[mpi]") {
  Watchdog guard("bucket views", 60);
  using O = hvd::DistributedOptimizerOptions;
  struct Config {
    const char* what;
    O options;
    double tol;  ///< 0: bit for bit (the sums pair the same values whatever the fusion)
  };
  // Two ranks add two values the same way whatever travels together; more ranks may reduce a
  // bucket and separate tensors in different orders.
  const double exact = hvd::size() <= 2 ? 0 : 1e-6;
  std::vector<Config> configs = {
      {"average", O(), exact},
      {"sum", O().op(hvd::ReduceOp::kSum), exact},
      {"predivide", O().gradient_predivide_factor(2.0), exact},
      {"two passes", O().backward_passes_per_step(2), exact},
      {"fp16", O().compression(hvd::Compression::kFp16), 2e-3},
  };
  for (const auto& c : configs) {
    INFO("config " << c.what);
    std::vector<torch::Tensor> g_off, g_on;
    O on = c.options;
    on.gradient_as_bucket_view(true).bucket_view_bytes(16 << 10);
    auto off = train_mnist(c.options, 4, &g_off, false);
    auto with = train_mnist(on, 4, &g_on, true);
    REQUIRE(off.size() == with.size());
    for (size_t i = 0; i < off.size(); ++i) {
      INFO("parameter " << i);
      if (c.tol == 0) {
        CHECK(torch::equal(g_on[i], g_off[i]));
        CHECK(torch::equal(with[i], off[i]));
      } else {
        CHECK(rel_diff(g_on[i], g_off[i]) <= c.tol);
        CHECK(rel_diff(with[i], off[i]) <= c.tol);
      }
    }
  }
}
