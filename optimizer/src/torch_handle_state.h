// SPDX-License-Identifier: Apache-2.0
// The shared state behind a TorchHandle (private to hvd_optimizer).
#pragma once

#include <torch/types.h>

#include <mutex>
#include <utility>
#include <vector>

#include "hvd/core/handle.h"

namespace hvd::optim::detail {

/// Keeps inputs, outputs and staging copies alive until the collective is done.
struct TorchHandleState {
  Handle handle;
  /// Grouped collectives whose core API returns one handle per tensor: the others (all are
  /// waited on; `handle` is the first).
  std::vector<Handle> more;
  std::vector<torch::Tensor> keep;  ///< inputs and contiguous staging buffers
  /// What wait() returns. Outputs whose size negotiation decides are allocated into their slot
  /// by the core's Allocator on the background thread, before the handle completes.
  std::vector<torch::Tensor> outputs;
  /// (user tensor, staging buffer): copied back once, after completion (in-place, non-contiguous)
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copy_back;
  std::once_flag finished;
};

}  // namespace hvd::optim::detail
