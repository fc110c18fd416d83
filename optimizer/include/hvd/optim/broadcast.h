// SPDX-License-Identifier: Apache-2.0
// Start-of-training helpers: make every rank begin from root_rank's parameters, optimizer state
// and plain values (epoch, seed).
//
//   hvd::broadcast_parameters(*model, 0);
//   hvd::broadcast_optimizer_state(optimizer, 0);
//   int64_t start_epoch = hvd::broadcast_object(resume_epoch, 0);
//
// Every rank of the process set (default: the global set) must make the same calls in the same
// order (names are derived from each set's call order when not given); ranks outside the set do
// not call. root_rank is a global rank, as in Horovod, and must be a member of the set: a root
// outside it fails the call on every member, naming the root and the set.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hvd/hvd.h"

namespace hvd::optim {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

/// Overwrites every tensor in place with root_rank's values, on every member of `process_set`.
/// Names identify the tensors across ranks and must be identical (and unique) on every member.
void broadcast_parameters(const NamedTensors& named_tensors, int root_rank,
                          const ProcessSet& process_set = {});
/// As above for a state dict such as module->named_parameters() or named_buffers().
void broadcast_parameters(const torch::OrderedDict<std::string, torch::Tensor>& state_dict,
                          int root_rank, const ProcessSet& process_set = {});
/// Every parameter and buffer of `module` (recursively), e.g. `broadcast_parameters(*model, 0)`.
void broadcast_parameters(const torch::nn::Module& module, int root_rank,
                          const ProcessSet& process_set = {});
template <typename M>
void broadcast_parameters(const torch::nn::ModuleHolder<M>& module, int root_rank,
                          const ProcessSet& process_set = {}) {
  broadcast_parameters(*module, root_rank, process_set);
}

/// Gives every member of `process_set` root_rank's optimizer state: the per-parameter state
/// tensors (momentum buffers, Adam moments and step counts, LBFGS history ...) and every param
/// group's options (lr, betas, weight decay, momentum, eps ...). Works for every libtorch
/// optimizer that implements save()/load() (SGD, Adam, AdamW, Adagrad, RMSprop, LBFGS), also when
/// some ranks have taken no step yet. Members other than root lose their own state. All members'
/// optimizers must hold the same number of param groups with the same number of parameters.
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root_rank,
                               const ProcessSet& process_set = {});

/// root_rank's bytes on every member of `process_set` (sizes may differ before the call).
std::vector<char> broadcast_bytes(const std::vector<char>& bytes, int root_rank,
                                  const std::string& name = "", const ProcessSet& process_set = {});

namespace detail {
/// The optimizer's state (per-parameter state and every param group's options) as bytes, and
/// back (broadcast_optimizer_state and hvd::elastic::TorchState). load_optimizer throws
/// hvd::Error beginning with `context` when the bytes do not fit the optimizer.
std::string save_optimizer(torch::optim::Optimizer& optimizer);
void load_optimizer(torch::optim::Optimizer& optimizer, const std::string& bytes,
                    const std::string& context);
std::vector<char> pickle(const c10::IValue& value);
c10::IValue unpickle(const std::vector<char>& bytes);
}  // namespace detail

/// root_rank's `value` on every member of `process_set`. T is either trivially copyable (int,
/// double, POD structs: sent as raw bytes) or a type c10::IValue converts both ways (std::string,
/// torch::Tensor, std::vector<int64_t|double|bool|std::string>, c10::Dict, std::tuple of these:
/// sent pickled).
template <typename T>
T broadcast_object(const T& value, int root_rank, const std::string& name = "",
                   const ProcessSet& process_set = {}) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    std::vector<char> bytes(sizeof(T));
    std::memcpy(bytes.data(), &value, sizeof(T));
    bytes = broadcast_bytes(bytes, root_rank, name, process_set);
    T out = value;
    std::memcpy(&out, bytes.data(), sizeof(T));
    return out;
  } else {
    return detail::unpickle(
               broadcast_bytes(detail::pickle(c10::IValue(value)), root_rank, name, process_set))
        .template to<T>();
  }
}

}  // namespace hvd::optim
