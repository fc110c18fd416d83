// SPDX-License-Identifier: Apache-2.0
// [mpi] Process sets on the libtorch helpers. At np 4 the set under test is global ranks [1, 3]
// (root: global rank 3) and ranks 0 and 2 run their own collectives on [0, 2] meanwhile; at np 1
// and 2 the global set is passed explicitly. Every expectation is computed by the test from the
// member ranks; a root outside the set must fail on every member, naming the root and the set.
#include <torch/nn.h>
#include <torch/optim.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "hvd/torch.h"
#include "watchdog.h"

// libtorch pulls in glog, whose CHECK macro would shadow Catch's: include Catch last.
#undef CHECK
#include "hvd_catch.h"

using hvd::test::Contains;

namespace {

/// The sets a test case runs on: at np >= 4 `set` = [1, 3] and `others` = every other rank,
/// both removed at the end; below, `set` is the global set (every rank a member).
class Sets {
 public:
  Sets() : split_(hvd::size() >= 4) {
    if (!split_) {
      members_.resize(hvd::size());
      std::iota(members_.begin(), members_.end(), 0);
      return;
    }
    members_ = {1, 3};
    for (int r = 0; r < hvd::size(); ++r) {
      if (r != 1 && r != 3) others_members_.push_back(r);
    }
    set_ = hvd::add_process_set(members_);
    others_ = hvd::add_process_set(others_members_);
  }
  Sets(const Sets&) = delete;
  Sets& operator=(const Sets&) = delete;
  ~Sets() {
    if (!split_) return;
    hvd::remove_process_set(set_);
    hvd::remove_process_set(others_);
  }

  bool split() const { return split_; }
  bool member() const { return is_member(hvd::rank()); }
  bool is_member(int rank) const {
    return std::find(members_.begin(), members_.end(), rank) != members_.end();
  }
  const hvd::ProcessSet& set() const { return set_; }
  const hvd::ProcessSet& others() const { return others_; }
  /// This rank's own set and its global ranks.
  const hvd::ProcessSet& mine() const { return member() ? set_ : others_; }
  const std::vector<int>& my_ranks() const { return member() ? members_ : others_members_; }
  /// The root of this rank's set: its last global rank (3 in [1, 3]).
  int my_root() const { return my_ranks().back(); }
  int root() const { return members_.back(); }
  /// A global rank outside this rank's set (size() for the global set: out of range).
  int outsider() const {
    if (!split_) return hvd::size();
    return member() ? others_members_.front() : members_.front();
  }
  /// What a refusal of a root outside this rank's set must say besides the root.
  std::string outsider_reason() const {
    if (!split_) return "out of range";
    // Consecutive ranks as a range, as hvd writes rank lists: [0, 2, 4, 5, 6] is "0,2,4-6".
    const std::vector<int>& m = my_ranks();
    std::string ranks;
    for (size_t i = 0; i < m.size();) {
      size_t j = i;
      while (j + 1 < m.size() && m[j + 1] == m[j] + 1) ++j;
      ranks += (ranks.empty() ? "" : ",") + std::to_string(m[i]);
      if (j > i) ranks += "-" + std::to_string(m[j]);
      i = j + 1;
    }
    return "process set " + std::to_string(mine().id()) + " (global ranks " + ranks + ")";
  }

 private:
  bool split_;
  std::vector<int> members_, others_members_;
  hvd::ProcessSet set_, others_;
};

torch::Tensor ranked(int rank, c10::ScalarType t, torch::IntArrayRef shape = {3, 4}) {
  return torch::full(shape, rank + 1, torch::TensorOptions().dtype(t));
}

/// sum / mean / max of (rank + 1) over `ranks`, computed here.
double sum_of(const std::vector<int>& ranks) {
  double s = 0;
  for (int r : ranks) s += r + 1;
  return s;
}
double mean_of(const std::vector<int>& ranks) { return sum_of(ranks) / ranks.size(); }
double max_of(const std::vector<int>& ranks) {
  return *std::max_element(ranks.begin(), ranks.end()) + 1;
}

bool all_equal(const torch::Tensor& t, double v) {
  return torch::equal(t.to(torch::kDouble), torch::full_like(t, v, torch::kDouble));
}

}  // namespace

TEST_CASE("torch allreduce and grouped_allreduce on a process set reduce over its members",
          "[mpi]") {
  Sets sets;
  const hvd::ProcessSet& ps = sets.mine();
  const std::vector<int>& m = sets.my_ranks();
  const int r = hvd::rank();
  INFO("rank " << r << " on process set " << ps.id());
  Watchdog dog("allreduce on a process set", 60);
  const auto avg = hvd::ReduceOp::kAverage, sum = hvd::ReduceOp::kSum;

  torch::Tensor t = ranked(r, torch::kFloat);
  CHECK(all_equal(hvd::allreduce(t, "ps.ar", avg, 1.0, 1.0, ps), mean_of(m)));
  CHECK(all_equal(t, r + 1));  // out of place: input untouched
  hvd::allreduce_(t, "ps.ar_", sum, 2.0, 0.25, ps);
  CHECK(all_equal(t, sum_of(m) * 0.5));
  CHECK(all_equal(
      hvd::allreduce_async(ranked(r, torch::kLong), "", hvd::ReduceOp::kMax, 1.0, 1.0, ps).wait(),
      max_of(m)));
  torch::Tensor d = ranked(r, torch::kDouble).t();  // non-contiguous, in place
  hvd::synchronize(hvd::allreduce_async_(d, "ps.ar_async_", sum, 1.0, 1.0, ps));
  CHECK(all_equal(d, sum_of(m)));

  std::vector<torch::Tensor> ts = {ranked(r, torch::kFloat), ranked(r, torch::kDouble, {5}),
                                   ranked(r, torch::kInt, {2, 2})};
  auto outs = hvd::grouped_allreduce(ts, "ps.gar", sum, 1.0, 1.0, ps);
  REQUIRE(outs.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(outs[i].sizes() == ts[i].sizes());
    CHECK(all_equal(outs[i], sum_of(m)));
    CHECK(all_equal(ts[i], r + 1));
  }
  auto async_outs = hvd::grouped_allreduce_async(ts, "", avg, 1.0, 1.0, ps).wait_all();
  CHECK(all_equal(async_outs[1], mean_of(m)));
  hvd::grouped_allreduce_async_(ts, "ps.gar_async_", sum, 1.0, 1.0, ps).wait_all();
  for (const auto& x : ts) CHECK(all_equal(x, sum_of(m)));
  std::vector<torch::Tensor> us = {ranked(r, torch::kFloat), ranked(r, torch::kDouble, {7})};
  hvd::grouped_allreduce_(us, "ps.gar_", avg, 1.0, 1.0, ps);
  for (const auto& x : us) CHECK(all_equal(x, mean_of(m)));

  // The same calls without a process set still run on every rank (source compatibility).
  std::vector<int> everyone(hvd::size());
  std::iota(everyone.begin(), everyone.end(), 0);
  CHECK(all_equal(hvd::allreduce(ranked(r, torch::kFloat), "ps.global", sum), sum_of(everyone)));
}

TEST_CASE("torch broadcast on a process set takes a global root and refuses one outside it",
          "[mpi]") {
  Sets sets;
  const hvd::ProcessSet& ps = sets.mine();
  const int r = hvd::rank(), root = sets.my_root();
  INFO("rank " << r << " on process set " << ps.id() << ", root " << root);
  Watchdog dog("broadcast on a process set", 60);

  torch::Tensor t = ranked(r, torch::kFloat);
  CHECK(all_equal(hvd::broadcast(t, root, "ps.b", ps), root + 1));
  CHECK(all_equal(t, r + 1));
  hvd::broadcast_(t, root, "ps.b_", ps);
  CHECK(all_equal(t, root + 1));
  CHECK(all_equal(hvd::broadcast_async(ranked(r, torch::kLong), root, "", ps).wait(), root + 1));
  torch::Tensor b = torch::full({4}, r == root, torch::kBool);
  hvd::synchronize(hvd::broadcast_async_(b, root, "ps.b_async_", ps));
  CHECK(b.all().item<bool>());

  const int out = sets.outsider();
  const std::string root_said = "root rank " + std::to_string(out),
                    set_said = sets.outsider_reason();
  torch::nn::Linear lin(2, 2);
  torch::optim::SGD sgd(lin->parameters(), torch::optim::SGDOptions(0.1));
  hvd::optim::NamedTensors named = {{"w", ranked(r, torch::kFloat)}};
  const std::vector<std::pair<const char*, std::function<void()>>> calls = {
      {"broadcast", [&] { hvd::broadcast(ranked(r, torch::kFloat), out, "ps.outside", ps); }},
      {"broadcast_async_",
       [&] { hvd::broadcast_async_(ranked(r, torch::kFloat), out, "", ps).wait(); }},
      {"broadcast_parameters", [&] { hvd::broadcast_parameters(named, out, ps); }},
      {"broadcast_object", [&] { hvd::broadcast_object<int64_t>(r, out, "", ps); }},
      {"broadcast_optimizer_state", [&] { hvd::broadcast_optimizer_state(sgd, out, ps); }},
  };
  for (const auto& [what, call] : calls) {
    INFO(what << " rooted at rank " << out);
    std::string err = "(no error)";
    try {
      call();
    } catch (const hvd::Error& e) {
      err = e.what();
    }
    CHECK_THAT(err, Contains(root_said) && Contains(set_said));
  }
  CHECK(all_equal(named[0].second, r + 1));
  // The set goes on after the refusals.
  CHECK(all_equal(hvd::broadcast(ranked(r, torch::kFloat), root, "ps.after", ps), root + 1));
}

namespace {

/// A small model with parameters and buffers (batch-norm statistics) and its SGD with
/// momentum, after one step as global rank `as_rank` takes it (its own initial weights, data,
/// learning rate): what any rank can compute for any rank.
struct Trained {
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::SGD> opt;

  explicit Trained(int as_rank) {
    torch::manual_seed(100 + as_rank);
    model = torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::BatchNorm1d(5),
                                  torch::nn::Linear(5, 3));
    opt = std::make_unique<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(0.01 * (as_rank + 1)).momentum(0.9));
    torch::Tensor x = torch::randn({8, 6});
    opt->zero_grad();
    model->forward(x).pow(2).sum().backward();
    opt->step();
  }

  /// Parameters, buffers, momentum buffers and the learning rate, flattened to float64.
  torch::Tensor flat() {
    std::vector<torch::Tensor> parts;
    for (const auto& p : model->parameters()) parts.push_back(p.detach().flatten());
    for (const auto& b : model->buffers()) parts.push_back(b.flatten());
    for (const auto& p : model->parameters()) {
      auto* st = hvd::optim::optimizer_state(*opt, p);
      REQUIRE(st != nullptr);
      parts.push_back(static_cast<torch::optim::SGDParamState*>(st)->momentum_buffer().flatten());
    }
    parts.push_back(torch::tensor({opt->param_groups()[0].options().get_lr()}, torch::kDouble));
    for (auto& x : parts) x = x.to(torch::kDouble);
    return torch::cat(parts);
  }
};

}  // namespace

TEST_CASE(
    "broadcast helpers on a process set give its members the root's parameters, optimizer state "
    "and objects and leave the other ranks theirs",
    "[mpi]") {
  Sets sets;
  const int r = hvd::rank(), root = sets.root();
  INFO("rank " << r << ", root " << root);
  Watchdog dog("broadcast helpers on a process set", 60);
  Trained mine(r);
  std::string word = "word of rank " + std::to_string(r);
  int64_t number = 10 * r;
  if (sets.member()) {
    hvd::broadcast_parameters(mine.model, root, sets.set());
    hvd::broadcast_optimizer_state(*mine.opt, root, sets.set());
    word = hvd::broadcast_object(word, root, "", sets.set());
    number = hvd::broadcast_object(number, root, "", sets.set());
  } else {
    // Meanwhile the other ranks run their own collectives on their own set.
    const std::vector<int>& m = sets.my_ranks();
    CHECK(all_equal(
        hvd::allreduce(ranked(r, torch::kFloat), "", hvd::ReduceOp::kSum, 1.0, 1.0, sets.others()),
        sum_of(m)));
    CHECK(hvd::broadcast_object<int64_t>(7 * r, m.back(), "", sets.others()) == 7 * m.back());
  }
  const int source = sets.member() ? root : r;
  CHECK(word == "word of rank " + std::to_string(source));
  CHECK(number == 10 * source);

  // Every rank checks every rank's state against the state it computes itself.
  torch::Tensor all = hvd::allgather(mine.flat().unsqueeze(0), "ps.states");
  REQUIRE(all.size(0) == hvd::size());
  for (int q = 0; q < hvd::size(); ++q) {
    const int expected_from = sets.is_member(q) ? root : q;
    INFO("state of rank " << q << " against rank " << expected_from << "'s");
    CHECK(torch::equal(all[q], Trained(expected_from).flat()));
  }
  // Unnamed broadcast_object calls are numbered per set: after those on the sets above, an
  // unnamed one on the global set still pairs up on every rank.
  CHECK(hvd::broadcast_object<int64_t>(r + 100, 0) == 100);
}
