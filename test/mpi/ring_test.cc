// SPDX-License-Identifier: Apache-2.0
// Fused batches large enough for the zero-copy ring (mpi_ring.cc): every dtype x op, tensors
// that straddle chunk boundaries, empty ones, pieces under and over the direct-message size,
// scaling and out-of-place outputs, against closed-form values.
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/mpi_util.h"
#include "hvd_catch.h"
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

namespace {

// Runs an allreduce (sum) of `tensors` (float32) on `ex` as one fused response; true when
// every element came out as the number of ranks.
bool run_fused(hvd::ops::MpiExecutor* ex, std::vector<std::vector<float>>* tensors) {
  hvd::core::Response r;
  std::vector<hvd::core::TensorEntry> entries(tensors->size());
  std::vector<hvd::core::TensorEntry*> ptrs;
  for (size_t i = 0; i < tensors->size(); ++i) {
    auto& t = (*tensors)[i];
    std::fill(t.begin(), t.end(), 1.0f);
    const int64_t n = static_cast<int64_t>(t.size());
    entries[i].input = entries[i].output = hvd::TensorView(t.data(), DataType::kFloat32, {n});
    r.names.push_back("buf." + std::to_string(i));
    r.numels.push_back(n);
    ptrs.push_back(&entries[i]);
  }
  if (!ex->execute(r, ptrs).ok()) return false;
  for (auto& t : *tensors) {
    for (float v : t) {
      if (v != static_cast<float>(hvd::size())) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("an executor's buffers grown past one huge page are released after a quiet period",
          "[mpi][multirank]") {
  REQUIRE(hvd::size() >= 2);
  MPI_Comm comm;
  REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  constexpr size_t kKept = hvd::ops::MpiExecutor::kKeptBytes;
  for (auto quiet : {std::chrono::milliseconds(0), std::chrono::milliseconds(3600 * 1000)}) {
    CAPTURE(quiet.count());
    hvd::ops::MpiExecutor ex(comm, quiet);
    // Two 16 MiB tensors take the ring, which stages a chunk of 32 MiB / np (8 MiB at np 4),
    // more than the huge page a buffer keeps.
    std::vector<std::vector<float>> large(2, std::vector<float>(4 << 20));
    REQUIRE(run_fused(&ex, &large));
    const size_t grown = ex.buffer_bytes();
    CHECK(grown > 2 * kKept);
    std::vector<std::vector<float>> small(2, std::vector<float>(16));
    REQUIRE(run_fused(&ex, &small));
    if (quiet.count() == 0) {
      CHECK(ex.buffer_bytes() <= 2 * kKept);
    } else {
      CHECK(ex.buffer_bytes() == grown);
    }
  }
  MPI_Comm_free(&comm);
}

TEST_CASE("a request batch that releases a send unfinished says so", "[mpi][multirank]") {
  // Rank 0 sends 1 MiB (past any eager limit) that rank 1 receives only later; rank 0's batch
  // is told to abort at once, so it releases the send unfinished: MPI may still read the
  // buffer, and the batch must say so (the executor then keeps the buffers).
  REQUIRE(hvd::size() >= 2);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<char> big(1 << 20, 'x');
  const std::function<hvd::Status()> abort = [] { return hvd::aborted("test abort"); };
  if (rank == 0) {
    bool abandoned = false;
    {
      hvd::ops::RequestBatch batch(1, &abort, &abandoned);
      REQUIRE(MPI_Isend(big.data(), static_cast<int>(big.size()), MPI_CHAR, 1, 77, comm,
                        batch.add_send(1)) == MPI_SUCCESS);
      CHECK_FALSE(batch.wait().ok());
    }
    CHECK(abandoned);
    // A batch whose requests all finished says nothing.
    bool none = false;
    {
      hvd::ops::RequestBatch batch(1, &abort, &none);
      int one = 1;
      REQUIRE(MPI_Isend(&one, 1, MPI_INT, 0, 78, comm, batch.add_send(0)) == MPI_SUCCESS);
      int got = 0;
      MPI_Recv(&got, 1, MPI_INT, 0, 78, comm, MPI_STATUS_IGNORE);
      CHECK(batch.wait().ok());
    }
    CHECK_FALSE(none);
  }
  MPI_Barrier(comm);
  if (rank == 1) {  // the released send completes now; nothing else touches `big` meanwhile
    std::vector<char> in(big.size());
    MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_CHAR, 0, 77, comm, MPI_STATUS_IGNORE);
    CHECK(in == big);
  }
  MPI_Barrier(comm);
  MPI_Comm_free(&comm);
}
