// SPDX-License-Identifier: Apache-2.0
// Wiring of the device (GPU) executor into a runtime, when this build has one.
#pragma once

#include <mpi.h>

#include <functional>

#include "hvd/core/config.h"
#include "hvd/core/runtime.h"

namespace hvd::ops {

/// Adds the NCCL executor when the build has NCCL and a CUDA device is usable; otherwise leaves
/// `device_executor` null and explains why in `no_device_reason` (a build without NCCL, no
/// driver, no device). `data` is the data communicator of the runtime's process set: the NCCL
/// unique ids are broadcast over it (collectively, on first use of a device, from the
/// background thread). Creates no NCCL communicator and makes no collective call itself.
/// `local_rank` (this process's rank on its node) picks the GPU of a rank that takes part in
/// a device collective without a device tensor of its own (joined) before it used any.
/// `should_abort` (null: never): asked while NCCL communicators are being created (a dead peer
/// ends the wait).
void add_device_executor(core::RuntimeParts* parts, MPI_Comm data, const core::Config& config,
                         int local_rank, std::function<Status()> should_abort = {});

}  // namespace hvd::ops
