// SPDX-License-Identifier: Apache-2.0
// Helpers for [mpi] tests: typed buffers of any hvd dtype, read and written as double.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace hvd_test {

/// The message of the hvd::Error that `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hvd::Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// The message with which `h` failed, or "(no error)".
inline std::string wait_error(const hvd::Handle& h) {
  return error_of([&h] { h.wait(); });
}

/// Rank r's element i for reduce op `op`: (r + 1) * (i % period + 1), or 1 / 2 alternating for
/// Product (so products stay small).
inline double reduce_input(hvd::ReduceOp op, int r, int64_t i, int period) {
  if (op == hvd::ReduceOp::kProduct) return static_cast<double>(((r + i) % 2) + 1);
  return static_cast<double>((r + 1) * ((i % period) + 1));
}

/// The closed-form reduction over n ranks of reduce_input(op, r, i, period); integer Average
/// truncates. The inputs of the ranks are parallel vectors, whose Adasum is their average.
inline double reduce_expected(hvd::ReduceOp op, hvd::DataType t, int n, int64_t i, int period) {
  const double k = static_cast<double>((i % period) + 1);
  switch (op) {
    case hvd::ReduceOp::kSum:
      return k * n * (n + 1) / 2;
    case hvd::ReduceOp::kAverage:
    case hvd::ReduceOp::kAdasum: {
      const double avg = k * (n + 1) / 2.0;
      return hvd::dtype_is_floating(t) ? avg : static_cast<double>(static_cast<int64_t>(avg));
    }
    case hvd::ReduceOp::kMin:
      return k;
    case hvd::ReduceOp::kMax:
      return k * n;
    case hvd::ReduceOp::kProduct: {
      double p = 1;
      for (int r = 0; r < n; ++r) p *= reduce_input(op, r, i, period);
      return p;
    }
  }
  return 0;
}

inline const std::vector<hvd::DataType>& reducible_dtypes() {
  static const std::vector<hvd::DataType> all = {
      hvd::DataType::kUInt8,    hvd::DataType::kInt8,    hvd::DataType::kInt16,
      hvd::DataType::kInt32,    hvd::DataType::kInt64,   hvd::DataType::kFloat16,
      hvd::DataType::kBFloat16, hvd::DataType::kFloat32, hvd::DataType::kFloat64};
  return all;
}

/// A host tensor of any dtype with double-valued accessors.
class Buffer {
 public:
  Buffer(hvd::DataType t, int64_t n)
      : t_(t), n_(n), bytes_(static_cast<size_t>(n) * hvd::dtype_size(t)) {}
  void set(int64_t i, double v) {
    uint8_t* p = bytes_.data() + i * static_cast<int64_t>(hvd::dtype_size(t_));
    switch (t_) {
      case hvd::DataType::kUInt8:
        store<uint8_t>(p, v);
        break;
      case hvd::DataType::kInt8:
        store<int8_t>(p, v);
        break;
      case hvd::DataType::kInt16:
        store<int16_t>(p, v);
        break;
      case hvd::DataType::kInt32:
        store<int32_t>(p, v);
        break;
      case hvd::DataType::kInt64:
        store<int64_t>(p, v);
        break;
      case hvd::DataType::kFloat16:
        store<uint16_t>(p, hvd::float_to_half(static_cast<float>(v)), true);
        break;
      case hvd::DataType::kBFloat16:
        store<uint16_t>(p, hvd::float_to_bf16(static_cast<float>(v)), true);
        break;
      case hvd::DataType::kFloat32:
        store<float>(p, v);
        break;
      case hvd::DataType::kFloat64:
        store<double>(p, v);
        break;
      case hvd::DataType::kBool:
        store<uint8_t>(p, v != 0 ? 1 : 0);
        break;
    }
  }
  double get(int64_t i) const {
    const uint8_t* p = bytes_.data() + i * static_cast<int64_t>(hvd::dtype_size(t_));
    switch (t_) {
      case hvd::DataType::kUInt8:
        return load<uint8_t>(p);
      case hvd::DataType::kInt8:
        return load<int8_t>(p);
      case hvd::DataType::kInt16:
        return load<int16_t>(p);
      case hvd::DataType::kInt32:
        return load<int32_t>(p);
      case hvd::DataType::kInt64:
        return static_cast<double>(load<int64_t>(p));
      case hvd::DataType::kFloat16:
        return hvd::half_to_float(load<uint16_t>(p));
      case hvd::DataType::kBFloat16:
        return hvd::bf16_to_float(load<uint16_t>(p));
      case hvd::DataType::kFloat32:
        return load<float>(p);
      case hvd::DataType::kFloat64:
        return load<double>(p);
      case hvd::DataType::kBool:
        return load<uint8_t>(p);
    }
    return 0;
  }
  hvd::TensorView view(std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {n_};
    return hvd::TensorView(bytes_.data(), t_, shape);
  }
  int64_t size() const { return n_; }

 private:
  template <typename T>
  static void store(uint8_t* p, double v, bool raw = false) {
    T x = raw ? static_cast<T>(v) : static_cast<T>(v);
    std::memcpy(p, &x, sizeof(T));
  }
  template <typename T>
  static T load(const uint8_t* p) {
    T x;
    std::memcpy(&x, p, sizeof(T));
    return x;
  }
  hvd::DataType t_;
  int64_t n_;
  std::vector<uint8_t> bytes_;
};

}  // namespace hvd_test
