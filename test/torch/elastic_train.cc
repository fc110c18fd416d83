// SPDX-License-Identifier: Apache-2.0
// [elastic] A libtorch elastic training program for test/torch/elastic_cpp_test.py: linear
// regression (float64), SGD with momentum through hvd::DistributedOptimizer, an
// hvd::elastic::Sampler over 64 samples, 4 per rank per batch, commit every 3 steps and at each
// epoch's end. In generation 0 rank --fail-rank SIGKILLs itself before step --fail-step
// (--fail kill). Rank 0 writes the steps and final parameters (hex floats) to --out; every rank
// appends its events to --out.log.
//
//   elastic_train --out FILE [--fail none|kill] [--fail-step N] [--fail-rank R]
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "hvd/torch.h"

namespace {

struct Args {
  std::string out;
  std::string fail = "none";
  int64_t fail_step = 11;
  int fail_rank = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--out")
      a.out = v;
    else if (k == "--fail")
      a.fail = v;
    else if (k == "--fail-step")
      a.fail_step = std::stoll(v);
    else if (k == "--fail-rank")
      a.fail_rank = std::stoi(v);
  }
  if (a.out.empty()) {
    std::fprintf(stderr, "usage: elastic_train --out FILE [--fail none|kill] ...\n");
    std::exit(2);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  hvd::init();
  const char* gen_env = std::getenv("HVD_ELASTIC_GENERATION");  // set by hvdrun --min-np
  const int generation = gen_env ? std::atoi(gen_env) : 0;
  std::ofstream log(args.out + ".log", std::ios::app);
  auto event = [&](const std::string& text) {
    const double t =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    char line[512];
    std::snprintf(line, sizeof(line), "%.6f gen%d rank%d %s\n", t, generation, hvd::rank(),
                  text.c_str());
    log << line << std::flush;
  };

  constexpr int64_t kSamples = 64, kBatch = 4, kEpochs = 2;
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({kSamples, 4}, torch::kFloat64);
  const torch::Tensor y =
      torch::matmul(x, torch::tensor({1.0, -2.0, 0.5, 3.0}, torch::kFloat64).view({4, 1})) + 0.1;
  torch::manual_seed(100 + hvd::rank());  // ranks start apart: sync must align them
  torch::nn::Linear model(4, 1);
  model->to(torch::kFloat64);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  hvd::DistributedOptimizer opt(sgd, model->named_parameters());

  hvd::elastic::Sampler sampler(kSamples, /*shuffle=*/true, /*seed=*/1);
  hvd::elastic::TorchState state(model, sgd, &sampler);
  int64_t& epoch = state.field<int64_t>("epoch");
  int64_t& step = state.field<int64_t>("step");
  state.register_reset_callbacks({[&] {
    event("reset at commit " + std::to_string(state.commit_id()) + " step " + std::to_string(step));
  }});

  const int64_t steps = hvd::elastic::run(state, [&](hvd::elastic::TorchState& s) {
    bool first = true;
    for (; epoch < kEpochs;) {
      const int64_t batches = (sampler.size() + kBatch - 1) / kBatch;
      for (int64_t b = 0; b < batches; ++b) {
        if (args.fail == "kill" && generation == 0 && step == args.fail_step &&
            hvd::rank() == args.fail_rank) {
          event("failing (kill) at step " + std::to_string(step));
          ::kill(::getpid(), SIGKILL);
        }
        const std::vector<int64_t> idx = sampler.get_indices(b, kBatch);
        const torch::Tensor rows = torch::tensor(idx, torch::kLong);
        opt.zero_grad();
        const torch::Tensor loss =
            (model->forward(x.index_select(0, rows)) - y.index_select(0, rows)).pow(2).mean();
        loss.backward();
        opt.step();
        ++step;
        if (first) {
          event("first step done (step " + std::to_string(step) + ")");
          first = false;
        }
        sampler.record_batch(b, kBatch);
        if (step % 3 == 0) {
          const auto t0 = std::chrono::steady_clock::now();
          s.commit();
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
          event("commit " + std::to_string(s.commit_id()) + " at step " + std::to_string(step) +
                " took " + std::to_string(ms) + " ms");
        }
      }
      ++epoch;
      sampler.set_epoch(epoch);
      s.commit();
    }
    return step;
  });

  if (hvd::rank() == 0) {
    std::ofstream out(args.out);
    out << "steps " << steps << "\n";
    for (const auto& p : model->named_parameters()) {
      out << p.key();
      const torch::Tensor t = p.value().detach().contiguous();
      for (int64_t i = 0; i < t.numel(); ++i) {
        char hex[64];
        std::snprintf(hex, sizeof(hex), " %a", t.data_ptr<double>()[i]);
        out << hex;
      }
      out << "\n";
    }
  }
  event("done");
  hvd::shutdown();
  return 0;
}
