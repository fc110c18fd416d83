// SPDX-License-Identifier: Apache-2.0
// Adasum's pure pieces: the pairwise rule (coefficients, zero norms, float16/bfloat16 extremes),
// the validation of an Adasum request, and fusion keeping Adasum apart from Sum.
#include "hvd/ops/adasum.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "hvd/core/fusion.h"
#include "hvd/core/validation.h"
#include "hvd_catch.h"

using namespace hvd;
using hvd::test::Contains;

namespace {

// The rule written out on its own, in long double: (1 - ab/2aa) a + (1 - ab/2bb) b.
std::vector<double> reference_pair(const std::vector<double>& a, const std::vector<double>& b) {
  long double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<long double>(a[i]) * b[i];
    aa += static_cast<long double>(a[i]) * a[i];
    bb += static_cast<long double>(b[i]) * b[i];
  }
  const long double ca = aa == 0 ? 1 : 1 - ab / (2 * aa);
  const long double cb = bb == 0 ? 1 : 1 - ab / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = static_cast<double>(ca * a[i] + cb * b[i]);
  return out;
}

core::Request adasum_request(DataType dt, core::OpType op = core::OpType::kAllreduce) {
  core::Request r;
  r.op = op;
  r.name = "g";
  r.dtype = dt;
  r.shape = {8};
  r.reduce_op = ReduceOp::kAdasum;
  return r;
}

}  // namespace

TEST_CASE("Adasum of orthogonal vectors is their sum, of equal vectors the vector", "[unit]") {
  auto c = ops::adasum_coefficients(0.0, 4.0, 9.0);
  REQUIRE(c.a_coef == 1.0);
  REQUIRE(c.b_coef == 1.0);
  c = ops::adasum_coefficients(5.0, 5.0, 5.0);  // a == b: half of each
  REQUIRE(c.a_coef == 0.5);
  REQUIRE(c.b_coef == 0.5);
  std::vector<double> a = {1, 2, 0, 0}, b = {0, 0, 3, -4};
  ops::adasum_pair(a.data(), b.data(), 4, DataType::kFloat64);
  REQUIRE(b == std::vector<double>{1, 2, 3, -4});
  std::vector<float> x = {1.5f, -2.f, 3.f}, y = x;
  ops::adasum_pair(x.data(), y.data(), 3, DataType::kFloat32);
  REQUIRE(y == x);
}

TEST_CASE("Adasum with a zero vector is the other vector, never NaN", "[unit]") {
  auto c = ops::adasum_coefficients(0.0, 0.0, 2.0);
  REQUIRE(c.a_coef == 1.0);
  REQUIRE(c.b_coef == 1.0);
  c = ops::adasum_coefficients(0.0, 0.0, 0.0);
  REQUIRE(c.a_coef == 1.0);
  REQUIRE(c.b_coef == 1.0);
  std::vector<float> zero(5, 0.f), b = {1, -2, 3, -4, 5};
  const std::vector<float> want = b;
  ops::adasum_pair(zero.data(), b.data(), 5, DataType::kFloat32);
  REQUIRE(b == want);
  std::vector<float> a = want, z(5, 0.f);
  ops::adasum_pair(a.data(), z.data(), 5, DataType::kFloat32);
  REQUIRE(z == want);
  std::vector<double> e1, e2;  // empty tensors: nothing to do
  ops::adasum_pair(e1.data(), e2.data(), 0, DataType::kFloat64);
}

TEST_CASE("Adasum of random vectors matches the rule computed in long double", "[unit]") {
  std::mt19937 gen(7);
  std::normal_distribution<double> dist;
  for (int n : {1, 3, 4, 17, 1000}) {
    std::vector<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (auto& v : a) v = dist(gen);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5 * a[i] + dist(gen);  // correlated
    const auto want = reference_pair(a, b);
    std::vector<double> got = b;
    ops::adasum_pair(a.data(), got.data(), n, DataType::kFloat64);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    INFO("n " << n << ": largest difference " << worst);
    REQUIRE(worst < 1e-12);
    // float32: the same rule, float64 sums, within float32 rounding.
    std::vector<float> fa(a.begin(), a.end()), fb(b.begin(), b.end());
    ops::adasum_pair(fa.data(), fb.data(), n, DataType::kFloat32);
    for (size_t i = 0; i < fb.size(); ++i) REQUIRE(std::fabs(fb[i] - want[i]) < 1e-5);
  }
}

TEST_CASE("Adasum of float16 and bfloat16 near their largest values stays finite", "[unit]") {
  // Equal vectors of 60000 (float16's largest is 65504): the sum would overflow, Adasum is the
  // vector. The squared norms (3.6e9 each) need more than float16.
  std::vector<uint16_t> a(64, float_to_half(60000.f)), b = a;
  ops::adasum_pair(a.data(), b.data(), 64, DataType::kFloat16);
  for (uint16_t h : b) REQUIRE(half_to_float(h) == 60000.f);
  // Orthogonal halves near the limit: the sum of each element fits.
  std::vector<uint16_t> x(4, 0), y(4, 0);
  x[0] = x[1] = float_to_half(65504.f);
  y[2] = y[3] = float_to_half(-65504.f);
  ops::adasum_pair(x.data(), y.data(), 4, DataType::kFloat16);
  REQUIRE(half_to_float(y[0]) == 65504.f);
  REQUIRE(half_to_float(y[3]) == -65504.f);
  // bfloat16 at 1e38: squares (1e76) exceed even float32; float64 sums hold them.
  std::vector<uint16_t> p(16, float_to_bf16(1e38f)), q = p;
  ops::adasum_pair(p.data(), q.data(), 16, DataType::kBFloat16);
  for (uint16_t h : q) {
    REQUIRE(std::isfinite(bf16_to_float(h)));
    REQUIRE(bf16_to_float(h) == bf16_to_float(p[0]));
  }
  // Tiny float16 values (subnormal): the norms are not flushed to zero in float64.
  std::vector<uint16_t> t(8, float_to_half(1e-7f)), u(8, 0);
  for (size_t i = 0; i < u.size(); ++i) u[i] = float_to_half(i % 2 ? 1e-7f : -1e-7f);
  ops::adasum_pair(t.data(), u.data(), 8, DataType::kFloat16);  // orthogonal: the sum
  for (size_t i = 0; i < u.size(); ++i) {
    REQUIRE(half_to_float(u[i]) == (i % 2 ? 2 * half_to_float(t[0]) : 0.f));
  }
}

TEST_CASE("an Adasum allreduce needs float tensors and a power-of-two set", "[unit]") {
  for (DataType dt :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (int n : {1, 2, 4, 8, 64}) REQUIRE(core::validate_local(adasum_request(dt), n).ok());
    REQUIRE(ops::adasum_dtype_supported(dt));
  }
  for (DataType dt : {DataType::kInt32, DataType::kUInt8, DataType::kInt64}) {
    Status s = core::validate_local(adasum_request(dt), 4);
    REQUIRE(s.code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(s.message(), Contains("allreduce 'g': Adasum reduces float16"));
    REQUIRE_THAT(s.message(), Contains(dtype_name(dt)));
    REQUIRE_FALSE(ops::adasum_dtype_supported(dt));
  }
  for (int n : {3, 5, 6, 12}) {
    Status s = core::validate_local(adasum_request(DataType::kFloat32), n);
    REQUIRE(s.code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(s.message(), Contains("power-of-two number of ranks"));
    REQUIRE_THAT(s.message(), Contains("has " + std::to_string(n)));
  }
  Status s =
      core::validate_local(adasum_request(DataType::kFloat32, core::OpType::kReducescatter), 4);
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(s.message(), Contains("reduce op Adasum is not supported"));
  REQUIRE(std::string(reduce_op_name(ReduceOp::kAdasum)) == "Adasum");
}

TEST_CASE("fusion keeps Adasum tensors apart from Sum tensors and other dtypes", "[unit]") {
  auto resp = [](const std::string& name, ReduceOp op, DataType dt) {
    core::Response r;
    r.op = core::OpType::kAllreduce;
    r.names = {name};
    r.dtype = dt;
    r.numels = {16};
    r.reduce_op = op;
    return r;
  };
  core::FusionOptions o;
  o.threshold_bytes = 1 << 20;
  o.direct_bytes = 1 << 20;
  auto planned = core::plan_fusion({resp("a", ReduceOp::kAdasum, DataType::kFloat32),
                                    resp("b", ReduceOp::kAdasum, DataType::kFloat32),
                                    resp("c", ReduceOp::kSum, DataType::kFloat32),
                                    resp("d", ReduceOp::kAdasum, DataType::kFloat32),
                                    resp("e", ReduceOp::kAdasum, DataType::kFloat64)},
                                   o);
  REQUIRE(planned.size() == 4);
  REQUIRE(planned[0].names == std::vector<std::string>{"a", "b"});
  REQUIRE(planned[1].names == std::vector<std::string>{"c"});
  REQUIRE(planned[2].names == std::vector<std::string>{"d"});
  REQUIRE(planned[3].names == std::vector<std::string>{"e"});
}
