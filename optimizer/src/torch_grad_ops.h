// SPDX-License-Identifier: Apache-2.0
// The libtorch frontend of the gradient registry (private to hvd_optimizer).
#pragma once

#include <torch/types.h>

#include <memory>

#include "hvd/optim/distributed_optimizer.h"
#include "hvd/optim/grad_registry.h"

namespace hvd::optim::detail {

/// The registry every libtorch DistributedOptimizer of this process uses.
GradRegistry& torch_registry();
/// The registry's view of parameter `p`, reduced with compression `c`.
std::unique_ptr<GradParam> make_torch_param(const torch::Tensor& p, Compression c);
const char* compression_name(Compression c);
/// What a tensor `t` goes on the wire as under compression `c`: a float32/float64 tensor cast
/// to 16 bits (kFp16, kBf16), `t` itself otherwise.
torch::Tensor compressed(const torch::Tensor& t, Compression c);

}  // namespace hvd::optim::detail
