// SPDX-License-Identifier: Apache-2.0
// hvd_control_plane_bench: what negotiation costs rank 0 and the other ranks at N = 2 to 1,024
// ranks, measured on the real controller (core/src/controller.cc) in one process.
//
// Two threads run two real Controllers: rank 0 and rank 1 of a set of N. Ranks 2..N-1 are
// modelled: every rank submits the same tensors, so their request lists are rank 1's (rank 0
// reads each request's sender from its place in the gather, not from the bytes), handed to rank
// 0 by the transport's gather as MpiTransport's gather does (one byte vector per rank, copied
// out of the receive buffer); their bit words equal rank 1's (an AND is idempotent). Each
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID) around its submissions and rounds, less the time
// spent inside the in-process exchange that stands in for MPI, is what one rank's background
// thread spends negotiating. What MPI's collectives add is not measured here but follows from
// the bytes printed: the AND allreduce takes log2(N) message steps of 8 x words bytes (recursive
// doubling), the gather N - 1 messages into rank 0 (after an allgather of the sizes, 4 x N
// bytes), the broadcast log2(N) steps of the response list (binomial tree).
//
// Tables: (1) a round of K new names (every rank submits the same K names, never seen): rank
// 0's and rank 1's CPU, rank 0's per name per rank, the bytes rank 0 receives and sends, rank
// 0's heap peak during the round. (2) a cached step of K tensors: CPU per rank, the AND's
// words, each rank's heap held by the controller and its cache. (3) the cache cliff: a cached
// step of K = 256 to 4,000 tensors against the default capacity (1,024, grown by the cache
// itself), plain and as one grouped allreduce: CPU per tensor and full rounds per step.
// Every round checks that rank 0's and rank 1's results name the same tensors in the same
// order, and that every submitted tensor was answered exactly once; a failure exits 1.
//
//   build/bench/hvd_control_plane_bench [--smoke] [--ranks N,N,...]
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "hvd/core/config.h"
#include "hvd/core/controller.h"
#include "hvd/core/executor.h"
#include "hvd/core/local_transport.h"
#include "hvd/core/message.h"

namespace {

// Heap accounting: every operator new carries a header naming the thread that allocated it
// (rank 0's, rank 1's, any other), so each rank's live and peak bytes are counted exactly.
struct alignas(16) Header {
  uint64_t size;
  uint64_t owner;
};
constexpr int kOwners = 3;
std::atomic<int64_t> g_live[kOwners];
std::atomic<int64_t> g_peak[kOwners];
thread_local int t_owner = 2;

void* counted_alloc(size_t n) noexcept {
  void* p = std::malloc(n + sizeof(Header));
  if (p == nullptr) return nullptr;
  auto* h = static_cast<Header*>(p);
  h->size = n;
  h->owner = static_cast<uint64_t>(t_owner);
  const int64_t live =
      g_live[t_owner].fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) +
      static_cast<int64_t>(n);
  if (live > g_peak[t_owner].load(std::memory_order_relaxed)) {
    g_peak[t_owner].store(live, std::memory_order_relaxed);
  }
  return h + 1;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  Header* h = static_cast<Header*>(p) - 1;
  g_live[h->owner].fetch_sub(static_cast<int64_t>(h->size), std::memory_order_relaxed);
  std::free(h);
}

void* throwing_alloc(size_t n) {
  void* p = counted_alloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(size_t n) { return throwing_alloc(n); }
void* operator new[](size_t n) { return throwing_alloc(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace {

using hvd::Status;
using hvd::core::Controller;
using hvd::core::LocalHub;
using hvd::core::Request;
using hvd::core::RoundResult;
using hvd::core::TensorEntry;

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

int64_t live_bytes(int owner) { return g_live[owner].load(std::memory_order_relaxed); }
void reset_peak(int owner) {
  g_peak[owner].store(g_live[owner].load(std::memory_order_relaxed), std::memory_order_relaxed);
}
int64_t peak_bytes(int owner) { return g_peak[owner].load(std::memory_order_relaxed); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool g_failed = false;
void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "hvd_control_plane_bench: FAILED: %s\n", what.c_str());
  g_failed = true;
}

// Rank 0 or 1 of a set of `n`: a two-party LocalHub carries what passes between the two real
// controllers. Rank 0's gather hands it every modelled rank's list as a copy of rank 1's (their
// requests are the same; only the rank field, which rank 0 overwrites with the sender's, would
// differ), as MpiTransport's gather copies each rank's bytes out of its receive buffer. Counts
// rank 0's bytes, and the CPU time spent in the hub (the stand-in for MPI, not counted).
class ModelTransport : public hvd::core::Transport {
 public:
  ModelTransport(std::shared_ptr<LocalHub> hub, int rank, int n)
      : hub_(std::move(hub)), rank_(rank), n_(n) {}
  int rank() const override { return rank_; }
  int size() const override { return n_; }
  Status allreduce_and(std::vector<uint64_t>* words) override {
    std::vector<uint8_t> mine(words->size() * 8);
    std::memcpy(mine.data(), words->data(), mine.size());
    std::vector<std::vector<uint8_t>> all;
    HVD_RETURN_IF_ERROR(exchange(std::move(mine), &all));
    const auto& peer = all[static_cast<size_t>(1 - rank_)];
    if (peer.size() != words->size() * 8) {
      return hvd::internal_error("the two ranks' bit vectors differ in length");
    }
    for (size_t i = 0; i < words->size(); ++i) {
      uint64_t w;
      std::memcpy(&w, peer.data() + i * 8, 8);
      (*words)[i] &= w;
    }
    and_words = words->size();
    return Status::OK();
  }
  Status gather(const std::vector<uint8_t>& mine,
                std::vector<std::vector<uint8_t>>* at_root) override {
    std::vector<std::vector<uint8_t>> all;
    HVD_RETURN_IF_ERROR(exchange(mine, &all));
    if (rank_ != 0) return Status::OK();
    // Every rank submitted the same tensors: the lists differ in their rank fields only.
    if (all[1].size() != mine.size()) lists_differ = true;
    at_root->assign(static_cast<size_t>(n_), {});
    for (int k = 2; k < n_; ++k) {
      (*at_root)[static_cast<size_t>(k)].assign(all[1].begin(), all[1].end());
    }
    received += all[1].size() * static_cast<size_t>(n_ - 1);
    (*at_root)[0] = std::move(all[0]);
    (*at_root)[1] = std::move(all[1]);
    return Status::OK();
  }
  Status broadcast(std::vector<uint8_t>* bytes) override {
    std::vector<std::vector<uint8_t>> all;
    HVD_RETURN_IF_ERROR(exchange(rank_ == 0 ? *bytes : std::vector<uint8_t>{}, &all));
    if (rank_ == 0) sent += bytes->size();
    *bytes = std::move(all[0]);
    return Status::OK();
  }

  size_t received = 0, sent = 0, and_words = 0;
  double hub_us = 0;  // CPU time inside the hub's exchanges
  bool lists_differ = false;

 private:
  Status exchange(std::vector<uint8_t> mine, std::vector<std::vector<uint8_t>>* all) {
    const double t0 = thread_cpu_us();
    Status s = hub_->exchange(rank_, std::move(mine), all);
    hub_us += thread_cpu_us() - t0;
    return s;
  }
  std::shared_ptr<LocalHub> hub_;
  int rank_, n_;
};

// What one rank saw in one step: the names it ran, in order.
using Trace = std::vector<std::string>;

// A tensor's request: a 256-float allreduce named like a model's parameter.
std::unique_ptr<TensorEntry> entry(const std::string& name, int rank, const std::string& group,
                                   int group_size) {
  auto e = std::make_unique<TensorEntry>();
  Request& q = e->request;
  q.rank = rank;
  q.op = hvd::core::OpType::kAllreduce;
  q.name = name;
  q.shape = {256};
  q.group = group;
  q.group_size = group_size;
  return e;
}

std::vector<std::string> step_names(const std::string& prefix, int k, bool grouped) {
  std::vector<std::string> names;
  for (int j = 0; j < k; ++j) {
    names.push_back(grouped ? hvd::core::member_name(prefix, static_cast<size_t>(j))
                            : prefix + ".layer" + std::to_string(j) + ".weight");
  }
  return names;
}

struct StepStats {
  double cpu_us = 0;
  int rounds = 0, full_rounds = 0;
};

// Submits every entry and runs rounds until each was answered; records what ran in `trace`.
StepStats run_step(Controller* c, ModelTransport* t,
                   const std::vector<std::unique_ptr<TensorEntry>>& es, Trace* trace) {
  StepStats st;
  trace->clear();
  RoundResult rr;
  const double t0 = thread_cpu_us() - t->hub_us;
  for (const auto& e : es) c->submit(e.get());
  size_t answered = 0;
  std::vector<RoundResult> results;
  while (answered < es.size() && st.rounds < 64) {
    rr = RoundResult{};
    const Status s = c->run_round(false, &rr);
    ++st.rounds;
    if (rr.full_round) ++st.full_rounds;
    if (!s.ok()) {
      check(false, "run_round failed: " + s.message());
      break;
    }
    answered += rr.cached.size();
    for (const auto& r : rr.responses) answered += r.names.size();
    results.push_back(std::move(rr));
  }
  st.cpu_us = thread_cpu_us() - t->hub_us - t0;
  for (const auto& r : results) {
    for (const TensorEntry* e : r.cached) trace->push_back(e->request.name);
    for (const auto& resp : r.responses) {
      if (resp.is_error()) trace->push_back("error: " + resp.error);
      for (const auto& nm : resp.names) trace->push_back(nm);
    }
  }
  return st;
}

// Both ranks ran the same tensors in the same order, each of `names` exactly once.
void check_traces(const Trace& r0, const Trace& r1, std::vector<std::string> names,
                  const std::string& where) {
  check(r0 == r1, where + ": rank 0 and rank 1 ran different lists");
  Trace sorted = r0;
  std::sort(sorted.begin(), sorted.end());
  std::sort(names.begin(), names.end());
  check(sorted == names, where + ": the tensors run are not the tensors submitted");
}

struct Scenario {
  int n = 2;
  int k = 1;
  bool grouped = false;
  bool fresh_names = false;  // every step new names (a round of K new names) or the same ones
  int steps = 1;             // measured steps
  int warmup_limit = 0;      // cached: warm-up steps at most, until a step needs no full round
};

struct RankResult {
  std::vector<double> cpu_us;  // per measured step
  double full_per_step = 0;
  int warmup_steps = 0;
  int64_t capacity = 0;
  int64_t held_bytes = 0;  // heap this rank's controller holds after the steps (entries apart)
  int64_t peak_bytes = 0;  // rank 0, fresh names: heap peak above the step's start
  size_t received = 0, sent = 0, and_words = 0;
  bool lists_differ = false;
  std::vector<Trace> traces;  // per measured step
};

void run_rank(const Scenario& sc, const std::shared_ptr<LocalHub>& hub, int rank, RankResult* out) {
  t_owner = rank;
  const std::string tag = "n" + std::to_string(sc.n) + "k" + std::to_string(sc.k);
  const int64_t before = live_bytes(rank);
  ModelTransport t(hub, rank, sc.n);
  auto controller = std::make_unique<Controller>(&t, hvd::core::Config{}.cache_capacity);
  std::vector<std::unique_ptr<TensorEntry>> es;
  int64_t entries_bytes = 0;
  auto make = [&](const std::string& prefix) {
    const int64_t at = live_bytes(rank);
    es.clear();
    const std::string group = sc.grouped ? prefix : "";
    for (const auto& nm : step_names(prefix, sc.k, sc.grouped)) {
      es.push_back(entry(nm, rank, group, sc.grouped ? sc.k : 0));
    }
    entries_bytes = live_bytes(rank) - at;
  };
  Trace trace;
  if (!sc.fresh_names) {
    make(tag + ".model");
    int full = 1;
    for (; out->warmup_steps < sc.warmup_limit && full > 0; ++out->warmup_steps) {
      full = run_step(controller.get(), &t, es, &trace).full_rounds;
      for (auto& e : es) e->request_unchanged = true;  // the runtime's unchanged refill
    }
  }
  int full = 0;
  for (int s = 0; s < sc.steps; ++s) {
    if (sc.fresh_names) make(tag + ".step" + std::to_string(s));
    if (rank == 0) t.received = t.sent = 0;
    reset_peak(rank);
    const int64_t start = live_bytes(rank);
    StepStats st = run_step(controller.get(), &t, es, &trace);
    out->peak_bytes = std::max(out->peak_bytes, peak_bytes(rank) - start);
    out->cpu_us.push_back(st.cpu_us);
    full += st.full_rounds;
    t_owner = 2;  // the bench's record, not the rank's memory
    out->traces.push_back(trace);
    t_owner = rank;
  }
  Trace().swap(trace);
  out->full_per_step = static_cast<double>(full) / sc.steps;
  out->capacity = controller->cache().capacity();
  out->held_bytes = live_bytes(rank) - before - entries_bytes;
  out->received = t.received;
  out->sent = t.sent;
  out->and_words = t.and_words;
  out->lists_differ = t.lists_differ;
  controller.reset();
  es.clear();
}

struct Outcome {
  RankResult r0, r1;
};

Outcome run(const Scenario& sc) {
  auto hub = std::make_shared<LocalHub>(2);
  Outcome o;
  std::thread t1([&] { run_rank(sc, hub, 1, &o.r1); });
  run_rank(sc, hub, 0, &o.r0);
  t1.join();
  t_owner = 2;
  const std::string where = "N=" + std::to_string(sc.n) + " K=" + std::to_string(sc.k) +
                            (sc.grouped ? " grouped" : "") + (sc.fresh_names ? " new" : " cached");
  check(!o.r0.lists_differ, where + ": rank 0's and rank 1's request lists differ");
  check(o.r0.traces.size() == o.r1.traces.size(), where + ": step counts differ");
  for (size_t s = 0; s < o.r0.traces.size() && s < o.r1.traces.size(); ++s) {
    const std::string tag = "n" + std::to_string(sc.n) + "k" + std::to_string(sc.k);
    const std::string prefix = sc.fresh_names ? tag + ".step" + std::to_string(s) : tag + ".model";
    check_traces(o.r0.traces[s], o.r1.traces[s], step_names(prefix, sc.k, sc.grouped),
                 where + " step " + std::to_string(s));
    // A round of new names runs them in the order every rank submitted them.
    if (sc.fresh_names && !sc.grouped) {
      check(o.r0.traces[s] == step_names(prefix, sc.k, false), where + ": order changed");
    }
  }
  return o;
}

int log2_ceil(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return l;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  std::string str(s);
  size_t at = 0;
  while (at <= str.size()) {
    const size_t comma = std::min(str.find(',', at), str.size());
    out.push_back(std::atoi(str.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::vector<int> ranks = {2, 8, 32, 128, 512, 1024};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--smoke")) {
      smoke = true;
    } else if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) {
      ranks = parse_list(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: hvd_control_plane_bench [--smoke] [--ranks N,N,...]\n");
      return 2;
    }
  }
  if (smoke) ranks = {2, 8};
  const std::vector<int> ks = smoke ? std::vector<int>{1, 64} : std::vector<int>{1, 64, 1024};

  std::printf(
      "hvd_control_plane_bench: real controllers of rank 0 and rank 1, ranks 2..N-1 "
      "modelled (their serialized lists); CPU = thread CPU time, median\n\n");
  std::printf("(1) a round of K new names\n");
  std::printf("%6s %6s %12s %14s %12s %12s %12s %12s\n", "N", "K", "r0 cpu us", "r0 ns/name/rk",
              "r1 cpu us", "r0 recv B", "r0 send B", "r0 peak KB");
  for (int n : ranks) {
    for (int k : ks) {
      Scenario sc;
      sc.n = n;
      sc.k = k;
      sc.fresh_names = true;
      const double work = static_cast<double>(n) * k;
      sc.steps = smoke ? 3 : static_cast<int>(std::clamp(4e5 / work, 3.0, 200.0));
      const Outcome o = run(sc);
      const double c0 = median(o.r0.cpu_us);
      std::printf("%6d %6d %12.1f %14.1f %12.1f %12zu %12zu %12.0f\n", n, k, c0, c0 * 1e3 / work,
                  median(o.r1.cpu_us), o.r0.received, o.r0.sent,
                  static_cast<double>(o.r0.peak_bytes) / 1024);
      std::fflush(stdout);
    }
  }

  std::printf("\n(2) a cached step of K tensors (after warm-up)\n");
  std::printf("%6s %6s %12s %12s %10s %14s %12s %12s %8s\n", "N", "K", "r0 cpu us", "r1 cpu us",
              "AND words", "AND B x steps", "r0 held KB", "r1 held KB", "full");
  for (int n : ranks) {
    for (int k : ks) {
      Scenario sc;
      sc.n = n;
      sc.k = k;
      sc.steps = smoke ? 5 : 200;
      sc.warmup_limit = 12;
      const Outcome o = run(sc);
      std::printf("%6d %6d %12.2f %12.2f %10zu %8zu x %3d %12.0f %12.0f %8.2f\n", n, k,
                  median(o.r0.cpu_us), median(o.r1.cpu_us), o.r0.and_words, o.r0.and_words * 8,
                  log2_ceil(n), static_cast<double>(o.r0.held_bytes) / 1024,
                  static_cast<double>(o.r1.held_bytes) / 1024, o.r0.full_per_step);
      check(o.r0.full_per_step == 0, "a cached step went through rank 0");
      std::fflush(stdout);
    }
  }

  std::printf("\n(3) the cache cliff: a cached step of K tensors, default capacity %lld\n",
              static_cast<long long>(hvd::core::Config{}.cache_capacity));
  std::printf("%6s %6s %8s %8s %10s %14s %14s %10s\n", "N", "K", "grouped", "warm-up", "capacity",
              "r0 ns/tensor", "r1 ns/tensor", "full/step");
  const std::vector<int> cliff_ranks = smoke ? std::vector<int>{8} : std::vector<int>{8, 128};
  const std::vector<int> cliff_ks =
      smoke ? std::vector<int>{256, 2000} : std::vector<int>{256, 1000, 2000, 4000};
  for (int n : cliff_ranks) {
    for (bool grouped : {false, true}) {
      for (int k : cliff_ks) {
        Scenario sc;
        sc.n = n;
        sc.k = k;
        sc.grouped = grouped;
        sc.steps = smoke ? 3 : 40;
        sc.warmup_limit = 12;
        const Outcome o = run(sc);
        std::printf("%6d %6d %8s %8d %10lld %14.1f %14.1f %10.2f\n", n, k, grouped ? "yes" : "no",
                    o.r0.warmup_steps, static_cast<long long>(o.r0.capacity),
                    median(o.r0.cpu_us) * 1e3 / k, median(o.r1.cpu_us) * 1e3 / k,
                    o.r0.full_per_step);
        check(o.r0.full_per_step == 0, "the cache did not take every tensor of the step");
        std::fflush(stdout);
      }
    }
  }
  if (g_failed) {
    std::printf("\nFAILED (see stderr)\n");
    return 1;
  }
  std::printf("\nall rounds checked: both ranks ran every submitted tensor once, in one order\n");
  return 0;
}
