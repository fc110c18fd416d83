// SPDX-License-Identifier: Apache-2.0
// NCCL broadcast, allgather (ragged: grouped send/recv), alltoall and reducescatter.
// Timeline phases as in nccl_executor.cc: the PhaseScopes time launches, not device work.
#include <algorithm>

#include "device_state.h"
#include "executor_util.h"
#include "hvd/core/timeline.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::ops::nccl {

using core::Response;
using core::TensorEntry;

namespace {

// The timeline's name of a group of point-to-point calls (ragged allgather, alltoall).
constexpr const char* kSendRecv = "ncclSend/ncclRecv";

// Runs `f` between ncclGroupStart and ncclGroupEnd; the group is closed even when f fails.
// `comm`: the communicator of the calls in it (ncclGroupEnd may answer ncclInProgress).
template <typename F>
Status grouped(ncclComm_t comm, F&& f) {
  HVD_NCCL_CHECK(ncclGroupStart());
  Status s = f();
  ncclResult_t end = ncclGroupEnd();
  HVD_RETURN_IF_ERROR(s);
  HVD_NCCL_ENQUEUE(comm, end);
  return Status::OK();
}

std::vector<int64_t> with_rows(int64_t rows, const std::vector<int64_t>& shape) {
  std::vector<int64_t> s = {rows};
  if (!shape.empty()) s.insert(s.end(), shape.begin() + 1, shape.end());
  return s;
}

// Allocates a device output of `shape` for entry i, or marks it failed. Failed (and stand-in)
// entries get `scratch` as input and output.
Status device_output(Inputs* in, size_t i, TensorEntry* e, const std::vector<int64_t>& shape,
                     int device) {
  if (!in->valid(i)) return Status::OK();
  if (!e->allocator) {
    in->fail(i, core::about(e->request, invalid_argument("a device output needs an allocator "
                                                         "(the framework adapter passes one)")));
    return Status::OK();
  }
  // A failed allocation fails this tensor only: the rank still takes part with zeros.
  Status s = core::allocate_output(e, shape);
  if (s.ok()) s = check_device_pointer(e->output.data, e->output.bytes(), device, *e, "output");
  if (!s.ok()) in->fail(i, s);
  return Status::OK();
}

}  // namespace

Status NcclExecutor::broadcast(DeviceState* d, const Response& r,
                               const std::vector<TensorEntry*>& es) {
  Inputs in(d, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/true));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));
  size_t most = 0;
  for (size_t i = 0; i < es.size(); ++i) {
    if (!in.valid(i)) most = std::max(most, es[i]->input.bytes());
  }
  void* z = nullptr;
  if (most > 0) {
    auto zr = in.zeros(most);
    if (!zr.ok()) return d->fail_response(zr.status());
    z = zr.value();
  }
  core::PhaseScope call(core::Phase::kCollective, "ncclBroadcast");  // launch only
  HVD_RETURN_IF_ERROR(grouped(d->comm, [&]() -> Status {
    for (size_t i = 0; i < es.size(); ++i) {
      const size_t bytes = es[i]->input.bytes();
      const bool ok = in.valid(i);
      const void* send = ok ? es[i]->input.data : z;
      void* recv = ok ? es[i]->output.data : z;
      HVD_NCCL_CHECK(ncclBroadcast(send, recv, bytes, ncclUint8, r.root, d->comm, d->stream));
    }
    return Status::OK();
  }));
  return in.status();
}

Status NcclExecutor::allgather(DeviceState* d, const Response& r,
                               const std::vector<TensorEntry*>& es) {
  auto planned = plan_allgather(r.rank_rows, r.numels, size_, rank_, dtype_size(r.dtype));
  if (!planned.ok())
    return internal_error(core::describe(r.op, r.names.front()) + ": " +
                          planned.status().message());
  const AllgatherPlan& p = planned.value();
  const size_t n = p.n, k = p.k, me = p.rank;
  if (es.size() != k)
    return internal_error(core::describe(r.op, r.names.front()) + ": malformed response");
  Inputs in(d, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/false));
  for (size_t i = 0; i < k; ++i) {
    HVD_RETURN_IF_ERROR(
        device_output(&in, i, es[i], with_rows(p.out_rows[i], es[i]->input.shape), d->device));
  }
  // Failed tensors send zeros from the front of a scratch buffer and, unpacked, receive
  // behind it (never into the zeros they send).
  size_t most = 0;
  for (size_t i = 0; i < k; ++i) {
    if (!in.valid(i)) most = std::max(most, p.out_bytes[i]);
  }
  const size_t zero_bytes = (p.count[me] + 15) / 16 * 16;
  uint8_t* z = nullptr;
  if (most > 0) {
    auto zr = in.zeros(zero_bytes + most);
    if (!zr.ok()) return d->fail_response(zr.status());
    z = static_cast<uint8_t*>(zr.value());
  }
  std::vector<const void*> src(k);
  std::vector<void*> dst(k);
  for (size_t i = 0; i < k; ++i) {
    src[i] = in.valid(i) ? es[i]->input.data : z;
    dst[i] = in.valid(i) ? es[i]->output.data : nullptr;
  }
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));

  const void* send = src[0];
  uint8_t* recv = dst[0] ? static_cast<uint8_t*>(dst[0]) : z + zero_bytes;
  if (p.packed()) {  // pack this rank's rows of every tensor, gather, unpack: one kernel each way
    auto sb = d->fusion.get(p.count[me] + 16);
    auto rb = d->gather.get(p.total + 16);
    if (!sb.ok()) return d->fail_response(sb.status());
    if (!rb.ok()) return d->fail_response(rb.status());
    core::PhaseScope copy(core::Phase::kCopyIn);  // the launch of the pack kernel
    HVD_RETURN_IF_ERROR(d->copy(p.pack(src, sb.value()), r.dtype, Scale{}));
    send = sb.value();
    recv = static_cast<uint8_t*>(rb.value());
  }
  if (p.equal) {
    core::PhaseScope call(core::Phase::kCollective, "ncclAllGather");  // launch only
    HVD_NCCL_ENQUEUE(d->comm, ncclAllGather(send, recv, p.count[0], ncclUint8, d->comm, d->stream));
  } else {
    core::PhaseScope call(core::Phase::kCollective, kSendRecv);  // launch only
    HVD_RETURN_IF_ERROR(grouped(d->comm, [&]() -> Status {
      for (size_t j = 0; j < n; ++j) {
        const int peer = static_cast<int>(j);
        if (p.count[me]) {
          HVD_NCCL_CHECK(ncclSend(send, p.count[me], ncclUint8, peer, d->comm, d->stream));
        }
        if (p.count[j]) {
          HVD_NCCL_CHECK(
              ncclRecv(recv + p.displ[j], p.count[j], ncclUint8, peer, d->comm, d->stream));
        }
      }
      return Status::OK();
    }));
  }
  if (p.packed()) {
    core::PhaseScope copy(core::Phase::kCopyOut);  // the launch of the unpack kernel
    HVD_RETURN_IF_ERROR(d->copy(p.unpack(recv, dst), r.dtype, Scale{}));
  }
  return in.status();
}

Status NcclExecutor::alltoall(DeviceState* d, const Response& r,
                              const std::vector<TensorEntry*>& es) {
  if (r.numels.size() != es.size() || es.empty()) {
    return internal_error(core::describe(r.op, r.names.front()) + ": malformed response");
  }
  auto planned = plan_alltoall(r.rank_rows, r.numels[0], size_, rank_, dtype_size(r.dtype));
  if (!planned.ok())
    return internal_error(core::describe(r.op, r.names.front()) + ": " +
                          planned.status().message());
  AlltoallPlan& p = planned.value();
  const size_t n = static_cast<size_t>(size_);
  Inputs in(d, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/false));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));
  size_t sbytes = 0, rbytes = 0;
  for (size_t j = 0; j < n; ++j) {
    sbytes += p.send_bytes[j];
    rbytes += p.recv_bytes[j];
  }
  for (size_t i = 0; i < es.size(); ++i) {
    TensorEntry* e = es[i];
    std::vector<int64_t> shape = e->input.shape;
    if (shape.empty()) shape.push_back(0);
    shape[0] = p.recv_rows;
    HVD_RETURN_IF_ERROR(device_output(&in, i, e, shape, d->device));
    // A failed tensor sends zeros and receives behind them (never into what it sends).
    const size_t zero_bytes = (sbytes + 15) / 16 * 16;
    uint8_t* z = nullptr;
    if (!in.valid(i)) {
      auto zr = in.zeros(zero_bytes + rbytes);
      if (!zr.ok()) return d->fail_response(zr.status());
      z = static_cast<uint8_t*>(zr.value());
    }
    const auto* send = in.valid(i) ? static_cast<const uint8_t*>(e->input.data) : z;
    auto* recv = in.valid(i) ? static_cast<uint8_t*>(e->output.data) : z + zero_bytes;
    core::PhaseScope call(core::Phase::kCollective, kSendRecv);  // launch only
    HVD_RETURN_IF_ERROR(grouped(d->comm, [&]() -> Status {
      for (size_t j = 0; j < n; ++j) {
        const int peer = static_cast<int>(j);
        if (p.send_bytes[j]) {
          HVD_NCCL_CHECK(
              ncclSend(send + p.send_off[j], p.send_bytes[j], ncclUint8, peer, d->comm, d->stream));
        }
        if (p.recv_bytes[j]) {
          HVD_NCCL_CHECK(
              ncclRecv(recv + p.recv_off[j], p.recv_bytes[j], ncclUint8, peer, d->comm, d->stream));
        }
      }
      return Status::OK();
    }));
    if (in.valid(i)) e->handle->extra().received_splits = p.received;
  }
  return in.status();
}

Status NcclExecutor::reducescatter(DeviceState* d, const Response& r,
                                   const std::vector<TensorEntry*>& es) {
  ncclDataType_t type;
  if (!nccl_type(r.dtype, &type)) return unsupported_dtype(r);
  const size_t esize = dtype_size(r.dtype);
  ncclRedOp_t op = nccl_base_op(r.reduce_op);
  double post = r.postscale;
  if (r.reduce_op == ReduceOp::kAverage) {
    if (dtype_is_floating(r.dtype)) {
      op = ncclAvg;
    } else {
      post /= size_;
    }
  }
  const Scale pre = make_scale(r.dtype, r.prescale), out_scale = make_scale(r.dtype, post);
  Inputs in(d, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/false));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));
  const int64_t row = r.numels.empty() ? 0 : r.numels[0];
  for (size_t i = 0; i < es.size(); ++i) {
    TensorEntry* e = es[i];
    const ReducescatterPlan p =
        plan_reducescatter(e->input.shape.empty() ? 0 : e->input.shape[0], row, size_, rank_);
    std::vector<int64_t> shape = e->input.shape;
    if (shape.empty()) shape.push_back(0);
    shape[0] = p.my_rows;
    HVD_RETURN_IF_ERROR(device_output(&in, i, e, shape, d->device));
    // Every rank's slice padded to `block` elements: slot j of the buffer holds rank j's rows.
    auto fb = d->fusion.get(static_cast<size_t>(p.block * size_) * esize + 16);
    auto gb = d->gather.get(static_cast<size_t>(p.block) * esize + 16);
    if (!fb.ok()) return d->fail_response(fb.status());
    if (!gb.ok()) return d->fail_response(gb.status());
    {
      core::PhaseScope copy(core::Phase::kCopyIn);  // the launch of the pack kernel
      HVD_RETURN_IF_ERROR(
          d->copy(p.pack(in.valid(i) ? e->input.data : nullptr, fb.value(), esize), r.dtype, pre));
    }
    {
      core::PhaseScope call(core::Phase::kCollective, "ncclReduceScatter");  // launch only
      HVD_NCCL_ENQUEUE(
          d->comm, ncclReduceScatter(fb.value(), gb.value(), static_cast<size_t>(p.block), type, op,
                                     d->comm, d->stream));
    }
    if (in.valid(i)) {
      core::PhaseScope copy(core::Phase::kCopyOut);  // the launch of the copy kernel
      HVD_RETURN_IF_ERROR(d->copy({{gb.value(), e->output.data, p.mine}}, r.dtype, out_scale));
    }
  }
  return in.status();
}

}  // namespace hvd::ops::nccl
