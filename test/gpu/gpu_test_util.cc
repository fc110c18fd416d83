// SPDX-License-Identifier: Apache-2.0
#include "gpu_test_util.h"

#include <mpi.h>

#include <map>
#include <stdexcept>
#include <utility>

namespace hvd::gputest {

int& skipped_cases() {
  static int n = 0;
  return n;
}

std::vector<uint8_t> encode(DataType t, const std::vector<double>& v) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = out.data() + i * dtype_size(t);
    auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
    switch (t) {
      case DataType::kUInt8:
        put(static_cast<uint8_t>(v[i]));
        break;
      case DataType::kInt8:
        put(static_cast<int8_t>(v[i]));
        break;
      case DataType::kInt16:
        put(static_cast<int16_t>(v[i]));
        break;
      case DataType::kInt32:
        put(static_cast<int32_t>(v[i]));
        break;
      case DataType::kInt64:
        put(static_cast<int64_t>(v[i]));
        break;
      case DataType::kFloat16:
        put(float_to_half(static_cast<float>(v[i])));
        break;
      case DataType::kBFloat16:
        put(float_to_bf16(static_cast<float>(v[i])));
        break;
      case DataType::kFloat32:
        put(static_cast<float>(v[i]));
        break;
      case DataType::kFloat64:
        put(v[i]);
        break;
      case DataType::kBool:
        put(static_cast<uint8_t>(v[i] != 0));
        break;
    }
  }
  return out;
}

std::vector<double> decode(DataType t, const void* bytes, size_t n) {
  std::vector<double> out(n);
  const auto* b = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = b + i * dtype_size(t);
    auto get = [&](auto x) {
      std::memcpy(&x, p, sizeof(x));
      return x;
    };
    switch (t) {
      case DataType::kUInt8:
        out[i] = get(uint8_t{});
        break;
      case DataType::kInt8:
        out[i] = get(int8_t{});
        break;
      case DataType::kInt16:
        out[i] = get(int16_t{});
        break;
      case DataType::kInt32:
        out[i] = get(int32_t{});
        break;
      case DataType::kInt64:
        out[i] = static_cast<double>(get(int64_t{}));
        break;
      case DataType::kFloat16:
        out[i] = half_to_float(get(uint16_t{}));
        break;
      case DataType::kBFloat16:
        out[i] = bf16_to_float(get(uint16_t{}));
        break;
      case DataType::kFloat32:
        out[i] = get(float{});
        break;
      case DataType::kFloat64:
        out[i] = get(double{});
        break;
      case DataType::kBool:
        out[i] = get(uint8_t{});
        break;
    }
  }
  return out;
}

std::unique_ptr<DevBuf> upload(DataType t, const std::vector<double>& v) {
  auto bytes = encode(t, v);
  auto b = std::make_unique<DevBuf>(bytes.size());
  if (!bytes.empty()) cudaMemcpy(b->p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  return b;
}

std::vector<double> download(DataType t, const void* dev, size_t n) {
  std::vector<uint8_t> bytes(n * dtype_size(t));
  if (n) cudaMemcpy(bytes.data(), dev, bytes.size(), cudaMemcpyDeviceToHost);
  return decode(t, bytes.data(), n);
}

Harness::Harness(ops::nccl::NcclOptions o) {
  static std::map<std::pair<bool, bool>, std::shared_ptr<core::Executor>> shared;
  auto& slot = shared[{o.hierarchical_allreduce, o.force_hierarchical}];
  if (!slot) {
    // The executor of the GPU module, loaded as a user's process loads it.
    const ops::GpuModuleState& m = ops::gpu_module();
    if (m.api == nullptr) throw std::runtime_error("the GPU module did not load: " + m.reason);
    slot = m.api->make_executor(MPI_COMM_WORLD, o);
  }
  ex = slot;
}

core::TensorEntry& Harness::add(const std::string& name, DataType t, std::vector<int64_t> shape,
                                void* in, void* out) {
  auto e = std::make_unique<core::TensorEntry>();
  e->request.name = name;
  e->request.dtype = t;
  e->request.shape = shape;
  e->request.device = Device::cuda(0);
  e->input = TensorView(in, t, shape, Device::cuda(0));
  e->output = TensorView(out ? out : in, t, shape, Device::cuda(0));
  e->handle = std::make_shared<core::HandleState>();
  entries.push_back(std::move(e));
  return *entries.back();
}

void Harness::device_allocators() {
  for (auto& e : entries) {
    const DataType t = e->request.dtype;
    e->allocator = [this, t](const std::vector<int64_t>& shape) -> void* {
      allocated.push_back(
          std::make_unique<DevBuf>(static_cast<size_t>(shape_numel(shape)) * dtype_size(t)));
      return allocated.back()->p;
    };
  }
}

Status Harness::run(const core::Response& r) {
  std::shared_ptr<core::Completion> done;
  Status s = launch(r, &done);
  Status finished = done ? done->wait() : Status::OK();
  return s.ok() ? finished : s;
}

Status Harness::launch(const core::Response& r, std::shared_ptr<core::Completion>* done) {
  std::vector<core::TensorEntry*> ptrs;
  for (auto& e : entries) {
    e->request.op = r.op;
    ptrs.push_back(e.get());
  }
  return ex->launch(r, ptrs, done);
}

core::Response response(core::OpType op, DataType t, const std::vector<std::string>& names,
                        const std::vector<int64_t>& numels) {
  core::Response r;
  r.op = op;
  r.dtype = t;
  r.names = names;
  r.numels = numels;
  r.device = Device::cuda(0);
  return r;
}

}  // namespace hvd::gputest
