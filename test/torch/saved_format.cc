// SPDX-License-Identifier: Apache-2.0
// [torch] hvd::elastic::TorchState's saved form across libtorch releases: a commit written by a
// program built against one libtorch (1.13 or 2.6) resumes in one built against the other
// (saved_format_cross_test.sh runs both directions; ctest torch.saved_format saves and loads
// with the same binary).
//
//   hvd_saved_format save FILE  for each optimizer kind below: trains a small model for the
//                               first steps, commits (TorchState::save) and writes the commit
//                               as hvd::elastic's snapshot (encode_snapshot of saved_bytes())
//   hvd_saved_format load FILE  for each kind: restores FILE's commit into fresh objects and
//                               compares them with a fresh run of the same steps here:
//                               parameters and buffers bit for bit; the optimizer's state and
//                               options, the fields and the sampler bit for bit (the restored
//                               objects saved again give the fresh run's payload, byte for
//                               byte); libtorch's optimizer finding the restored state under
//                               its own keys; then the remaining steps, parameters bit for bit
//                               after each.
// Exit status: 0 all equal, 1 a difference (each printed), 2 a usage, file or format error.
//
// The kinds are those whose state has the same fields in libtorch 1.13 and 2.6: SGD with
// momentum (plain and Nesterov), Adam (with and without amsgrad), AdamW, Adagrad, RMSprop. The
// model's arithmetic is elementwise in float64 (no matrix product, no reduction in a gradient)
// and its initial values are exact, so every release computes the same bits from the same state.
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hvd/torch.h"

namespace {

namespace optim = torch::optim;

constexpr char kMagic[] = "HVDSAVEDFORMAT1";
// The snapshots' key: the same in every build, so that one build's file verifies in another.
constexpr hvd::elastic::SnapshotKey kKey = {'h', 'v', 'd', ' ', 's', 'a', 'v', 'e', 'd', ' ', 'f',
                                            'o', 'r', 'm', 'a', 't', ' ', 't', 'e', 's', 't', ' ',
                                            'k', 'e', 'y', ' ', '3', '2', 'b', 'y', 't', 'e'};
const std::vector<double> kBefore = {1.0, -0.5, 2.0};  // the inputs of the steps before the commit
const std::vector<double> kAfter = {0.75, -1.5, 0.5};  // and after it
const char* const kKinds[] = {"sgd",   "sgd_nesterov", "adam",   "adam_amsgrad",
                              "adamw", "adagrad",      "rmsprop"};

std::string libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

// y = w * x + b, loss = sum(y * y): every gradient element depends on its own elements only.
struct Model : torch::nn::Module {
  torch::Tensor w, b, steps;
  explicit Model(double shift) {
    w = register_parameter("w",
                           torch::arange(6, torch::kFloat64).reshape({2, 3}).div(8).add(shift));
    b = register_parameter("b", torch::full({2, 3}, 0.25 + shift, torch::kFloat64));
    steps = register_buffer("steps", torch::zeros({1}, torch::kLong));
  }
};

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind,
                                                 std::vector<torch::Tensor> params) {
  if (kind == "sgd") {
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01));
  }
  if (kind == "sgd_nesterov") {
    return std::make_unique<optim::SGD>(params,
                                        optim::SGDOptions(0.05).momentum(0.8).nesterov(true));
  }
  if (kind == "adam") {
    return std::make_unique<optim::Adam>(
        params, optim::AdamOptions(0.01).betas({0.8, 0.95}).weight_decay(0.001));
  }
  if (kind == "adam_amsgrad") {
    return std::make_unique<optim::Adam>(params, optim::AdamOptions(0.02).amsgrad(true));
  }
  if (kind == "adamw") {
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(0.01).weight_decay(0.1));
  }
  if (kind == "adagrad") {
    return std::make_unique<optim::Adagrad>(
        params, optim::AdagradOptions(0.1).lr_decay(0.01).initial_accumulator_value(0.1));
  }
  return std::make_unique<optim::RMSprop>(params,
                                          optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
}

// A model, its optimizer, a sampler and a TorchState over them with three fields.
struct Job {
  std::shared_ptr<Model> model;
  std::unique_ptr<optim::Optimizer> opt;
  hvd::elastic::Sampler sampler{10, /*shuffle=*/false};
  std::unique_ptr<hvd::elastic::TorchState> state;

  Job(const std::string& kind, double shift) : model(std::make_shared<Model>(shift)) {
    opt = make_optimizer(kind, model->parameters());
    state = std::make_unique<hvd::elastic::TorchState>(model, *opt, &sampler);
    state->field<int64_t>("step", 0);
    state->field<double>("scale", 1.0);
    state->field<std::string>("note", "");
  }
  void step(double x) {
    opt->zero_grad();
    const torch::Tensor y = model->w * x + model->b;
    (y * y).sum().backward();
    opt->step();
    torch::NoGradGuard no_grad;
    model->steps.add_(1);
  }
  // The steps before the commit, and what they leave in the fields and the sampler.
  void train_until_commit() {
    for (double x : kBefore) step(x);
    state->set<int64_t>("step", static_cast<int64_t>(kBefore.size()));
    state->set<double>("scale", 0.375);
    state->set<std::string>("note", "after the first steps");
    sampler.set_epoch(1);
    sampler.record_batch(0, 3);
  }
  std::string payload() {
    state->save();
    return state->saved_bytes();
  }
};

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const torch::Tensor ca = a.detach().cpu().contiguous(), cb = b.detach().cpu().contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Differences between the live tensors of `got` and `want`, one line each.
std::vector<std::string> tensor_differences(const Job& got, const Job& want, const char* when) {
  std::vector<std::string> out;
  const auto compare = [&](const torch::OrderedDict<std::string, torch::Tensor>& g,
                           const torch::OrderedDict<std::string, torch::Tensor>& w) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (i >= g.size() || !same_bits(g[i].value(), w[i].value())) {
        std::ostringstream line;
        line << "'" << w[i].key() << "' " << when << ": "
             << (i < g.size() ? g[i].value() : torch::Tensor()) << " expected " << w[i].value();
        out.push_back(line.str());
      }
    }
  };
  compare(got.model->named_parameters(), want.model->named_parameters());
  compare(got.model->named_buffers(), want.model->named_buffers());
  return out;
}

// One saved commit: "<kind> <snapshot bytes>\n" then the snapshot.
void write_commits(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out << kMagic << ' ' << libtorch_version() << '\n';
  for (const char* kind : kKinds) {
    Job job(kind, 0.0);
    job.train_until_commit();
    const std::string snapshot =
        hvd::elastic::encode_snapshot(
            {static_cast<uint64_t>(kBefore.size()), /*world_size=*/1, job.payload()}, kKey)
            .value();
    out << kind << ' ' << snapshot.size() << '\n' << snapshot;
  }
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
  std::cout << "saved " << std::size(kKinds) << " commits with libtorch " << libtorch_version()
            << " to " << path << "\n";
}

// The checks of one kind's commit `snapshot`; the differences, one line each.
std::vector<std::string> check_commit(const std::string& kind, const std::string& snapshot) {
  std::vector<std::string> bad;
  const auto checked = hvd::elastic::decode_snapshot(snapshot, kKey, "the commit of " + kind);
  if (!checked.ok()) return {checked.status().message()};
  const hvd::elastic::Snapshot* decoded = &checked.value();
  if (decoded->commit_id != kBefore.size() || decoded->world_size != 1) {
    bad.push_back("snapshot header: commit " + std::to_string(decoded->commit_id) + ", world " +
                  std::to_string(decoded->world_size));
  }
  Job want(kind, 0.0);  // the fresh run of the same steps
  want.train_until_commit();
  Job got(kind, 1.0);  // fresh objects with other values, no optimizer state yet
  got.state->load_saved_bytes(decoded->payload);
  got.state->restore();

  for (auto& line : tensor_differences(got, want, "after the restore")) bad.push_back(line);
  if (got.payload() != want.payload()) {
    bad.push_back(
        "the restored optimizer state, options, fields or sampler differ (its payload "
        "saved again is not the fresh run's)");
  }
  if (got.state->get<int64_t>("step") != 3 || got.state->get<double>("scale") != 0.375 ||
      got.state->get<std::string>("note") != "after the first steps" || got.sampler.epoch() != 1 ||
      got.sampler.processed() != want.sampler.processed()) {
    bad.push_back("fields or sampler not restored");
  }
  const size_t params = got.model->parameters().size();
  if (got.opt->state().size() != params) {
    bad.push_back("optimizer state of " + std::to_string(got.opt->state().size()) +
                  " parameters restored, " + std::to_string(params) + " expected");
  }
  for (size_t i = 0; i < kAfter.size(); ++i) {
    got.step(kAfter[i]);
    want.step(kAfter[i]);
    const std::string when = "after step " + std::to_string(kBefore.size() + i + 1);
    for (auto& line : tensor_differences(got, want, when.c_str())) bad.push_back(line);
  }
  // libtorch's own step found the restored state under its key: it added no entry.
  if (got.opt->state().size() != params) {
    bad.push_back("the optimizer's step made new state (" +
                  std::to_string(got.opt->state().size()) + " entries for " +
                  std::to_string(params) + " parameters): the restored keys are not libtorch's");
  }
  return bad;
}

int read_commits(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string magic, saved_by;
  if (!(in >> magic >> saved_by) || magic != kMagic || in.get() != '\n') {
    std::cerr << path << ": not a file of hvd_saved_format save\n";
    return 2;
  }
  std::cout << "loading commits saved with libtorch " << saved_by << " into libtorch "
            << libtorch_version() << "\n";
  size_t failed = 0;
  for (const char* kind : kKinds) {
    std::string name;
    size_t size = 0;
    if (!(in >> name >> size) || name != kind || in.get() != '\n') {
      std::cerr << path << ": no commit of " << kind << " where expected\n";
      return 2;
    }
    std::string snapshot(size, '\0');
    if (!in.read(snapshot.data(), static_cast<std::streamsize>(size))) {
      std::cerr << path << ": the commit of " << kind << " is cut short\n";
      return 2;
    }
    std::vector<std::string> bad;
    try {
      bad = check_commit(kind, snapshot);
    } catch (const std::exception& e) {
      bad.push_back(std::string("error: ") + e.what());
    }
    for (const auto& line : bad) std::cout << "FAIL " << kind << ": " << line << "\n";
    if (bad.empty()) std::cout << "ok " << kind << "\n";
    failed += bad.empty() ? 0 : 1;
  }
  std::cout << (failed ? "FAILED: " : "passed: ") << std::size(kKinds) - failed << " of "
            << std::size(kKinds) << " kinds (saved with libtorch " << saved_by << ", loaded with "
            << libtorch_version() << ")\n";
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "save") != 0 && std::strcmp(argv[1], "load") != 0)) {
    std::cerr << "usage: " << argv[0] << " save|load FILE\n";
    return 2;
  }
  torch::set_num_threads(1);
  try {
    if (std::strcmp(argv[1], "save") == 0) {
      write_commits(argv[2]);
      return 0;
    }
    return read_commits(argv[2]);
  } catch (const std::exception& e) {
    std::cerr << argv[0] << " " << argv[1] << ": " << e.what() << "\n";
    return 2;
  }
}
