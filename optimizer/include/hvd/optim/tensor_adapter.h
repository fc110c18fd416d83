// SPDX-License-Identifier: Apache-2.0
// Adapters between torch::Tensor and hvd's framework-agnostic TensorView.
#pragma once

#include <torch/types.h>

#include <string>

#include "hvd/core/types.h"

namespace hvd::optim {

/// hvd's element type for a torch scalar type: uint8, int8, int16, int32, int64, float16 (Half),
/// bfloat16, float32, float64, bool. Throws hvd::Error (InvalidArgument) for the others (complex,
/// quantized), naming `what`.
DataType to_hvd_dtype(c10::ScalarType t, const std::string& what = "tensor");
/// The torch scalar type for an hvd element type (the inverse of to_hvd_dtype).
c10::ScalarType to_torch_dtype(DataType t);
/// cpu -> Device::host(); cuda:i -> Device::cuda(i) (cuda without an index -> the current one,
/// reported as index 0 when libtorch cannot say). Other device types throw hvd::Error.
Device to_hvd_device(const c10::Device& d, const std::string& what = "tensor");

/// A non-owning view of `t`'s memory (dtype, shape, device, data pointer). `t` must be dense and
/// contiguous — otherwise hvd::Error names `what` and says to call .contiguous() — and must stay
/// alive, unresized, while the view is used. The view's stream is left null.
TensorView to_view(const torch::Tensor& t, const std::string& what = "tensor");

/// `t` itself when it is dense and contiguous, else a contiguous copy. Undefined or sparse
/// tensors throw hvd::Error naming `what`.
torch::Tensor as_contiguous(const torch::Tensor& t, const std::string& what = "tensor");

}  // namespace hvd::optim
