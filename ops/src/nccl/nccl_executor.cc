// SPDX-License-Identifier: Apache-2.0
// The NCCL executor: device selection, input checks, allreduce (fused or in place).
//
// Timeline phases: copies of tensors into and out of the fusion (and gather) buffers report
// "copy_in" / "copy_out", NCCL calls "collective" named after the call (ncclAllReduce ...),
// paths without such copies report the collective only. Device work is asynchronous: these
// PhaseScopes time the enqueueing of the copy kernels and NCCL calls on the stream (launch
// time), not the work on the GPU, which runs after launch() has returned (the hierarchical
// allreduce is the exception: it waits for the device halfway through).
#include "hvd/ops/nccl/nccl_executor.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "device_state.h"
#include "executor_util.h"
#include "hvd/core/logging.h"
#include "hvd/core/timeline.h"
#include "hvd/ops/nccl/check.h"

namespace hvd::ops::nccl {

using core::OpType;
using core::Response;
using core::TensorEntry;

namespace {
// The timeline's name of the hierarchical allreduce: its calls, in order (the host staging
// copies and the wait for the device between them count as the collective).
constexpr const char* kHierarchicalCall = "ncclReduceScatter+MPI_Allreduce+ncclAllGather";
}  // namespace

NcclExecutor::NcclExecutor(MPI_Comm comm, NcclOptions opts) : comm_(comm), opts_(std::move(opts)) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
  auto fault =
      parse_test_fault(opts_.test_fault.empty() ? test_fault_from_env() : opts_.test_fault);
  if (fault.ok()) {
    fault_ = fault.value();
  } else {
    setup_failed_ = fault.status();  // the same on every rank: the job shares its environment
  }
}

NcclExecutor::~NcclExecutor() = default;

Result<DeviceState*> NcclExecutor::device_for(const Response& r,
                                              const std::vector<TensorEntry*>& es) {
  if (!setup_failed_.ok()) return setup_failed_;
  int dev = -1;
  Status mixed;
  for (const auto* e : es) {
    if (e->input.device.kind != DeviceKind::kCuda) continue;
    if (dev >= 0 && e->input.device.index != dev) {
      mixed =
          invalid_argument(core::describe(r.op, r.names.front()) +
                           ": tensors of one collective on cuda:" + std::to_string(dev) + " and " +
                           e->input.device.str() + " on rank " + std::to_string(rank_) +
                           "; hvd uses one GPU per rank for a collective");
      break;
    }
    dev = e->input.device.index;
  }
  if (dev < 0) dev = last_device_;  // a joined rank: only host stand-ins
  // Never the background thread's current device (0 unless set): the rank's own GPU.
  if (dev < 0) dev = opts_.default_device;
  auto it = devices_.find(dev);
  if (it == devices_.end() && (devices_.empty() || mixed.ok())) {
    // First use: collective on every rank, whatever this rank's own preparation gave.
    auto made = create_device(dev, mixed);
    if (!made.ok()) return made.status();
    it = devices_.emplace(dev, std::move(made).value()).first;
  } else if (!mixed.ok()) {
    return mixed;
  }
  last_device_ = dev;
  DeviceState* d = it->second.get();
  if (!d->broken.ok()) return d->broken;
  if (opts_.hierarchical_allreduce && r.op == OpType::kAllreduce) {
    HVD_RETURN_IF_ERROR(d->ensure_hierarchical(opts_.force_hierarchical));
  }
  return d;
}

Result<std::unique_ptr<DeviceState>> NcclExecutor::create_device(int dev, Status prepared) {
  CommSpec spec;
  spec.mpi = comm_;
  spec.device = dev;
  spec.timeout = opts_.init_timeout;
  spec.should_abort = &opts_.should_abort;
  spec.fault = fault_;
  spec.what = "the NCCL communicator of this process set (" + std::to_string(size_) + " ranks)";
  if (prepared.ok() && fault_.at(TestFault::Point::kInit, rank_)) {
    prepared = internal_error("injected failure (HVD_TEST_FAULT=" + fault_.spec +
                              "), before touching CUDA");
  }
  std::unique_ptr<DeviceState> fresh;
  if (prepared.ok()) {
    auto made = DeviceState::create(dev, comm_);
    if (made.ok()) {
      fresh = std::move(made).value();
    } else {
      prepared = Status(made.status().code(),
                        made.status().message() + " (cuda:" + std::to_string(dev) + ")");
    }
  }
  ncclComm_t comm = nullptr;
  Status s = create_comm(spec, prepared, &comm);
  if (!s.ok()) {
    HVD_LOG(Error) << s.message();
    setup_failed_ = s;
    return s;
  }
  fresh->spec = spec;
  fresh->comm = comm;
  std::lock_guard<std::mutex> lk(fresh->health->mu);
  fresh->health->comm = comm;
  return fresh;
}

Status NcclExecutor::prepare_input(TensorEntry* e) {
  TensorView& v = e->input;
  if (v.device.kind != DeviceKind::kCuda || v.ready_event) return Status::OK();
  const int dev = v.device.index;
  // The event is created on, and recorded with, the tensor's device current (a null stream is
  // that device's default stream). Frameworks set the thread's device to the tensor's, so
  // normally nothing switches; otherwise the caller's device is restored afterwards.
  int current = -1;
  HVD_CUDA_CHECK(cudaGetDevice(&current));
  if (current != dev) HVD_CUDA_CHECK(cudaSetDevice(dev));
  Status s = record_submit_event(e, dev);
  if (current != dev) cudaSetDevice(current);
  return s;
}

Status NcclExecutor::record_submit_event(TensorEntry* e, int dev) {
  if (!e->submit_event || e->submit_event_device != dev) {
    cudaEvent_t ev = nullptr;
    HVD_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    e->submit_event.reset(ev, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
    e->submit_event_device = dev;
  }
  auto* ev = static_cast<cudaEvent_t>(e->submit_event.get());
  const cudaError_t rc = cudaEventRecord(ev, static_cast<cudaStream_t>(e->input.stream));
  if (rc != cudaSuccess) {
    cudaGetLastError();  // handled here
    return core::about(
        e->request, invalid_argument(std::string("cannot record an event on the tensor's "
                                                 "stream: ") +
                                     cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")"));
  }
  e->input.ready_event = ev;
  return Status::OK();
}

Status NcclExecutor::execute(const Response& r, const std::vector<TensorEntry*>& es) {
  std::shared_ptr<core::Completion> pending;
  Status s = launch(r, es, &pending);
  if (!pending) return s;
  Status done = pending->wait();
  return s.ok() ? done : s;
}

Status NcclExecutor::launch(const Response& r, const std::vector<TensorEntry*>& es,
                            std::shared_ptr<core::Completion>* pending) {
  auto dev = device_for(r, es);
  if (!dev.ok()) return dev.status();
  DeviceState* d = dev.value();
  // Descriptors: allgather unpacks (rank, tensor) pieces, reducescatter packs rank slices.
  const size_t n = static_cast<size_t>(size_);
  HVD_RETURN_IF_ERROR(d->begin(es.size() * (n + 2) + 2 * n + 2));
  Status s;
  switch (r.op) {
    case OpType::kAllreduce:
      s = allreduce(d, r, es);
      break;
    case OpType::kBroadcast:
      s = broadcast(d, r, es);
      break;
    case OpType::kAllgather:
      s = allgather(d, r, es);
      break;
    case OpType::kAlltoall:
      s = alltoall(d, r, es);
      break;
    case OpType::kReducescatter:
      s = reducescatter(d, r, es);
      break;
    default:
      return invalid_argument(std::string(core::op_name(r.op)) +
                              " is not supported by the NCCL executor");
  }
  if (!s.ok()) {
    // Whatever was launched must finish before the buffers are reused or the handles fail.
    (void)d->finish();
    return s;
  }
  // The handles poll the completion; this thread goes on to the next response.
  return d->finish_async(pending);
}

Status NcclExecutor::allreduce(DeviceState* d, const Response& r,
                               const std::vector<TensorEntry*>& es) {
  if (r.reduce_op == ReduceOp::kAdasum) return adasum_allreduce(d, r, es);
  ncclDataType_t type;
  if (!nccl_type(r.dtype, &type)) return unsupported_dtype(r);
  const size_t esize = dtype_size(r.dtype);
  const bool hier = opts_.hierarchical_allreduce && d->hier_ok;
  ncclRedOp_t op = nccl_base_op(r.reduce_op);
  double post = r.postscale;
  if (r.reduce_op == ReduceOp::kAverage) {  // divided by the set size, joined ranks included
    if (dtype_is_floating(r.dtype) && !hier) {
      op = ncclAvg;
    } else {
      post /= size_;
    }
  }
  const Scale pre = make_scale(r.dtype, r.prescale), out_scale = make_scale(r.dtype, post);

  Inputs in(d, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/true));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));

  // One real tensor, no hierarchy: reduce straight from the input into the output.
  if (es.size() == 1 && in.valid(0) && !hier) {
    TensorEntry* e = es[0];
    const void* src = e->input.data;
    void* dst = e->output.data;
    const int64_t n = e->input.numel();
    if (!pre.identity()) {
      HVD_RETURN_IF_ERROR(d->copy({{src, dst, n}}, r.dtype, pre));
      src = dst;
    }
    core::PhaseScope call(core::Phase::kCollective, "ncclAllReduce");  // launch only
    HVD_NCCL_ENQUEUE(d->comm,
                     ncclAllReduce(src, dst, static_cast<size_t>(n), type, op, d->comm, d->stream));
    if (!out_scale.identity()) HVD_RETURN_IF_ERROR(d->copy({{dst, dst, n}}, r.dtype, out_scale));
    return in.status();
  }

  // Fused: offsets aligned to 16 bytes (padding is reduced too, and ignored).
  FusedStage st;
  HVD_RETURN_IF_ERROR(stage_fused(d, es, in, esize, hier ? d->local_size : 1, &st));
  const FusedLayout& l = st.layout;
  uint8_t* buf = st.buf;
  {
    core::PhaseScope copy(core::Phase::kCopyIn);  // the launch of the copy kernel
    HVD_RETURN_IF_ERROR(d->copy(st.in, r.dtype, pre));
  }
  if (hier) {
    core::PhaseScope call(core::Phase::kCollective, kHierarchicalCall);
    HVD_RETURN_IF_ERROR(hierarchical_allreduce(d, buf, l.padded, r));
  } else {
    core::PhaseScope call(core::Phase::kCollective, "ncclAllReduce");  // launch only
    HVD_NCCL_ENQUEUE(d->comm, ncclAllReduce(buf, buf, static_cast<size_t>(l.total), type, op,
                                            d->comm, d->stream));
  }
  core::PhaseScope copy(core::Phase::kCopyOut);  // the launch of the copy kernel
  HVD_RETURN_IF_ERROR(d->copy(st.out, r.dtype, out_scale));
  return in.status();
}

}  // namespace hvd::ops::nccl
