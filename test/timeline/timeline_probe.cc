// SPDX-License-Identifier: Apache-2.0
// A small training-like job for the timeline tests (test/timeline/timeline_test.py): each step
// submits 8 gradients (6 of 4 KiB, 2 of 64 KiB: fused, through the fusion buffer), rank 1 submits
// the last one 3 ms late, and each rank "computes" 2 ms between steps.
//   timeline_probe STEPS [error]   STEPS = 0: run until killed; "error": after 3 steps a
//   collective whose shapes differ between ranks fails, and the process exits 3 without
//   shutdown().
//   timeline_probe STEPS ops       instead, each step runs one of each host path other than the
//   fused MPI_Allreduce, one after the other (see run_ops); exits 4 if a result is wrong.
// Writes its pid to $HVD_PROBE_PID_DIR/pid.<rank> when that variable is set (the test's SIGTERM
// goes to one rank).
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

namespace {

hvd::TensorView view(std::vector<float>& v, int64_t rows) {
  return hvd::TensorView(v.data(), hvd::DataType::kFloat32,
                         {rows, static_cast<int64_t>(v.size()) / rows});
}

// Each path once per step (names: the timeline test's): an allgather of one tensor (straight
// into the output), three fused allgathers ("ag.fused", through the fusion and gather buffers),
// an alltoall, reducescatters of float32 (in place), prescaled float32 (a scaled copy in) and
// float16 (widened in, narrowed out), a ring allreduce of large and small tensors ("ring.mixed":
// the small ones packed and unpacked) and one of large tensors only ("ring.large": no copies).
// Returns false if a result is wrong.
bool run_ops(long steps, int rank, int size) {
  bool ok = true;
  auto expect = [&](bool cond, const char* what) {
    if (!cond) std::fprintf(stderr, "rank %d: wrong result of %s\n", rank, what);
    ok = ok && cond;
  };
  const int64_t rows = 2 * size;  // for alltoall and reducescatter: 2 rows per rank
  for (long s = 0; s < steps; ++s) {
    std::vector<float> one(static_cast<size_t>(16 * (rank + 1)), 1.0f);
    hvd::Handle h = hvd::allgather(view(one, rank + 1), "ag.one");
    expect(h.output().shape[0] == size * (size + 1) / 2, "ag.one");

    std::vector<std::vector<float>> parts(3, std::vector<float>(64, 2.0f));
    std::vector<hvd::TensorView> pv;
    for (auto& v : parts) pv.push_back(view(v, 4));
    for (auto& g : hvd::grouped_allgather_async(pv, "ag.fused")) {
      g.wait();
      expect(g.output().shape[0] == 4 * size &&
                 static_cast<const float*>(g.output().data)[4 * 16 * size - 1] == 2.0f,
             "ag.fused");
    }

    std::vector<float> a2a(static_cast<size_t>(rows * 8), static_cast<float>(rank));
    h = hvd::alltoall(view(a2a, rows), {}, "a2a");
    expect(h.output().shape[0] == rows, "a2a");

    std::vector<float> rs(static_cast<size_t>(rows * 16), 1.0f);
    h = hvd::reducescatter(view(rs, rows), "rs.f32", hvd::ReduceOp::kSum);
    expect(static_cast<const float*>(h.output().data)[0] == static_cast<float>(size), "rs.f32");
    h = hvd::reducescatter(view(rs, rows), "rs.prescaled", hvd::ReduceOp::kSum, 0.5);
    expect(static_cast<const float*>(h.output().data)[0] == 0.5f * static_cast<float>(size),
           "rs.prescaled");
    std::vector<uint16_t> half(static_cast<size_t>(rows * 16), 0x3C00);  // float16 1.0
    h = hvd::reducescatter(hvd::TensorView(half.data(), hvd::DataType::kFloat16, {rows, 16}),
                           "rs.f16", hvd::ReduceOp::kSum);
    expect(static_cast<const uint16_t*>(h.output().data)[0] == (size == 2 ? 0x4000 : 0),
           "rs.f16");  // float16 2.0 (checked at np 2 only)

    // 4 x 128 KiB and 4 x 1 KiB (< the ring's 32 KiB direct pieces): each rank's chunk holds
    // small tensors, so every step packs and every allgather step unpacks.
    std::vector<std::vector<float>> mixed;
    for (int i = 0; i < 8; ++i) mixed.emplace_back(i % 2 ? 32768 : 256, 1.0f);
    std::vector<hvd::TensorView> mv;
    for (auto& v : mixed) mv.push_back(view(v, 1));
    hvd::grouped_allreduce(mv, "ring.mixed", hvd::ReduceOp::kSum);
    for (auto& v : mixed) expect(v.front() == size && v.back() == size, "ring.mixed");

    // 2 x 256 KiB: at np 2 each rank's chunk is one whole tensor, sent and received in place.
    std::vector<std::vector<float>> large(2, std::vector<float>(65536, 1.0f));
    std::vector<hvd::TensorView> lv;
    for (auto& v : large) lv.push_back(view(v, 1));
    hvd::grouped_allreduce(lv, "ring.large", hvd::ReduceOp::kSum);
    for (auto& v : large) expect(v.front() == size && v.back() == size, "ring.large");
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 10;
  const bool error = argc > 2 && std::string(argv[2]) == "error";
  hvd::init();
  if (argc > 2 && std::string(argv[2]) == "ops") {
    const bool ok = run_ops(steps, hvd::rank(), hvd::size());
    hvd::shutdown();
    return ok ? 0 : 4;
  }
  const int rank = hvd::rank();
  if (const char* dir = std::getenv("HVD_PROBE_PID_DIR")) {
    if (FILE* f = std::fopen((std::string(dir) + "/pid." + std::to_string(rank)).c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
      std::fclose(f);
    }
  }
  std::vector<std::vector<float>> grads;
  for (int i = 0; i < 8; ++i) grads.emplace_back(i < 6 ? 1024 : 16384, 1.0f);
  for (long s = 0; steps == 0 || s < steps; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // forward + backward
    std::vector<hvd::Handle> hs;
    for (int i = 0; i < 8; ++i) {
      if (i == 7 && rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      auto& g = grads[static_cast<size_t>(i)];
      hs.push_back(hvd::allreduce_async(
          hvd::TensorView(g.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(g.size())}),
          "grad." + std::to_string(i), hvd::ReduceOp::kAverage));
    }
    for (auto& h : hs) h.wait();
    if (error && s == 3) {
      std::vector<float> bad(static_cast<size_t>(4 + rank), 1.0f);
      try {
        hvd::allreduce(hvd::TensorView(bad.data(), hvd::DataType::kFloat32,
                                       {static_cast<int64_t>(bad.size())}),
                       "bad");
      } catch (const std::exception& e) {
        std::printf("rank %d: expected error: %s\n", rank, e.what());
        std::fflush(stdout);
        std::exit(3);
      }
    }
  }
  hvd::shutdown();
  return 0;
}
