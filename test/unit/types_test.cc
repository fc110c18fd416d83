// SPDX-License-Identifier: Apache-2.0
// dtype tables and 16-bit float conversions.
#include "hvd/core/types.h"

#include "hvd_catch.h"

using namespace hvd;

TEST_CASE("float16 round trips small integers and rounds to nearest even", "[unit]") {
  for (int i = -2048; i <= 2048; ++i) {
    REQUIRE(half_to_float(float_to_half(static_cast<float>(i))) == static_cast<float>(i));
  }
  REQUIRE(float_to_half(1.0f) == 0x3c00);
  REQUIRE(float_to_half(65504.0f) == 0x7bff);
  REQUIRE(float_to_half(1e6f) == 0x7c00);                   // overflow to inf
  REQUIRE(half_to_float(0x0001) == Approx(5.9604645e-8f));  // smallest subnormal
  REQUIRE(float_to_half(5.9604645e-8f) == 0x0001);
  REQUIRE(float_to_half(2049.0f) == float_to_half(2048.0f));  // tie rounds to even
}

TEST_CASE("bfloat16 round trips integers up to 256", "[unit]") {
  for (int i = -256; i <= 256; ++i) {
    REQUIRE(bf16_to_float(float_to_bf16(static_cast<float>(i))) == static_cast<float>(i));
  }
  REQUIRE(float_to_bf16(1.0f) == 0x3f80);
}

TEST_CASE("dtype sizes and names", "[unit]") {
  REQUIRE(dtype_size(DataType::kBFloat16) == 2);
  REQUIRE(dtype_size(DataType::kFloat64) == 8);
  REQUIRE(std::string(dtype_name(DataType::kInt16)) == "int16");
  REQUIRE(shape_str({64, 32}) == "[64, 32]");
  REQUIRE(TensorView(nullptr, DataType::kFloat32, {3, 4}).bytes() == 48);
}

TEST_CASE("a shape keeps small ranks in place and behaves as a vector of any rank", "[unit]") {
  const std::vector<int64_t> dims{2, 3, 4, 5, 6, 7};
  for (size_t rank = 0; rank <= dims.size(); ++rank) {
    const std::vector<int64_t> v(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(rank));
    Shape s(v);
    CHECK(s.size() == rank);
    CHECK(s.empty() == (rank == 0));
    CHECK(s == v);
    CHECK(v == s);
    CHECK(s.vec() == v);
    CHECK(s.capacity() == std::max(rank, Shape::kInline));
    const Shape copy = s;  // the copy is what is tested
    CHECK(copy == s);
    CHECK(copy.data() != s.data());
    Shape moved = std::move(s);
    CHECK(moved == v);
    CHECK(s.empty());  // a moved-from shape is empty
    std::vector<int64_t> back = moved;
    CHECK(back == v);
    Shape grown;
    for (int64_t d : v) grown.push_back(d);
    CHECK(grown == moved);
    grown.push_back(9);
    CHECK(grown != moved);
    CHECK(grown.back() == 9);
    grown.resize(rank);
    CHECK(grown == v);
    grown = {1};
    CHECK(grown == std::vector<int64_t>{1});
    grown = v;  // back to the vector's dimensions, keeping the room it had
    CHECK(grown == v);
  }
  TensorView t(nullptr, DataType::kFloat32, {2, 3, 4, 5, 6});
  CHECK(t.numel() == 720);
  CHECK(t.bytes() == 2880);
  CHECK(TensorView(nullptr, DataType::kInt8, {}).numel() == 1);
}

TEST_CASE("same_text compares names of every length, a difference at any position", "[unit]") {
  for (size_t n = 0; n <= 40; ++n) {
    std::string a;
    for (size_t i = 0; i < n; ++i) a.push_back(static_cast<char>('a' + i % 26));
    const std::string same = a;
    REQUIRE(same_text(a, same));
    for (size_t i = 0; i < n; ++i) {
      std::string b = a;
      b[i] = '#';
      INFO("length " << n << ", difference at " << i);
      REQUIRE_FALSE(same_text(a, b));
      REQUIRE_FALSE(same_text(b, a));
    }
    REQUIRE_FALSE(same_text(a, a + "x"));
    REQUIRE_FALSE(same_text(a + "x", a));
  }
}
