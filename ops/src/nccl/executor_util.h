// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the NCCL executor's source files. Private.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "device_state.h"
#include "hvd/core/executor.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/kernels.h"

namespace hvd::ops::nccl {

inline Status unsupported_dtype(const core::Response& r) {
  return invalid_argument(core::describe(r.op, r.names.front()) + ": " + dtype_name(r.dtype) +
                          " cannot be reduced on the GPU (NCCL has no such type); use a "
                          "32-bit type or a host tensor");
}

/// The local checks of one response's tensors. A tensor that fails them (a host or invalid
/// pointer) is not touched: this rank still takes part in the collective with zeros (peers
/// must not hang waiting for it) and the response fails here with the first such error.
class Inputs {
 public:
  Inputs(DeviceState* d, const std::vector<core::TensorEntry*>& es)
      : d_(d), es_(es), valid_(es.size(), false) {}

  /// Checks inputs (and outputs when already known). Host stand-ins of a joined rank are
  /// "not valid" without an error. Returns only errors that stop the whole response.
  Status check(bool outputs_known) {
    for (size_t i = 0; i < es_.size(); ++i) {
      const core::TensorEntry* e = es_[i];
      if (e->input.device.kind != DeviceKind::kCuda) continue;
      Status s = check_device_pointer(e->input.data, e->input.bytes(), d_->device, *e, "input");
      if (s.ok() && outputs_known && e->output.data != e->input.data) {
        s = check_device_pointer(e->output.data, e->output.bytes(), d_->device, *e, "output");
      }
      if (s.ok()) {
        valid_[i] = true;
      } else if (first_.ok()) {
        first_ = s;
      }
    }
    return Status::OK();
  }
  /// Marks entry `i` failed (e.g. its allocated output is not device memory).
  void fail(size_t i, const Status& s) {
    valid_[i] = false;
    if (first_.ok()) first_ = s;
  }
  bool valid(size_t i) const { return valid_[i]; }
  Status status() const { return first_; }
  /// A zeroed device buffer of at least `bytes`, shared by every failed tensor of the response.
  Result<void*> zeros(size_t bytes) {
    auto b = d_->scratch.get(std::max<size_t>(bytes, 16));
    if (!b.ok()) return b;
    cudaError_t e = cudaMemsetAsync(b.value(), 0, std::max<size_t>(bytes, 16), d_->stream);
    if (e != cudaSuccess) return cuda_error(e, "cudaMemsetAsync", __FILE__, __LINE__);
    return b;
  }

 private:
  DeviceState* d_;
  const std::vector<core::TensorEntry*>& es_;
  std::vector<bool> valid_;
  Status first_;
};

}  // namespace hvd::ops::nccl
