// SPDX-License-Identifier: Apache-2.0
// Framework-agnostic tensor descriptions: dtype, device, shape, data pointer, stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvd {

/// Element types hvd moves. Numbering is part of the wire format: append only.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kBool,
};
constexpr int kNumDataTypes = 10;

size_t dtype_size(DataType t);
const char* dtype_name(DataType t);
bool dtype_is_floating(DataType t);
bool dtype_valid(int raw);

/// Reductions for allreduce / reducescatter.
enum class ReduceOp : uint8_t { kSum = 0, kAverage, kMin, kMax, kProduct };
const char* reduce_op_name(ReduceOp op);

enum class DeviceKind : uint8_t { kHost = 0, kCuda = 1 };

/// Where a tensor's memory lives. Host tensors have index -1.
struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = -1;
  static Device host() { return {}; }
  static Device cuda(int i) { return {DeviceKind::kCuda, i}; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  ///< "cpu" or "cuda:0"
};

/// A non-owning view of a tensor. For device tensors, `stream` is the producer's stream
/// (cudaStream_t) and `ready_event` an optional event (cudaEvent_t) recorded after the write;
/// the collective waits for it on the device, never with a device-wide sync.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  Device device;
  void* stream = nullptr;
  void* ready_event = nullptr;

  TensorView() = default;
  TensorView(void* d, DataType t, std::vector<int64_t> s, Device dev = Device::host())
      : data(d), dtype(t), shape(std::move(s)), device(dev) {}
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

/// "[64, 32]"
std::string shape_str(const std::vector<int64_t>& shape);
int64_t shape_numel(const std::vector<int64_t>& shape);

/// IEEE half and bfloat16 conversions (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace hvd
