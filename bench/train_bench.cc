// SPDX-License-Identifier: Apache-2.0
// hvd_train_bench: training throughput (samples/s) with hvd::DistributedOptimizer vs the same
// training with no communication (the plain optimizer), for three models on synthetic
// 1x28x28 inputs: the mnist_mlp-sized MLP, a small CNN (~0.62M parameters) and a ~10M-parameter
// MLP. Per-rank batch is fixed (weak scaling); every rank reuses one synthetic batch, so data
// loading is not measured. Windows of hvd and no-comm steps alternate (so load changes hit both
// alike); each rank takes the median of its windows and the table sums the ranks. A fourth
// model, resnet18 (torchvision's ResNet-18, 3x64x64 inputs, batch 16, as python_bench's), runs
// only when named (--model resnet18). Also printed: the CPU time per step of a rank's process
// (every thread), the slowest rank's, and no-comm's / hvd's: what communicating costs the cores.
//
//   mpirun -np 1 build/bench/hvd_train_bench --baseline-file /tmp/b.txt --write-baseline
//   mpirun -np 2 --bind-to none build/bench/hvd_train_bench --baseline-file /tmp/b.txt
//
// Scaling efficiency (np > 1 with a baseline file) = hvd samples/s at this np / (np x the np=1
// no-communication samples/s with the same threads per rank and batch). At np > 1 the run also
// times rank 0 training alone (the others blocked in a sleeping barrier) between the windows,
// an np=1 figure taken under the same machine load, and prints the efficiency against it too.
//
// --bucket-view adds a third model trained by a DistributedOptimizer with
// gradient_as_bucket_view, its windows interleaved with the other two.
//
// --reduction K S (no models): K float32 parameters of S bytes, each step a backward whose only
// work is their K gradients, then step(); windows alternate the optimizer without and with
// gradient_as_bucket_view, the same steps without communication, and one raw in-place
// MPI_Allreduce (Sum) of the K x S bytes. "Reduction" = hvd's step time minus the no-comm one;
// also printed: step() alone after its backward, minus no-comm's step() (what of the reduction
// the backward did not hide: with bucket views the bucket submitted by the last gradient's hook),
// against a fifth mode, the same backward then one raw call and no-comm's step() (the ideal,
// with the ranks' skew after backward in it too); the same ratio again from per-step medians
// (each rank's median step(), the slowest rank's), which a preempted step does not move; and
// hvd's floor: a sixth mode, the same backward then one hvd::allreduce_ of the same bytes and
// no-comm's step() (no optimizer: what the runtime's one collective costs against the raw call).
// Last, "after last": each step's reduction timed from the last rank's end of backward to the
// end of synchronize() (step() runs as synchronize() then step() inside skip_synchronize()) or
// of the raw call, per-step medians: the ranks' skew after backward taken out (one host: the
// ranks share steady_clock).
//
//   mpirun -np 2 --bind-to none build/bench/hvd_train_bench --reduction 1024 1024
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/torch.h"

namespace {

namespace nn = torch::nn;

struct Spec {
  std::string name;
  std::function<nn::Sequential()> make;
  std::vector<int64_t> input = {1, 28, 28};  // one sample's shape
  int64_t batch = 0;                         // 0: --batch
  bool opt_in = false;                       // runs only when named by --model
};

/// ResNet's basic block (two 3x3 convolutions with batch norm, the input added back through a
/// 1x1 projection where the shape changes), for the ResNet-18 below.
struct BasicBlockImpl : nn::Module {
  nn::Conv2d c1{nullptr}, c2{nullptr}, proj{nullptr};
  nn::BatchNorm2d b1{nullptr}, b2{nullptr}, bp{nullptr};
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    c1 = register_module(
        "c1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    b1 = register_module("b1", nn::BatchNorm2d(out));
    c2 = register_module("c2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    b2 = register_module("b2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      proj = register_module("proj",
                             nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      bp = register_module("bp", nn::BatchNorm2d(out));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = b2(c2(torch::relu(b1(c1(x)))));
    return torch::relu(y + (proj ? bp(proj(x)) : x));
  }
};
TORCH_MODULE(BasicBlock);

/// ResNet-18 as torchvision builds it (11.2M parameters with 10 classes), as python_bench's
/// resnet18 model: 3x64x64 inputs, batch 16.
nn::Sequential resnet18() {
  nn::Sequential m(nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)),
                   nn::BatchNorm2d(64), nn::ReLU(),
                   nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  int64_t in = 64;
  for (int64_t out : {64, 128, 256, 512}) {
    m->push_back(BasicBlock(in, out, out == 64 ? 1 : 2));
    m->push_back(BasicBlock(out, out, 1));
    in = out;
  }
  m->push_back(nn::AdaptiveAvgPool2d(1));
  m->push_back(nn::Flatten());
  m->push_back(nn::Linear(512, 10));
  return m;
}

std::vector<Spec> specs() {
  return {
      {"mnist_mlp",
       [] {
         return nn::Sequential(nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 64),
                               nn::ReLU(), nn::Linear(64, 10));
       }},
      {"cnn",
       [] {
         auto conv = [](int64_t i, int64_t o) {
           return nn::Conv2d(nn::Conv2dOptions(i, o, 5).padding(2));
         };
         return nn::Sequential(conv(1, 16), nn::ReLU(), nn::MaxPool2d(2), conv(16, 32), nn::ReLU(),
                               nn::MaxPool2d(2), nn::Flatten(), nn::Linear(32 * 7 * 7, 384),
                               nn::ReLU(), nn::Linear(384, 10));
       }},
      {"mlp_10m",
       [] {
         return nn::Sequential(nn::Flatten(), nn::Linear(784, 2048), nn::ReLU(),
                               nn::Linear(2048, 2048), nn::ReLU(), nn::Linear(2048, 2048),
                               nn::ReLU(), nn::Linear(2048, 10));
       }},
      {"resnet18", resnet18, {3, 64, 64}, 16, true},
  };
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using hvd_bench::median;

double sum_over_ranks(double v, const std::string& name) {
  return hvd::allreduce(torch::tensor(v, torch::kDouble), name, hvd::ReduceOp::kSum).item<double>();
}

double cpu_s() {  // the process's CPU time, every thread (hvd's background thread, MPI's)
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Per-step times of one window: forward+backward, and step (for hvd: the wait for the
/// allreduces still in flight after backward, then the SGD update); the process's CPU per step.
struct Window {
  double total = 0, compute = 0, step = 0, cpu = 0;
};

Window run_steps(nn::Sequential& model, const std::function<void()>& zero_grad,
                 const std::function<void()>& step, const torch::Tensor& x, const torch::Tensor& y,
                 int64_t steps) {
  Window w;
  const double t0 = now_s(), c0 = cpu_s();
  for (int64_t i = 0; i < steps; ++i) {
    const double a = now_s();
    zero_grad();
    torch::cross_entropy_loss(model->forward(x), y).backward();
    const double b = now_s();
    step();
    w.compute += b - a;
    w.step += now_s() - b;
  }
  w.total = now_s() - t0;
  w.cpu = (cpu_s() - c0) / static_cast<double>(steps);
  w.compute /= static_cast<double>(steps);
  w.step /= static_cast<double>(steps);
  return w;
}

struct Result {
  std::string model;
  int64_t params = 0;
  double hvd = 0, plain = 0;                  // samples/s, summed over ranks
  double view = 0;                            // --bucket-view: samples/s, summed over ranks
  double compute_view = 0, step_view = 0;     // ms per step (median, rank 0)
  double solo = 0;                            // np > 1: rank 0 alone (no comm), samples/s
  double compute_hvd = 0, compute_plain = 0;  // ms per step (median, rank 0)
  double step_hvd = 0, step_plain = 0;
  double cpu_hvd = 0, cpu_plain = 0, cpu_view = 0;  // CPU ms per step, slowest rank's median
  int64_t batch = 0;
};

struct Args {
  int threads = 1;
  int64_t batch = 64;
  int windows = 5;
  double window_s = 1.0;
  int warmup = 5;
  std::string baseline_file, only;
  bool write_baseline = false;
  bool bucket_view = false;
  int64_t reduction_k = 0, reduction_bytes = 0;
};

Result bench_model(const Spec& spec, const Args& a) {
  torch::manual_seed(1);
  nn::Sequential m_hvd = spec.make();
  nn::Sequential m_plain = spec.make();
  {
    torch::NoGradGuard ng;
    auto src = m_hvd->parameters(), dst = m_plain->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  int64_t params = 0;
  for (const auto& p : m_hvd->parameters()) params += p.numel();
  torch::optim::SGD sgd_hvd(m_hvd->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::optim::SGD sgd_plain(m_plain->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  hvd::DistributedOptimizer opt(sgd_hvd, hvd::prefixed(spec.name + ".", m_hvd->named_parameters()));
  nn::Sequential m_view = spec.make();
  {
    torch::NoGradGuard ng;
    auto src = m_hvd->parameters(), dst = m_view->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  torch::optim::SGD sgd_view(m_view->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  std::unique_ptr<hvd::DistributedOptimizer> view;
  if (a.bucket_view) {
    view = std::make_unique<hvd::DistributedOptimizer>(
        sgd_view, hvd::prefixed(spec.name + ".view.", m_view->named_parameters()),
        hvd::DistributedOptimizerOptions().gradient_as_bucket_view(true));
  }

  torch::manual_seed(100 + hvd::rank());
  const int64_t batch = spec.batch > 0 ? spec.batch : a.batch;
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), spec.input.begin(), spec.input.end());
  torch::Tensor x = torch::randn(shape);
  torch::Tensor y = torch::randint(0, 10, {batch}, torch::kLong);
  auto hvd_zero = [&] { opt.zero_grad(); };
  auto hvd_step = [&] { opt.step(); };
  auto plain_zero = [&] { sgd_plain.zero_grad(); };
  auto plain_step = [&] { sgd_plain.step(); };
  auto view_zero = [&] { view->zero_grad(); };
  auto view_step = [&] { view->step(); };

  // Warm up both, and size a window from the slower (hvd) step time, decided on rank 0.
  run_steps(m_plain, plain_zero, plain_step, x, y, a.warmup);
  if (view) run_steps(m_view, view_zero, view_step, x, y, a.warmup);
  Window cal = run_steps(m_hvd, hvd_zero, hvd_step, x, y, a.warmup);
  int64_t steps =
      std::max<int64_t>(3, static_cast<int64_t>(a.window_s / std::max(1e-6, cal.total / a.warmup)));
  steps = hvd::broadcast_object<int64_t>(steps, 0, spec.name + ".steps");

  std::vector<double> r_hvd, r_plain, r_solo, c_hvd, c_plain, s_hvd, s_plain, r_view, c_view,
      s_view, u_hvd, u_plain, u_view;
  // CPU per step of the slowest rank: the maximum over ranks, one allreduce of three values.
  auto slowest = [&spec](double h, double p, double v) {
    torch::Tensor t = hvd::allreduce(torch::tensor({h, p, v}, torch::kDouble),
                                     spec.name + ".cpu.max", hvd::ReduceOp::kMax);
    return std::vector<double>{t[0].item<double>(), t[1].item<double>(), t[2].item<double>()};
  };
  for (int w = 0; w < a.windows; ++w) {
    // The three alternate, in reverse order every other window (none always first).
    Window h, p, v;
    auto run_hvd = [&] { h = run_steps(m_hvd, hvd_zero, hvd_step, x, y, steps); };
    auto run_plain = [&] { p = run_steps(m_plain, plain_zero, plain_step, x, y, steps); };
    auto run_view = [&] {
      if (view) v = run_steps(m_view, view_zero, view_step, x, y, steps);
    };
    std::vector<std::function<void()>> order{run_hvd, run_plain, run_view};
    if (w % 2) std::reverse(order.begin(), order.end());
    for (auto& run : order) {
      hvd::barrier();  // ranks run the no-comm window concurrently too, as in real training
      run();
    }
    const double samples = static_cast<double>(batch * steps);
    r_hvd.push_back(samples / h.total);
    r_plain.push_back(samples / p.total);
    c_hvd.push_back(h.compute * 1e3);
    c_plain.push_back(p.compute * 1e3);
    s_hvd.push_back(h.step * 1e3);
    s_plain.push_back(p.step * 1e3);
    std::vector<double> cpu = slowest(h.cpu * 1e3, p.cpu * 1e3, v.cpu * 1e3);
    u_hvd.push_back(cpu[0]);
    u_plain.push_back(cpu[1]);
    if (view) {
      r_view.push_back(samples / v.total);
      c_view.push_back(v.compute * 1e3);
      s_view.push_back(v.step * 1e3);
      u_view.push_back(cpu[2]);
    }
    if (hvd::size() > 1) {
      // In-run np=1 figure: rank 0 trains alone while the others wait in hvd::barrier(), whose
      // background thread sleeps (backoff to 1 ms) rather than spins.
      hvd::barrier();
      if (hvd::rank() == 0) {
        r_solo.push_back(samples / run_steps(m_plain, plain_zero, plain_step, x, y, steps).total);
      }
      hvd::barrier();
    }
  }
  Result r;
  r.model = spec.name;
  r.params = params;
  r.hvd = sum_over_ranks(median(r_hvd), spec.name + ".sum.hvd");
  r.plain = sum_over_ranks(median(r_plain), spec.name + ".sum.plain");
  r.solo = median(r_solo);
  r.compute_hvd = median(c_hvd);
  r.compute_plain = median(c_plain);
  r.step_hvd = median(s_hvd);
  r.step_plain = median(s_plain);
  r.cpu_hvd = median(u_hvd);
  r.cpu_plain = median(u_plain);
  r.batch = batch;
  if (view) {
    r.view = sum_over_ranks(median(r_view), spec.name + ".sum.view");
    r.compute_view = median(c_view);
    r.step_view = median(s_view);
    r.cpu_view = median(u_view);
  }
  return r;
}

std::string key(const std::string& model, int threads, int64_t batch) {
  return model + " " + std::to_string(threads) + " " + std::to_string(batch);
}

/// Baseline file lines: "<model> <threads> <batch> <no-comm samples/s> <hvd samples/s>".
std::map<std::string, double> read_baseline(const std::string& path) {
  std::map<std::string, double> out;
  std::ifstream in(path);
  std::string model;
  int threads = 0;
  int64_t batch = 0;
  double plain = 0, with_hvd = 0;
  while (in >> model >> threads >> batch >> plain >> with_hvd) {
    out[key(model, threads, batch)] = plain;
  }
  return out;
}

/// --reduction: medians over the windows of ms per step (rank 0's; the raw MPI call per step).
void bench_reduction(const Args& a) {
  const int64_t k = a.reduction_k, n = a.reduction_bytes / 4;
  auto make = [&] {
    std::vector<torch::Tensor> ps;
    for (int64_t i = 0; i < k; ++i) ps.push_back(torch::zeros({n}, torch::requires_grad()));
    return ps;
  };
  std::vector<torch::Tensor> p_off = make(), p_on = make(), p_plain = make();
  const torch::Tensor c = torch::full({k * n}, 1.0f / static_cast<float>(k * n));
  torch::optim::SGD s_off(p_off, 1e-3), s_on(p_on, 1e-3), s_plain(p_plain, 1e-3);
  hvd::DistributedOptimizer off(s_off, hvd::NamedParameters{},
                                hvd::DistributedOptimizerOptions().label("off"));
  hvd::DistributedOptimizer on(
      s_on, hvd::NamedParameters{},
      hvd::DistributedOptimizerOptions().label("on").gradient_as_bucket_view(true));
  // The backward: one cat, one dot, the K gradient accumulators (every training has those).
  auto pass = [&c](std::vector<torch::Tensor>& ps) { torch::cat(ps).dot(c).backward(); };
  std::vector<float> flat(static_cast<size_t>(k * n), 1.0f);
  const torch::Tensor hvd_flat = torch::ones({k * n});
  using Fn = std::function<void()>;
  const Fn raw = [&] {
    MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(flat.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  };
  const Fn plain_backward = [&] {
    s_plain.zero_grad();
    pass(p_plain);
  };
  // Each mode: its backward (zero_grad and the pass; none for the raw call alone) and its
  // step(). The fifth is the ideal after the same backward: one raw call, then no-comm's step()
  // (the ranks' skew after backward hits it as it hits hvd); the sixth the same with one
  // hvd::allreduce_ of the same bytes instead of the raw call: hvd's per-collective floor
  // (negotiation, the background thread, its wake-ups), what no optimizer on hvd gets below.
  constexpr int kModes = 6;
  const Fn backwards[kModes] = {[&] {
                                  off.zero_grad();
                                  pass(p_off);
                                },
                                [&] {
                                  on.zero_grad();
                                  pass(p_on);
                                },
                                plain_backward,
                                [] {},
                                plain_backward,
                                plain_backward};
  // `reduced`: when the step's reduction completed, before its update (step() as
  // synchronize() then step() inside skip_synchronize(), which is what step() does).
  double reduced = 0;
  const auto reduce_then_step = [&reduced](hvd::DistributedOptimizer& o) {
    o.synchronize();
    reduced = now_s();
    hvd::optim::SkipSynchronizeGuard skip(o);
    o.step();
  };
  const Fn steps[kModes] = {[&] { reduce_then_step(off); },
                            [&] { reduce_then_step(on); },
                            [&] { s_plain.step(); },
                            raw,
                            [&] {
                              raw();
                              reduced = now_s();
                              s_plain.step();
                            },
                            [&] {
                              hvd::allreduce_(hvd_flat, "reduction.floor", hvd::ReduceOp::kSum);
                              reduced = now_s();
                              s_plain.step();
                            }};
  const int64_t iters = std::max<int64_t>(20, static_cast<int64_t>(a.window_s * 200));
  // t: whole steps; r: step() alone, after its backward (what of the reduction backward did not
  // hide: the bucket or the last tensors still in flight, their completion, the update).
  std::vector<double> t[kModes], r[kModes], each[kModes];  // each: every step's step()
  // Every step's end of backward and its reduction's end (steady_clock: one clock for every
  // process of a host), for the reduction after the last rank's backward (skew out, below).
  std::vector<double> ends[kModes];
  for (int w = 0; w < a.warmup + a.windows; ++w) {
    for (int m = 0; m < kModes; ++m) {
      hvd::barrier();
      double in_step = 0;
      const double t0 = now_s();
      for (int64_t i = 0; i < iters; ++i) {
        backwards[m]();
        const double s0 = now_s();
        steps[m]();
        const double d = now_s() - s0;
        in_step += d;
        if (w >= a.warmup) {
          each[m].push_back(d * 1e3);
          ends[m].push_back(s0);
          ends[m].push_back(reduced);
        }
      }
      double dt[2] = {(now_s() - t0) / static_cast<double>(iters) * 1e3,
                      in_step / static_cast<double>(iters) * 1e3};
      MPI_Allreduce(MPI_IN_PLACE, dt, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (w < a.warmup) continue;
      t[m].push_back(dt[0]);
      r[m].push_back(dt[1]);
    }
  }
  // Per-step medians of step() (each rank's, then the slowest rank's): a preempted step on this
  // shared VM moves a window's mean, not these.
  double med[kModes];
  for (int m = 0; m < kModes; ++m) med[m] = median(each[m]);
  MPI_Allreduce(MPI_IN_PLACE, med, kModes, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // After the last rank's backward: each step's latest end of the reduction over the ranks
  // minus its latest end of backward, median over the steps. Ranks that finish backward early
  // wait for the last one whatever runs next (a raw call too): that skew is not the reduction's
  // cost, and this takes it out. One host only (the clock is the host's).
  double after_last[kModes] = {};
  for (int m : {0, 1, 4, 5}) {
    MPI_Allreduce(MPI_IN_PLACE, ends[m].data(), static_cast<int>(ends[m].size()), MPI_DOUBLE,
                  MPI_MAX, MPI_COMM_WORLD);
    std::vector<double> lat;
    for (size_t i = 0; i + 1 < ends[m].size(); i += 2)
      lat.push_back((ends[m][i + 1] - ends[m][i]) * 1e3);
    after_last[m] = median(lat);
  }
  if (hvd::rank() != 0) return;
  const double off_ms = median(t[0]), on_ms = median(t[1]), plain_ms = median(t[2]),
               raw_ms = median(t[3]);
  const double r_off = median(r[0]), r_on = median(r[1]), r_plain = median(r[2]),
               r_raw = median(r[4]) - r_plain;
  std::printf(
      "\n%lld x %lld B, np %d, %d windows x %lld steps (ms per step, slowest rank, medians)\n"
      "| hvd | hvd bucket views | no-comm | raw MPI_Allreduce | reduction / raw | "
      "reduction with views / raw |\n|---:|---:|---:|---:|---:|---:|\n"
      "| %.3f | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n"
      "step() after backward, ms (what backward did not hide): hvd %.3f, bucket views %.3f, "
      "no-comm %.3f, raw MPI_Allreduce + no-comm %.3f; (step() - no-comm's) / (raw + no-comm's - "
      "no-comm's): hvd %.2fx, bucket views %.2fx\n",
      static_cast<long long>(k), static_cast<long long>(a.reduction_bytes), hvd::size(), a.windows,
      static_cast<long long>(iters), off_ms, on_ms, plain_ms, raw_ms, (off_ms - plain_ms) / raw_ms,
      (on_ms - plain_ms) / raw_ms, r_off, r_on, r_plain, r_raw + r_plain, (r_off - r_plain) / r_raw,
      (r_on - r_plain) / r_raw);
  const double med_raw = med[4] - med[2];
  std::printf(
      "step() after backward, per-step medians, ms: hvd %.3f, bucket views %.3f, no-comm %.3f, "
      "raw MPI_Allreduce + no-comm %.3f; (step() - no-comm's) / (raw + no-comm's - no-comm's): "
      "hvd %.2fx, bucket views %.2fx (per-step)\n",
      med[0], med[1], med[2], med[4], (med[0] - med[2]) / med_raw, (med[1] - med[2]) / med_raw);
  std::printf(
      "hvd's floor: one hvd::allreduce_ of the same bytes after the same backward, then "
      "no-comm's step(): %.3f ms (windows) / %.3f ms (per-step); (- no-comm's) / the raw "
      "call's: %.2fx (windows), %.2fx (per-step)\n",
      median(r[5]), med[5], (median(r[5]) - r_plain) / r_raw, (med[5] - med[2]) / med_raw);
  std::printf(
      "the reduction after the last rank's backward (skew out; to the end of synchronize() or "
      "of the raw call), per-step medians, ms: hvd %.3f, bucket views %.3f, raw MPI_Allreduce "
      "%.3f, hvd's floor %.3f; / the raw call's: hvd %.2fx, bucket views %.2fx, floor %.2fx "
      "(after last)\n",
      after_last[0], after_last[1], after_last[4], after_last[5], after_last[0] / after_last[4],
      after_last[1] / after_last[4], after_last[5] / after_last[4]);
  std::fflush(stdout);
}

int usage() {
  std::fprintf(
      stderr,
      "usage: hvd_train_bench [--threads N] [--batch B] [--windows W] [--window-s S]\n"
      "         [--warmup K] [--model mnist_mlp|cnn|mlp_10m|resnet18] [--baseline-file F]\n"
      "         [--write-baseline] [--bucket-view] [--reduction K S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const bool more = i + 1 < argc;
    if (s == "--threads" && more)
      a.threads = std::atoi(argv[++i]);
    else if (s == "--batch" && more)
      a.batch = std::atoll(argv[++i]);
    else if (s == "--windows" && more)
      a.windows = std::atoi(argv[++i]);
    else if (s == "--window-s" && more)
      a.window_s = std::atof(argv[++i]);
    else if (s == "--warmup" && more)
      a.warmup = std::atoi(argv[++i]);
    else if (s == "--model" && more)
      a.only = argv[++i];
    else if (s == "--baseline-file" && more)
      a.baseline_file = argv[++i];
    else if (s == "--write-baseline")
      a.write_baseline = true;
    else if (s == "--bucket-view")
      a.bucket_view = true;
    else if (s == "--reduction" && i + 2 < argc) {
      a.reduction_k = std::atoll(argv[++i]);
      a.reduction_bytes = std::atoll(argv[++i]);
    } else
      return usage();
  }
  if (a.threads < 1 || a.batch < 1 || a.windows < 1 || a.warmup < 1) return usage();
  if (a.reduction_k < 0 || a.reduction_bytes < 0) return usage();
  torch::set_num_threads(a.threads);
  int provided = 0;  // MPI first, with threads: the reduction mode calls MPI beside hvd's thread
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  hvd::init();
  if (a.reduction_k > 0) {
    bench_reduction(a);
    hvd::shutdown();
    MPI_Finalize();
    return 0;
  }
  const int np = hvd::size();
  const bool root = hvd::rank() == 0;

  std::vector<Result> results;
  for (const Spec& spec : specs()) {
    if (a.only.empty() ? spec.opt_in : spec.name != a.only) continue;
    results.push_back(bench_model(spec, a));
  }

  if (root) {
    std::map<std::string, double> base;
    if (!a.baseline_file.empty() && !a.write_baseline) base = read_baseline(a.baseline_file);
    std::printf(
        "\n| model | params | np | threads/rank | batch/rank | samples/s hvd | "
        "samples/s no-comm | hvd / no-comm | scaling eff. vs np=1 run | np=1 in-run | "
        "scaling eff. vs in-run |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Result& r : results) {
      std::string eff = "-";
      auto it = base.find(key(r.model, a.threads, r.batch));
      if (np > 1 && it != base.end() && it->second > 0) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.2f", r.hvd / (np * it->second));
        eff = buf;
      }
      std::string solo = "-", eff_solo = "-";
      if (np > 1 && r.solo > 0) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.0f", r.solo);
        solo = buf;
        std::snprintf(buf, sizeof(buf), "%.2f", r.hvd / (np * r.solo));
        eff_solo = buf;
      }
      std::printf("| %s | %.2fM | %d | %d | %lld | %.0f | %.0f | %.2f | %s | %s | %s |\n",
                  r.model.c_str(), static_cast<double>(r.params) / 1e6, np, a.threads,
                  static_cast<long long>(r.batch), r.hvd, r.plain, r.hvd / r.plain, eff.c_str(),
                  solo.c_str(), eff_solo.c_str());
    }
    std::printf(
        "\nper step on rank 0 (ms, medians): forward+backward and step (hvd step = wait "
        "for in-flight allreduces + SGD)\n"
        "| model | np | fwd+bwd hvd | fwd+bwd no-comm | step hvd | step no-comm |\n"
        "|---|---:|---:|---:|---:|---:|\n");
    for (const Result& r : results) {
      std::printf("| %s | %d | %.2f | %.2f | %.2f | %.2f |\n", r.model.c_str(), np, r.compute_hvd,
                  r.compute_plain, r.step_hvd, r.step_plain);
    }
    std::printf(
        "\nCPU ms per step of a rank's process, every thread (slowest rank, median of the "
        "windows)\n| model | np | hvd | hvd bucket views | no-comm | no-comm / hvd | "
        "no-comm / bucket views |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (const Result& r : results) {
      std::string v = "-", rv = "-";
      if (a.bucket_view) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.2f", r.cpu_view);
        v = buf;
        std::snprintf(buf, sizeof(buf), "%.3f", r.cpu_plain / r.cpu_view);
        rv = buf;
      }
      std::printf("| %s | %d | %.2f | %s | %.2f | %.3f | %s |\n", r.model.c_str(), np, r.cpu_hvd,
                  v.c_str(), r.cpu_plain, r.cpu_plain / r.cpu_hvd, rv.c_str());
    }
    if (a.bucket_view) {
      std::printf(
          "\ngradient_as_bucket_view (interleaved windows)\n"
          "| model | np | samples/s hvd | samples/s hvd bucket views | no-comm | views / no-comm | "
          "step hvd ms | step views ms |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
      for (const Result& r : results) {
        std::printf("| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |\n", r.model.c_str(), np,
                    r.hvd, r.view, r.plain, r.view / r.plain, r.step_hvd, r.step_view);
      }
    }
    std::fflush(stdout);
    if (a.write_baseline && !a.baseline_file.empty()) {
      std::ofstream out(a.baseline_file);
      for (const Result& r : results) {
        out << key(r.model, a.threads, r.batch) << " " << r.plain << " " << r.hvd << "\n";
      }
    }
  }
  hvd::shutdown();
  MPI_Finalize();
  return 0;
}
