// SPDX-License-Identifier: Apache-2.0
// CPU kernels: integer and float scaling, float16/bfloat16 widening and narrowing.
#include "hvd/ops/cpu_kernels.h"

#include <cstdint>
#include <vector>

#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::ops;

TEST_CASE("averaging ints divides exactly and truncates toward zero", "[unit]") {
  // A sum over 3 ranks, scaled by 1/3: 1/3 in double times 9 is 2.9999..., which would
  // truncate to 2 if multiplied; dividing gives 3.
  std::vector<int32_t> v = {9, 10, -10, 0, 2147483646, -7};
  scale_in_place(v.data(), DataType::kInt32, 6, 1.0 / 3.0);
  REQUIRE(v == std::vector<int32_t>{3, 3, -3, 0, 715827882, -2});

  std::vector<int64_t> w = {49, -49, 700};
  scale_in_place(w.data(), DataType::kInt64, 3, 1.0 / 7.0);
  REQUIRE(w == std::vector<int64_t>{7, -7, 100});

  std::vector<uint8_t> u = {255, 6, 5};
  scale_in_place(u.data(), DataType::kUInt8, 3, 0.5);
  REQUIRE(u == std::vector<uint8_t>{127, 3, 2});
}

TEST_CASE("scaling ints by other factors multiplies and truncates", "[unit]") {
  std::vector<int16_t> v = {10, -10, 3};
  scale_in_place(v.data(), DataType::kInt16, 3, 2.5);
  REQUIRE(v == std::vector<int16_t>{25, -25, 7});
  std::vector<int8_t> w = {10, -10, 7};
  scale_in_place(w.data(), DataType::kInt8, 3, 0.4);  // 1/0.4 = 2.5: not an exact division
  REQUIRE(w == std::vector<int8_t>{4, -4, 2});
}

TEST_CASE("scale by 1 and n = 0 leave data alone", "[unit]") {
  std::vector<int32_t> v = {5, 6};
  scale_in_place(v.data(), DataType::kInt32, 2, 1.0);
  REQUIRE(v == std::vector<int32_t>{5, 6});
  scale_in_place(v.data(), DataType::kInt32, 0, 0.5);
  REQUIRE(v == std::vector<int32_t>{5, 6});
  scale_in_place(v.data(), DataType::kInt32, 1, 0.5);  // only the first element
  REQUIRE(v == std::vector<int32_t>{2, 6});
}

TEST_CASE("scaling floats multiplies", "[unit]") {
  std::vector<float> f = {1.0f, -3.0f, 0.5f};
  scale_in_place(f.data(), DataType::kFloat32, 3, 0.25);
  REQUIRE(f == std::vector<float>{0.25f, -0.75f, 0.125f});
  std::vector<double> d = {3.0, 1e300};
  scale_in_place(d.data(), DataType::kFloat64, 2, 1.0 / 3.0);
  REQUIRE(d[0] == Approx(1.0));
  REQUIRE(d[1] == Approx(1e300 / 3.0));
}

TEST_CASE("scaling float16 and bfloat16 goes through float", "[unit]") {
  std::vector<uint16_t> h = {float_to_half(3.0f), float_to_half(-1.0f)};
  scale_in_place(h.data(), DataType::kFloat16, 2, 0.5);
  REQUIRE(half_to_float(h[0]) == 1.5f);
  REQUIRE(half_to_float(h[1]) == -0.5f);
  std::vector<uint16_t> b = {float_to_bf16(6.0f), float_to_bf16(256.0f)};
  scale_in_place(b.data(), DataType::kBFloat16, 2, 0.25);
  REQUIRE(bf16_to_float(b[0]) == 1.5f);
  REQUIRE(bf16_to_float(b[1]) == 64.0f);
}

TEST_CASE("bool data is never scaled", "[unit]") {
  std::vector<uint8_t> v = {1, 0, 1};
  scale_in_place(v.data(), DataType::kBool, 3, 0.5);
  REQUIRE(v == std::vector<uint8_t>{1, 0, 1});
}

TEST_CASE("widen_to_float converts float16 and bfloat16 and applies the factor", "[unit]") {
  std::vector<uint16_t> h = {0x3c00, 0xc000, 0x3800, 0x0001};  // 1, -2, 0.5, 2^-24
  std::vector<float> out(4);
  widen_to_float(h.data(), DataType::kFloat16, 4, 1.0, out.data());
  REQUIRE(out == std::vector<float>{1.0f, -2.0f, 0.5f, 5.9604645e-8f});
  widen_to_float(h.data(), DataType::kFloat16, 3, 4.0, out.data());
  REQUIRE(out[0] == 4.0f);
  REQUIRE(out[1] == -8.0f);
  REQUIRE(out[2] == 2.0f);

  std::vector<uint16_t> b = {0x3f80, 0xc040, 0x4380};  // 1, -3, 256
  widen_to_float(b.data(), DataType::kBFloat16, 3, 0.5, out.data());
  REQUIRE(out[0] == 0.5f);
  REQUIRE(out[1] == -1.5f);
  REQUIRE(out[2] == 128.0f);
}

TEST_CASE("narrow_from_float rounds to nearest and applies the factor", "[unit]") {
  std::vector<float> src = {1.0f, -2.0f, 1e6f, 2049.0f};
  std::vector<uint16_t> h(4);
  narrow_from_float(src.data(), 4, 1.0, DataType::kFloat16, h.data());
  REQUIRE(h == std::vector<uint16_t>{0x3c00, 0xc000, 0x7c00, float_to_half(2048.0f)});
  narrow_from_float(src.data(), 2, 0.5, DataType::kFloat16, h.data());
  REQUIRE(h[0] == 0x3800);  // 0.5
  REQUIRE(h[1] == 0xbc00);  // -1

  std::vector<float> bsrc = {1.0f, 3.0f, 257.0f};  // 257 is a tie in bf16: rounds to even 256
  std::vector<uint16_t> b(3);
  narrow_from_float(bsrc.data(), 3, 1.0, DataType::kBFloat16, b.data());
  REQUIRE(b == std::vector<uint16_t>{0x3f80, 0x4040, 0x4380});
  narrow_from_float(bsrc.data(), 2, 2.0, DataType::kBFloat16, b.data());
  REQUIRE(bf16_to_float(b[0]) == 2.0f);
  REQUIRE(bf16_to_float(b[1]) == 6.0f);
}

TEST_CASE("widening then narrowing round trips every finite float16", "[unit]") {
  std::vector<uint16_t> all;
  for (uint32_t x = 0; x < 0x10000; ++x) {
    if ((x & 0x7c00u) == 0x7c00u) continue;  // inf / nan
    all.push_back(static_cast<uint16_t>(x));
  }
  std::vector<float> wide(all.size());
  widen_to_float(all.data(), DataType::kFloat16, static_cast<int64_t>(all.size()), 1.0,
                 wide.data());
  std::vector<uint16_t> back(all.size());
  narrow_from_float(wide.data(), static_cast<int64_t>(wide.size()), 1.0, DataType::kFloat16,
                    back.data());
  REQUIRE(back == all);
}

TEST_CASE("reduced_as_float is true only for the 16-bit floats", "[unit]") {
  REQUIRE(reduced_as_float(DataType::kFloat16));
  REQUIRE(reduced_as_float(DataType::kBFloat16));
  REQUIRE_FALSE(reduced_as_float(DataType::kFloat32));
  REQUIRE_FALSE(reduced_as_float(DataType::kInt16));
}

TEST_CASE("one-pass copy_scaled and sum_scaled equal the two passes they replace", "[unit]") {
  REQUIRE(folds_scale(DataType::kFloat32));
  REQUIRE(folds_scale(DataType::kFloat64));
  REQUIRE_FALSE(folds_scale(DataType::kFloat16));
  REQUIRE_FALSE(folds_scale(DataType::kInt32));
  // Every length up to 40 from every start within a vector (the vector loops' remainders and
  // unaligned starts), bit for bit against a copy or MPI-style sum followed by scale_in_place.
  auto check = [](auto zero, DataType t) {
    using T = decltype(zero);
    std::vector<T> a(48), b(48);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<T>(0.1 * static_cast<double>(i) - 1.7);
      b[i] = static_cast<T>(3.3 - 0.37 * static_cast<double>(i));
    }
    for (int64_t start = 0; start < 8; ++start) {
      for (int64_t n = 0; start + n <= 48 && n <= 40; ++n) {
        std::vector<T> two = b, one = b;
        for (int64_t i = start; i < start + n; ++i) two[i] = a[i];
        scale_in_place(two.data() + start, t, n, 1.0 / 3.0);
        copy_scaled(a.data() + start, t, n, 1.0 / 3.0, one.data() + start);
        REQUIRE(one == two);
        two = b;
        one = b;
        for (int64_t i = start; i < start + n; ++i) two[i] = a[i] + two[i];
        scale_in_place(two.data() + start, t, n, 0.5);
        sum_scaled(a.data() + start, t, n, 0.5, one.data() + start);
        REQUIRE(one == two);
      }
    }
  };
  check(0.0f, DataType::kFloat32);
  check(0.0, DataType::kFloat64);
}
