// SPDX-License-Identifier: Apache-2.0
// Adasum allreduce (ReduceOp::kAdasum) against the recursive pairwise rule computed here in long
// double from every rank's input: random, orthogonal and parallel vectors, float16/bfloat16
// extremes, fused bursts and grouped calls, process sets. Each case prints its largest
// difference from the reference on rank 0.
#include <cmath>
#include <cstdio>
#include <map>

#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd::test::Contains;
using hvd_test::Buffer;
using hvd_test::error_of;

namespace {

using Vec = std::vector<long double>;

// adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b; a zero side has coefficient 1.
Vec pair_rule(const Vec& a, const Vec& b) {
  long double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const long double ca = aa == 0 ? 1 : 1 - ab / (2 * aa);
  const long double cb = bb == 0 ? 1 : 1 - ab / (2 * bb);
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The recursion over 2^k ranks: neighbours first (0+1, 2+3, ...), then pairs of pairs.
Vec recursive_rule(std::vector<Vec> v) {
  while (v.size() > 1) {
    std::vector<Vec> next;
    for (size_t i = 0; i + 1 < v.size(); i += 2) next.push_back(pair_rule(v[i], v[i + 1]));
    v = std::move(next);
  }
  return v[0];
}

// Rank r's input: how each case fills element i.
using Fill = double (*)(int r, int64_t i, int seed);

// splitmix64: a well-mixed 64-bit value per key.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A standard normal value per (seed, rank, element), the same on every rank (Box-Muller).
double random_fill(int r, int64_t i, int seed) {
  const uint64_t k = mix((static_cast<uint64_t>(seed) << 40) ^ (static_cast<uint64_t>(r) << 32) ^
                         static_cast<uint64_t>(i));
  const double u1 = (static_cast<double>(k >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = static_cast<double>(mix(k) >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
double orthogonal_fill(int r, int64_t i, int /*seed*/) {
  return i % hvd::size() == r ? static_cast<double>(i % 7 + 1) * (r % 2 ? -1 : 1) : 0.0;
}
double parallel_fill(int r, int64_t i, int /*seed*/) {
  return static_cast<double>(r + 1) * static_cast<double>(i % 5 - 2);
}

// Every rank's input as `dtype` holds it (rounded), widened: the reference's starting point.
std::vector<Vec> inputs(DataType dtype, Fill fill, int64_t n, int seed, int ranks) {
  std::vector<Vec> v;
  for (int r = 0; r < ranks; ++r) {
    Buffer b(dtype, n);
    Vec x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      b.set(i, fill(r, i, seed));
      x[static_cast<size_t>(i)] = b.get(i);
    }
    v.push_back(std::move(x));
  }
  return v;
}

// Relative tolerance per dtype: its rounding of the result (float16/bfloat16 are combined in
// float32 and rounded once), with room for the order of the float64 sums.
double tolerance(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return 2e-3;
    case DataType::kBFloat16:
      return 1.6e-2;
    case DataType::kFloat32:
      return 2e-6;
    default:
      return 1e-12;
  }
}

// The largest |got - want| / max(1, |want|) over the elements.
double worst_difference(const Buffer& got, const Vec& want) {
  double worst = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double w = static_cast<double>(want[static_cast<size_t>(i)]);
    const double d = std::fabs(got.get(i) - w) / std::max(1.0, std::fabs(w));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

void report(const std::string& what, double worst) {
  if (hvd::rank() == 0) {
    std::printf("[adasum np %d] %s: largest difference from the reference %.3g\n", hvd::size(),
                what.c_str(), worst);
  }
}

const DataType kFloats[] = {DataType::kFloat64, DataType::kFloat32, DataType::kFloat16,
                            DataType::kBFloat16};

struct Case {
  std::string name;
  DataType dtype;
  Buffer buf;
  Vec want;
  hvd::Handle h;
};

// Submits one Adasum per (dtype, fill, length) at once, so fusion batches tensors of different
// sizes and patterns (each must keep its own dot products), then checks each.
void run_burst(const std::string& prefix, const std::vector<std::pair<std::string, Fill>>& fills,
               std::initializer_list<int64_t> lengths) {
  const int r = hvd::rank(), n = hvd::size();
  std::vector<Case> cases;
  int seed = 1;
  for (DataType t : kFloats) {
    for (const auto& [label, fill] : fills) {
      for (int64_t len : lengths) {
        Case c{prefix + "." + label + "." + hvd::dtype_name(t) + "." + std::to_string(len),
               t,
               Buffer(t, len),
               recursive_rule(inputs(t, fill, len, seed, n)),
               {}};
        for (int64_t i = 0; i < len; ++i) c.buf.set(i, fill(r, i, seed));
        ++seed;
        cases.push_back(std::move(c));
      }
    }
  }
  for (auto& c : cases) c.h = hvd::allreduce_async(c.buf.view(), c.name, ReduceOp::kAdasum);
  std::map<std::string, double> worst;  // per fill and dtype, over the lengths
  for (auto& c : cases) {
    INFO(c.name);
    REQUIRE_NOTHROW(hvd::wait(c.h));
    const double d = worst_difference(c.buf, c.want);
    REQUIRE(d <= tolerance(c.dtype));
    const std::string key = c.name.substr(0, c.name.rfind('.'));
    worst[key] = std::max(worst[key], d);
  }
  for (const auto& [key, d] : worst) report(key, d);
}

}  // namespace

TEST_CASE("Adasum allreduce equals the recursive rule for random vectors of every float dtype",
          "[mpi][adasum]") {
  run_burst("adasum.random", {{"random", random_fill}}, {1, 3, 1000, 70000});
}

TEST_CASE("Adasum of orthogonal vectors is their sum, of parallel vectors their average",
          "[mpi][adasum]") {
  const int n = hvd::size();
  run_burst("adasum.shape", {{"orthogonal", orthogonal_fill}, {"parallel", parallel_fill}},
            {5, 4096});
  // Orthogonal: exactly the sum (the dot products are exact zeros).
  Buffer o(DataType::kFloat32, 64);
  for (int64_t i = 0; i < 64; ++i) o.set(i, orthogonal_fill(hvd::rank(), i, 0));
  hvd::allreduce(o.view(), "adasum.orthogonal.exact", ReduceOp::kAdasum);
  for (int64_t i = 0; i < 64; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += orthogonal_fill(r, i, 0);
    REQUIRE(o.get(i) == sum);
  }
  // Parallel: (r + 1) v averages to (n + 1) / 2 v; prescale and postscale apply as for Sum.
  Buffer p(DataType::kFloat64, 10);
  for (int64_t i = 0; i < 10; ++i) p.set(i, parallel_fill(hvd::rank(), i, 0));
  hvd::allreduce(p.view(), "adasum.parallel.scaled", ReduceOp::kAdasum, 2.0, 3.0);
  for (int64_t i = 0; i < 10; ++i) {
    REQUIRE(p.get(i) == Approx(6.0 * (n + 1) / 2.0 * static_cast<double>(i % 5 - 2)));
  }
}

TEST_CASE("Adasum of float16 near its largest and smallest values has no inf or NaN",
          "[mpi][adasum]") {
  const int n = hvd::size();
  // Equal vectors of 60000 on every rank: Adasum is the vector (a sum would be inf).
  Buffer big(DataType::kFloat16, 300);
  for (int64_t i = 0; i < 300; ++i) big.set(i, i % 2 ? 60000.0 : -65504.0);
  hvd::allreduce(big.view(), "adasum.f16.big", ReduceOp::kAdasum);
  double worst = 0;
  for (int64_t i = 0; i < 300; ++i) {
    REQUIRE(std::isfinite(big.get(i)));
    worst = std::max(worst, std::fabs(big.get(i) - (i % 2 ? 60000.0 : -65504.0)) / 65504.0);
  }
  REQUIRE(worst <= tolerance(DataType::kFloat16));
  report("float16 equal vectors near 65504", worst);
  // Rank-scaled vectors of float16 subnormals: parallel, so their average, not flushed to 0.
  const auto tiny = [](int r, int64_t i, int) {
    return (r + 1) * 6e-8 * static_cast<double>(i % 3);
  };
  Buffer t(DataType::kFloat16, 30);
  for (int64_t i = 0; i < 30; ++i) t.set(i, tiny(hvd::rank(), i, 0));
  const Vec want = recursive_rule(inputs(DataType::kFloat16, tiny, 30, 0, n));
  hvd::allreduce(t.view(), "adasum.f16.tiny", ReduceOp::kAdasum);
  worst = 0;
  for (int64_t i = 0; i < 30; ++i) {
    REQUIRE(std::isfinite(t.get(i)));
    // float16's spacing down there is 6e-8: one step of it.
    worst =
        std::max(worst, std::fabs(t.get(i) - static_cast<double>(want[static_cast<size_t>(i)])));
  }
  REQUIRE(worst <= 6e-8);
  report("float16 subnormals (absolute)", worst);
  // bfloat16 at 1e38: the squared norms (1e76) overflow float32 but not the float64 sums.
  Buffer b(DataType::kBFloat16, 16);
  for (int64_t i = 0; i < 16; ++i) b.set(i, 1e38);
  hvd::allreduce(b.view(), "adasum.bf16.big", ReduceOp::kAdasum);
  for (int64_t i = 0; i < 16; ++i)
    REQUIRE(b.get(i) == hvd::bf16_to_float(hvd::float_to_bf16(1e38f)));
}

TEST_CASE("grouped Adasum gives each tensor its own dot products and norms", "[mpi][adasum]") {
  const int r = hvd::rank(), n = hvd::size();
  // An orthogonal, a parallel and a random tensor in one group: shared dot products would mix
  // them up (the orthogonal one would no longer be the sum).
  const std::vector<std::pair<Fill, int64_t>> parts = {
      {orthogonal_fill, 40}, {parallel_fill, 7}, {random_fill, 333}, {random_fill, 1}};
  for (DataType t : kFloats) {
    std::vector<Buffer> bufs;
    std::vector<hvd::TensorView> views;
    std::vector<Vec> want;
    int seed = 100;
    for (const auto& [fill, len] : parts) {
      bufs.emplace_back(t, len);
      for (int64_t i = 0; i < len; ++i) bufs.back().set(i, fill(r, i, seed));
      want.push_back(recursive_rule(inputs(t, fill, len, seed, n)));
      ++seed;
    }
    for (auto& b : bufs) views.push_back(b.view());
    hvd::grouped_allreduce(views, std::string("adasum.grouped.") + hvd::dtype_name(t),
                           ReduceOp::kAdasum);
    double worst = 0;
    for (size_t k = 0; k < bufs.size(); ++k)
      worst = std::max(worst, worst_difference(bufs[k], want[k]));
    INFO(hvd::dtype_name(t));
    REQUIRE(worst <= tolerance(t));
    report(std::string("grouped, 4 tensors, ") + hvd::dtype_name(t), worst);
  }
}

TEST_CASE("Adasum of an integer tensor is refused on every rank", "[mpi][adasum]") {
  std::vector<int32_t> v(4, 1);
  const std::string err = error_of([&] {
    hvd::allreduce(hvd::TensorView(v.data(), DataType::kInt32, {4}), "adasum.int",
                   ReduceOp::kAdasum);
  });
  REQUIRE_THAT(err, Contains("Adasum reduces float16, bfloat16, float32 and float64"));
  REQUIRE_THAT(err, Contains("int32"));
  // The job goes on.
  std::vector<float> f(3, 2.f);
  hvd::allreduce(hvd::TensorView(f.data(), DataType::kFloat32, {3}), "adasum.after.int",
                 ReduceOp::kAdasum);
  REQUIRE(f == std::vector<float>(3, 2.f));
}

TEST_CASE("Adasum on process sets: a power-of-two set reduces, a set of 3 fails every member",
          "[mpi][multirank][adasum]") {
  const int r = hvd::rank(), n = hvd::size();
  REQUIRE(n >= 2);
  if (n < 4) {
    WARN("Adasum process-set case skipped: needs 4 ranks, this run has " << n);
    return;
  }
  hvd::ProcessSet pair = hvd::add_process_set({1, 3});
  hvd::ProcessSet three = hvd::add_process_set({0, 1, 2});
  if (pair.included()) {
    Buffer b(DataType::kFloat32, 500);
    for (int64_t i = 0; i < 500; ++i) b.set(i, random_fill(r, i, 77));
    std::vector<Vec> in = inputs(DataType::kFloat32, random_fill, 500, 77, n);
    const Vec want = recursive_rule({in[1], in[3]});
    hvd::allreduce(b.view(), "adasum.set.pair", ReduceOp::kAdasum, 1.0, 1.0, pair);
    const double worst = worst_difference(b, want);
    REQUIRE(worst <= tolerance(DataType::kFloat32));
    if (r == 1) {
      std::printf("[adasum np %d] process set {1, 3}, float32: largest difference %.3g\n", n,
                  worst);
    }
  }
  if (three.included()) {
    std::vector<float> v(8, 1.f);
    const std::string err = error_of([&] {
      hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {8}), "adasum.set.three",
                     ReduceOp::kAdasum, 1.0, 1.0, three);
    });
    REQUIRE_THAT(err, Contains("power-of-two number of ranks"));
    REQUIRE_THAT(err, Contains("has 3"));
    // The set still works for other ops.
    hvd::allreduce(hvd::TensorView(v.data(), DataType::kFloat32, {8}), "adasum.set.three.sum",
                   ReduceOp::kSum, 1.0, 1.0, three);
    REQUIRE(v == std::vector<float>(8, 3.f));
  }
  hvd::barrier();
  hvd::remove_process_set(three);
  hvd::remove_process_set(pair);
}
