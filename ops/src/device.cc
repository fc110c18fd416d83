// SPDX-License-Identifier: Apache-2.0
// Device wiring: the NCCL executor of the GPU module when it is loaded and a CUDA device is
// usable; otherwise the reason there is none.
#include "hvd/ops/device.h"

#include <string>

#include "hvd/core/logging.h"
#include "hvd/ops/gpu_module.h"

namespace hvd::ops {

void add_device_executor(core::RuntimeParts* parts, MPI_Comm data, const core::Config& config,
                         int local_rank, std::function<Status()> should_abort) {
  parts->device_executor.reset();
  const GpuModuleState& m = gpu_module();
  if (m.api == nullptr) {
    parts->no_device_reason = m.reason;
    return;
  }
  auto count = m.api->device_count();
  if (!count.ok()) {
    parts->no_device_reason = count.status().message() + "; hvd's GPU module is loaded (NCCL " +
                              std::to_string(m.api->nccl_version) +
                              "), GPU collectives need a CUDA device and driver";
    HVD_LOG(Debug) << parts->no_device_reason;
    return;
  }
  nccl::NcclOptions opts;
  opts.hierarchical_allreduce = config.hierarchical_allreduce;
  opts.default_device = local_rank % count.value();
  opts.should_abort = std::move(should_abort);
  parts->device_executor = m.api->make_executor(data, opts);
  parts->no_device_reason.clear();
}

}  // namespace hvd::ops
