// SPDX-License-Identifier: Apache-2.0
// [gpu] tier through the public API: device tensors go to the NCCL executor, inputs are read
// only after the producer's stream wrote them, errors reach the caller as hvd::Error.
#include <cstdio>
#include <string>

#include "gpu_test_util.h"
#include "hvd/hvd.h"
#include "hvd_catch.h"

using namespace hvd;

TEST_CASE("the GPU module loads with this host's CUDA runtime and NCCL", "[gpu]") {
  // Not skipped without a device: loading needs only the libraries (the bundle's selftest
  // runs it with the toolkit hidden, the CUDA runtime carried and NCCL from NCCL_LIB_DIR).
  const GpuSupport g = hvd::gpu_support();
  std::printf("GPU module %s: loaded %d, NCCL %d, CUDA runtime %d, devices %d, reason '%s'\n",
              g.module.c_str(), g.loaded ? 1 : 0, g.nccl_version, g.cuda_runtime_version, g.devices,
              g.reason.c_str());
  INFO(g.reason);
  REQUIRE(g.loaded);
  REQUIRE(hvd::nccl_built());
  REQUIRE(g.nccl_version >= 21000);  // 2.10 or later
  REQUIRE(g.cuda_runtime_version >= 11000);
  REQUIRE(g.module.find("libhvd_nccl.so") != std::string::npos);
  REQUIRE((g.devices > 0) == gputest::have_gpu());
  if (g.devices == 0) REQUIRE_THAT(g.reason, hvd::test::Contains("no usable CUDA device"));
}

TEST_CASE("gpu allreduce waits for the producer's stream", "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  const int n = 1 << 16;
  gputest::DevBuf buf(n * sizeof(float));
  REQUIRE(cudaMemset(buf.p, 0, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the user stream below is non-blocking
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  for (bool with_event : {false, true}) {
    INFO("ready_event " << with_event);
    // The kernel spins ~50 ms before writing; reading early would reduce zeros.
    gputest::launch_slow_fill(static_cast<float*>(buf.p), n, 3.0f, 50, s);
    TensorView v(buf.p, DataType::kFloat32, {n}, Device::cuda(0));
    v.stream = s;
    cudaEvent_t ev = nullptr;
    if (with_event) {
      REQUIRE(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess);
      REQUIRE(cudaEventRecord(ev, s) == cudaSuccess);
      v.ready_event = ev;
      v.stream = nullptr;
    }
    hvd::allreduce(v, with_event ? "ordered.event" : "ordered.stream", ReduceOp::kSum, 1.0, 2.0);
    auto got = gputest::download(DataType::kFloat32, buf.p, n);
    REQUIRE(got.front() == 3.0 * 2 * hvd::size());
    REQUIRE(got.back() == 3.0 * 2 * hvd::size());
    if (ev) cudaEventDestroy(ev);
    REQUIRE(cudaMemset(buf.p, 0, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  cudaStreamDestroy(s);
}

TEST_CASE("gpu allreduce does not wait for work queued after the submission", "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  const int n = 1024;
  gputest::DevBuf buf(n * sizeof(float)), later(n * sizeof(float));
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  // Warm-up: hvd's buffers and descriptor areas exist before the timing-sensitive part, so no
  // allocation runs while the long kernel below does.
  for (int i = 0; i < 6; ++i) {
    REQUIRE(cudaMemset(buf.p, 0, n * sizeof(float)) == cudaSuccess);
    hvd::allreduce(TensorView(buf.p, DataType::kFloat32, {n}, Device::cuda(0)),
                   "warm." + std::to_string(i));
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  gputest::launch_slow_fill(static_cast<float*>(buf.p), n, 2.0f, 20, s);  // the producer
  TensorView v(buf.p, DataType::kFloat32, {n}, Device::cuda(0));
  v.stream = s;
  Handle h = hvd::allreduce_async(v, "before.later.work", ReduceOp::kSum);
  // Queued on the producer's stream after the submission: ~2 s of unrelated work.
  gputest::launch_slow_fill(static_cast<float*>(later.p), n, 5.0f, 2000, s);
  h.wait();
  // The reduction finished while the later kernel still runs: hvd waited only for what the
  // stream held at submission.
  REQUIRE(cudaStreamQuery(s) == cudaErrorNotReady);
  REQUIRE(gputest::download(DataType::kFloat32, buf.p, n).back() == 2.0 * hvd::size());
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  cudaStreamDestroy(s);
}

TEST_CASE("gpu many small device tensors through the API", "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  std::vector<std::unique_ptr<gputest::DevBuf>> bufs;
  std::vector<Handle> hs;
  for (int i = 0; i < 256; ++i) {
    bufs.push_back(gputest::upload(DataType::kFloat32, std::vector<double>(100, i)));
    hs.push_back(
        hvd::allreduce_async(TensorView(bufs.back()->p, DataType::kFloat32, {100}, Device::cuda(0)),
                             "many." + std::to_string(i), ReduceOp::kAverage));
  }
  for (auto& h : hs) h.wait();
  for (int i = 0; i < 256; ++i) {
    REQUIRE(gputest::download(DataType::kFloat32, bufs[static_cast<size_t>(i)]->p, 100) ==
            std::vector<double>(100, i));
  }
}

TEST_CASE("gpu a host pointer labelled cuda:0 fails with hvd::Error, not a crash",
          "[gpu][device]") {
  HVD_GPU_OR_SKIP();
  std::vector<float> host(16, 1.0f);
  TensorView v(host.data(), DataType::kFloat32, {16}, Device::cuda(0));
  REQUIRE_THROWS_WITH(hvd::allreduce(v, "host.as.device"),
                      hvd::test::Contains("not device memory"));
  gputest::DevBuf ok(16 * sizeof(float));
  REQUIRE(cudaMemset(ok.p, 0, 16 * sizeof(float)) == cudaSuccess);
  hvd::allreduce(TensorView(ok.p, DataType::kFloat32, {16}, Device::cuda(0)), "after.error");
}
