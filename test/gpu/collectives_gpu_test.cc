// SPDX-License-Identifier: Apache-2.0
// [gpu] tier at np = 1 on one GPU: every collective x dtype through the NCCL executor against
// host-computed references, fusion of many small tensors, errors as statuses.
#include <cmath>
#include <string>

#include "gpu_test_util.h"
#include "hvd_catch.h"

using namespace hvd;
using core::OpType;
using gputest::Harness;
using gputest::response;

namespace {

const DataType kTypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                           DataType::kFloat64, DataType::kInt32,    DataType::kInt64,
                           DataType::kUInt8,   DataType::kInt8};

std::vector<double> values(size_t n, int seed) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<double>((i * 7 + static_cast<size_t>(seed)) % 9 + 1);
  return v;
}

// What hvd computes at np = 1 for x with prescale 3 and postscale 0.5 (any reduce op reduces
// one contribution to itself): floats x * 1.5; integers (3x) / 2, truncated.
double scaled(DataType t, double x) {
  if (dtype_is_floating(t)) return x * 1.5;
  return std::trunc(x * 3 / 2);
}

}  // namespace

TEST_CASE("gpu allreduce of every dtype and reduce op matches the host reference",
          "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  for (DataType t : kTypes) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (int k : {1, 3}) {  // one tensor in place, three fused
        INFO(dtype_name(t) << " " << reduce_op_name(op) << " k=" << k);
        Harness h;
        std::vector<std::unique_ptr<gputest::DevBuf>> in, out;
        std::vector<std::string> names;
        std::vector<int64_t> numels;
        for (int i = 0; i < k; ++i) {
          const int64_t n = 37 + 100 * i;
          in.push_back(gputest::upload(t, values(static_cast<size_t>(n), i)));
          out.push_back(std::make_unique<gputest::DevBuf>(static_cast<size_t>(n) * dtype_size(t)));
          names.push_back("t" + std::to_string(i));
          numels.push_back(n);
          h.add(names.back(), t, {n}, in.back()->p, out.back()->p);
        }
        auto r = response(OpType::kAllreduce, t, names, numels);
        r.reduce_op = op;
        r.prescale = 3.0;
        r.postscale = 0.5;
        Status s = h.run(r);
        REQUIRE(s.ok());
        for (int i = 0; i < k; ++i) {
          auto got = gputest::download(t, out[static_cast<size_t>(i)]->p,
                                       static_cast<size_t>(numels[static_cast<size_t>(i)]));
          auto want = values(got.size(), i);
          for (size_t j = 0; j < got.size(); ++j) REQUIRE(got[j] == scaled(t, want[j]));
        }
      }
    }
  }
}

TEST_CASE("gpu hierarchical allreduce matches the flat result", "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  ops::nccl::NcclOptions o;
  o.hierarchical_allreduce = true;
  o.force_hierarchical = true;  // one node: NCCL reduce-scatter + allgather all the same
  for (DataType t : kTypes) {
    INFO(dtype_name(t));
    Harness h(o);
    auto in = gputest::upload(t, values(1001, 3));
    h.add("h", t, {1001}, in->p);
    auto r = response(OpType::kAllreduce, t, {"h"}, {1001});
    r.reduce_op = ReduceOp::kAverage;
    REQUIRE(h.run(r).ok());
    REQUIRE(gputest::download(t, in->p, 1001) == values(1001, 3));
  }
}

TEST_CASE("gpu broadcast, allgather, alltoall and reducescatter of every dtype", "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  for (DataType t : kTypes) {
    INFO(dtype_name(t));
    const auto v = values(5 * 3, 1), w = values(2 * 3, 2);
    {  // broadcast from root 0, in place and into another buffer
      Harness h;
      auto a = gputest::upload(t, v);
      auto b = gputest::upload(t, w);
      gputest::DevBuf out(w.size() * dtype_size(t));
      h.add("a", t, {5, 3}, a->p);
      h.add("b", t, {2, 3}, b->p, out.p);
      REQUIRE(h.run(response(OpType::kBroadcast, t, {"a", "b"}, {15, 6})).ok());
      REQUIRE(gputest::download(t, a->p, v.size()) == v);
      REQUIRE(gputest::download(t, out.p, w.size()) == w);
    }
    for (int k : {1, 2}) {  // allgather: straight, and fused through the buffers
      Harness h;
      auto a = gputest::upload(t, v);
      auto b = gputest::upload(t, w);
      h.add("a", t, {5, 3}, a->p);
      if (k == 2) h.add("b", t, {2, 3}, b->p);
      h.device_allocators();
      auto r = response(OpType::kAllgather, t,
                        k == 1 ? std::vector<std::string>{"a"} : std::vector<std::string>{"a", "b"},
                        k == 1 ? std::vector<int64_t>{3} : std::vector<int64_t>{3, 3});
      r.rank_rows = k == 1 ? std::vector<int64_t>{5} : std::vector<int64_t>{5, 2};
      REQUIRE(h.run(r).ok());
      REQUIRE(h.entries[0]->output.shape == std::vector<int64_t>{5, 3});
      REQUIRE(gputest::download(t, h.entries[0]->output.data, v.size()) == v);
      if (k == 2) REQUIRE(gputest::download(t, h.entries[1]->output.data, w.size()) == w);
    }
    {  // alltoall to oneself
      Harness h;
      auto a = gputest::upload(t, v);
      h.add("a", t, {5, 3}, a->p);
      h.device_allocators();
      auto r = response(OpType::kAlltoall, t, {"a"}, {3});
      r.rank_rows = {5};
      REQUIRE(h.run(r).ok());
      REQUIRE(gputest::download(t, h.entries[0]->output.data, v.size()) == v);
      REQUIRE(h.entries[0]->handle->extra().received_splits == std::vector<int64_t>{5});
    }
    {  // reducescatter: one rank gets every row, scaled
      Harness h;
      auto a = gputest::upload(t, v);
      h.add("a", t, {5, 3}, a->p);
      h.device_allocators();
      auto r = response(OpType::kReducescatter, t, {"a"}, {3});
      r.prescale = 3.0;
      r.postscale = 0.5;
      REQUIRE(h.run(r).ok());
      auto got = gputest::download(t, h.entries[0]->output.data, v.size());
      for (size_t j = 0; j < v.size(); ++j) REQUIRE(got[j] == scaled(t, v[j]));
    }
  }
}

TEST_CASE("gpu fusion of a thousand small tensors runs as one response", "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  Harness h;
  std::vector<std::unique_ptr<gputest::DevBuf>> bufs;
  std::vector<std::string> names;
  std::vector<int64_t> numels;
  for (int i = 0; i < 1000; ++i) {
    const int64_t n = 1 + (i * 37) % 300;
    bufs.push_back(gputest::upload(DataType::kFloat32, values(static_cast<size_t>(n), i)));
    names.push_back("s" + std::to_string(i));
    numels.push_back(n);
    h.add(names.back(), DataType::kFloat32, {n}, bufs.back()->p);
  }
  auto r = response(OpType::kAllreduce, DataType::kFloat32, names, numels);
  r.postscale = 2.0;
  REQUIRE(h.run(r).ok());
  for (size_t i = 0; i < bufs.size(); ++i) {
    auto got = gputest::download(DataType::kFloat32, bufs[i]->p, static_cast<size_t>(numels[i]));
    auto want = values(got.size(), static_cast<int>(i));
    for (size_t j = 0; j < got.size(); ++j) REQUIRE(got[j] == 2 * want[j]);
  }
}

TEST_CASE("gpu errors: a host pointer gives a status, and the device stays usable",
          "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  std::vector<float> host(64, 1.0f);
  {
    Harness h;
    h.add("bad", DataType::kFloat32, {64}, host.data());
    Status s = h.run(response(OpType::kAllreduce, DataType::kFloat32, {"bad"}, {64}));
    REQUIRE_FALSE(s.ok());
    REQUIRE(s.message().find("allreduce 'bad' input") != std::string::npos);
    REQUIRE(s.message().find("not device memory") != std::string::npos);
  }
  {  // a bogus device address
    Harness h;
    h.add("bogus", DataType::kFloat32, {64}, reinterpret_cast<void*>(0x10));
    REQUIRE_FALSE(h.run(response(OpType::kAllreduce, DataType::kFloat32, {"bogus"}, {64})).ok());
  }
  {  // int16 cannot be reduced by NCCL
    Harness h;
    gputest::DevBuf b(64 * 2);
    h.add("i16", DataType::kInt16, {64}, b.p);
    Status s = h.run(response(OpType::kAllreduce, DataType::kInt16, {"i16"}, {64}));
    REQUIRE(s.message().find("int16") != std::string::npos);
  }
  Harness h;  // still fine afterwards
  auto ok = gputest::upload(DataType::kFloat32, values(64, 0));
  h.add("ok", DataType::kFloat32, {64}, ok->p);
  REQUIRE(h.run(response(OpType::kAllreduce, DataType::kFloat32, {"ok"}, {64})).ok());
}

TEST_CASE("gpu responses launched back to back outnumber the descriptor areas", "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  // 12 fused responses in flight at once (4 descriptor areas rotate): each is checked after
  // all were launched, so a descriptor or buffer reused too early shows as a wrong sum.
  constexpr int kResponses = 12;
  std::vector<std::unique_ptr<Harness>> hs;
  std::vector<std::vector<std::unique_ptr<gputest::DevBuf>>> bufs(kResponses);
  std::vector<std::shared_ptr<core::Completion>> done(kResponses);
  for (int k = 0; k < kResponses; ++k) {
    hs.push_back(std::make_unique<Harness>());
    std::vector<std::string> names;
    std::vector<int64_t> numels;
    for (int i = 0; i < 3; ++i) {
      const int64_t n = 1000 + 500 * k + i;
      bufs[k].push_back(gputest::upload(DataType::kFloat32, values(static_cast<size_t>(n), k + i)));
      names.push_back("r" + std::to_string(k) + "." + std::to_string(i));
      numels.push_back(n);
      hs.back()->add(names.back(), DataType::kFloat32, {n}, bufs[k].back()->p);
    }
    auto r = response(OpType::kAllreduce, DataType::kFloat32, names, numels);
    r.postscale = 1.0 + k;
    REQUIRE(hs.back()->launch(r, &done[k]).ok());
    REQUIRE(done[k] != nullptr);
  }
  for (int k = 0; k < kResponses; ++k) {
    REQUIRE(done[k]->wait().ok());
    for (int i = 0; i < 3; ++i) {
      const size_t n = static_cast<size_t>(1000 + 500 * k + i);
      auto got = gputest::download(DataType::kFloat32, bufs[k][i]->p, n);
      auto want = values(n, k + i);
      for (size_t j = 0; j < n; ++j) REQUIRE(got[j] == want[j] * (1.0 + k));
    }
  }
}

TEST_CASE("gpu Adasum of one rank returns its tensors, flat and through the host step",
          "[gpu][device][adasum]") {
  HVD_GPU_OR_SKIP();
  // Adasum of a single contribution is that contribution (then prescale 3, postscale 0.5).
  // Not forced: one node, so the average of the node's ranks (one ncclAllReduce). Forced: the
  // hierarchical path with every step (reduce-scatter, the shard through host memory and
  // Adasum across the one node, allgather), float16/bfloat16 widened to float32 on the host.
  for (bool force : {false, true}) {
    ops::nccl::NcclOptions o;
    o.force_hierarchical = force;
    for (DataType t :
         {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
      for (int k : {1, 3}) {
        INFO(dtype_name(t) << " k=" << k << (force ? " forced hierarchical" : " flat"));
        Harness h(o);
        std::vector<std::unique_ptr<gputest::DevBuf>> in, out;
        std::vector<std::string> names;
        std::vector<int64_t> numels;
        for (int i = 0; i < k; ++i) {
          const int64_t n = i == 1 ? 1 : 37 + 1000 * i;
          in.push_back(gputest::upload(t, values(static_cast<size_t>(n), i)));
          out.push_back(std::make_unique<gputest::DevBuf>(static_cast<size_t>(n) * dtype_size(t)));
          names.push_back("adasum" + std::to_string(i));
          numels.push_back(n);
          h.add(names.back(), t, {n}, in.back()->p, out.back()->p);
        }
        auto r = response(OpType::kAllreduce, t, names, numels);
        r.reduce_op = ReduceOp::kAdasum;
        r.prescale = 3.0;
        r.postscale = 0.5;
        REQUIRE(h.run(r).ok());
        for (int i = 0; i < k; ++i) {
          const auto n = static_cast<size_t>(numels[static_cast<size_t>(i)]);
          auto got = gputest::download(t, out[static_cast<size_t>(i)]->p, n);
          auto want = values(n, i);
          for (size_t j = 0; j < n; ++j) REQUIRE(got[j] == scaled(t, want[j]));
        }
      }
    }
    Harness h(o);  // an integer tensor is refused with a status naming it
    gputest::DevBuf b(64 * 4);
    h.add("adasum_int", DataType::kInt32, {64}, b.p);
    auto r = response(OpType::kAllreduce, DataType::kInt32, {"adasum_int"}, {64});
    r.reduce_op = ReduceOp::kAdasum;
    Status s = h.run(r);
    REQUIRE_FALSE(s.ok());
    REQUIRE(s.message().find("adasum_int") != std::string::npos);
  }
}
