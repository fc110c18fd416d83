// SPDX-License-Identifier: Apache-2.0
// Framework-agnostic tensor descriptions: dtype, device, shape, data pointer, stream.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
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

/// Bytes per element (0 for a value out of range). Inline: asked per tensor, across libraries.
constexpr size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}
const char* dtype_name(DataType t);
bool dtype_is_floating(DataType t);
bool dtype_valid(int raw);

/// Reductions for allreduce / reducescatter. Numbering is part of the wire format (and of the
/// Python constants): append only. kAdasum: adaptive summation (Maleki et al., MLSys 2021) of
/// float tensors, allreduce only, over a power-of-two number of ranks (docs/cpp-api.md).
enum class ReduceOp : uint8_t { kSum = 0, kAverage, kMin, kMax, kProduct, kAdasum };
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

/// A tensor's dimensions: a vector of int64_t that keeps up to kInline of them in place, so
/// that describing a tensor allocates nothing (a collective's caller builds a view per call).
/// Converts to and from std::vector<int64_t>.
class Shape {
 public:
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  static constexpr size_t kInline = 4;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) {  // NOLINT(google-explicit-constructor): a vector
    assign(dims.data(), dims.data() + dims.size());
  }
  Shape(const int64_t* first, const int64_t* last) { assign(first, last); }
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept { take(&o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      take(&o);
    }
    return *this;
  }
  Shape& operator=(const std::vector<int64_t>& dims) {
    assign(dims.data(), dims.data() + dims.size());
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  ~Shape() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  int64_t* data() { return heap_ ? heap_ : inline_; }
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t front() const { return data()[0]; }
  int64_t back() const { return data()[size_ - 1]; }
  void clear() { size_ = 0; }
  void push_back(int64_t d) {
    grow(size_ + 1);
    data()[size_++] = d;
  }
  void resize(size_t n, int64_t value = 0) {
    grow(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void assign(const int64_t* first, const int64_t* last) {
    const auto n = static_cast<size_t>(last - first);
    if (n > cap_) reallocate(n, 0);  // nothing to keep: the old dimensions are replaced
    std::copy(first, last, data());
    size_ = static_cast<uint32_t>(n);
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  operator std::vector<int64_t>() const { return vec(); }  // NOLINT(google-explicit-constructor)

  friend bool operator==(const Shape& a, const Shape& b) {
    return same_dims(a.data(), a.size(), b.data(), b.size());
  }
  friend bool operator==(const Shape& a, const std::vector<int64_t>& b) {
    return same_dims(a.data(), a.size(), b.data(), b.size());
  }
  friend bool operator==(const std::vector<int64_t>& a, const Shape& b) { return b == a; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend bool operator!=(const Shape& a, const std::vector<int64_t>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<int64_t>& a, const Shape& b) { return !(b == a); }

 private:
  // A loop, not std::equal: that calls memcmp, which costs more than the few dimensions.
  static bool same_dims(const int64_t* a, size_t n, const int64_t* b, size_t m) {
    if (n != m) return false;
    for (size_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }
  // Room for n dimensions (the first size_ kept).
  void grow(size_t n) {
    if (n > cap_) reallocate(n, std::min<size_t>(size_, n));
  }
  // A block of n dimensions holding the first `keep` of the current ones. `keep` is read by the
  // caller, before the allocation: operator new may be replaced, so the compiler must assume
  // that it changes size_, and would otherwise see a copy of up to 2^32 dimensions into it.
  void reallocate(size_t n, size_t keep) {
    const int64_t* old = data();
    auto* bigger = new int64_t[n];
    std::copy(old, old + keep, bigger);
    release();
    heap_ = bigger;
    cap_ = static_cast<uint32_t>(n);
  }
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    cap_ = kInline;
  }
  void take(Shape* o) {
    if (o->heap_) {
      heap_ = o->heap_;
      cap_ = o->cap_;
      o->heap_ = nullptr;
      o->cap_ = kInline;
    } else {
      std::copy(o->begin(), o->end(), inline_);
    }
    size_ = o->size_;
    o->size_ = 0;
  }
  int64_t* heap_ = nullptr;  // null: the dimensions are in inline_
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
  int64_t inline_[kInline] = {};
};

/// `a == b` for the short strings that tensor names are: eight bytes at a time inline, where
/// std::string's == calls memcmp (which costs more than comparing a name of a few words).
inline bool same_text(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  if (n < 8) {
    for (size_t i = 0; i < n; ++i) {
      if (p[i] != q[i]) return false;
    }
    return true;
  }
  uint64_t x, y;
  for (size_t i = 0; i + 8 < n; i += 8) {
    std::memcpy(&x, p + i, 8);
    std::memcpy(&y, q + i, 8);
    if (x != y) return false;
  }
  std::memcpy(&x, p + n - 8, 8);  // the last eight (overlapping the words before)
  std::memcpy(&y, q + n - 8, 8);
  return x == y;
}

/// The number of elements of a tensor of dimensions [first, last) (1 for none). Inline: asked
/// per tensor, across libraries.
inline int64_t dims_numel(const int64_t* first, const int64_t* last) {
  int64_t n = 1;
  for (; first != last; ++first) n *= *first;
  return n;
}

/// A non-owning view of a tensor. For device tensors, `stream` is the producer's stream
/// (cudaStream_t) and `ready_event` an optional event (cudaEvent_t) recorded after the write;
/// the collective waits for it on the device, never with a device-wide sync.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  Device device;
  void* stream = nullptr;
  void* ready_event = nullptr;

  TensorView() = default;
  TensorView(void* d, DataType t, Shape s, Device dev = Device::host())
      : data(d), dtype(t), shape(std::move(s)), device(dev) {}
  int64_t numel() const { return dims_numel(shape.begin(), shape.end()); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

/// "[64, 32]"
std::string shape_str(const std::vector<int64_t>& shape);
inline int64_t shape_numel(const std::vector<int64_t>& shape) {
  return dims_numel(shape.data(), shape.data() + shape.size());
}

/// IEEE half and bfloat16 conversions (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace hvd
