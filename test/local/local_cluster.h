// SPDX-License-Identifier: Apache-2.0
// [local] harness: N core::Runtimes over one LocalHub, a test executor, deadline-bounded waits.
#pragma once

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "hvd/core/executor.h"
#include "hvd/core/local_transport.h"
#include "hvd/core/runtime.h"

namespace hvd::test {

using core::Config;
using core::LocalHub;
using core::LocalTransport;
using core::OpType;
using core::Response;
using core::Runtime;
using core::TensorEntry;

/// Host allreduce (Sum/Average/Min/Max/Product on float32/float64/int32/int64, fused or not) and
/// broadcast, moving bytes through its own LocalHub. Floats get out = post * reduce(pre * in);
/// Average divides the reduced value by the number of ranks (integers truncate).
class TestExecutor : public core::Executor {
 public:
  TestExecutor(std::shared_ptr<LocalHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  Status execute(const Response& r, const std::vector<TensorEntry*>& es) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      batches_.push_back(r.names);
    }
    for (size_t i = 0; i < es.size(); ++i) {
      if (es[i]->request.name != r.names[i]) return internal_error("entries out of name order");
    }
    if (r.op == OpType::kBroadcast) return broadcast(r, es);
    if (r.op != OpType::kAllreduce) return invalid_argument("test executor: unsupported op");
    switch (r.dtype) {
      case DataType::kFloat32:
        return allreduce<float>(r, es);
      case DataType::kFloat64:
        return allreduce<double>(r, es);
      case DataType::kInt32:
        return allreduce<int32_t>(r, es);
      case DataType::kInt64:
        return allreduce<int64_t>(r, es);
      default:
        return invalid_argument("test executor: unsupported dtype");
    }
  }
  std::string name() const override { return "local-test"; }

  /// Names of every executed response (one element per fused batch), in execution order.
  std::vector<std::vector<std::string>> batches() const {
    std::lock_guard<std::mutex> lk(mu_);
    return batches_;
  }

 private:
  template <typename T>
  Status allreduce(const Response& r, const std::vector<TensorEntry*>& es) {
    std::vector<uint8_t> mine;
    for (size_t i = 0; i < es.size(); ++i) {
      const auto* p = static_cast<const uint8_t*>(es[i]->input.data);
      mine.insert(mine.end(), p, p + es[i]->input.bytes());
    }
    std::vector<std::vector<uint8_t>> all;
    HVD_RETURN_IF_ERROR(hub_->exchange(rank_, mine, &all));
    const size_t n = mine.size() / sizeof(T);
    std::vector<T> acc(n), v(n);
    for (size_t k = 0; k < all.size(); ++k) {
      if (all[k].size() != mine.size()) return internal_error("ranks sent different sizes");
      std::memcpy(v.data(), all[k].data(), mine.size());
      for (size_t i = 0; i < n; ++i) {
        T x = v[i];
        if (std::is_floating_point<T>::value) x = static_cast<T>(x * r.prescale);
        if (k == 0) {
          acc[i] = x;
        } else if (r.reduce_op == ReduceOp::kMin) {
          acc[i] = std::min(acc[i], x);
        } else if (r.reduce_op == ReduceOp::kMax) {
          acc[i] = std::max(acc[i], x);
        } else if (r.reduce_op == ReduceOp::kProduct) {
          acc[i] = acc[i] * x;
        } else {
          acc[i] = acc[i] + x;
        }
      }
    }
    for (auto& x : acc) {
      if (r.reduce_op == ReduceOp::kAverage) x = static_cast<T>(x / static_cast<T>(all.size()));
      if (std::is_floating_point<T>::value) x = static_cast<T>(x * r.postscale);
    }
    size_t off = 0;
    for (size_t i = 0; i < es.size(); ++i) {
      std::memcpy(es[i]->output.data, acc.data() + off, es[i]->output.bytes());
      off += es[i]->output.bytes() / sizeof(T);
    }
    return Status::OK();
  }

  Status broadcast(const Response& r, const std::vector<TensorEntry*>& es) {
    std::vector<uint8_t> mine;
    if (rank_ == r.root) {
      const auto* p = static_cast<const uint8_t*>(es[0]->input.data);
      mine.assign(p, p + es[0]->input.bytes());
    }
    std::vector<std::vector<uint8_t>> all;
    HVD_RETURN_IF_ERROR(hub_->exchange(rank_, std::move(mine), &all));
    const auto& root = all[static_cast<size_t>(r.root)];
    if (root.size() != es[0]->output.bytes()) return internal_error("broadcast size differs");
    std::memcpy(es[0]->output.data, root.data(), root.size());
    return Status::OK();
  }

  std::shared_ptr<LocalHub> hub_;
  int rank_;
  mutable std::mutex mu_;
  std::vector<std::vector<std::string>> batches_;
};

/// N runtimes as N ranks. Negotiation and execution use separate hubs.
struct Cluster {
  /// `device_executor`: also run device (kCuda) responses through a TestExecutor, so that
  /// device-kind paths can be tested on host memory.
  explicit Cluster(int n, Config cfg = Config{}, bool device_executor = false)
      : hub(std::make_shared<LocalHub>(n)), exec_hub(std::make_shared<LocalHub>(n)) {
    for (int r = 0; r < n; ++r) {
      auto t = std::make_unique<LocalTransport>(hub, r);
      auto e = std::make_unique<TestExecutor>(exec_hub, r);
      std::unique_ptr<TestExecutor> d;
      if (device_executor) d = std::make_unique<TestExecutor>(exec_hub, r);
      transports.push_back(t.get());
      executors.push_back(e.get());
      device_executors.push_back(d.get());
      rt.push_back(std::make_unique<Runtime>(
          cfg, core::RuntimeParts{std::move(t), std::move(e), std::move(d)}));
    }
  }
  ~Cluster() {
    if (!shutdown_all()) {
      hub->abort();
      exec_hub->abort();
      (void)shutdown_all();
    }
  }

  int size() const { return static_cast<int>(rt.size()); }
  Runtime& operator[](int r) { return *rt[static_cast<size_t>(r)]; }
  void start_all() {
    for (auto& r : rt) r->start();
  }
  /// Gather calls so far, per rank (the coordinator's full path).
  std::vector<int> gathers() const {
    std::vector<int> g;
    for (auto* t : transports) g.push_back(t->gather_calls.load());
    return g;
  }
  /// Shuts every rank down concurrently (shutdown is collective). False if that took over 20 s;
  /// the hubs are then aborted so that the threads can finish.
  bool shutdown_all(std::vector<int> ranks = {}) {
    if (ranks.empty()) {
      for (int r = 0; r < size(); ++r) ranks.push_back(r);
    }
    std::vector<std::future<void>> fs;
    for (int r : ranks) {
      Runtime* p = rt[static_cast<size_t>(r)].get();
      fs.push_back(std::async(std::launch::async, [p] { p->shutdown(); }));
    }
    bool in_time = true;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (auto& f : fs) {
      if (f.wait_until(deadline) != std::future_status::ready) in_time = false;
    }
    if (!in_time) {
      hub->abort();
      exec_hub->abort();
    }
    return in_time;
  }

  /// For clusters that are not start()ed: one run_once() on every rank at the same time
  /// (each round is collective). False if that took over 20 s; the hubs are then aborted.
  bool step_all() {
    std::vector<std::future<bool>> fs;
    for (auto& r : rt) {
      Runtime* p = r.get();
      fs.push_back(std::async(std::launch::async, [p] { return p->run_once(); }));
    }
    bool in_time = true;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (auto& f : fs) {
      if (f.wait_until(deadline) != std::future_status::ready) in_time = false;
    }
    if (!in_time) {
      hub->abort();
      exec_hub->abort();
    }
    return in_time;
  }

  std::shared_ptr<LocalHub> hub, exec_hub;
  std::vector<LocalTransport*> transports;
  std::vector<TestExecutor*> executors;
  std::vector<TestExecutor*> device_executors;  ///< null entries without device executors
  std::vector<std::unique_ptr<Runtime>> rt;
};

/// A tensor with its own input and output buffers, submitted as one TensorEntry.
template <typename T>
struct Tensor {
  std::vector<T> in, out;
  explicit Tensor(std::vector<T> v) : in(std::move(v)), out(in.size(), T{}) {}
};

template <typename T>
constexpr DataType dtype_of() {
  if (std::is_same<T, float>::value) return DataType::kFloat32;
  if (std::is_same<T, double>::value) return DataType::kFloat64;
  if (std::is_same<T, int32_t>::value) return DataType::kInt32;
  return DataType::kInt64;
}

struct Opts {
  OpType op = OpType::kAllreduce;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  double prescale = 1.0, postscale = 1.0;
  std::string group;
  int group_size = 0;
  std::vector<int64_t> shape;  ///< empty: 1-D of the tensor's length
  Device device = Device::host();
};

template <typename T>
Handle submit(Runtime& rt, const std::string& name, Tensor<T>& t, const Opts& o = Opts{}) {
  TensorEntry e;
  core::Request& q = e.request;
  q.rank = rt.rank();
  q.op = o.op;
  q.name = name;
  q.dtype = dtype_of<T>();
  q.shape = o.shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(t.in.size())} : o.shape;
  q.reduce_op = o.reduce;
  q.root = o.root;
  q.prescale = o.prescale;
  q.postscale = o.postscale;
  q.group = o.group;
  q.group_size = o.group_size;
  q.device = o.device;
  e.input = TensorView(t.in.data(), q.dtype, q.shape, o.device);
  e.output = TensorView(t.out.data(), q.dtype, q.shape, o.device);
  return rt.enqueue(std::move(e));
}

/// Waits for `h` at most `seconds`; FAILs the test (never hangs) when the deadline passes.
inline Status await(const Handle& h, const std::string& what, double seconds = 20.0) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!h.poll()) {
    if (std::chrono::steady_clock::now() > deadline) {
      FAIL("timed out after " << seconds << " s waiting for " << what);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return h.wait_status();
}

/// Waits for `h` and requires success.
inline void await_ok(const Handle& h, const std::string& what) {
  Status s = await(h, what);
  INFO(what << ": " << s.to_string());
  REQUIRE(s.ok());
}

}  // namespace hvd::test
