// SPDX-License-Identifier: Apache-2.0
// broadcast_parameters / broadcast_optimizer_state / broadcast_object.
//
// Optimizer state travels as bytes: root serializes its optimizer with libtorch's own archive
// (optimizer.save(), the format torch::save uses), broadcasts the size and then the bytes as a
// uint8 tensor, and every other rank clears its state and loads the archive (optimizer.load()).
// libtorch's load maps saved state to parameters by position within each param group; the group
// options (which libtorch 1.13's load ignores) travel beside it and are read back through each
// options type's own serialize(). Ranks that have taken no step get exactly root's state.
#include "hvd/optim/broadcast.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

#include "hvd/core/status.h"
#include "hvd/hvd.h"
#include "hvd/optim/collectives.h"
#include "hvd/optim/tensor_adapter.h"

namespace hvd::optim {
namespace {

/// "<prefix>.<n>" with the next number of (process set, prefix): the automatic names of unnamed
/// broadcast_object and broadcast_optimizer_state calls. Counted per set, since only a set's
/// members make its calls: the ranks of each set then number them alike.
std::string next_name(const char* prefix, const ProcessSet& ps) {
  static std::mutex mu;
  static std::map<std::pair<int32_t, std::string>, uint64_t> counters;
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lk(mu);
    n = counters[{ps.id(), prefix}]++;
  }
  return std::string(prefix) + "." + std::to_string(n);
}

}  // namespace

void broadcast_parameters(const NamedTensors& named_tensors, int root_rank,
                          const ProcessSet& process_set) {
  std::vector<TorchHandle> handles;
  handles.reserve(named_tensors.size());
  for (const auto& [name, t] : named_tensors) {
    if (!t.defined()) continue;
    handles.push_back(
        broadcast_async_(t.detach(), root_rank, "broadcast_parameters." + name, process_set));
  }
  for (auto& h : handles) h.wait();
}

void broadcast_parameters(const torch::OrderedDict<std::string, torch::Tensor>& state_dict,
                          int root_rank, const ProcessSet& process_set) {
  NamedTensors named;
  named.reserve(state_dict.size());
  for (const auto& item : state_dict) named.emplace_back(item.key(), item.value());
  broadcast_parameters(named, root_rank, process_set);
}

void broadcast_parameters(const torch::nn::Module& module, int root_rank,
                          const ProcessSet& process_set) {
  NamedTensors named;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    named.emplace_back("param." + item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    named.emplace_back("buffer." + item.key(), item.value());
  }
  broadcast_parameters(named, root_rank, process_set);
}

std::vector<char> broadcast_bytes(const std::vector<char>& bytes, int root_rank,
                                  const std::string& name, const ProcessSet& process_set) {
  const std::string base = name.empty() ? next_name("broadcast_object", process_set) : name;
  const bool root = hvd::rank() == root_rank;
  torch::Tensor size = torch::tensor({static_cast<int64_t>(root ? bytes.size() : 0)}, torch::kLong);
  broadcast_(size, root_rank, base + ".size", process_set);
  const int64_t n = size.item<int64_t>();
  torch::Tensor data = torch::empty({n}, torch::kByte);
  if (root && n > 0) std::memcpy(data.data_ptr(), bytes.data(), static_cast<size_t>(n));
  broadcast_(data, root_rank, base + ".data", process_set);
  const char* p = static_cast<const char*>(data.data_ptr());
  return std::vector<char>(p, p + n);
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank,
                               const ProcessSet& process_set) {
  const std::string name = next_name("broadcast_optimizer_state", process_set);
  std::vector<char> bytes;
  if (hvd::rank() == root_rank) {
    const std::string s = detail::save_optimizer(optimizer);
    bytes.assign(s.begin(), s.end());
  }
  bytes = broadcast_bytes(bytes, root_rank, name, process_set);
  if (hvd::rank() == root_rank) return;
  detail::load_optimizer(optimizer, std::string(bytes.begin(), bytes.end()),
                         "broadcast_optimizer_state: rank " + std::to_string(hvd::rank()) +
                             " cannot load the state of rank " + std::to_string(root_rank));
}

namespace detail {

std::string save_optimizer(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive, state(archive.compilation_unit());
  optimizer.save(state);
  archive.write("optimizer", state);
  // libtorch 1.13's load() ignores the saved group options: they travel separately.
  const auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::OutputArchive options(archive.compilation_unit());
    groups[i].options().serialize(options);
    archive.write("group_options/" + std::to_string(i), options);
  }
  std::ostringstream os;
  archive.save_to(os);
  return os.str();
}

void load_optimizer(torch::optim::Optimizer& optimizer, const std::string& bytes,
                    const std::string& context) {
  try {
    std::istringstream is(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(is);
    optimizer.state().clear();
    torch::serialize::InputArchive state;
    archive.read("optimizer", state);
    optimizer.load(state);
    auto& groups = optimizer.param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      torch::serialize::InputArchive options;
      archive.read("group_options/" + std::to_string(i), options);
      groups[i].options().serialize(options);
    }
  } catch (const c10::Error& e) {
    throw Error(invalid_argument(context + " (do both optimizers hold the same param groups?): " +
                                 e.what_without_backtrace()));
  }
}

}  // namespace detail

namespace detail {
std::vector<char> pickle(const c10::IValue& value) { return torch::jit::pickle_save(value); }
c10::IValue unpickle(const std::vector<char>& bytes) { return torch::jit::pickle_load(bytes); }
}  // namespace detail

}  // namespace hvd::optim
