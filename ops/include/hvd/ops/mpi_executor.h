// SPDX-License-Identifier: Apache-2.0
// Host-memory collectives over MPI, with the persistent fusion buffer.
#pragma once

#include <mpi.h>

#include <vector>

#include "hvd/core/executor.h"

namespace hvd::ops {

/// Runs negotiated responses on host tensors with MPI on a communicator dedicated to data (so
/// data never interleaves with negotiation). Fused allreduces are copied into one persistent
/// buffer (prescale applied on the way in, postscale and averaging on the way out), reduced
/// once, and copied back; a single tensor is reduced in place. float16 and bfloat16 are reduced
/// through float32 so the accumulation is in float.
class MpiExecutor : public core::Executor {
 public:
  explicit MpiExecutor(MPI_Comm comm);
  Status execute(const core::Response& r, const std::vector<core::TensorEntry*>& entries) override;
  std::string name() const override { return "mpi"; }

 private:
  Status allreduce(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  Status broadcast(const core::Response& r, const std::vector<core::TensorEntry*>& entries);
  /// MPI_Allreduce in place, split into calls of at most 2^30 elements.
  Status reduce_buffer(void* data, int64_t count, MPI_Datatype type, MPI_Op op);
  uint8_t* fusion_buffer(size_t bytes);

  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  std::vector<uint8_t> fusion_;
};

}  // namespace hvd::ops
