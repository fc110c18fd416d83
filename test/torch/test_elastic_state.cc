// SPDX-License-Identifier: Apache-2.0
// [mpi] hvd::elastic::TorchState (save/restore/sync of model, optimizer, fields and sampler),
// host updates and run() outside hvdrun's elastic mode. The resume across generations is the
// [elastic] test elastic_cpp_test.py.
#include <stdlib.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hvd/torch.h"

// libtorch pulls in glog, whose CHECK macro would shadow Catch's: include Catch last.
#undef CHECK
#include "hvd_catch.h"

using hvd::test::Contains;

namespace {

struct Job {
  torch::nn::Linear model{nullptr};
  std::unique_ptr<torch::optim::SGD> sgd;
  explicit Job(int seed) {
    torch::manual_seed(seed);
    model = torch::nn::Linear(3, 2);
    model->to(torch::kFloat64);
    sgd = std::make_unique<torch::optim::SGD>(model->parameters(),
                                              torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  void step(double x) {
    sgd->zero_grad();
    model->forward(torch::full({4, 3}, x, torch::kFloat64)).pow(2).sum().backward();
    sgd->step();
  }
  std::vector<torch::Tensor> params() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }
  std::vector<torch::Tensor> momenta() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) {
      const auto* s =
          dynamic_cast<const torch::optim::SGDParamState*>(hvd::optim::optimizer_state(*sgd, p));
      REQUIRE(s);
      out.push_back(s->momentum_buffer().clone());
    }
    return out;
  }
};

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("TorchState restore brings back the committed model, momentum, fields and sampler",
          "[mpi]") {
  Job job(7);
  hvd::elastic::Sampler sampler(16, true, 3);
  hvd::elastic::TorchState state(job.model, *job.sgd, &sampler);
  int64_t& epoch = state.field<int64_t>("epoch", 1);
  double& lr = state.field<double>("lr", 0.5);
  std::string& tag = state.field<std::string>("tag", "a");
  job.step(1.0);
  job.step(2.0);
  sampler.record_batch(0, 2);
  epoch = 2;
  tag = "b";
  state.commit();  // not in elastic mode: memory only (and the host-update check)
  CHECK(state.commit_id() == 1);
  const auto params = job.params(), momenta = job.momenta();
  const auto processed = sampler.processed();

  job.step(3.0);
  sampler.record_batch(1, 2);
  epoch = 9;
  lr = 0.25;
  tag = "c";
  REQUIRE_FALSE(same(job.params(), params));
  state.restore();
  CHECK(same(job.params(), params));
  CHECK(same(job.momenta(), momenta));
  CHECK(epoch == 2);
  CHECK(lr == 0.5);
  CHECK(tag == "b");
  CHECK(sampler.processed() == processed);
  // The epoch goes on with the samples not yet processed at the commit.
  hvd::elastic::Sampler expect(16, true, 3);
  expect.load(0, std::vector<int64_t>(processed.begin(), processed.end()));
  CHECK(sampler.indices() == expect.indices());
  CHECK(sampler.size() == (16 - 2 * hvd::size() + hvd::size() - 1) / hvd::size());
  // Training goes on from the restored state exactly as from the committed one.
  Job ref(7);
  ref.step(1.0);
  ref.step(2.0);
  ref.step(3.0);
  job.step(3.0);
  CHECK(same(job.params(), ref.params()));
}

TEST_CASE("TorchState sync gives every rank rank 0's model, momentum and fields", "[mpi]") {
  Job job(100 + hvd::rank());
  job.step(1.0 + hvd::rank());
  hvd::elastic::TorchState state(job.model, *job.sgd);
  int64_t& epoch = state.field<int64_t>("epoch", hvd::rank());
  state.sync();
  Job rank0(100);  // rank 0's values, computed here independently
  rank0.step(1.0);
  CHECK(same(job.params(), rank0.params()));
  CHECK(same(job.momenta(), rank0.momenta()));
  CHECK(epoch == 0);
  // What sync gave is also the saved state.
  job.step(5.0);
  state.restore();
  CHECK(same(job.params(), rank0.params()));
}

TEST_CASE("a TorchState field asked for with another type is an error naming it", "[mpi]") {
  Job job(1);
  hvd::elastic::TorchState state(job.model, *job.sgd);
  state.set<int64_t>("epoch", 3);
  CHECK(state.get<int64_t>("epoch") == 3);
  CHECK_THROWS_WITH(state.get<double>("epoch"), Contains("field 'epoch' holds a int64_t"));
}

TEST_CASE("a host update told to rank 0 interrupts every rank at the same check", "[mpi]") {
  Job job(1);
  hvd::elastic::TorchState state(job.model, *job.sgd);
  state.check_host_updates();  // nothing yet
  if (hvd::rank() == 0) {
    state.on_hosts_updated(5, hvd::elastic::HostUpdateResult::kAdded);
  }
  bool skip_sync = false;
  try {
    state.check_host_updates();
    FAIL("no HostsUpdatedInterrupt");
  } catch (const hvd::elastic::HostsUpdatedInterrupt& e) {
    skip_sync = e.skip_sync();
  }
  CHECK(skip_sync);            // hosts were only added
  state.check_host_updates();  // seen: no second interrupt
  if (hvd::rank() == 0) state.on_hosts_updated(6, hvd::elastic::HostUpdateResult::kRemoved);
  CHECK_THROWS_AS(state.commit(), hvd::elastic::HostsUpdatedInterrupt);
}

TEST_CASE("run outside elastic mode syncs, returns fn's result and lets errors propagate",
          "[mpi]") {
  Job job(200 + hvd::rank());
  hvd::elastic::TorchState state(job.model, *job.sgd);
  const int got = hvd::elastic::run(state, [](hvd::elastic::TorchState&) { return 7; });
  CHECK(got == 7);
  CHECK(same(job.params(), Job(200).params()));  // synced from rank 0 before fn ran
  CHECK_THROWS_AS(hvd::elastic::run(state,
                                    [](hvd::elastic::TorchState&) {
                                      throw hvd::Error(hvd::peer_failure("a rank died"));
                                    }),
                  hvd::Error);
}

TEST_CASE("hvdrun's host-change file interrupts every rank once per change", "[mpi]") {
  Job job(1);
  hvd::elastic::TorchState state(job.model, *job.sgd);
  char dir[] = "/tmp/hvd_elastic_hosts_XXXXXX";
  std::string path = hvd::rank() == 0 ? std::string(::mkdtemp(dir)) + "/hosts" : "";
  path = hvd::broadcast_object(path, 0, "hosts.path");
  ::setenv("HVD_ELASTIC_HOSTS_FILE", path.c_str(), 1);  // what hvdrun's wrapper sets
  auto post = [&](const char* text) {
    if (hvd::rank() == 0) std::ofstream(path) << text;
  };
  auto interrupted = [&](bool* skip_sync) {
    try {
      state.check_host_updates();
    } catch (const hvd::elastic::HostsUpdatedInterrupt& e) {
      *skip_sync = e.skip_sync();
      return true;
    }
    return false;
  };
  bool skip = true;
  CHECK_FALSE(interrupted(&skip));  // no file yet
  post("1 1\n");                    // a host removed
  CHECK(interrupted(&skip));
  CHECK_FALSE(skip);
  CHECK_FALSE(interrupted(&skip));  // the same change is seen once
  post("2 2\n");                    // a host added
  CHECK(interrupted(&skip));
  CHECK(skip);
  ::unsetenv("HVD_ELASTIC_HOSTS_FILE");
  hvd::barrier();
  if (hvd::rank() == 0) std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}
