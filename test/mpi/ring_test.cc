// SPDX-License-Identifier: Apache-2.0
// Fused batches large enough for the zero-copy ring (mpi_ring.cc): every dtype x op, tensors
// that straddle chunk boundaries, empty ones, pieces under and over the direct-message size,
// scaling and out-of-place outputs, against closed-form values.
#include <catch2/catch.hpp>

#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd_test::Buffer;

namespace {

// Elements per tensor: > 256 KiB per fused batch even for 1-byte types; a mix of empty, tiny,
// under-32-KiB and large tensors so chunks cut through tensors of every kind.
const int64_t kSizes[] = {0, 5, 40000, 100, 150001, 3, 90007, 1};

double value(ReduceOp op, int r, int64_t i) { return hvd_test::reduce_input(op, r, i, 3); }

double expected(ReduceOp op, DataType t, int n, int64_t i) {
  return hvd_test::reduce_expected(op, t, n, i, 3);
}

struct Tensor {
  Buffer in, out;
  hvd::Handle h;
  std::string name;
};

}  // namespace

TEST_CASE("large fused batches: every dtype and op, tensors across chunk boundaries", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  for (DataType t : hvd_test::reducible_dtypes()) {
    for (ReduceOp op : ops) {
      std::vector<Tensor> ts;
      for (int64_t len : kSizes) {
        Tensor x{Buffer(t, len), Buffer(t, 0), {}, ""};
        for (int64_t i = 0; i < len; ++i) x.in.set(i, value(op, r, i));
        x.name = std::string("ring.") + hvd::dtype_name(t) + "." + hvd::reduce_op_name(op) + "." +
                 std::to_string(len);
        ts.push_back(std::move(x));
      }
      for (auto& x : ts) x.h = hvd::allreduce_async(x.in.view(), x.name, op);
      for (size_t k = 0; k < ts.size(); ++k) {
        INFO(ts[k].name);
        REQUIRE_NOTHROW(hvd::wait(ts[k].h));
        for (int64_t i = 0; i < kSizes[k]; ++i) {
          if (ts[k].in.get(i) != expected(op, t, n, i)) {
            FAIL("element " << i << " is " << ts[k].in.get(i) << ", expected "
                            << expected(op, t, n, i));
          }
        }
      }
    }
  }
}

TEST_CASE("large fused batches: prescale, postscale and separate outputs", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    for (int round = 0; round < 2; ++round) {  // the second round runs from the cache
      std::vector<Tensor> ts;
      for (int64_t len : kSizes) {
        Tensor x{Buffer(t, len), Buffer(t, len), {}, ""};
        for (int64_t i = 0; i < len; ++i) {
          x.in.set(i, value(ReduceOp::kSum, r, i));
          x.out.set(i, -1);
        }
        x.name = std::string("ring.scaled.") + hvd::dtype_name(t) + "." + std::to_string(len);
        ts.push_back(std::move(x));
      }
      for (auto& x : ts) {
        x.h = hvd::allreduce_async(x.in.view(), x.out.view(), x.name, ReduceOp::kAverage, 0.5, 4.0);
      }
      for (size_t k = 0; k < ts.size(); ++k) {
        INFO(ts[k].name);
        REQUIRE_NOTHROW(hvd::wait(ts[k].h));
        for (int64_t i = 0; i < kSizes[k]; ++i) {
          const double want = expected(ReduceOp::kAverage, t, n, i) * 2.0;
          if (ts[k].out.get(i) != want || ts[k].in.get(i) != value(ReduceOp::kSum, r, i)) {
            FAIL("element " << i << ": output " << ts[k].out.get(i) << " (expected " << want
                            << "), input " << ts[k].in.get(i) << " (must be unchanged)");
          }
        }
      }
    }
  }
}
