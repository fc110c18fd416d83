// SPDX-License-Identifier: Apache-2.0
// allreduce / grouped allreduce / broadcast / barrier against closed-form expected values.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd_test::Buffer;

namespace {

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                         ReduceOp::kProduct};

double input_value(ReduceOp op, int r, int64_t i) { return hvd_test::reduce_input(op, r, i, 5); }

double expected_value(ReduceOp op, DataType t, int n, int64_t i) {
  return hvd_test::reduce_expected(op, t, n, i, 5);
}

struct Case {
  DataType dtype;
  ReduceOp op;
  int64_t n;
  Buffer buf;
  hvd::Handle h;
  std::string name;
};

// Submits every dtype x op x size at once (so fusion sees a burst), then checks all.
void run_allreduce_matrix(const std::string& prefix) {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<Case> cases;
  for (DataType t : hvd_test::reducible_dtypes()) {
    for (ReduceOp op : kOps) {
      for (int64_t len : {1, 17, 1000}) {
        Case c{t, op, len, Buffer(t, len), {}, ""};
        for (int64_t i = 0; i < len; ++i) c.buf.set(i, input_value(op, r, i));
        c.name = prefix + "." + hvd::dtype_name(t) + "." + hvd::reduce_op_name(op) + "." +
                 std::to_string(len);
        cases.push_back(std::move(c));
      }
    }
  }
  for (auto& c : cases) c.h = hvd::allreduce_async(c.buf.view(), c.name, c.op);
  for (auto& c : cases) {
    INFO(c.name);
    REQUIRE_NOTHROW(hvd::wait(c.h));
    for (int64_t i = 0; i < c.n; ++i) {
      REQUIRE(c.buf.get(i) == expected_value(c.op, c.dtype, n, i));
    }
  }
}

}  // namespace

TEST_CASE("allreduce gives closed-form results for every dtype and reduce op", "[mpi]") {
  run_allreduce_matrix("matrix");
  // The same names again: the response cache fast path must give the same answers.
  run_allreduce_matrix("matrix");
  run_allreduce_matrix("matrix");
}

TEST_CASE("allreduce applies prescale and postscale factors", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                     DataType::kFloat64, DataType::kInt32}) {
    Buffer b(t, 64);
    for (int64_t i = 0; i < 64; ++i) b.set(i, input_value(ReduceOp::kSum, r, i));
    hvd::allreduce(b.view(), std::string("scaled.") + hvd::dtype_name(t), ReduceOp::kSum, 2.0, 3.0);
    for (int64_t i = 0; i < 64; ++i) {
      REQUIRE(b.get(i) == 6.0 * expected_value(ReduceOp::kSum, t, n, i));
    }
    Buffer a(t, 8);
    for (int64_t i = 0; i < 8; ++i) a.set(i, 4.0 * (r + 1));
    hvd::allreduce(a.view(), std::string("scaled.avg.") + hvd::dtype_name(t), ReduceOp::kAverage,
                   0.5, 2.0);
    for (int64_t i = 0; i < 8; ++i) REQUIRE(a.get(i) == 2.0 * (n + 1));  // avg(4(r+1))*0.5*2
  }
}

TEST_CASE("out-of-place allreduce leaves the input untouched", "[mpi]") {
  const int n = hvd::size();
  std::vector<double> in(100, 1.5), out(100, -1.0);
  hvd::TensorView vin(in.data(), DataType::kFloat64, {10, 10});
  hvd::TensorView vout(out.data(), DataType::kFloat64, {10, 10});
  hvd::allreduce_async(vin, vout, "oop", ReduceOp::kSum).wait();
  for (int i = 0; i < 100; ++i) {
    REQUIRE(in[i] == 1.5);
    REQUIRE(out[i] == 1.5 * n);
  }
}

TEST_CASE("large tensors are reduced in place and correctly", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  const int64_t len = (4 << 20) / 4 + 3;  // above the direct-reduction size
  std::vector<float> a(static_cast<size_t>(len)), b(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>((i % 11) * (r + 1));
    b[static_cast<size_t>(i)] = static_cast<float>(r);
  }
  auto ha = hvd::allreduce_async(hvd::TensorView(a.data(), DataType::kFloat32, {len}), "big.a",
                                 ReduceOp::kSum);
  auto hb = hvd::allreduce_async(hvd::TensorView(b.data(), DataType::kFloat32, {len}), "big.b",
                                 ReduceOp::kMax);
  ha.wait();
  hb.wait();
  for (int64_t i = 0; i < len; i += 997) {
    REQUIRE(a[static_cast<size_t>(i)] == static_cast<float>((i % 11) * n * (n + 1) / 2));
    REQUIRE(b[static_cast<size_t>(i)] == static_cast<float>(n - 1));
  }
}

TEST_CASE("a large tensor's Average divides every element, in place or into an output", "[mpi]") {
  // One float tensor in place and one double tensor into a separate output with a postscale:
  // the ring divides as it reduces (one pass), on every element of both halves.
  const int r = hvd::rank(), n = hvd::size();
  const int64_t len = (1 << 20) + 5;
  std::vector<float> f(static_cast<size_t>(len));
  std::vector<double> d(static_cast<size_t>(len)), out(static_cast<size_t>(len), -1.0);
  for (int64_t i = 0; i < len; ++i) {
    f[static_cast<size_t>(i)] = static_cast<float>((i % 13) * (r + 1));
    d[static_cast<size_t>(i)] = static_cast<double>((i % 7) * (r + 1));
  }
  auto hf = hvd::allreduce_async(hvd::TensorView(f.data(), DataType::kFloat32, {len}), "big.avg.f",
                                 ReduceOp::kAverage);
  auto hd = hvd::allreduce_async(hvd::TensorView(d.data(), DataType::kFloat64, {len}),
                                 hvd::TensorView(out.data(), DataType::kFloat64, {len}),
                                 "big.avg.d", ReduceOp::kAverage, 1.0, 4.0);
  hf.wait();
  hd.wait();
  // Sums of (r + 1) over the ranks, divided by n: (n + 1) / 2, exact in binary for n <= 4.
  for (int64_t i = 0; i < len; ++i) {
    const auto k = static_cast<size_t>(i);
    if (f[k] != static_cast<float>((i % 13) * (n + 1)) / 2.0f)
      FAIL("big.avg.f[" << i << "] = " << f[k]);
    if (out[k] != 4.0 * static_cast<double>((i % 7) * (n + 1)) / 2.0) {
      FAIL("big.avg.d[" << i << "] = " << out[k]);
    }
    if (d[k] != static_cast<double>((i % 7) * (r + 1))) FAIL("big.avg.d's input changed at " << i);
  }
}

// Resident memory of this process, in bytes.
int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

TEST_CASE("a large float16 allreduce is exact and leaves no buffer of its size behind", "[mpi]") {
  const int n = hvd::size();
  const int64_t len = 32 << 20;  // 64 MiB of float16: a whole float32 copy would be 128 MiB
  std::vector<uint16_t> h(static_cast<size_t>(len), 0x3C00);  // 1.0
  h.back() = 0x4000;                                          // 2.0
  const int64_t before = resident_bytes();
  hvd::allreduce(hvd::TensorView(h.data(), DataType::kFloat16, {len}), "big.f16", ReduceOp::kSum);
  const int64_t grown = resident_bytes() - before;
  // float16 of n and 2n (n = 2, 4: exact): exponent 15 + log2(n), mantissa 0; 2n one more.
  const uint16_t one = static_cast<uint16_t>((15 + (n == 4 ? 2 : n == 2 ? 1 : 0)) << 10);
  if (n == 1 || n == 2 || n == 4) {
    CHECK(h.front() == one);
    CHECK(h[static_cast<size_t>(len / 2)] == one);
    CHECK(h.back() == static_cast<uint16_t>(one + (1 << 10)));
  }
  CAPTURE(grown);
#ifndef __SANITIZE_ADDRESS__  // ASan's quarantine keeps MPI's freed temporaries resident
  CHECK(grown < (16 << 20));
#endif
}

TEST_CASE("grouped allreduce runs every member with one handle", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<std::vector<float>> data(5);
  std::vector<hvd::TensorView> views;
  for (size_t k = 0; k < data.size(); ++k) {
    data[k].assign(10 + k * 100, static_cast<float>(r + k));
    views.emplace_back(data[k].data(), DataType::kFloat32,
                       std::vector<int64_t>{static_cast<int64_t>(data[k].size())});
  }
  for (int rep = 0; rep < 3; ++rep) {
    for (size_t k = 0; k < data.size(); ++k)
      std::fill(data[k].begin(), data[k].end(), static_cast<float>(r + k));
    hvd::grouped_allreduce(views, "grp", ReduceOp::kSum);
    for (size_t k = 0; k < data.size(); ++k) {
      for (float v : data[k])
        REQUIRE(v == static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(k)));
    }
  }
}

TEST_CASE("broadcast copies the root's values for every dtype and root", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<DataType> types = hvd_test::reducible_dtypes();
  types.push_back(DataType::kBool);
  for (int root = 0; root < n; ++root) {
    std::vector<Buffer> bufs;
    std::vector<hvd::Handle> hs;
    for (DataType t : types) {
      Buffer b(t, 33);
      for (int64_t i = 0; i < 33; ++i) {
        b.set(i, t == DataType::kBool ? (r + i) % 2 : (r + 1) * (i % 7));
      }
      bufs.push_back(std::move(b));
    }
    for (size_t k = 0; k < types.size(); ++k) {
      hs.push_back(hvd::broadcast_async(
          bufs[k].view(), root,
          std::string("bcast.") + hvd::dtype_name(types[k]) + "." + std::to_string(root)));
    }
    for (size_t k = 0; k < types.size(); ++k) {
      hs[k].wait();
      for (int64_t i = 0; i < 33; ++i) {
        double want = types[k] == DataType::kBool ? (root + i) % 2 : (root + 1) * (i % 7);
        REQUIRE(bufs[k].get(i) == want);
      }
    }
  }
}

TEST_CASE("unnamed collectives get matching automatic names on every rank", "[mpi]") {
  const int n = hvd::size();
  for (int k = 0; k < 5; ++k) {
    std::vector<int64_t> v(7, k);
    hvd::allreduce(hvd::TensorView(v.data(), DataType::kInt64, {7}), "", ReduceOp::kSum);
    for (auto x : v) REQUIRE(x == static_cast<int64_t>(k) * n);
  }
}

TEST_CASE("barrier waits for every rank", "[mpi]") {
  const int r = hvd::rank(), n = hvd::size();
  using Clock = std::chrono::steady_clock;  // one clock for every process on this host
  auto ns = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  const hvd::RuntimeStats before = hvd::runtime_stats();
  if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // arrives last
  std::vector<int64_t> times = {ns(Clock::now()), 0};
  hvd::barrier();
  times[1] = ns(Clock::now());
  // Negotiated through rank 0 at every np (a barrier never goes through the cache).
  REQUIRE(hvd::runtime_stats().full_rounds > before.full_rounds);
  // No rank left before the last one arrived.
  hvd::Handle h = hvd::allgather(hvd::TensorView(times.data(), DataType::kInt64, {1, 2}));
  const auto* all = static_cast<const int64_t*>(h.output().data);
  int64_t last_arrival = 0;
  for (int k = 0; k < n; ++k) last_arrival = std::max(last_arrival, all[2 * k]);
  for (int k = 0; k < n; ++k) {
    INFO("rank " << k << " left " << (all[2 * k + 1] - last_arrival)
                 << " ns after the last arrival");
    REQUIRE(all[2 * k + 1] >= last_arrival);
  }
}

TEST_CASE("fused allreduce of large tensors straddling ring chunks is exact", "[mpi][multirank]") {
  // The ring path (mpi_ring.cc, np >= 2): 40 x 30001+ floats (~4.8 MB fused, each over the
  // ring's 32 KiB direct size) cross chunk boundaries at odd offsets; float64 too.
  REQUIRE(hvd::size() >= 2);  // [multirank]: np = 1 runs exclude it
  const int r = hvd::rank(), n = hvd::size();
  std::vector<std::vector<float>> f(40);
  std::vector<std::vector<double>> d(7);
  std::vector<hvd::Handle> hs;
  for (size_t k = 0; k < f.size(); ++k) {
    f[k].resize(30001 + k);
    for (size_t i = 0; i < f[k].size(); ++i) f[k][i] = static_cast<float>((r + 1) * ((i + k) % 13));
    hs.push_back(hvd::allreduce_async(
        hvd::TensorView(f[k].data(), DataType::kFloat32, {static_cast<int64_t>(f[k].size())}),
        "slices.f." + std::to_string(k), ReduceOp::kSum, 2.0, 0.5));
  }
  for (size_t k = 0; k < d.size(); ++k) {
    d[k].resize(70001);
    for (size_t i = 0; i < d[k].size(); ++i) d[k][i] = static_cast<double>(r * 1000 + i % 97);
    hs.push_back(hvd::allreduce_async(
        hvd::TensorView(d[k].data(), DataType::kFloat64, {static_cast<int64_t>(d[k].size())}),
        "slices.d." + std::to_string(k), ReduceOp::kMax));
  }
  for (auto& h : hs) h.wait();
  for (size_t k = 0; k < f.size(); ++k) {
    for (size_t i = 0; i < f[k].size(); ++i) {
      REQUIRE(f[k][i] == static_cast<float>(n * (n + 1) / 2 * ((i + k) % 13)));
    }
  }
  for (size_t k = 0; k < d.size(); ++k) {
    for (size_t i = 0; i < d[k].size(); ++i)
      REQUIRE(d[k][i] == static_cast<double>((n - 1) * 1000 + i % 97));
  }
}

TEST_CASE("fused allreduce of small tensors across fusion-buffer slices is exact", "[mpi]") {
  // The copy path at every np: 120 tensors of 5003+ floats (each under the ring's 32 KiB
  // direct size, ~2.4 MB fused) are copied through the 256 KiB slices of the fusion buffer,
  // tensors crossing slice boundaries at odd offsets; scaled, with an int32 batch too.
  const int r = hvd::rank(), n = hvd::size();
  std::vector<std::vector<float>> f(120);
  std::vector<std::vector<int32_t>> q(60);
  std::vector<hvd::Handle> hs;
  for (size_t k = 0; k < f.size(); ++k) {
    f[k].resize(5003 + k);
    for (size_t i = 0; i < f[k].size(); ++i) f[k][i] = static_cast<float>((r + 1) * ((i + k) % 11));
    hs.push_back(hvd::allreduce_async(
        hvd::TensorView(f[k].data(), DataType::kFloat32, {static_cast<int64_t>(f[k].size())}),
        "copy.f." + std::to_string(k), ReduceOp::kSum, 4.0, 0.25));
  }
  for (size_t k = 0; k < q.size(); ++k) {
    q[k].resize(7001 + 3 * k);
    for (size_t i = 0; i < q[k].size(); ++i) q[k][i] = static_cast<int32_t>(r + (i + k) % 7);
    hs.push_back(hvd::allreduce_async(
        hvd::TensorView(q[k].data(), DataType::kInt32, {static_cast<int64_t>(q[k].size())}),
        "copy.q." + std::to_string(k), ReduceOp::kMin));
  }
  for (auto& h : hs) h.wait();
  for (size_t k = 0; k < f.size(); ++k) {
    for (size_t i = 0; i < f[k].size(); ++i) {
      if (f[k][i] != static_cast<float>(n * (n + 1) / 2 * ((i + k) % 11))) {
        FAIL("copy.f." << k << "[" << i << "] = " << f[k][i]);
      }
    }
  }
  for (size_t k = 0; k < q.size(); ++k) {
    for (size_t i = 0; i < q[k].size(); ++i) {
      if (q[k][i] != static_cast<int32_t>((i + k) % 7)) FAIL("copy.q." << k << "[" << i << "]");
    }
  }
}

TEST_CASE("same-op allreduces of different dtypes submitted next to each other are exact",
          "[mpi]") {
  // Alternating float32 / int32 / float64 sums in one burst: fusing across dtypes would
  // reinterpret one dtype's bytes as another's.
  const int r = hvd::rank(), n = hvd::size();
  const int64_t len = 37;
  std::vector<std::vector<float>> f(8, std::vector<float>(len));
  std::vector<std::vector<int32_t>> q(8, std::vector<int32_t>(len));
  std::vector<std::vector<double>> d(8, std::vector<double>(len));
  std::vector<hvd::Handle> hs;
  for (size_t k = 0; k < 8; ++k) {
    for (int64_t i = 0; i < len; ++i) {
      f[k][i] = static_cast<float>(r + 1) * 0.5f + static_cast<float>(i);
      q[k][i] = (r + 1) * 1000 + static_cast<int32_t>(i + k);
      d[k][i] = (r + 1) * 0.25 + static_cast<double>(i) * 1e-3;
    }
    const std::string s = std::to_string(k);
    hs.push_back(hvd::allreduce_async(hvd::TensorView(f[k].data(), DataType::kFloat32, {len}),
                                      "mixed.f." + s, ReduceOp::kSum));
    hs.push_back(hvd::allreduce_async(hvd::TensorView(q[k].data(), DataType::kInt32, {len}),
                                      "mixed.q." + s, ReduceOp::kSum));
    hs.push_back(hvd::allreduce_async(hvd::TensorView(d[k].data(), DataType::kFloat64, {len}),
                                      "mixed.d." + s, ReduceOp::kSum));
  }
  for (auto& h : hs) h.wait();
  const double ranks = n * (n + 1) / 2.0;
  for (size_t k = 0; k < 8; ++k) {
    for (int64_t i = 0; i < len; ++i) {
      INFO("k = " << k << ", i = " << i);
      REQUIRE(f[k][i] == static_cast<float>(ranks * 0.5 + n * i));
      REQUIRE(q[k][i] == static_cast<int32_t>(ranks * 1000 + n * (i + k)));
      REQUIRE(d[k][i] == Approx(ranks * 0.25 + n * i * 1e-3).epsilon(1e-12));
    }
  }
}

TEST_CASE("ranks out of step", "[.][deadline]") {
  // Run alone by mpi.deadline.np2 (HVD_TEST_DEADLINE_SECONDS=2): rank 1 is busy elsewhere
  // while rank 0 waits for it, and the deadline must end the job naming this test.
  if (hvd::rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
  std::vector<float> v(1, 1.0f);
  hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {1}), "out.of.step");
}
