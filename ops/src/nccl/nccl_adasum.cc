// SPDX-License-Identifier: Apache-2.0
// Adasum allreduce of GPU tensors, as Horovod runs it with NCCL: inside a node the ranks' tensors
// are averaged, across nodes the node averages are combined by Adasum.
//
//   1. The tensors are copied into the fusion buffer (padded to a multiple of the local size),
//      scaled by prescale / local_size on the way.
//   2. ncclReduceScatter (sum) over the node's ranks: local rank l holds shard l of the node's
//      average.
//   3. The shard goes to pinned host memory (float16/bfloat16 widened to float32), and
//      adasum_across_nodes (adasum_nodes.h) combines it with the same shard of the other nodes:
//      each tensor with its own dot products, summed over every shard of the tensor.
//   4. The shard goes back to the device; ncclAllGather inside the node; copy out (postscale).
// One node: Horovod's hierarchy has no level across nodes, so the result is the average of the
// ranks: one ncclAllReduce (ncclAvg), no host step. Tests force the hierarchical path on one node
// (NcclOptions::force_hierarchical) to run every step with a single node.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "device_state.h"
#include "executor_util.h"
#include "hvd/core/timeline.h"
#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/mpi_util.h"
#include "hvd/ops/nccl/adasum_nodes.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/nccl_executor.h"
#include "hvd/ops/nccl/plan.h"

namespace hvd::ops::nccl {

namespace {
constexpr const char* kAdasumCall = "ncclReduceScatter+Adasum(MPI)+ncclAllGather";
}  // namespace

Status NcclExecutor::adasum_allreduce(DeviceState* d, const core::Response& r,
                                      const std::vector<core::TensorEntry*>& es) {
  ncclDataType_t type;
  if (!dtype_is_floating(r.dtype)) {
    return invalid_argument(core::describe(r.op, r.names.front()) +
                            ": Adasum reduces float16, bfloat16, float32 and float64 tensors, "
                            "not " +
                            dtype_name(r.dtype) + " (use Sum or Average)");
  }
  if (!nccl_type(r.dtype, &type)) return unsupported_dtype(r);
  HVD_RETURN_IF_ERROR(d->ensure_hierarchical(opts_.force_hierarchical));
  if (!d->hier_ok) {
    if (d->nodes == 1) {  // one node: the average of its ranks (Horovod's result there)
      core::Response avg = r;
      avg.reduce_op = ReduceOp::kAverage;
      return allreduce(d, avg, es);
    }
    return invalid_argument(core::describe(r.op, r.names.front()) +
                            ": Adasum on GPU tensors needs the same number of ranks of the "
                            "process set on every node (its " +
                            std::to_string(size_) + " ranks are spread unevenly over " +
                            std::to_string(d->nodes) +
                            " nodes); start the same number on every node");
  }
  if (!d->adasum_nodes) {  // first Adasum response: every rank of the set is here
    auto c = std::make_unique<AdasumNodeComms>();
    Status s = make_adasum_node_comms(d->mpi, d->local_mpi, c.get());
    d->adasum_setup = agree_status(d->mpi, s, "setting up Adasum across nodes", opts_.should_abort);
    d->adasum_nodes = std::move(c);
  }
  if (!d->adasum_setup.ok()) {
    return Status(d->adasum_setup.code(),
                  core::describe(r.op, r.names.front()) + ": " + d->adasum_setup.message());
  }

  const size_t esize = dtype_size(r.dtype);
  const Scale pre = make_scale(r.dtype, r.prescale / d->local_size);
  const Scale post = make_scale(r.dtype, r.postscale);
  Inputs in(d, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/true));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));

  FusedStage st;
  HVD_RETURN_IF_ERROR(stage_fused(d, es, in, esize, d->local_size, &st));
  const FusedLayout& l = st.layout;
  uint8_t* buf = st.buf;
  {
    core::PhaseScope copy(core::Phase::kCopyIn);
    HVD_RETURN_IF_ERROR(d->copy(st.in, r.dtype, pre));
  }
  {
    core::PhaseScope call(core::Phase::kCollective, kAdasumCall);
    const int64_t chunk = l.padded / d->local_size;
    uint8_t* mine = buf + static_cast<size_t>(d->local_rank * chunk) * esize;
    const size_t bytes = static_cast<size_t>(chunk) * esize;
    HVD_NCCL_ENQUEUE(d->local, ncclReduceScatter(buf, mine, static_cast<size_t>(chunk), type,
                                                 ncclSum, d->local, d->stream));
    if (chunk > 0) {  // one node (forced, tests) too: every step runs
      auto h = d->host_stage.get(bytes);
      if (!h.ok()) return d->fail_response(h.status());
      HVD_CUDA_CHECK(cudaMemcpyAsync(h.value(), mine, bytes, cudaMemcpyDeviceToHost, d->stream));
      HVD_RETURN_IF_ERROR(d->finish());  // the host needs the shard (polls async errors)
      void* host = h.value();
      DataType host_type = r.dtype;
      if (reduced_as_float(r.dtype)) {  // combined in float32, as on the host path
        auto f = d->host_float.get(static_cast<size_t>(chunk) * 4);
        if (!f.ok()) return d->fail_response(f.status());
        widen_to_float(h.value(), r.dtype, chunk, 1.0, static_cast<float*>(f.value()));
        host = f.value();
        host_type = DataType::kFloat32;
      }
      const auto segs = shard_segments(l.offset, st.numels, d->local_rank * chunk, chunk);
      bool abandoned = false;
      Status s = adasum_across_nodes(host, chunk, host_type, segs, *d->adasum_nodes,
                                     opts_.should_abort, &abandoned);
      if (abandoned) {  // MPI may still write into them: never reused, never freed
        d->host_stage.ptr = d->host_float.ptr = nullptr;
        d->host_stage.size = d->host_float.size = 0;
      }
      if (!s.ok()) {
        return d->fail_response(Status(s.code(), core::describe(r.op, r.names.front()) +
                                                     ": Adasum across nodes: " + s.message()));
      }
      if (host != h.value()) {
        narrow_from_float(static_cast<const float*>(host), chunk, 1.0, r.dtype, h.value());
      }
      HVD_CUDA_CHECK(cudaMemcpyAsync(mine, h.value(), bytes, cudaMemcpyHostToDevice, d->stream));
    }
    HVD_NCCL_ENQUEUE(
        d->local, ncclAllGather(mine, buf, static_cast<size_t>(chunk), type, d->local, d->stream));
  }
  core::PhaseScope copy(core::Phase::kCopyOut);
  HVD_RETURN_IF_ERROR(d->copy(st.out, r.dtype, post));
  return in.status();
}

}  // namespace hvd::ops::nccl
