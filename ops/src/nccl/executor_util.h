// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the NCCL executor's source files. Private.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "device_state.h"
#include "hvd/core/executor.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/kernels.h"
#include "hvd/ops/nccl/plan.h"

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

/// A fused response's tensors laid out in the fusion buffer (fused_layout, `multiple` equal
/// chunks), with the copies into it (a tensor that is not valid contributes zeros) and out of it
/// (valid tensors only).
struct FusedStage {
  std::vector<int64_t> numels;
  FusedLayout layout;
  uint8_t* buf = nullptr;
  std::vector<CopyDesc> in, out;
};

/// Fills `*st` for `es`; a failed allocation returns d->fail_response()'s status.
inline Status stage_fused(DeviceState* d, const std::vector<core::TensorEntry*>& es,
                          const Inputs& in, size_t esize, int64_t multiple, FusedStage* st) {
  st->numels.resize(es.size());
  for (size_t i = 0; i < es.size(); ++i) st->numels[i] = es[i]->input.numel();
  st->layout = fused_layout(st->numels, esize, multiple);
  auto fb = d->fusion.get(static_cast<size_t>(std::max<int64_t>(st->layout.padded, 1)) * esize);
  if (!fb.ok()) return d->fail_response(fb.status());
  st->buf = static_cast<uint8_t*>(fb.value());
  for (size_t i = 0; i < es.size(); ++i) {
    uint8_t* slot = st->buf + static_cast<size_t>(st->layout.offset[i]) * esize;
    const bool ok = in.valid(i);
    st->in.push_back({ok ? es[i]->input.data : nullptr, slot, st->numels[i]});
    if (ok) st->out.push_back({slot, es[i]->output.data, st->numels[i]});
  }
  return Status::OK();
}

}  // namespace hvd::ops::nccl
