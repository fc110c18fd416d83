// SPDX-License-Identifier: Apache-2.0
// The NCCL executor's batched copy kernel, replayed on the CPU: its per-thread body
// (copy_body.h, the same code the kernel runs) is called for every thread of the grid that
// copy_grid plans, so indexing, 16-byte words vs tails, zero fill, guard bytes and the scaling
// of every dtype are checked in every build that has CUDA headers, GPU or not.
#include "hvd/config.h"

#if HVD_HAVE_NCCL
#include <cmath>
#include <cstring>
#include <vector>

#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/nccl/copy_body.h"
#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::ops::nccl;

namespace {

// Runs the whole launch the way the kernels do: block row y walks pieces y, y + gy, ...;
// thread tid of gx * kCopyThreads handles elements tid, tid + stride, ...
void replay(const std::vector<CopyDesc>& ds, DataType t, const Scale& s) {
  int64_t max_count = 0;
  for (const auto& d : ds) max_count = std::max(max_count, d.count);
  const CopyGrid g = copy_grid(static_cast<int>(ds.size()), max_count, dtype_size(t), s.identity());
  const size_t stride = static_cast<size_t>(g.x) * kCopyThreads;
  for (unsigned by = 0; by < g.y; ++by) {
    for (size_t p = by; p < ds.size(); p += g.y) {
      for (size_t tid = 0; tid < stride; ++tid) {
        const auto st = static_cast<int64_t>(stride), ti = static_cast<int64_t>(tid);
        if (s.identity()) {
          body::copy_bytes(ds[p], dtype_size(t), tid, stride);
          continue;
        }
        const bool known = body::visit_scaled_type(t, [&](auto tag) {
          body::copy_scaled<decltype(tag)>(ds[p], s.factor, s.divisor, ti, st);
        });
        if (!known) FAIL("no scaled copy for " << dtype_name(t));
      }
    }
  }
}

// Host values of dtype t (float16/bfloat16 through hvd's host conversions).
double load(DataType t, const uint8_t* p) {
  float f = 0;
  switch (t) {
    case DataType::kUInt8:
      return *p;
    case DataType::kInt8:
      return *reinterpret_cast<const int8_t*>(p);
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DataType::kFloat32:
      std::memcpy(&f, p, 4);
      return f;
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      ops::widen_to_float(p, t, 1, 1.0, &f);
      return f;
  }
}

void store(DataType t, double v, uint8_t* p) {
  switch (t) {
    case DataType::kUInt8:
      *p = static_cast<uint8_t>(v);
      return;
    case DataType::kInt8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
      return;
    case DataType::kInt32: {
      auto x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case DataType::kInt64: {
      auto x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      return;
    }
    case DataType::kFloat64:
      std::memcpy(p, &v, 8);
      return;
    default: {
      const auto f = static_cast<float>(v);
      if (t == DataType::kFloat32) {
        std::memcpy(p, &f, 4);
      } else {
        ops::narrow_from_float(&f, 1, 1.0, t, p);
      }
    }
  }
}

const DataType kTypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                           DataType::kFloat64, DataType::kInt32,    DataType::kInt64,
                           DataType::kUInt8,   DataType::kInt8};

}  // namespace

TEST_CASE("copy kernel body: pure copies at every alignment and length, zero fill, guards",
          "[unit]") {
  const int64_t counts[] = {0, 1, 3, 15, 16, 17, 255, 1000, 4099};
  for (size_t esize : {1, 2, 4, 8}) {
    const DataType t = esize == 1   ? DataType::kUInt8
                       : esize == 2 ? DataType::kFloat16
                       : esize == 4 ? DataType::kFloat32
                                    : DataType::kFloat64;
    // One source and one destination arena; pieces at byte offsets 0..17 (aligned and not).
    std::vector<uint8_t> src(1 << 17), dst(1 << 17, 0xab), want(1 << 17, 0xab);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 31 + 7);
    std::vector<CopyDesc> ds;
    size_t pos = 0;
    int shift = 0;
    for (int64_t c : counts) {
      for (int zero = 0; zero < 2; ++zero) {
        const size_t so = pos + static_cast<size_t>(shift % 17),
                     doff = pos + static_cast<size_t>((shift * 5) % 19);
        const size_t b = static_cast<size_t>(c) * esize;
        ds.push_back({zero ? nullptr : src.data() + so, dst.data() + doff, c});
        for (size_t i = 0; i < b; ++i) want[doff + i] = zero ? 0 : src[so + i];
        pos += b + 64;  // guard gap: bytes between pieces must stay 0xab
        ++shift;
      }
    }
    REQUIRE(pos < dst.size());
    replay(ds, t, Scale{});
    INFO("esize " << esize);
    REQUIRE(dst == want);
  }
}

TEST_CASE("copy kernel body: many pieces stride over the block rows", "[unit]") {
  // 70,000 pieces: more than the 65,535 rows of blocks, so rows walk several pieces.
  const int n = 70000;
  std::vector<float> src(static_cast<size_t>(n) * 3), dst(src.size(), -1.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  std::vector<CopyDesc> ds;
  for (int p = 0; p < n; ++p) {
    ds.push_back({src.data() + 3 * p, dst.data() + 3 * p, 3});
  }
  replay(ds, DataType::kFloat32, Scale{2.0, 1});  // scaled: element by element
  for (size_t i = 0; i < src.size(); ++i) REQUIRE(dst[i] == 2.0f * src[i]);
}

TEST_CASE("copy kernel body: scaling of every dtype matches the host rule", "[unit]") {
  const std::vector<double> vals = {0, 1, 2, 3, 5, 7, 9, 13, 33, 41};  // x 3 fits int8
  for (DataType t : kTypes) {
    const size_t es = dtype_size(t);
    for (double factor : {0.5, 1.5, 3.0, 0.25, 1.0 / 3}) {
      const Scale s = make_scale(t, factor);
      INFO(dtype_name(t) << " factor " << factor << " divisor " << s.divisor);
      std::vector<uint8_t> in(vals.size() * es), out(vals.size() * es + 8, 0xcd);
      for (size_t i = 0; i < vals.size(); ++i) {
        // Signed integers get negative values too (truncation toward zero).
        const bool neg =
            (t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64) && i % 2;
        store(t, neg ? -vals[i] : vals[i], in.data() + i * es);
      }
      replay({{in.data(), out.data(), static_cast<int64_t>(vals.size())}}, t, s);
      for (size_t i = 0; i < vals.size(); ++i) {
        const double x = load(t, in.data() + i * es), got = load(t, out.data() + i * es);
        double want;
        if (t == DataType::kFloat64) {
          want = x * factor;
        } else if (dtype_is_floating(t)) {
          // Scaled in float, rounded to the type.
          uint8_t tmp[8];
          store(t, static_cast<double>(static_cast<float>(x) * static_cast<float>(factor)), tmp);
          want = load(t, tmp);
        } else if (s.divisor > 1) {
          want = std::trunc(x / static_cast<double>(s.divisor));
        } else {
          want = std::trunc(x * factor);
        }
        REQUIRE(got == want);
      }
      for (size_t i = vals.size() * es; i < out.size(); ++i) REQUIRE(out[i] == 0xcd);
    }
  }
  // Zero fill through the scaled path, and an int8 average over more ranks than int8 holds.
  std::vector<int8_t> z(5, 9);
  replay({{nullptr, z.data(), 5}}, DataType::kInt8, Scale{1.0, 3});
  REQUIRE(z == std::vector<int8_t>(5, 0));
  std::vector<int8_t> a = {100, -100}, b(2);
  replay({{a.data(), b.data(), 2}}, DataType::kInt8, make_scale(DataType::kInt8, 1.0 / 200));
  REQUIRE(b == std::vector<int8_t>{0, 0});
  replay({{a.data(), b.data(), 2}}, DataType::kInt8, make_scale(DataType::kInt8, 1.0 / 50));
  REQUIRE(b == std::vector<int8_t>{2, -2});
}
#endif  // HVD_HAVE_NCCL
