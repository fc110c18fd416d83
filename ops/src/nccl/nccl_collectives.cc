// SPDX-License-Identifier: Apache-2.0
// NCCL broadcast, allgather (ragged: grouped send/recv), alltoall and reducescatter.
#include <algorithm>

#include "device_state.h"
#include "executor_util.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/nccl/check.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::ops::nccl {

using core::Response;
using core::TensorEntry;

namespace {

// Runs `f` between ncclGroupStart and ncclGroupEnd; the group is closed even when f fails.
template <typename F>
Status grouped(F&& f) {
  HVD_NCCL_CHECK(ncclGroupStart());
  Status s = f();
  ncclResult_t end = ncclGroupEnd();
  HVD_RETURN_IF_ERROR(s);
  HVD_NCCL_CHECK(end);
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
  const std::string what = std::string(core::op_name(e->request.op)) + " '" + e->request.name + "'";
  if (!e->allocator) {
    in->fail(i, invalid_argument(what + ": a device output needs an allocator (the framework "
                                        "adapter passes one)"));
    return Status::OK();
  }
  HVD_RETURN_IF_ERROR(core::allocate_output(e, shape));
  Status s = check_device_pointer(e->output.data, e->output.bytes(), device, what + " output");
  if (!s.ok()) in->fail(i, s);
  return Status::OK();
}

}  // namespace

Status NcclExecutor::broadcast(DeviceState* d, const Response& r,
                               const std::vector<TensorEntry*>& es) {
  Inputs in(d, r, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/true));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));
  size_t most = 0;
  for (size_t i = 0; i < es.size(); ++i) {
    if (!in.valid(i)) most = std::max(most, es[i]->input.bytes());
  }
  void* z = nullptr;
  if (most > 0) {
    auto zr = in.zeros(most);
    if (!zr.ok()) return zr.status();
    z = zr.value();
  }
  HVD_RETURN_IF_ERROR(grouped([&]() -> Status {
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
  const size_t n = static_cast<size_t>(size_), k = es.size(), me = static_cast<size_t>(rank_);
  if (r.rank_rows.size() != n * k || r.numels.size() != k) {
    return internal_error("allgather '" + r.names.front() + "': malformed response");
  }
  auto rows = [&](size_t i, size_t j) { return r.rank_rows[i * n + j]; };
  const size_t esize = dtype_size(r.dtype);
  Inputs in(d, r, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/false));
  std::vector<size_t> cnt(n, 0), displ(n, 0), out_bytes(k, 0);
  for (size_t i = 0; i < k; ++i) {
    int64_t total = 0;
    for (size_t j = 0; j < n; ++j) {
      total += rows(i, j);
      cnt[j] += static_cast<size_t>(rows(i, j) * r.numels[i]) * esize;
    }
    out_bytes[i] = static_cast<size_t>(total * r.numels[i]) * esize;
    HVD_RETURN_IF_ERROR(
        device_output(&in, i, es[i], with_rows(total, es[i]->input.shape), d->device));
  }
  for (size_t j = 1; j < n; ++j) displ[j] = displ[j - 1] + cnt[j - 1];
  const size_t all = displ[n - 1] + cnt[n - 1];
  size_t most = 0;
  for (size_t i = 0; i < k; ++i) {
    if (!in.valid(i)) most = std::max(most, out_bytes[i]);
  }
  void* z = nullptr;
  if (most > 0) {
    auto zr = in.zeros(most);
    if (!zr.ok()) return zr.status();
    z = zr.value();
  }
  auto src_of = [&](size_t i) { return in.valid(i) ? es[i]->input.data : z; };
  auto dst_of = [&](size_t i) { return in.valid(i) ? es[i]->output.data : z; };
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));

  const void* send = nullptr;
  uint8_t* recv = nullptr;
  if (k == 1) {
    send = src_of(0);
    recv = static_cast<uint8_t*>(dst_of(0));
  } else {  // pack this rank's rows of every tensor, gather, unpack: one kernel each way
    auto sb = d->fusion.get(cnt[me] + 16);
    auto rb = d->gather.get(all + 16);
    if (!sb.ok()) return sb.status();
    if (!rb.ok()) return rb.status();
    std::vector<CopyDesc> pack;
    size_t pos = 0;
    for (size_t i = 0; i < k; ++i) {
      const int64_t elems = rows(i, me) * r.numels[i];
      pack.push_back({src_of(i), static_cast<uint8_t*>(sb.value()) + pos, elems});
      pos += static_cast<size_t>(elems) * esize;
    }
    HVD_RETURN_IF_ERROR(d->copy(pack, r.dtype, Scale{}));
    send = sb.value();
    recv = static_cast<uint8_t*>(rb.value());
  }
  const bool equal = std::all_of(cnt.begin(), cnt.end(), [&](size_t c) { return c == cnt[0]; });
  if (equal) {
    HVD_NCCL_CHECK(ncclAllGather(send, recv, cnt[0], ncclUint8, d->comm, d->stream));
  } else {
    HVD_RETURN_IF_ERROR(grouped([&]() -> Status {
      for (size_t j = 0; j < n; ++j) {
        const int peer = static_cast<int>(j);
        if (cnt[me]) HVD_NCCL_CHECK(ncclSend(send, cnt[me], ncclUint8, peer, d->comm, d->stream));
        if (cnt[j]) {
          HVD_NCCL_CHECK(ncclRecv(recv + displ[j], cnt[j], ncclUint8, peer, d->comm, d->stream));
        }
      }
      return Status::OK();
    }));
  }
  if (k > 1) {  // rank j's block holds its rows of tensor 0, then tensor 1, ...
    std::vector<CopyDesc> unpack;
    std::vector<size_t> out_off(k, 0);
    size_t pos = 0;
    for (size_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < k; ++i) {
        const int64_t elems = rows(i, j) * r.numels[i];
        const size_t b = static_cast<size_t>(elems) * esize;
        if (b && in.valid(i)) {
          unpack.push_back({recv + pos, static_cast<uint8_t*>(dst_of(i)) + out_off[i], elems});
        }
        out_off[i] += b;
        pos += b;
      }
    }
    HVD_RETURN_IF_ERROR(d->copy(unpack, r.dtype, Scale{}));
  }
  return in.status();
}

Status NcclExecutor::alltoall(DeviceState* d, const Response& r,
                              const std::vector<TensorEntry*>& es) {
  const size_t n = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  if (r.rank_rows.size() != n * n || r.numels.size() != es.size()) {
    return internal_error("alltoall '" + r.names.front() + "': malformed response");
  }
  const size_t esize = dtype_size(r.dtype);
  const int64_t row = r.numels[0];
  Inputs in(d, r, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/false));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));
  for (size_t i = 0; i < es.size(); ++i) {
    TensorEntry* e = es[i];
    std::vector<size_t> sc(n), rc(n);
    std::vector<int64_t> received(n);
    int64_t recv_rows = 0;
    size_t sbytes = 0, rbytes = 0;
    for (size_t j = 0; j < n; ++j) {
      sc[j] = static_cast<size_t>(r.rank_rows[me * n + j] * row) * esize;
      rc[j] = static_cast<size_t>(r.rank_rows[j * n + me] * row) * esize;
      received[j] = r.rank_rows[j * n + me];
      recv_rows += received[j];
      sbytes += sc[j];
      rbytes += rc[j];
    }
    std::vector<int64_t> shape = e->input.shape;
    if (shape.empty()) shape.push_back(0);
    shape[0] = recv_rows;
    HVD_RETURN_IF_ERROR(device_output(&in, i, e, shape, d->device));
    void* z = nullptr;
    if (!in.valid(i)) {
      auto zr = in.zeros(std::max(sbytes, rbytes));
      if (!zr.ok()) return zr.status();
      z = zr.value();
    }
    const auto* send = static_cast<const uint8_t*>(in.valid(i) ? e->input.data : z);
    auto* recv = static_cast<uint8_t*>(in.valid(i) ? e->output.data : z);
    HVD_RETURN_IF_ERROR(grouped([&]() -> Status {
      size_t so = 0, ro = 0;
      for (size_t j = 0; j < n; ++j) {
        const int peer = static_cast<int>(j);
        if (sc[j]) HVD_NCCL_CHECK(ncclSend(send + so, sc[j], ncclUint8, peer, d->comm, d->stream));
        if (rc[j]) HVD_NCCL_CHECK(ncclRecv(recv + ro, rc[j], ncclUint8, peer, d->comm, d->stream));
        so += sc[j];
        ro += rc[j];
      }
      return Status::OK();
    }));
    if (in.valid(i)) e->handle->received_splits = std::move(received);
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
  Inputs in(d, r, es);
  HVD_RETURN_IF_ERROR(in.check(/*outputs_known=*/false));
  HVD_RETURN_IF_ERROR(d->wait_inputs(es));
  const int64_t row = r.numels.empty() ? 0 : r.numels[0];
  for (size_t i = 0; i < es.size(); ++i) {
    TensorEntry* e = es[i];
    const int64_t rows = e->input.shape.empty() ? 0 : e->input.shape[0];
    const int64_t block_rows = (rows + size_ - 1) / size_;
    const int64_t block = block_rows * row, mine = reducescatter_rows(rows, size_, rank_) * row;
    std::vector<int64_t> shape = e->input.shape;
    if (shape.empty()) shape.push_back(0);
    shape[0] = reducescatter_rows(rows, size_, rank_);
    HVD_RETURN_IF_ERROR(device_output(&in, i, e, shape, d->device));
    // Pad every rank's slice to `block` elements: slot j of the buffer holds rank j's rows.
    auto fb = d->fusion.get(static_cast<size_t>(block * size_) * esize + 16);
    auto gb = d->gather.get(static_cast<size_t>(block) * esize + 16);
    if (!fb.ok()) return fb.status();
    if (!gb.ok()) return gb.status();
    auto* buf = static_cast<uint8_t*>(fb.value());
    std::vector<CopyDesc> pack;
    for (int j = 0; j < size_; ++j) {
      const int64_t start = reducescatter_start(rows, size_, j) * row;
      const int64_t cnt = reducescatter_rows(rows, size_, j) * row;
      const void* src =
          in.valid(i) ? static_cast<const uint8_t*>(e->input.data) + start * esize : nullptr;
      pack.push_back({src, buf + static_cast<size_t>(j * block) * esize, cnt});
    }
    HVD_RETURN_IF_ERROR(d->copy(pack, r.dtype, pre));
    HVD_NCCL_CHECK(ncclReduceScatter(buf, gb.value(), static_cast<size_t>(block), type, op, d->comm,
                                     d->stream));
    if (in.valid(i)) {
      HVD_RETURN_IF_ERROR(d->copy({{gb.value(), e->output.data, mine}}, r.dtype, out_scale));
    }
  }
  return in.status();
}

}  // namespace hvd::ops::nccl
