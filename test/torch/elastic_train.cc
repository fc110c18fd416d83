// SPDX-License-Identifier: Apache-2.0
// [elastic] A libtorch elastic training program for test/torch/elastic_cpp_test.py: linear
// regression (float64), SGD with momentum through hvd::DistributedOptimizer, an
// hvd::elastic::Sampler over 64 samples, 4 per rank per batch, commit every 3 steps and at each
// epoch's end. In generation 0 rank --fail-rank SIGKILLs (--fail kill) or SIGSTOPs (--fail
// stop) itself before step --fail-step; --long-step S: in generation 0, step 2 runs
// collectives for S seconds without a commit; --step-sleep S: sleep S seconds per step. Rank 0
// writes the steps and final parameters (hex floats) to --out; every rank appends its events
// (the first: its host) to --out.log. With --log-batches 1 rank 0 also logs every step's
// batches of all ranks, in the form test/elastic/replay.py replays.
//
//   elastic_train --out FILE [--fail none|kill|stop] [--fail-step N] [--fail-rank R]
//                 [--long-step S] [--step-sleep S] [--log-batches 1]
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "hvd/torch.h"

namespace {

struct Args {
  std::string out;
  std::string fail = "none";
  int64_t fail_step = 11;
  int fail_rank = 1;
  bool log_batches = false;
  double long_step = 0, step_sleep = 0;
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
    else if (k == "--log-batches")
      a.log_batches = v == "1";
    else if (k == "--long-step")
      a.long_step = std::stod(v);
    else if (k == "--step-sleep")
      a.step_sleep = std::stod(v);
  }
  if (a.out.empty()) {
    std::fprintf(stderr, "usage: elastic_train --out FILE [--fail none|kill] ...\n");
    std::exit(2);
  }
  return a;
}

// A long step: collectives for `seconds`, no commit (the step watchdog must not fire).
template <typename Event>
void long_step(double seconds, Event& event) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const torch::Tensor x = torch::zeros({1});
  while (elapsed() < seconds) {
    static_cast<void>(hvd::allreduce(x, "long_step"));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  event("long step of " + std::to_string(elapsed()) + " s without a commit");
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
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  event(std::string("started on ") + host);

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

  // "batch step S epoch E np N [[i, ...], ...]": every rank's indices (padded to kBatch + 1
  // with the count first, so that one allgather of equal rows carries them).
  auto log_batch = [&](const std::vector<int64_t>& idx, int64_t done, int64_t ep) {
    torch::Tensor row = torch::full({1, kBatch + 1}, -1, torch::kLong);
    row[0][0] = static_cast<int64_t>(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) row[0][static_cast<int64_t>(i) + 1] = idx[i];
    const torch::Tensor all = hvd::allgather(row, "test.batches");
    if (hvd::rank() != 0) return;
    std::string text = "batch step " + std::to_string(done + 1) + " epoch " + std::to_string(ep) +
                       " np " + std::to_string(hvd::size()) + " [";
    for (int64_t r = 0; r < all.size(0); ++r) {
      text += r ? ", [" : "[";
      for (int64_t i = 0; i < all[r][0].item<int64_t>(); ++i)
        text += (i ? ", " : "") + std::to_string(all[r][i + 1].item<int64_t>());
      text += "]";
    }
    event(text + "]");
  };

  const int64_t steps = hvd::elastic::run(state, [&](hvd::elastic::TorchState& s) {
    bool first = true;
    for (; epoch < kEpochs;) {
      const int64_t batches = (sampler.size() + kBatch - 1) / kBatch;
      for (int64_t b = 0; b < batches; ++b) {
        if (args.fail != "none" && generation == 0 && step == args.fail_step &&
            hvd::rank() == args.fail_rank) {
          event("failing (" + args.fail + ") at step " + std::to_string(step));
          ::kill(::getpid(), args.fail == "stop" ? SIGSTOP : SIGKILL);
        }
        if (generation == 0 && args.long_step > 0 && step == 2) long_step(args.long_step, event);
        const std::vector<int64_t> idx = sampler.get_indices(b, kBatch);
        if (args.log_batches) log_batch(idx, step, epoch);
        if (args.step_sleep > 0)
          std::this_thread::sleep_for(std::chrono::duration<double>(args.step_sleep));
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
