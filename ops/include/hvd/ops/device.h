// SPDX-License-Identifier: Apache-2.0
// Wiring of the device (GPU) executor into a runtime, when this build has one.
#pragma once

#include "hvd/core/runtime.h"

namespace hvd::ops {

/// Adds the NCCL executor when the build has NCCL and a CUDA device is usable; otherwise leaves
/// `device_executor` null and explains why in `no_device_reason`.
void add_device_executor(core::RuntimeParts* parts);

}  // namespace hvd::ops
