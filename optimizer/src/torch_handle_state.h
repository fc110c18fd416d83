// SPDX-License-Identifier: Apache-2.0
// The shared state behind a TorchHandle (private to hvd_optimizer).
#pragma once

#include <torch/types.h>

#include <mutex>
#include <utility>
#include <vector>

#include "hvd/core/handle.h"

namespace hvd::optim::detail {

/// Keeps inputs, outputs and staging copies alive until the collective is done, and past that
/// until hvd let go of them (after an abort a handle fails at once while the background thread
/// may still write them: the destructor parks them with core::keep_until_released()).
struct TorchHandleState {
  TorchHandleState() = default;
  TorchHandleState(const TorchHandleState&) = delete;
  TorchHandleState& operator=(const TorchHandleState&) = delete;
  ~TorchHandleState() {
    auto all_released = [&] {
      if (handle.valid() && !handle.released()) return false;
      for (const Handle& h : more) {
        if (h.valid() && !h.released()) return false;
      }
      return true;
    };
    if (all_released()) return;
    struct Tensors {
      std::vector<torch::Tensor> keep, outputs;
      std::vector<std::pair<torch::Tensor, torch::Tensor>> copy_back;
    };
    auto owned = std::make_shared<Tensors>(
        Tensors{std::move(keep), std::move(outputs), std::move(copy_back)});
    core::keep_until_released(handle, owned);  // each handle holds them until it let go
    for (const Handle& h : more) core::keep_until_released(h, owned);
  }

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
