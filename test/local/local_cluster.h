// SPDX-License-Identifier: Apache-2.0
// [local] harness: N core::Runtimes over one LocalHub, a test executor, deadline-bounded waits.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "hvd/core/executor.h"
#include "hvd/core/local_transport.h"
#include "hvd/core/runtime.h"
#include "hvd/ops/cpu_kernels.h"
#include "hvd_catch.h"

namespace hvd::test {

using core::Config;
using core::LocalHub;
using core::LocalTransport;
using core::OpType;
using core::Response;
using core::Runtime;
using core::TensorEntry;

/// Host allreduce (Sum/Average/Min/Max/Product on float32/float64/int32/int64, fused or not),
/// broadcast, allgather (any dtype, fused or not), alltoall (splits) and reducescatter (Sum,
/// Average), moving bytes through its own LocalHub, with the semantics of ops/src/mpi_*.cc:
/// out = post * reduce(pre * in), integers scaled by ops::scale_in_place; allreduce Average divides
/// by the ranks that contributed data (not the joined ones), reducescatter Average by the set size
/// (integers truncate); reducescatter gives ranks 0 .. R%N-1 R/N+1 rows and the rest R/N. Joined
/// ranks run through here too, with the runtime's stand-in entries (zeros, no rows).
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
      if (es[i]->input.ready_event == &kSubmitMark) ++marked_;
    }
    if (r.op == OpType::kBroadcast) return broadcast(r, es);
    if (r.op == OpType::kAllgather) return allgather(r, es);
    if (r.op == OpType::kAlltoall) return alltoall(r, es);
    const bool rs = r.op == OpType::kReducescatter;
    if (r.op != OpType::kAllreduce && !rs) return invalid_argument("test executor: unsupported op");
    switch (r.dtype) {
      case DataType::kFloat32:
        return rs ? reducescatter<float>(r, es) : allreduce<float>(r, es);
      case DataType::kFloat64:
        return rs ? reducescatter<double>(r, es) : allreduce<double>(r, es);
      case DataType::kInt32:
        return rs ? reducescatter<int32_t>(r, es) : allreduce<int32_t>(r, es);
      case DataType::kInt64:
        return rs ? reducescatter<int64_t>(r, es) : allreduce<int64_t>(r, es);
      default:
        return invalid_argument("test executor: unsupported dtype");
    }
  }
  std::string name() const override { return "local-test"; }

  /// As a device executor: notes the submitting thread, then refuses with the error set by
  /// refuse_prepare() or marks the input's ready_event (execute() counts marked entries).
  Status prepare_input(TensorEntry* e) override {
    std::lock_guard<std::mutex> lk(mu_);
    prepared_on_.push_back(std::this_thread::get_id());
    if (!prepare_error_.ok()) return prepare_error_;
    if (!e->input.ready_event) e->input.ready_event = &kSubmitMark;
    return Status::OK();
  }
  void refuse_prepare(Status s) {
    std::lock_guard<std::mutex> lk(mu_);
    prepare_error_ = std::move(s);
  }
  std::vector<std::thread::id> prepared_on() const {
    std::lock_guard<std::mutex> lk(mu_);
    return prepared_on_;
  }
  /// Entries executed with the ready_event prepare_input set.
  int marked() const { return marked_.load(); }

  /// Names of every executed response (one element per fused batch), in execution order.
  std::vector<std::vector<std::string>> batches() const {
    std::lock_guard<std::mutex> lk(mu_);
    return batches_;
  }

 private:
  // Element-wise post * reduce(pre * x) over every rank's bytes (Average: / divisor).
  template <typename T>
  Status reduce_all(const Response& r, const std::vector<std::vector<uint8_t>>& all, size_t bytes,
                    size_t divisor, std::vector<T>* out) {
    const size_t n = bytes / sizeof(T);
    std::vector<T>& acc = *out;
    acc.assign(n, T{});
    std::vector<T> v(n);
    for (size_t k = 0; k < all.size(); ++k) {
      if (all[k].size() != bytes) return internal_error("ranks sent different sizes");
      if (bytes) std::memcpy(v.data(), all[k].data(), bytes);
      // Integers scale as the MPI executor scales them (ops::scale_in_place).
      if (!std::is_floating_point<T>::value)
        ops::scale_in_place(v.data(), r.dtype, static_cast<int64_t>(n), r.prescale);
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
    if (!std::is_floating_point<T>::value) {
      // One factor, as the MPI executor: postscale / ranks for an Average.
      const double post =
          r.postscale / (r.reduce_op == ReduceOp::kAverage ? static_cast<double>(divisor) : 1.0);
      ops::scale_in_place(acc.data(), r.dtype, static_cast<int64_t>(n), post);
      return Status::OK();
    }
    for (auto& x : acc) {
      if (r.reduce_op == ReduceOp::kAverage) x = static_cast<T>(x / static_cast<T>(divisor));
      x = static_cast<T>(x * r.postscale);
    }
    return Status::OK();
  }

  static std::vector<int64_t> with_rows(int64_t rows, const std::vector<int64_t>& shape) {
    std::vector<int64_t> s = {rows};
    if (!shape.empty()) s.insert(s.end(), shape.begin() + 1, shape.end());
    return s;
  }

  // Every rank's inputs, concatenated in name order; each rank's block is split by rank_rows.
  Status allgather(const Response& r, const std::vector<TensorEntry*>& es) {
    const size_t n = static_cast<size_t>(hub_->size()), k = es.size();
    const size_t esize = dtype_size(r.dtype);
    if (r.rank_rows.size() != n * k || r.numels.size() != k) {
      return internal_error("test allgather: malformed response");
    }
    auto rows = [&](size_t i, size_t j) { return r.rank_rows[i * n + j]; };
    std::vector<uint8_t> mine;
    for (size_t i = 0; i < k; ++i) {
      const auto& in = es[i]->input;
      if (in.shape.empty() || in.shape[0] != rows(i, static_cast<size_t>(rank_))) {
        return internal_error("test allgather '" + r.names[i] + "': rows differ from response");
      }
      const auto* p = static_cast<const uint8_t*>(in.data);
      if (in.bytes()) mine.insert(mine.end(), p, p + in.bytes());
    }
    std::vector<std::vector<uint8_t>> all;
    HVD_RETURN_IF_ERROR(hub_->exchange(rank_, std::move(mine), &all));
    std::vector<size_t> out_off(k, 0);
    for (size_t i = 0; i < k; ++i) {
      int64_t total = 0;
      for (size_t j = 0; j < n; ++j) total += rows(i, j);
      HVD_RETURN_IF_ERROR(core::allocate_output(es[i], with_rows(total, es[i]->input.shape)));
    }
    for (size_t j = 0; j < n; ++j) {
      size_t off = 0;
      for (size_t i = 0; i < k; ++i) {
        const size_t b = static_cast<size_t>(rows(i, j) * r.numels[i]) * esize;
        if (off + b > all[j].size()) return internal_error("test allgather: short block");
        if (b)
          std::memcpy(static_cast<uint8_t*>(es[i]->output.data) + out_off[i], all[j].data() + off,
                      b);
        off += b;
        out_off[i] += b;
      }
    }
    return Status::OK();
  }

  // rank_rows[i * n + j]: rows rank i sends to rank j, consecutive in rank order.
  Status alltoall(const Response& r, const std::vector<TensorEntry*>& es) {
    const size_t n = static_cast<size_t>(hub_->size()), me = static_cast<size_t>(rank_);
    if (r.rank_rows.size() != n * n || r.numels.empty()) {
      return internal_error("test alltoall: malformed response");
    }
    const size_t row_bytes = static_cast<size_t>(r.numels[0]) * dtype_size(r.dtype);
    for (auto* e : es) {
      const auto* p = static_cast<const uint8_t*>(e->input.data);
      std::vector<std::vector<uint8_t>> all;
      HVD_RETURN_IF_ERROR(
          hub_->exchange(rank_, std::vector<uint8_t>(p, p + e->input.bytes()), &all));
      std::vector<int64_t> got(n);
      int64_t total = 0;
      for (size_t j = 0; j < n; ++j) total += got[j] = r.rank_rows[j * n + me];
      HVD_RETURN_IF_ERROR(core::allocate_output(e, with_rows(total, e->input.shape)));
      size_t out = 0;
      for (size_t j = 0; j < n; ++j) {
        size_t skip = 0;
        for (size_t q = 0; q < me; ++q) skip += static_cast<size_t>(r.rank_rows[j * n + q]);
        const size_t b = static_cast<size_t>(got[j]) * row_bytes;
        if ((skip * row_bytes) + b > all[j].size()) return internal_error("test alltoall: short");
        if (b)
          std::memcpy(static_cast<uint8_t*>(e->output.data) + out, all[j].data() + skip * row_bytes,
                      b);
        out += b;
      }
      e->handle->extra().received_splits = got;
    }
    return Status::OK();
  }

  template <typename T>
  Status reducescatter(const Response& r, const std::vector<TensorEntry*>& es) {
    const int64_t n = hub_->size();
    for (auto* e : es) {
      const auto* p = static_cast<const uint8_t*>(e->input.data);
      std::vector<std::vector<uint8_t>> all;
      HVD_RETURN_IF_ERROR(
          hub_->exchange(rank_, std::vector<uint8_t>(p, p + e->input.bytes()), &all));
      std::vector<T> acc;
      HVD_RETURN_IF_ERROR(reduce_all<T>(r, all, e->input.bytes(), static_cast<size_t>(n), &acc));
      const int64_t rows = e->input.shape[0], row = r.numels.empty() ? 0 : r.numels[0];
      const int64_t mine = rows / n + (rank_ < rows % n ? 1 : 0);
      const int64_t start = rank_ * (rows / n) + std::min<int64_t>(rank_, rows % n);
      HVD_RETURN_IF_ERROR(core::allocate_output(e, with_rows(mine, e->input.shape)));
      if (mine * row > 0) {
        std::memcpy(e->output.data, acc.data() + start * row,
                    static_cast<size_t>(mine * row) * sizeof(T));
      }
    }
    return Status::OK();
  }

  template <typename T>
  Status allreduce(const Response& r, const std::vector<TensorEntry*>& es) {
    std::vector<uint8_t> mine;
    for (size_t i = 0; i < es.size(); ++i) {
      const auto* p = static_cast<const uint8_t*>(es[i]->input.data);
      mine.insert(mine.end(), p, p + es[i]->input.bytes());
    }
    std::vector<std::vector<uint8_t>> all;
    HVD_RETURN_IF_ERROR(hub_->exchange(rank_, mine, &all));
    std::vector<T> acc;
    // Average divides by the set size, as Horovod: joined ranks contribute zeros.
    HVD_RETURN_IF_ERROR(reduce_all<T>(r, all, mine.size(), all.size(), &acc));
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
  std::vector<std::thread::id> prepared_on_;
  Status prepare_error_;
  std::atomic<int> marked_{0};
  static inline int kSubmitMark = 0;
};

/// Device work the test finishes by hand: launches counted, and completions that report done
/// only once `open` is set (with `error` as their status).
struct DeviceGate {
  std::atomic<bool> open{false};
  std::atomic<int> launches{0};
  std::atomic<int> queries{0};
  Status error;  // set before opening
};

/// A TestExecutor for device responses whose work "still runs" after launch(): the data is
/// reduced at once, but the handles finish only when the gate opens (as if on a GPU stream).
class AsyncTestExecutor : public TestExecutor {
 public:
  AsyncTestExecutor(std::shared_ptr<LocalHub> hub, int rank, std::shared_ptr<DeviceGate> gate)
      : TestExecutor(std::move(hub), rank), gate_(std::move(gate)) {}
  Status launch(const Response& r, const std::vector<TensorEntry*>& es,
                std::shared_ptr<core::Completion>* pending) override {
    Status s = execute(r, es);
    ++gate_->launches;
    *pending = std::make_shared<GateCompletion>(gate_);
    return s;
  }

 private:
  class GateCompletion : public core::Completion {
   public:
    explicit GateCompletion(std::shared_ptr<DeviceGate> g) : g_(std::move(g)) {}

   protected:
    bool query(Status* s) override {
      ++g_->queries;
      if (!g_->open.load()) return false;
      *s = g_->error;
      return true;
    }

   private:
    std::shared_ptr<DeviceGate> g_;
  };
  std::shared_ptr<DeviceGate> gate_;
};

/// N runtimes as N ranks. Negotiation and execution use separate hubs.
struct Cluster {
  /// `device_executor`: also run device (kCuda) responses through a TestExecutor, so that
  /// device-kind paths can be tested on host memory.
  /// `gate`: device responses "finish" only when it opens (AsyncTestExecutor).
  /// `clock`: the runtimes' stall clock (null: steady_clock).
  explicit Cluster(int n, Config cfg = Config{}, bool device_executor = false,
                   std::shared_ptr<DeviceGate> gate = nullptr, core::StallClock clock = nullptr)
      : hub(std::make_shared<LocalHub>(n)), exec_hub(std::make_shared<LocalHub>(n)) {
    for (int r = 0; r < n; ++r) {
      auto t = std::make_unique<LocalTransport>(hub, r);
      auto e = std::make_unique<TestExecutor>(exec_hub, r);
      std::unique_ptr<TestExecutor> d;
      if (gate) {
        d = std::make_unique<AsyncTestExecutor>(exec_hub, r, gate);
      } else if (device_executor) {
        d = std::make_unique<TestExecutor>(exec_hub, r);
      }
      transports.push_back(t.get());
      executors.push_back(e.get());
      device_executors.push_back(d.get());
      core::RuntimeParts parts{std::move(t), std::move(e), std::move(d)};
      parts.make_process_set = [this, r](int32_t id, const std::vector<int32_t>& ranks,
                                         core::RuntimeParts* out) {
        return make_set_parts(r, id, ranks, out);
      };
      parts.clock = clock;
      rt.push_back(std::make_unique<Runtime>(cfg, std::move(parts)));
    }
  }

  /// Process sets: members of set `id` share a pair of hubs made by the first member to ask.
  Status make_set_parts(int rank, int32_t id, const std::vector<int32_t>& ranks,
                        core::RuntimeParts* out) {
    auto it = std::find(ranks.begin(), ranks.end(), rank);
    if (it == ranks.end()) return Status::OK();  // not a member: no runtime here
    std::shared_ptr<LocalHub> neg, ex;
    {
      std::lock_guard<std::mutex> lk(sets_mu);
      auto& h = set_hubs[id];
      if (!h.first) {
        h.first = std::make_shared<LocalHub>(static_cast<int>(ranks.size()));
        h.second = std::make_shared<LocalHub>(static_cast<int>(ranks.size()));
      }
      neg = h.first;
      ex = h.second;
    }
    const int idx = static_cast<int>(it - ranks.begin());
    out->transport = std::make_unique<LocalTransport>(neg, idx);
    out->host_executor = std::make_unique<TestExecutor>(ex, idx);
    return Status::OK();
  }
  void abort_hubs() {
    hub->abort();
    exec_hub->abort();
    std::lock_guard<std::mutex> lk(sets_mu);
    for (auto& kv : set_hubs) {
      kv.second.first->abort();
      kv.second.second->abort();
    }
  }
  ~Cluster() {
    if (!shutdown_all()) {
      abort_hubs();
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
    if (!in_time) abort_hubs();
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
    if (!in_time) abort_hubs();
    return in_time;
  }

  std::shared_ptr<LocalHub> hub, exec_hub;
  std::vector<LocalTransport*> transports;
  std::vector<TestExecutor*> executors;
  std::vector<TestExecutor*> device_executors;  ///< null entries without device executors
  std::mutex sets_mu;
  std::map<int32_t, std::pair<std::shared_ptr<LocalHub>, std::shared_ptr<LocalHub>>> set_hubs;
  std::vector<std::unique_ptr<Runtime>> rt;  // last: destroyed first, while the hubs live
};

/// A tensor with its own input and output buffers, submitted as one TensorEntry.
template <typename T>
struct Tensor {
  std::vector<T> in, out;
  explicit Tensor(std::vector<T> v) : in(std::move(v)), out(in.size(), T{}) {}
};

template <typename T>
constexpr DataType dtype_of() {
  if (std::is_same<T, uint8_t>::value) return DataType::kUInt8;
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
  std::vector<int64_t> splits;  ///< alltoall
  int32_t process_set = 0;
  std::function<void*(const std::vector<int64_t>&)> allocator;  ///< sized ops; null: hvd's
};

/// True for the collectives whose output size negotiation decides.
inline bool sized_op(OpType op) {
  return op == OpType::kAllgather || op == OpType::kAlltoall || op == OpType::kReducescatter;
}

// submit() sets every Request field from Opts: a new field must be added to Opts and set there.
static_assert(core::request_field_count() == 15,
              "Request has a new field: give Opts a member for it and set it in submit()");

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
  q.splits = o.splits;
  q.process_set = o.process_set;
  e.input = TensorView(t.in.data(), q.dtype, q.shape, o.device);
  e.output = TensorView(t.out.data(), q.dtype, q.shape, o.device);
  if (sized_op(o.op)) {  // allocated at execution (Handle::output()), as the API does
    e.output = TensorView(nullptr, q.dtype, {0}, o.device);
    e.allocator = o.allocator;
  }
  if (o.process_set != rt.process_set_id()) return rt.enqueue(std::move(e));
  // As the API's allreduce does (Runtime::enqueue_refill): the table slot keeps the last
  // request of this name; an equal one only takes the new buffers, and negotiation then takes
  // the cache entry that request hit without comparing it again.
  return rt.enqueue_refill(name, [&e](TensorEntry* slot) {
    const core::Request& was = slot->request;
    if (was.same_params(e.request) && was.rank == e.request.rank &&
        was.refused == e.request.refused) {
      core::assign_view(&slot->input, e.input);
      core::assign_view(&slot->output, e.output);
      slot->allocator = std::move(e.allocator);
      return true;
    }
    Runtime::fill_slot(slot, std::move(e));
    return false;
  });
}

/// A cluster configuration with a response cache of `capacity` entries.
inline Config with_cache(int64_t capacity) {
  Config cfg;
  cfg.cache_capacity = capacity;
  return cfg;
}

/// hvd::join() on one rank of the cluster: the handle's state()->result is the last rank.
inline Handle submit_join(Runtime& rt) {
  TensorEntry e;
  e.request.rank = rt.rank();
  e.request.op = OpType::kJoin;
  e.request.name = "join";
  e.request.dtype = DataType::kUInt8;
  e.request.shape = {0};
  e.input = e.output = TensorView(nullptr, DataType::kUInt8, {0});
  return rt.enqueue(std::move(e));
}

/// The output of a sized collective as a vector of T.
template <typename T>
std::vector<T> output_of(const Handle& h) {
  const TensorView& o = h.output();
  const auto* p = static_cast<const T*>(o.data);
  return std::vector<T>(p, p + o.numel());
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

/// Submits `name` on ranks 0 and 1 of a two-rank cluster (t0, t1, both with `o`) and requires
/// both to succeed.
template <typename T>
void run_both(Cluster& c, const std::string& name, Tensor<T>& t0, Tensor<T>& t1,
              const Opts& o = Opts{}) {
  Handle h0 = submit(c[0], name, t0, o), h1 = submit(c[1], name, t1, o);
  await_ok(h0, name + " on rank 0");
  await_ok(h1, name + " on rank 1");
}

}  // namespace hvd::test
