// SPDX-License-Identifier: Apache-2.0
// Data-parallel linear regression with the plain hvd C++ API (no framework): each rank computes
// gradients on its shard, hvd averages them (fused, asynchronously), every rank applies them.
//
//   mpirun -np 2 build/examples/allreduce_demo     or     hvdrun -np 2
//   build/examples/allreduce_demo
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "hvd/hvd.h"

int main() {
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  constexpr int kFeatures = 16, kSamples = 4096, kSteps = 200;
  // The same synthetic problem on every rank: y = x . w_true + 0.5
  std::mt19937 gen(42);
  std::normal_distribution<float> nd;
  std::vector<float> w_true(kFeatures);
  for (auto& w : w_true) w = nd(gen);
  std::vector<float> x(static_cast<size_t>(kSamples) * kFeatures), y(kSamples);
  for (int i = 0; i < kSamples; ++i) {
    float dot = 0.5f;
    for (int j = 0; j < kFeatures; ++j) {
      x[static_cast<size_t>(i) * kFeatures + j] = nd(gen);
      dot += x[static_cast<size_t>(i) * kFeatures + j] * w_true[static_cast<size_t>(j)];
    }
    y[static_cast<size_t>(i)] = dot;
  }
  // Rank 0's random start wins: broadcast it.
  std::vector<float> w(kFeatures), b(1, 0.0f);
  std::mt19937 init_gen(1000 + static_cast<unsigned>(rank));
  for (auto& v : w) v = nd(init_gen);
  hvd::broadcast(hvd::TensorView(w.data(), hvd::DataType::kFloat32, {kFeatures}), 0, "w.init");

  std::vector<float> gw(kFeatures), gb(1), loss(1);
  for (int step = 0; step < kSteps; ++step) {
    std::fill(gw.begin(), gw.end(), 0.0f);
    gb[0] = 0;
    loss[0] = 0;
    int n = 0;
    for (int i = rank; i < kSamples; i += size, ++n) {  // this rank's shard
      const float* xi = &x[static_cast<size_t>(i) * kFeatures];
      float pred = b[0];
      for (int j = 0; j < kFeatures; ++j) pred += xi[j] * w[static_cast<size_t>(j)];
      float err = pred - y[static_cast<size_t>(i)];
      for (int j = 0; j < kFeatures; ++j) gw[static_cast<size_t>(j)] += 2 * err * xi[j];
      gb[0] += 2 * err;
      loss[0] += err * err;
    }
    for (auto& g : gw) g /= static_cast<float>(n);
    gb[0] /= static_cast<float>(n);
    loss[0] /= static_cast<float>(n);
    // Three tensors in flight at once: the runtime fuses them into one MPI allreduce.
    auto h1 = hvd::allreduce_async(hvd::TensorView(gw.data(), hvd::DataType::kFloat32, {kFeatures}),
                                   "grad.w");
    auto h2 =
        hvd::allreduce_async(hvd::TensorView(gb.data(), hvd::DataType::kFloat32, {1}), "grad.b");
    auto h3 =
        hvd::allreduce_async(hvd::TensorView(loss.data(), hvd::DataType::kFloat32, {1}), "loss");
    hvd::wait(h1);
    hvd::wait(h2);
    hvd::wait(h3);
    for (int j = 0; j < kFeatures; ++j)
      w[static_cast<size_t>(j)] -= 0.05f * gw[static_cast<size_t>(j)];
    b[0] -= 0.05f * gb[0];
    if (rank == 0 && step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, loss[0]);
  }
  float max_err = std::fabs(b[0] - 0.5f);
  for (int j = 0; j < kFeatures; ++j) {
    max_err =
        std::max(max_err, std::fabs(w[static_cast<size_t>(j)] - w_true[static_cast<size_t>(j)]));
  }
  if (rank == 0) {
    std::printf("trained on %d ranks: final loss %.2e, max |w - w_true| = %.2e\n", size, loss[0],
                max_err);
  }
  hvd::shutdown();
  return max_err < 1e-3f ? 0 : 1;
}
