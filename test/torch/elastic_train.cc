// SPDX-License-Identifier: Apache-2.0
// [elastic] A libtorch elastic training program for test/torch/elastic_cpp_test.py and
// bench/elastic_bench.sh --cpp. --model linear (the default): linear regression (float64), SGD
// with momentum through hvd::DistributedOptimizer, an hvd::elastic::Sampler over 64 samples, 4
// per rank per batch. --model cnn: test/elastic/train_elastic.py's small CNN (two 3x3 conv
// layers with ReLU and 2x2 max-pooling, then a linear layer: 9.1k float32 parameters) on
// --samples synthetic 1x28x28 images, --batch per rank per batch, cross-entropy, one torch
// thread. A commit every --commit-every steps (default 3) and at each epoch's end, --epochs
// epochs (default 2). In generation 0 rank --fail-rank SIGKILLs (--fail kill) or SIGSTOPs
// (--fail stop) itself before step --fail-step, or throws std::invalid_argument there (--fail
// invalid: an error a restart cannot fix, every generation); --long-step S: in generation 0, step 2
// runs collectives for S seconds without a commit; --step-sleep S: sleep S seconds per step. Rank 0
// writes the steps and final parameters (hex floats) to --out; every rank appends its events
// (the first: its host) to --out.log. With --log-batches 1 rank 0 also logs every step's
// batches of all ranks, in the form test/elastic/replay.py replays. --time-steps 1: rank 0 logs
// each step's time (without the commit) as `step S took MS ms cpu MS ms`, and each commit's as
// `commit C at step S took MS ms cpu MS ms` (cpu: the main thread's CPU time), as
// train_elastic.py does.
//
//   elastic_train --out FILE [--fail none|kill|stop|invalid] [--fail-step N] [--fail-rank R]
//                 [--long-step S] [--step-sleep S] [--log-batches 1] [--model linear|cnn]
//                 [--samples N] [--batch B] [--epochs E] [--commit-every K] [--time-steps 1]
#include <signal.h>
#include <time.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
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
  std::string model = "linear";
  int64_t samples = 256, batch = 32, epochs = 2, commit_every = 3;
  bool time_steps = false;
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
    else if (k == "--model")
      a.model = v;
    else if (k == "--samples")
      a.samples = std::stoll(v);
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--epochs")
      a.epochs = std::stoll(v);
    else if (k == "--commit-every")
      a.commit_every = std::stoll(v);
    else if (k == "--time-steps")
      a.time_steps = v == "1";
  }
  if (a.out.empty() || (a.model != "linear" && a.model != "cnn") || a.commit_every < 1) {
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

double thread_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The workload: data, model and loss (see the top of this file).
struct Workload {
  torch::Tensor x, y;
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss;
  int64_t samples, batch;
};

Workload make_workload(const Args& a) {
  Workload w;
  torch::manual_seed(0);
  if (a.model == "linear") {
    w.samples = 64;
    w.batch = 4;
    w.x = torch::randn({w.samples, 4}, torch::kFloat64);
    w.y = torch::matmul(w.x, torch::tensor({1.0, -2.0, 0.5, 3.0}, torch::kFloat64).view({4, 1})) +
          0.1;
    torch::manual_seed(100 + hvd::rank());  // ranks start apart: sync must align them
    torch::nn::Linear linear(4, 1);
    linear->to(torch::kFloat64);
    w.module = linear.ptr();
    w.forward = [linear](const torch::Tensor& in) mutable { return linear->forward(in); };
    w.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
      return (out - y).pow(2).mean();
    };
  } else {
    torch::set_num_threads(1);
    w.samples = a.samples;
    w.batch = a.batch;
    w.x = torch::randn({w.samples, 1, 28, 28});
    w.y = torch::randint(0, 10, {w.samples}, torch::kLong);
    torch::manual_seed(100 + hvd::rank());
    namespace nn = torch::nn;
    nn::Sequential cnn(nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)), nn::ReLU(),
                       nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)),
                       nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(16 * 7 * 7, 10));
    w.module = cnn.ptr();
    w.forward = [cnn](const torch::Tensor& in) mutable { return cnn->forward(in); };
    w.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
      return torch::nn::functional::cross_entropy(out, y);
    };
  }
  return w;
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

  const Workload w = make_workload(args);
  const int64_t batch = w.batch;
  torch::optim::SGD sgd(w.module->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
  hvd::DistributedOptimizer opt(sgd, w.module->named_parameters());

  hvd::elastic::Sampler sampler(w.samples, /*shuffle=*/true, /*seed=*/1);
  hvd::elastic::TorchState state(w.module, sgd, &sampler);
  int64_t& epoch = state.field<int64_t>("epoch");
  int64_t& step = state.field<int64_t>("step");
  state.register_reset_callbacks({[&] {
    event("reset at commit " + std::to_string(state.commit_id()) + " step " + std::to_string(step));
  }});

  // "batch step S epoch E np N [[i, ...], ...]": every rank's indices (padded to batch + 1
  // with the count first, so that one allgather of equal rows carries them).
  auto log_batch = [&](const std::vector<int64_t>& idx, int64_t done, int64_t ep) {
    torch::Tensor row = torch::full({1, batch + 1}, -1, torch::kLong);
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
    for (; epoch < args.epochs;) {
      const int64_t batches = (sampler.size() + batch - 1) / batch;
      for (int64_t b = 0; b < batches; ++b) {
        if (args.fail == "invalid" && step == args.fail_step && hvd::rank() == args.fail_rank) {
          throw std::invalid_argument("elastic_train: step " + std::to_string(step) +
                                      " got an invalid batch (simulated bug)");
        }
        if (args.fail != "none" && args.fail != "invalid" && generation == 0 &&
            step == args.fail_step && hvd::rank() == args.fail_rank) {
          event("failing (" + args.fail + ") at step " + std::to_string(step));
          ::kill(::getpid(), args.fail == "stop" ? SIGSTOP : SIGKILL);
        }
        if (generation == 0 && args.long_step > 0 && step == 2) long_step(args.long_step, event);
        const std::vector<int64_t> idx = sampler.get_indices(b, batch);
        if (args.log_batches) log_batch(idx, step, epoch);
        if (args.step_sleep > 0)
          std::this_thread::sleep_for(std::chrono::duration<double>(args.step_sleep));
        const double t_step = now_ms(), cpu_step = thread_cpu_ms();
        const torch::Tensor rows = torch::tensor(idx, torch::kLong);
        opt.zero_grad();
        const torch::Tensor loss =
            w.loss(w.forward(w.x.index_select(0, rows)), w.y.index_select(0, rows));
        loss.backward();
        opt.step();
        ++step;
        if (first) {
          event("first step done (step " + std::to_string(step) + ")");
          first = false;
        }
        sampler.record_batch(b, batch);
        if (args.time_steps && hvd::rank() == 0) {
          event("step " + std::to_string(step) + " took " + std::to_string(now_ms() - t_step) +
                " ms cpu " + std::to_string(thread_cpu_ms() - cpu_step) + " ms");
        }
        if (step % args.commit_every == 0) {
          const double t = now_ms(), cpu = thread_cpu_ms();
          s.commit();
          event("commit " + std::to_string(s.commit_id()) + " at step " + std::to_string(step) +
                " took " + std::to_string(now_ms() - t) + " ms cpu " +
                std::to_string(thread_cpu_ms() - cpu) + " ms");
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
    for (const auto& p : w.module->named_parameters()) {
      out << p.key();
      const torch::Tensor t = p.value().detach().to(torch::kFloat64).contiguous();
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
