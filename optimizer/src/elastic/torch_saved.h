// SPDX-License-Identifier: Apache-2.0
// The pieces of hvd::elastic::TorchState's saved form (torch_state.cc defines the form): the
// optimizer's state as an IValue tree, a commit's copy of a tree into the previous commit's
// tensors, and a tree's snapshot payload.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <string>

namespace hvd::elastic::detail {

/// Throws hvd::Error: the committed state does not fit this TorchState (`what` says how).
[[noreturn]] void bad_snapshot(const std::string& what);

/// The optimizer's param-group options and per-parameter state as a tree holding the live
/// tensors (not copies). Field by field for the optimizers libtorch ships (SGD, Adam, AdamW,
/// Adagrad, RMSprop; the one list of their fields is in torch_saved.cc); any other optimizer as
/// the bytes of its serialize() archive.
c10::IValue optimizer_tree(torch::optim::Optimizer& optimizer);
/// Writes a tree of optimizer_tree() back into `optimizer` (its tensors copied: the optimizer
/// never holds a tensor of the tree). Throws hvd::Error when the tree is of another optimizer.
void load_optimizer_tree(torch::optim::Optimizer& optimizer, const c10::IValue& tree);

/// A copy of `now` (lists, tensors, numbers, strings, None) that shares nothing with it. Each
/// tensor is copied into the tensor at the same place of `old` when that one has the same
/// shape, dtype and device (then it is reused), else cloned: once shapes settle, a commit
/// allocates no tensor memory.
c10::IValue copy_into(const c10::IValue& old, const c10::IValue& now);

/// A tree as snapshot bytes: a magic, the tensors' dtypes and shapes, the tree pickled with its
/// tensors as references, then each tensor's raw bytes (no zip archive), and back. from_payload
/// throws hvd::Error on bytes that are not such a payload.
std::string to_payload(const c10::IValue& tree);
c10::IValue from_payload(const std::string& bytes);

}  // namespace hvd::elastic::detail
