// SPDX-License-Identifier: Apache-2.0
// Device kernels of the NCCL executor: the batched copy (many tensors into or out of the
// fusion buffer in one launch, scaling on the way) and the ncclDataType mapping.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>

#include "hvd/core/types.h"
#include "hvd/ops/nccl/plan.h"

namespace hvd::ops::nccl {

/// Runs every copy of `descs` (already in device memory, `n` of them, `max_count` the largest
/// count) in ONE kernel launch on `stream`. A pure copy moves 16 bytes per thread where the
/// pointers and sizes allow; a scaled copy works element by element in `dtype`. Returns the
/// launch error (cudaSuccess when none). Scaling bool or int16 is not supported (they are
/// never reduced on the device).
cudaError_t launch_batched_copy(const CopyDesc* descs, int n, int64_t max_count, DataType dtype,
                                const Scale& scale, cudaStream_t stream);

/// NCCL type for `t`; false for types NCCL cannot reduce (int16, bool).
bool nccl_type(DataType t, ncclDataType_t* out);

/// NCCL reduction for `op` when averaging is done by hvd (Sum for Sum and Average); callers
/// that can use ncclAvg switch to it themselves.
inline ncclRedOp_t nccl_base_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
    default:
      return ncclSum;
  }
}

}  // namespace hvd::ops::nccl
