// SPDX-License-Identifier: Apache-2.0
// Device wiring for builds with NCCL: the NCCL executor when a CUDA device is usable.
#include <nccl.h>

#include "hvd/core/logging.h"
#include "hvd/hvd.h"
#include "hvd/ops/device.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::ops {

void add_device_executor(core::RuntimeParts* parts, MPI_Comm data, const core::Config& config,
                         int local_rank) {
  parts->device_executor.reset();
  auto count = nccl::usable_device_count();
  if (!count.ok()) {
    parts->no_device_reason = count.status().message() +
                              "; this build of hvd has NCCL, GPU collectives need a CUDA device "
                              "and driver";
    HVD_LOG(Debug) << parts->no_device_reason;
    return;
  }
  nccl::NcclOptions opts;
  opts.hierarchical_allreduce = config.hierarchical_allreduce;
  opts.default_device = local_rank % count.value();
  parts->device_executor = std::make_unique<nccl::NcclExecutor>(data, opts);
  parts->no_device_reason.clear();
}

}  // namespace hvd::ops

namespace hvd {
int nccl_version() { return NCCL_VERSION_CODE; }
}  // namespace hvd
