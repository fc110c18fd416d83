// SPDX-License-Identifier: Apache-2.0
// [soak] Random collectives of every kind, checked against closed forms, run under mpiexec.
//
// Every rank draws the same batches from one seed (rank 0's, broadcast and printed): each batch
// holds up to 16 collectives (allreduce with every reduce op, grouped allreduce, broadcast,
// ragged allgather, alltoall with random splits, reducescatter, allreduce / allgather on process
// sets) with names drawn from a pool larger than the response cache, sizes from 0 to 4 MiB
// (mostly small), every dtype. Each rank submits the batch in its own random order from two
// user threads at once, then checks every result. Every 64 batches the ranks run uneven tails
// and join(). Resident memory after the first thousand collectives must stay within a bound to
// the end. HVD_SOAK_ITERATIONS: collectives per rank (default 20000).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

namespace {

using hvd::DataType;
using hvd::ReduceOp;

constexpr int kPool = 300;  // names; run with HVD_CACHE_CAPACITY well below this
constexpr DataType kTypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                               DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                               DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                               DataType::kBool};

enum class Kind { kAllreduce, kGrouped, kBroadcast, kAllgather, kAlltoall, kReducescatter };

// One collective of a batch, the same on every rank.
struct Op {
  Kind kind = Kind::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  int64_t elems = 0;          // per row for allgather/alltoall/reducescatter
  int root = 0;               // broadcast
  int members = 1;            // grouped
  int set = 0;                // 0: global, 1: even ranks, 2: odd ranks
  std::vector<int64_t> rows;  // allgather: rows per rank; reducescatter: {total rows}
  std::vector<std::vector<int64_t>> splits;  // alltoall: splits[i][j] rows i sends j
};

// Stored values are small integers, exact in every dtype (bool: 0/1).
void put(DataType t, void* p, int64_t i, double v) {
  switch (t) {
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = hvd::float_to_half(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = hvd::float_to_bf16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(p)[i] = v != 0;
      break;
  }
}

double get(DataType t, const void* p, int64_t i) {
  switch (t) {
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(p)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kFloat16:
      return hvd::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return hvd::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DataType::kBool:
      return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

// A small value per (source rank, position) for data-moving collectives.
double tag(int src, int64_t pos, DataType t) {
  if (t == DataType::kBool) return (src + pos) % 2;
  return static_cast<double>((src * 7 + pos * 3) % 23);
}

int64_t draw_size(std::mt19937_64& g, DataType t) {
  const int64_t max = (int64_t{4} << 20) / static_cast<int64_t>(hvd::dtype_size(t));
  const int u = static_cast<int>(g() % 1000);
  if (u < 880) return static_cast<int64_t>(g() % 65);          // mostly tiny (0 included)
  if (u < 995) return 64 + static_cast<int64_t>(g() % 16384);  // some medium
  return 16384 + static_cast<int64_t>(g() % static_cast<uint64_t>(max - 16384 + 1));  // a few big
}

struct Soak {
  int rank = 0, n = 1;
  uint64_t seed = 0;
  hvd::ProcessSet sets[3];
  std::atomic<int64_t> checked{0};
  std::mutex mu;
  std::vector<std::string> failures;

  std::vector<int> set_ranks(int s) const {
    std::vector<int> out;
    for (int r = 0; r < n; ++r) {
      if (s == 0 || (s == 1 && r % 2 == 0) || (s == 2 && r % 2 == 1)) out.push_back(r);
    }
    return out;
  }

  void fail(const Op& op, const std::string& what) {
    std::lock_guard<std::mutex> lk(mu);
    if (failures.size() < 20) {
      failures.push_back("'" + op.name + "' (" + hvd::dtype_name(op.dtype) + ", " +
                         std::to_string(op.elems) + " elements): " + what);
    }
  }

  std::vector<Op> draw_batch(uint64_t b) {
    std::mt19937_64 g(seed * 1000003 + b);
    std::vector<int> pool(kPool);
    for (int i = 0; i < kPool; ++i) pool[static_cast<size_t>(i)] = i;
    std::shuffle(pool.begin(), pool.end(), g);
    const int count = 1 + static_cast<int>(g() % 16);
    std::vector<Op> ops;
    for (int k = 0; k < count; ++k) {
      Op op;
      op.name = "p" + std::to_string(pool[static_cast<size_t>(k)]);
      op.kind = static_cast<Kind>(g() % 6);
      op.dtype = kTypes[g() % 10];
      op.elems = draw_size(g, op.dtype);
      if (op.kind == Kind::kAllreduce || op.kind == Kind::kGrouped ||
          op.kind == Kind::kReducescatter) {
        if (op.dtype == DataType::kBool) op.dtype = DataType::kInt32;
        const bool fp = hvd::dtype_is_floating(op.dtype);
        const ReduceOp ops5[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                                 ReduceOp::kAverage};
        op.reduce = ops5[g() % (fp ? 5 : 4)];
        if (op.kind == Kind::kReducescatter && op.reduce != ReduceOp::kAverage) {
          op.reduce = ReduceOp::kSum;
        }
      }
      if (n >= 4 && (op.kind == Kind::kAllreduce || op.kind == Kind::kAllgather) && g() % 5 == 0) {
        op.set = 1 + static_cast<int>(g() % 2);
      }
      const int m = static_cast<int>(set_ranks(op.set).size());
      op.root = static_cast<int>(g() % static_cast<uint64_t>(n));
      op.members = 2 + static_cast<int>(g() % 3);
      if (op.kind == Kind::kGrouped) op.elems = std::min<int64_t>(op.elems, 4096);
      if (op.kind == Kind::kAllgather || op.kind == Kind::kAlltoall ||
          op.kind == Kind::kReducescatter) {
        op.elems = std::min<int64_t>(op.elems, 8192) / 8 + 1;  // a row; several rows below
      }
      if (op.kind == Kind::kAllgather) {
        for (int r = 0; r < m; ++r) op.rows.push_back(static_cast<int64_t>(g() % 4));  // ragged
      }
      if (op.kind == Kind::kReducescatter) op.rows = {static_cast<int64_t>(g() % 9)};
      if (op.kind == Kind::kAlltoall) {
        op.splits.assign(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n)));
        for (auto& row : op.splits) {
          for (auto& s : row) s = static_cast<int64_t>(g() % 4);
        }
      }
      ops.push_back(std::move(op));
    }
    return ops;
  }

  // Input value of element i on set-rank `idx` of a set of `m` ranks for a reduction.
  static double reduce_input(ReduceOp op, int idx, int m, int64_t i) {
    if (op == ReduceOp::kProduct) return idx == static_cast<int>(i % m) ? 2 : 1;
    return static_cast<double>((idx + 1) * (i % 5 + 1));
  }
  static double reduce_expect(ReduceOp op, int m, int64_t i) {
    const double k = static_cast<double>(i % 5 + 1);
    switch (op) {
      case ReduceOp::kSum:
        return k * m * (m + 1) / 2;
      case ReduceOp::kAverage:
      case ReduceOp::kAdasum:  // of parallel vectors: their average
        return k * (m + 1) / 2.0;
      case ReduceOp::kMin:
        return k;
      case ReduceOp::kMax:
        return k * m;
      case ReduceOp::kProduct:
        return 2;
    }
    return 0;
  }

  // Submits `op` (this rank's part) and returns a checker to run after the batch.
  struct Pending {
    const Op* op;
    std::vector<hvd::Handle> handles;
    std::vector<std::vector<uint8_t>> bufs;
  };

  bool member(const Op& op) const {
    auto rs = set_ranks(op.set);
    return std::find(rs.begin(), rs.end(), rank) != rs.end();
  }

  Pending submit(const Op& op) {
    Pending p{&op, {}, {}};
    const size_t es = hvd::dtype_size(op.dtype);
    const auto rs = set_ranks(op.set);
    const int m = static_cast<int>(rs.size());
    const int idx = static_cast<int>(std::find(rs.begin(), rs.end(), rank) - rs.begin());
    const hvd::ProcessSet& ps = sets[op.set];
    auto buffer = [&](int64_t count) {
      p.bufs.emplace_back(static_cast<size_t>(std::max<int64_t>(count, 1)) * es, 0);
      return p.bufs.back().data();
    };
    switch (op.kind) {
      case Kind::kAllreduce:
      case Kind::kGrouped: {
        const int k = op.kind == Kind::kGrouped ? op.members : 1;
        std::vector<hvd::TensorView> vs;
        for (int t = 0; t < k; ++t) {
          void* d = buffer(op.elems);
          for (int64_t i = 0; i < op.elems; ++i)
            put(op.dtype, d, i, reduce_input(op.reduce, idx, m, i + t));
          vs.emplace_back(d, op.dtype, std::vector<int64_t>{op.elems});
        }
        p.handles.push_back(op.kind == Kind::kGrouped
                                ? hvd::grouped_allreduce_async(vs, op.name, op.reduce, 1.0, 1.0, ps)
                                : hvd::allreduce_async(vs[0], op.name, op.reduce, 1.0, 1.0, ps));
        break;
      }
      case Kind::kBroadcast: {
        void* d = buffer(op.elems);
        for (int64_t i = 0; i < op.elems; ++i) put(op.dtype, d, i, tag(rank, i, op.dtype));
        p.handles.push_back(
            hvd::broadcast_async(hvd::TensorView(d, op.dtype, {op.elems}), op.root, op.name));
        break;
      }
      case Kind::kAllgather: {
        const int64_t rows = op.rows[static_cast<size_t>(idx)];
        void* d = buffer(rows * op.elems);
        for (int64_t i = 0; i < rows * op.elems; ++i) put(op.dtype, d, i, tag(idx, i, op.dtype));
        p.handles.push_back(
            hvd::allgather_async(hvd::TensorView(d, op.dtype, {rows, op.elems}), op.name, ps));
        break;
      }
      case Kind::kAlltoall: {
        const auto& mine = op.splits[static_cast<size_t>(rank)];
        int64_t rows = 0;
        for (int64_t s : mine) rows += s;
        void* d = buffer(rows * op.elems);
        int64_t row = 0;
        for (int j = 0; j < n; ++j) {
          for (int64_t q = 0; q < mine[static_cast<size_t>(j)]; ++q, ++row) {
            for (int64_t c = 0; c < op.elems; ++c) {
              put(op.dtype, d, row * op.elems + c, tag(rank, j * 100 + q * 10 + c, op.dtype));
            }
          }
        }
        p.handles.push_back(
            hvd::alltoall_async(hvd::TensorView(d, op.dtype, {rows, op.elems}), mine, op.name));
        break;
      }
      case Kind::kReducescatter: {
        const int64_t rows = op.rows[0];
        void* d = buffer(rows * op.elems);
        for (int64_t i = 0; i < rows * op.elems; ++i)
          put(op.dtype, d, i, reduce_input(op.reduce, idx, m, i));
        p.handles.push_back(hvd::reducescatter_async(hvd::TensorView(d, op.dtype, {rows, op.elems}),
                                                     op.name, op.reduce));
        break;
      }
    }
    return p;
  }

  void check(Pending& p) {
    const Op& op = *p.op;
    const auto rs = set_ranks(op.set);
    const int m = static_cast<int>(rs.size());
    const int idx = static_cast<int>(std::find(rs.begin(), rs.end(), rank) - rs.begin());
    for (auto& h : p.handles) {
      hvd::Status s = h.wait_status();
      if (!s.ok()) return fail(op, "failed: " + s.message());
    }
    auto expect = [&](const void* d, int64_t i, double want) {
      const double got = get(op.dtype, d, i);
      if (got != want) {
        fail(op, "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
                     std::to_string(want));
        return false;
      }
      return true;
    };
    switch (op.kind) {
      case Kind::kAllreduce:
      case Kind::kGrouped:
        for (size_t t = 0; t < p.bufs.size(); ++t) {
          for (int64_t i = 0; i < op.elems; ++i) {
            if (!expect(p.bufs[t].data(), i,
                        reduce_expect(op.reduce, m, i + static_cast<int64_t>(t))))
              return;
          }
        }
        break;
      case Kind::kBroadcast:
        for (int64_t i = 0; i < op.elems; ++i) {
          if (!expect(p.bufs[0].data(), i, tag(op.root, i, op.dtype))) return;
        }
        break;
      case Kind::kAllgather: {
        const hvd::TensorView& out = p.handles[0].output();
        int64_t total = 0;
        for (int64_t r : op.rows) total += r;
        if (out.shape.empty() || out.shape[0] != total) return fail(op, "wrong gathered rows");
        int64_t off = 0;
        for (int q = 0; q < m; ++q) {
          for (int64_t i = 0; i < op.rows[static_cast<size_t>(q)] * op.elems; ++i) {
            if (!expect(out.data, off + i, tag(q, i, op.dtype))) return;
          }
          off += op.rows[static_cast<size_t>(q)] * op.elems;
        }
        break;
      }
      case Kind::kAlltoall: {
        const hvd::TensorView& out = p.handles[0].output();
        int64_t row = 0;
        for (int i = 0; i < n; ++i) {
          const int64_t from = op.splits[static_cast<size_t>(i)][static_cast<size_t>(rank)];
          for (int64_t q = 0; q < from; ++q, ++row) {
            for (int64_t c = 0; c < op.elems; ++c) {
              if (!expect(out.data, row * op.elems + c, tag(i, rank * 100 + q * 10 + c, op.dtype)))
                return;
            }
          }
        }
        if (out.shape.empty() || out.shape[0] != row) return fail(op, "wrong received rows");
        break;
      }
      case Kind::kReducescatter: {
        const hvd::TensorView& out = p.handles[0].output();
        const int64_t rows = op.rows[0], base = rows / n, extra = rows % n;
        const int64_t mine = base + (idx < extra ? 1 : 0);
        const int64_t first = idx * base + std::min<int64_t>(idx, extra);
        if (out.shape.empty() || out.shape[0] != mine) return fail(op, "wrong slice rows");
        for (int64_t i = 0; i < mine * op.elems; ++i) {
          if (!expect(out.data, i, reduce_expect(op.reduce, m, first * op.elems + i))) return;
        }
        break;
      }
    }
    ++checked;
  }

  // This rank's ops of a batch, in its own order, split over two threads.
  size_t run_batch(uint64_t b) {
    const std::vector<Op> ops = draw_batch(b);
    std::vector<const Op*> mine;
    for (const Op& op : ops) {
      if (member(op)) mine.push_back(&op);
    }
    std::mt19937_64 g(seed * 7919 + b * 31 + static_cast<uint64_t>(rank));
    std::shuffle(mine.begin(), mine.end(), g);
    std::vector<const Op*> half[2];
    for (const Op* op : mine) half[g() % 2].push_back(op);
    auto work = [this](const std::vector<const Op*>& list) {
      std::vector<Pending> ps;
      ps.reserve(list.size());
      for (const Op* op : list) ps.push_back(submit(*op));
      for (auto& p : ps) check(p);
    };
    std::thread other(work, half[1]);
    work(half[0]);
    other.join();
    // The fewest collectives any rank took part in (the same number on every rank).
    size_t fewest = ops.size();
    for (int r = 0; r < n; ++r) {
      size_t in = 0;
      for (const Op& op : ops) {
        const auto rs = set_ranks(op.set);
        in += std::find(rs.begin(), rs.end(), r) != rs.end() ? 1 : 0;
      }
      fewest = std::min(fewest, in);
    }
    return fewest;
  }

  // Uneven tails, then join(): rank r runs r extra allreduces; the ranks that joined take part
  // with zeros, so tail i sums (q + 1) over the ranks q > i.
  void run_join(uint64_t b) {
    std::vector<std::vector<int32_t>> bufs(static_cast<size_t>(rank));
    std::vector<hvd::Handle> hs;
    for (int i = 0; i < rank; ++i) {
      bufs[static_cast<size_t>(i)].assign(8, rank + 1);
      hs.push_back(hvd::allreduce_async(
          hvd::TensorView(bufs[static_cast<size_t>(i)].data(), DataType::kInt32, {8}),
          "tail." + std::to_string(i), ReduceOp::kSum));
    }
    for (int i = 0; i < rank; ++i) {
      Op op;
      op.name = "tail." + std::to_string(i) + " (batch " + std::to_string(b) + ")";
      hvd::Status s = hs[static_cast<size_t>(i)].wait_status();
      if (!s.ok()) {
        fail(op, s.message());
        continue;
      }
      int32_t want = 0;
      for (int q = i + 1; q < n; ++q) want += q + 1;
      if (bufs[static_cast<size_t>(i)][0] != want) fail(op, "wrong sum after join");
      ++checked;
    }
    const int last = hvd::join();
    if (last != n - 1) {
      Op op;
      op.name = "join";
      fail(op, "last rank to join is " + std::to_string(last));
    }
  }
};

int64_t rss_kib() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace

int main() {
  hvd::init();
  Soak s;
  s.rank = hvd::rank();
  s.n = hvd::size();
  int64_t target = 20000;
  if (const char* v = std::getenv("HVD_SOAK_ITERATIONS")) target = std::atoll(v);
  int64_t seed = static_cast<int64_t>(std::random_device{}()) ^
                 std::chrono::steady_clock::now().time_since_epoch().count();
  hvd::broadcast(hvd::TensorView(&seed, DataType::kInt64, {1}), 0, "soak.seed");
  s.seed = static_cast<uint64_t>(seed);
  if (s.rank == 0)
    std::printf("SOAK seed %lld, %lld collectives per rank\n", static_cast<long long>(seed),
                static_cast<long long>(target));
  std::fflush(stdout);
  if (s.n >= 4) {
    s.sets[1] = hvd::add_process_set(s.set_ranks(1));
    s.sets[2] = hvd::add_process_set(s.set_ranks(2));
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t rss_first = 0, rss_max = 0;
  uint64_t b = 0;
  // Every rank counts the same (the fewest any rank took part in), so all run the same batches
  // and every rank checks at least `target` collectives.
  for (int64_t planned = 0; planned < target; ++b) {
    planned += static_cast<int64_t>(s.run_batch(b));
    if (b % 64 == 63) s.run_join(b);
    if (rss_first == 0 && s.checked.load() >= 1000) rss_first = rss_kib();
    if (rss_first) rss_max = std::max(rss_max, rss_kib());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t growth = rss_max - rss_first;
#if defined(__SANITIZE_ADDRESS__)
  // ASan's quarantine holds freed memory (256 MiB by default): resident memory says nothing.
  const int64_t bound = int64_t{1} << 40;
#else
  const int64_t bound = 64 * 1024;  // KiB: a few 4 MiB buffers in the output pool, no leak
#endif
  bool ok = s.failures.empty() && growth < bound;
  std::printf(
      "SOAK %s (rank %d): seed %lld, %lld collectives checked in %.1f s (%llu batches), "
      "resident %lld KiB after 1000, max %lld KiB (+%lld KiB, bound %lld)\n",
      ok ? "PASS" : "FAIL", s.rank, static_cast<long long>(seed),
      static_cast<long long>(s.checked.load()), secs, static_cast<unsigned long long>(b),
      static_cast<long long>(rss_first), static_cast<long long>(rss_max),
      static_cast<long long>(growth), static_cast<long long>(bound));
  for (const auto& f : s.failures) std::printf("SOAK FAIL (rank %d): %s\n", s.rank, f.c_str());
  std::fflush(stdout);
  hvd::shutdown();
  return ok ? 0 : 1;
}
