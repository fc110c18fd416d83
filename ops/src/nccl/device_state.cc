// SPDX-License-Identifier: Apache-2.0
// Per-device state: lazy communicators (unique id over MPI), input waits, completion polling
// with asynchronous NCCL error detection.
#include "device_state.h"

#include <algorithm>
#include <set>

#include "hvd/core/logging.h"
#include "hvd/ops/mpi_util.h"
#include "hvd/ops/nccl/check.h"

namespace hvd::ops::nccl {
namespace {

// Sizes grow in 2 MiB steps and by at least a quarter: a slowly growing size reallocates a
// bounded number of times.
size_t grown_size(size_t want, size_t have) {
  constexpr size_t kGrain = 2 << 20;
  const size_t n = std::max(std::max<size_t>(want, 1), have + have / 4);
  return (n + kGrain - 1) / kGrain * kGrain;
}

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (ptr) cudaFree(ptr);  // teardown: waits for the device (the owner synchronised already)
}

Result<void*> DeviceBuffer::get(size_t bytes) {
  if (bytes <= size && ptr) return ptr;
  const size_t n = grown_size(bytes, size);
  void* fresh = nullptr;
  if (async) {
    cudaError_t e = cudaMallocAsync(&fresh, n, stream);
    if (e == cudaErrorNotSupported) {  // no memory pools here after all: synchronous from now
      cudaGetLastError();
      async = false;
      return get(bytes);
    }
    if (e == cudaErrorMemoryAllocation && ptr) {
      // Give the old buffer back first (in stream order) and let the pool reuse it.
      cudaGetLastError();
      HVD_CUDA_CHECK(cudaFreeAsync(ptr, stream));
      ptr = nullptr;
      size = 0;
      HVD_CUDA_CHECK(cudaStreamSynchronize(stream));
      e = cudaMallocAsync(&fresh, n, stream);
    }
    if (e != cudaSuccess) return cuda_error(e, "cudaMallocAsync", __FILE__, __LINE__);
    if (ptr) {
      const cudaError_t f = cudaFreeAsync(ptr, stream);
      if (f != cudaSuccess) {
        cudaFreeAsync(fresh, stream);
        return cuda_error(f, "cudaFreeAsync", __FILE__, __LINE__);
      }
    }
  } else {
    if (ptr) HVD_CUDA_CHECK(cudaFree(ptr));
    ptr = nullptr;
    size = 0;
    HVD_CUDA_CHECK(cudaMalloc(&fresh, n));
  }
  ptr = fresh;
  size = n;
  return ptr;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr) cudaFreeHost(ptr);
  for (void* p : retired) cudaFreeHost(p);
}

Result<void*> PinnedBuffer::get(size_t bytes) {
  if (bytes <= size && ptr) return ptr;
  const size_t n = grown_size(bytes, size);
  void* fresh = nullptr;
  HVD_CUDA_CHECK(cudaMallocHost(&fresh, n));
  if (ptr) retired.push_back(ptr);
  ptr = fresh;
  size = n;
  return ptr;
}

Result<std::unique_ptr<DeviceState>> DeviceState::create(int device, MPI_Comm mpi) {
  auto d = std::make_unique<DeviceState>();
  d->device = device;
  d->mpi = mpi;
  MPI_Comm_rank(mpi, &d->rank);
  MPI_Comm_size(mpi, &d->size);
  HVD_CUDA_CHECK(cudaSetDevice(device));
  HVD_CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
    cudaGetLastError();
    pools = 0;
  }
  for (DeviceBuffer* b : {&d->fusion, &d->gather, &d->scratch}) {
    b->stream = d->stream;
    b->async = pools != 0;
  }
  for (DescArea& a : d->areas) {
    HVD_CUDA_CHECK(cudaEventCreateWithFlags(&a.done, cudaEventDisableTiming));
    a.dev.stream = d->stream;
    a.dev.async = pools != 0;
  }
  d->health->device = device;
  return d;
}

DeviceHealth::~DeviceHealth() {
  // Runs on whichever thread drops the last completion: keep that thread's current device.
  int current = -1;
  if (free_events.empty() || cudaGetDevice(&current) != cudaSuccess) return;
  if (current != device && cudaSetDevice(device) != cudaSuccess) return;
  for (cudaEvent_t e : free_events) cudaEventDestroy(e);
  if (current != device) cudaSetDevice(current);
}

DeviceCompletion::DeviceCompletion(std::shared_ptr<DeviceHealth> h, cudaEvent_t ev)
    : health_(std::move(h)), event_(ev) {
  std::lock_guard<std::mutex> lk(health_->mu);
  health_->live.push_back(this);
}

DeviceCompletion::~DeviceCompletion() {
  std::lock_guard<std::mutex> lk(health_->mu);
  auto& live = health_->live;
  auto it = std::find(live.begin(), live.end(), this);
  if (it != live.end()) {
    *it = live.back();
    live.pop_back();
  }
  health_->free_events.push_back(event_);
}

void DeviceCompletion::doom_if_unfinished() {
  const cudaError_t q = cudaEventQuery(event_);
  if (q != cudaSuccess) {
    if (q != cudaErrorNotReady) cudaGetLastError();
    doomed_ = true;
  }
}

bool DeviceCompletion::work_stopped() {
  const cudaError_t q = cudaEventQuery(event_);
  if (q == cudaErrorNotReady) return false;
  if (q != cudaSuccess) cudaGetLastError();  // a sticky error: the context is gone
  return true;
}

bool DeviceCompletion::query(Status* s) {
  std::lock_guard<std::mutex> lk(health_->mu);
  if (doomed_) {  // its work was still running when the communicator was aborted
    *s = health_->error;
    return true;
  }
  // The event first: a response whose work finished succeeded, whatever failed after it.
  const cudaError_t q = cudaEventQuery(event_);
  if (q == cudaSuccess) {
    *s = Status::OK();
    return true;
  }
  if (!health_->error.ok()) {
    *s = health_->error;
    return true;
  }
  if (q != cudaErrorNotReady) {
    cudaGetLastError();
    health_->error = cuda_error(q, "cudaEventQuery(completion)", __FILE__, __LINE__);
    *s = health_->error;
    return true;
  }
  if ((polls_++ & 63) == 0) {
    for (ncclComm_t c : {health_->comm, health_->local}) {
      if (!c) continue;
      ncclResult_t async = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(c, &async);
      if (rc == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) continue;
      // The background thread aborts the communicators at its next response (begin()).
      health_->error =
          nccl_error(rc != ncclSuccess ? rc : async, "ncclCommGetAsyncError()", __FILE__, __LINE__);
      *s = health_->error;
      return true;
    }
  }
  return false;
}

DeviceState::~DeviceState() {
  if (cudaSetDevice(device) != cudaSuccess) return;  // driver gone (process exit): leak
  if (stream) cudaStreamSynchronize(stream);
  {
    std::lock_guard<std::mutex> lk(health->mu);
    destroy_comm(comm);
    destroy_comm(local);
    health->comm = health->local = nullptr;
  }
  for (cudaEvent_t e : input_events) cudaEventDestroy(e);
  for (DescArea& a : areas) {
    if (a.done) cudaEventDestroy(a.done);
  }
  if (stream) cudaStreamDestroy(stream);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    if (local_mpi != MPI_COMM_NULL) MPI_Comm_free(&local_mpi);
    if (cross_mpi != MPI_COMM_NULL) MPI_Comm_free(&cross_mpi);
  }
}

Status DeviceState::ensure_hierarchical(bool force) {
  if (!broken.ok()) return broken;
  if (hier_setup) return Status::OK();
  hier_setup = true;
  // Any failure here breaks the device: a rank that went on flat while its peers run the
  // hierarchical plan would call NCCL out of step with them.
  Status s = setup_hierarchical(force);
  // Agreed set-wide: node-local communicators are agreed per node only, and a node that went
  // flat while the others run the hierarchical plan would call NCCL out of step with them.
  s = agree_status(mpi, s, "setting up the hierarchical allreduce",
                   spec.should_abort ? *spec.should_abort : std::function<Status()>());
  if (!s.ok()) {
    hier_ok = false;
    if (broken.ok()) abort(s);
  }
  return s;
}

Status DeviceState::setup_hierarchical(bool force) {
  HVD_MPI_CHECK(MPI_Comm_split_type(mpi, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local_mpi));
  MPI_Comm_rank(local_mpi, &local_rank);
  MPI_Comm_size(local_mpi, &local_size);
  HVD_MPI_CHECK(MPI_Comm_split(mpi, local_rank, rank, &cross_mpi));
  MPI_Comm_size(cross_mpi, &cross_size);
  int mm[3] = {local_size, -local_size, -cross_size};
  HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, mm, 3, MPI_INT, MPI_MIN, mpi));
  const bool equal = mm[0] == -mm[1];
  nodes = -mm[2];
  if (!equal && rank == 0) {
    HVD_LOG(Warning) << "HVD_HIERARCHICAL_ALLREDUCE: nodes hold different numbers of ranks of "
                        "this process set ("
                     << mm[0] << " to " << -mm[1] << "); using flat NCCL allreduce";
  }
  // One node: NCCL's own allreduce is the better plan (same decision on every rank: the
  // cross size is the number of nodes).
  if (!equal || (cross_size == 1 && !force)) return Status::OK();
  CommSpec local_spec = spec;
  local_spec.mpi = local_mpi;
  local_spec.what = "the node-local NCCL communicator of the hierarchical allreduce";
  HVD_RETURN_IF_ERROR(create_comm(local_spec, Status::OK(), &local));
  hier_ok = true;
  std::lock_guard<std::mutex> lk(health->mu);
  health->local = local;
  return Status::OK();
}

Status DeviceState::begin(size_t max_descs) {
  Status seen;  // an asynchronous error a handle's poll found since the last response
  {
    std::lock_guard<std::mutex> lk(health->mu);
    seen = health->error;
  }
  if (!seen.ok() && broken.ok()) abort(seen);
  if (!broken.ok()) return broken;
  HVD_CUDA_CHECK(cudaSetDevice(device));
  descs_used = 0;
  area = (area + 1) % kDescAreas;
  DescArea& a = areas[area];
  // Reused only once the response that last used it has run (normally long ago: this waits
  // only with kDescAreas responses still on the stream).
  if (a.used) HVD_CUDA_CHECK(cudaEventSynchronize(a.done));
  a.used = false;
  const size_t bytes = (max_descs + 1) * sizeof(CopyDesc);
  auto h = a.host.get(bytes);
  if (!h.ok()) return fail_response(h.status());
  auto d = a.dev.get(bytes);
  if (!d.ok()) return fail_response(d.status());
  return Status::OK();
}

Status DeviceState::wait_inputs(const std::vector<core::TensorEntry*>& es) {
  std::set<void*> seen;
  size_t next = 0;
  for (const auto* e : es) {
    const TensorView& v = e->input;
    if (v.device.kind != DeviceKind::kCuda) continue;  // a joined rank's host stand-in
    if (v.ready_event) {
      if (seen.insert(v.ready_event).second) {
        HVD_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(v.ready_event), 0));
      }
      continue;
    }
    if (v.stream == stream || !seen.insert(v.stream).second) continue;
    if (next == input_events.size()) {
      cudaEvent_t ev = nullptr;
      HVD_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      input_events.push_back(ev);
    }
    cudaEvent_t ev = input_events[next++];
    HVD_CUDA_CHECK(cudaEventRecord(ev, static_cast<cudaStream_t>(v.stream)));
    HVD_CUDA_CHECK(cudaStreamWaitEvent(stream, ev, 0));
  }
  return Status::OK();
}

Status DeviceState::copy(const std::vector<CopyDesc>& d, DataType dtype, const Scale& s) {
  if (d.empty()) return Status::OK();
  DescArea& a = areas[area];
  const size_t need = (descs_used + d.size()) * sizeof(CopyDesc);
  if (need > a.host.size || need > a.dev.size) {
    return internal_error("nccl executor: descriptor area too small (" + std::to_string(need) +
                          " bytes)");
  }
  auto* host = static_cast<CopyDesc*>(a.host.ptr) + descs_used;
  auto* dev = static_cast<CopyDesc*>(a.dev.ptr) + descs_used;
  int64_t max_count = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    host[i] = d[i];
    max_count = std::max(max_count, d[i].count);
  }
  descs_used += d.size();
  HVD_CUDA_CHECK(
      cudaMemcpyAsync(dev, host, d.size() * sizeof(CopyDesc), cudaMemcpyHostToDevice, stream));
  HVD_CUDA_CHECK(launch_batched_copy(dev, static_cast<int>(d.size()), max_count, dtype, s, stream));
  return Status::OK();
}

Status DeviceState::finish_async(std::shared_ptr<core::Completion>* pending) {
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> lk(health->mu);
    if (!health->free_events.empty()) {
      ev = health->free_events.back();
      health->free_events.pop_back();
    }
  }
  if (!ev) HVD_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaError_t rc = cudaEventRecord(ev, stream);
  if (rc != cudaSuccess) {
    std::lock_guard<std::mutex> lk(health->mu);
    health->free_events.push_back(ev);
    return cuda_error(rc, "cudaEventRecord(completion)", __FILE__, __LINE__);
  }
  *pending = std::make_shared<DeviceCompletion>(health, ev);
  HVD_CUDA_CHECK(cudaEventRecord(areas[area].done, stream));
  areas[area].used = true;
  return Status::OK();
}

Status DeviceState::finish() {
  // The same completion the handles poll (event, then async NCCL errors), waited for here.
  std::shared_ptr<core::Completion> pending;
  HVD_RETURN_IF_ERROR(finish_async(&pending));
  Status s = pending->wait();
  if (!s.ok() && broken.ok()) abort(s);
  return s;
}

void DeviceState::abort(const Status& why) {
  HVD_LOG(Error) << "NCCL communicator on cuda:" << device << " aborted: " << why.message();
  std::lock_guard<std::mutex> lk(health->mu);
  if (health->error.ok()) health->error = why;  // handed-out completions report it
  for (DeviceCompletion* c : health->live) c->doom_if_unfinished();
  if (comm) ncclCommAbort(comm);
  if (local) ncclCommAbort(local);
  comm = local = nullptr;
  health->comm = health->local = nullptr;
  broken = Status(why.code(), "the NCCL communicator on cuda:" + std::to_string(device) +
                                  " was aborted after an earlier error (" + why.message() +
                                  "); restart hvd");
}

Status DeviceState::fail_response(const Status& why) {
  Status s(why.code(), why.message() +
                           " (this rank could not take part in the collective, so its NCCL "
                           "communicator was aborted: later device collectives fail at once; "
                           "peers already in this collective wait until this process exits)");
  if (broken.ok()) abort(s);
  return s;
}

Status check_device_pointer(const void* p, size_t bytes, int device, const core::TensorEntry& e,
                            const char* which) {
  if (bytes == 0) return Status::OK();
  cudaPointerAttributes a{};
  const cudaError_t err = cudaPointerGetAttributes(&a, p);
  if (err == cudaSuccess &&
      (a.type == cudaMemoryTypeManaged || (a.type == cudaMemoryTypeDevice && a.device == device))) {
    return Status::OK();
  }
  const std::string what = core::describe(e.request.op, e.request.name) + " " + which;
  if (err != cudaSuccess) {
    cudaGetLastError();
    return invalid_argument(what + ": cannot inspect pointer: " + cudaGetErrorString(err));
  }
  if (a.type != cudaMemoryTypeDevice) {
    return invalid_argument(what + ": the tensor says cuda:" + std::to_string(device) +
                            " but its data pointer is not device memory (host or invalid "
                            "pointer); pass a CUDA allocation");
  }
  return invalid_argument(what + ": the tensor says cuda:" + std::to_string(device) +
                          " but its memory is on cuda:" + std::to_string(a.device));
}

}  // namespace hvd::ops::nccl
