// SPDX-License-Identifier: Apache-2.0
// Device wiring for builds without NCCL (builds with NCCL use nccl/device_nccl.cc).
#include "hvd/config.h"

#if !HVD_HAVE_NCCL
#include "hvd/ops/device.h"

namespace hvd::ops {

void add_device_executor(core::RuntimeParts* parts, MPI_Comm /*data*/,
                         const core::Config& /*config*/, int /*local_rank*/) {
  parts->device_executor.reset();
  parts->no_device_reason =
      "this build of hvd has no GPU support (built with HVD_WITH_NCCL=OFF or NCCL not found)";
}

}  // namespace hvd::ops

namespace hvd {
int nccl_version() { return 0; }
}  // namespace hvd
#endif
