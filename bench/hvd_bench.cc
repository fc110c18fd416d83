// SPDX-License-Identifier: Apache-2.0
// hvd_bench: hvd allreduce of K tensors of S floats vs one raw MPI_Allreduce of the same bytes
// and vs K raw MPI_Allreduce calls, plus the same K as one grouped allreduce; Sum, and Average
// in the ":avg" cases (raw MPI sums there too: the division is hvd's). Prints medians (max
// over ranks per iteration) and ratios. The case "crossed" measures how fast a background loop
// that backs off after fruitless rounds (ranks submitted different names) reacts to new work:
// rank r submits "crossed.r" alone, waits 5 ms (the rounds match nothing, the loops back off),
// then every rank submits the names of the others; printed: the median time from that last
// submission until every handle completed (slowest rank). "loop us" and "caller us": CPU time
// per collective of hvd's background thread and of the submitting thread over the hvd runs
// (mean over ranks; the loop's includes MPI's polling while it waits for a peer): CPU time is
// less noisy than wall time on a loaded machine.
//
// The case "adasum" (only when asked for) times op Adasum against Sum on the same tensors
// (1 x 1Mi and 64 x 16Ki floats, each tensor its own allreduce_async), interleaved: each
// iteration runs Sum then Adasum, so that a shared machine's load falls on both alike.
//
//   mpirun -np 2 --bind-to none build/bench/hvd_bench [--iters N]
//     [--case KxS[:avg]|crossed|adasum] [--hvd-only]
//   --hvd-only: hvd's runs alone (no grouped, no raw MPI), for profiling hvd's own path.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "hvd/hvd.h"

namespace {

using hvd_bench::median_ms;

struct Case {
  int k;
  int64_t s;
  const char* label;
  hvd::ReduceOp op;  // raw MPI sums either way: an Average's division is part of hvd's time
};

}  // namespace

int main(int argc, char** argv) {
  int iters = 30;
  std::string only;
  bool hvd_only = false;  // --hvd-only: skip grouped and raw MPI (profiling hvd's own path)
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--case") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--hvd-only"))
      hvd_only = true;
    else {
      std::fprintf(stderr,
                   "usage: hvd_bench [--iters N] [--case KxS|crossed|adasum] [--hvd-only]\n");
      return 2;
    }
  }
  int provided = 0;  // MPI first, so that the threads hvd::init() starts are told apart
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  hvd_bench::LoopThread loop;
  loop.before_init();
  hvd::init();
  loop.after_init();
  const int rank = hvd::rank();
  const Case cases[] = {{1, 1 << 20, "1x1Mi", hvd::ReduceOp::kSum},
                        {64, 16 << 10, "64x16Ki", hvd::ReduceOp::kSum},
                        {16, 1 << 20, "16x1Mi", hvd::ReduceOp::kSum},
                        {1024, 256, "1024x256", hvd::ReduceOp::kSum},
                        {1, 1 << 20, "1x1Mi:avg", hvd::ReduceOp::kAverage},
                        {1, 256 << 10, "1x256Ki", hvd::ReduceOp::kSum},
                        {1, 256 << 10, "1x256Ki:avg", hvd::ReduceOp::kAverage},
                        {16, 1 << 20, "16x1Mi:avg", hvd::ReduceOp::kAverage}};
  if (rank == 0 && only != "adasum") {
    std::printf(
        "hvd_bench: allreduce (Sum, float32; :avg cases Average, raw MPI's sum without the "
        "division), np=%d, %d iterations, median of slowest rank\n",
        hvd::size(), iters);
    std::printf("%-10s %10s %12s %12s %12s %8s %12s %9s %9s %9s %9s\n", "case", "MiB", "hvd ms",
                "raw1 ms", "rawK ms", "ratio", "grouped ms", "loop us", "caller us", "rounds/it",
                "resp/it");
  }
  if (only == "adasum") {
    if (rank == 0) {
      std::printf(
          "hvd_bench: allreduce Sum vs Adasum, float32, np=%d, %d iterations each, "
          "interleaved; median of the slowest rank\n",
          hvd::size(), iters);
      std::printf("%-10s %10s %12s %12s %8s\n", "case", "MiB", "Sum ms", "Adasum ms", "ratio");
    }
    for (const Case& c : {cases[0], cases[1]}) {
      // Each rank's own values (Adasum's result does not depend on them, its cost neither).
      auto tensors = [&] {
        return std::vector<std::vector<float>>(
            static_cast<size_t>(c.k),
            std::vector<float>(static_cast<size_t>(c.s), static_cast<float>(rank + 1)));
      };
      std::vector<std::vector<float>> sum_t = tensors(), ada_t = tensors();
      std::vector<hvd::Handle> hs(static_cast<size_t>(c.k));
      auto slowest_ms = [&](std::vector<std::vector<float>>& ts, hvd::ReduceOp op,
                            const std::string& prefix) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = hvd_bench::now_ms();
        for (int j = 0; j < c.k; ++j) {
          hs[static_cast<size_t>(j)] = hvd::allreduce_async(
              hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {c.s}),
              prefix + std::to_string(j), op);
        }
        for (auto& h : hs) h.wait();
        double dt = hvd_bench::now_ms() - t0, worst = 0;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return worst;
      };
      std::vector<double> t_sum, t_ada;
      for (int i = 0; i < iters + 3; ++i) {  // the first 3 warm up
        const double a = slowest_ms(sum_t, hvd::ReduceOp::kSum, std::string(c.label) + ".sum.");
        const double b =
            slowest_ms(ada_t, hvd::ReduceOp::kAdasum, std::string(c.label) + ".adasum.");
        if (i < 3) continue;
        t_sum.push_back(a);
        t_ada.push_back(b);
      }
      std::sort(t_sum.begin(), t_sum.end());
      std::sort(t_ada.begin(), t_ada.end());
      const double ms = t_sum[t_sum.size() / 2], ma = t_ada[t_ada.size() / 2];
      if (rank == 0) {
        std::printf("%-10s %10.2f %12.3f %12.3f %7.2fx\n", c.label,
                    static_cast<double>(c.k * c.s * 4) / (1 << 20), ms, ma, ma / ms);
        std::fflush(stdout);
      }
    }
  }
  for (const Case& c : cases) {
    if (!only.empty() && only != c.label) continue;
    std::vector<std::vector<float>> ts(static_cast<size_t>(c.k),
                                       std::vector<float>(static_cast<size_t>(c.s), 1.0f));
    std::vector<float> flat(static_cast<size_t>(c.k * c.s), 1.0f);
    std::vector<std::string> names;
    for (int j = 0; j < c.k; ++j) names.push_back(std::string(c.label) + "." + std::to_string(j));
    std::vector<hvd::Handle> hs(static_cast<size_t>(c.k));

    const std::vector<double> loop0 = loop.sample();
    const double caller0 = hvd_bench::self_cpu_ns();
    const hvd::RuntimeStats st0 = hvd::runtime_stats();
    double t_hvd = median_ms(iters, [&] {
      for (int j = 0; j < c.k; ++j) {
        hs[static_cast<size_t>(j)] = hvd::allreduce_async(
            hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {c.s}),
            names[static_cast<size_t>(j)], c.op);
      }
      for (auto& h : hs) h.wait();
    });
    // Per collective (iters + 3 warm-up runs of k), averaged over ranks.
    const double colls = static_cast<double>(iters + 3) * c.k;
    double cpu[2] = {hvd_bench::LoopThread::busiest_delta(loop0, loop.sample()) / colls / 1e3,
                     (hvd_bench::self_cpu_ns() - caller0) / colls / 1e3};
    MPI_Allreduce(MPI_IN_PLACE, cpu, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    // Negotiation rounds and responses per iteration on this rank (rank 0 prints its own).
    const hvd::RuntimeStats st1 = hvd::runtime_stats();
    const double runs = static_cast<double>(iters + 3);
    const double per_it[2] = {static_cast<double>(st1.rounds - st0.rounds) / runs,
                              static_cast<double>(st1.responses - st0.responses) / runs};
    if (hvd_only) {
      if (rank == 0) {
        std::printf("%-10s %10.2f %12.3f %12s %12s %8s %12s %9.3f %9.3f %9.1f %9.1f\n", c.label,
                    static_cast<double>(c.k * c.s * 4) / (1 << 20), t_hvd, "-", "-", "-", "-",
                    cpu[0] / hvd::size(), cpu[1] / hvd::size(), per_it[0], per_it[1]);
      }
      continue;
    }
    std::vector<hvd::TensorView> views;
    for (auto& t : ts)
      views.emplace_back(t.data(), hvd::DataType::kFloat32, std::vector<int64_t>{c.s});
    const std::string group = std::string(c.label) + ".group";
    double t_grouped =
        median_ms(iters, [&] { hvd::grouped_allreduce_async(views, group, c.op).wait(); });
    double t_raw1 = median_ms(iters, [&] {
      MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(flat.size()), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    });
    double t_rawk = median_ms(iters, [&] {
      for (auto& t : ts) {
        MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      }
    });
    if (rank == 0) {
      double best = std::min(t_raw1, t_rawk);
      std::printf("%-10s %10.2f %12.3f %12.3f %12.3f %7.2fx %12.3f %9.3f %9.3f %9.1f %9.1f\n",
                  c.label, static_cast<double>(c.k * c.s * 4) / (1 << 20), t_hvd, t_raw1, t_rawk,
                  t_hvd / best, t_grouped, cpu[0] / hvd::size(), cpu[1] / hvd::size(), per_it[0],
                  per_it[1]);
      std::fflush(stdout);
    }
  }
  if ((only.empty() || only == "crossed") && hvd::size() > 1) {
    const int n = hvd::size();
    std::vector<std::vector<float>> ts(static_cast<size_t>(n), std::vector<float>(256, 1.0f));
    std::vector<hvd::Handle> hs(static_cast<size_t>(n));
    auto submit = [&](int j) {
      hs[static_cast<size_t>(j)] = hvd::allreduce_async(
          hvd::TensorView(ts[static_cast<size_t>(j)].data(), hvd::DataType::kFloat32, {256}),
          "crossed." + std::to_string(j), hvd::ReduceOp::kSum);
    };
    std::vector<double> t;
    for (int i = 0; i < iters + 3; ++i) {
      submit(rank);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = hvd_bench::now_ms();
      for (int j = 0; j < n; ++j)
        if (j != rank) submit(j);
      for (auto& h : hs) h.wait();
      double dt = hvd_bench::now_ms() - t0, worst = 0;
      MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (i >= 3) t.push_back(worst);
    }
    std::sort(t.begin(), t.end());
    if (rank == 0) {
      std::printf(
          "crossed    %10s %12.3f   (ranks submit different names, back off, then match;"
          " ms from the last submission to completion; p90 %.3f)\n",
          "-", t[t.size() / 2], t[t.size() * 9 / 10]);
    }
  }
  hvd::shutdown();
  MPI_Finalize();
  return 0;
}
