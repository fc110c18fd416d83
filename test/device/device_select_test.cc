// SPDX-License-Identifier: Apache-2.0
// CPU-only: device tensors are routed to the GPU executor when the build has one, and are
// refused with a clear reason otherwise (no NCCL in the build, or no usable CUDA device).
#include <cstdio>
#include <vector>

#include "hvd/config.h"
#include "hvd/core/runtime.h"
#include "hvd/hvd.h"
#include "hvd/ops/device.h"
#include "hvd_catch.h"

using namespace hvd;

TEST_CASE("the process reports whether its GPU module is loaded, and why not", "[mpi]") {
  const GpuSupport g = hvd::gpu_support();
  std::printf("GPU support: loaded %d, module '%s', NCCL %d, reason '%s'\n", g.loaded ? 1 : 0,
              g.module.c_str(), g.nccl_version, g.reason.c_str());
  REQUIRE(hvd::nccl_built() == g.loaded);
  REQUIRE(hvd::cuda_built() == g.loaded);
  // The loaded NCCL's version code (2.28.9: 22809), as Horovod's nccl_built(); 0 without.
  REQUIRE(hvd::nccl_version() == g.nccl_version);
#if HVD_HAVE_NCCL
  // The module is built next to libhvd_ops.so; this machine has the CUDA runtime and NCCL it
  // links, so it loads, device or not.
  REQUIRE(g.loaded);
  REQUIRE(g.nccl_version >= 21000);
  REQUIRE(g.module.find("/libhvd_nccl.so") != std::string::npos);
#else
  REQUIRE_FALSE(g.loaded);
  REQUIRE(g.nccl_version == 0);
  REQUIRE_THAT(g.reason, hvd::test::Contains("no GPU support"));
#endif
  if (g.loaded && g.devices == 0)
    REQUIRE_THAT(g.reason, hvd::test::Contains("no usable CUDA device"));
}

TEST_CASE("add_device_executor gives an executor or a reason", "[mpi]") {
  core::RuntimeParts parts;
  ops::add_device_executor(&parts, MPI_COMM_WORLD, core::Config{}, 0);
  if (parts.device_executor) {
    REQUIRE(hvd::gpu_support().devices > 0);
    REQUIRE(parts.device_executor->name() == "nccl");
  } else {
#if HVD_HAVE_NCCL
    // Without a GPU or driver the CUDA probe fails: that means "no device", not a crash.
    REQUIRE_THAT(parts.no_device_reason, hvd::test::Contains("no usable CUDA device"));
    REQUIRE_THAT(parts.no_device_reason, hvd::test::Contains("GPU module is loaded"));
#else
    REQUIRE_THAT(parts.no_device_reason, hvd::test::Contains("no GPU support"));
#endif
  }
}

TEST_CASE("a device tensor goes to the GPU executor or fails with a clear error", "[mpi]") {
  // Host memory labelled cuda:0: the NCCL executor (when present) rejects the pointer; without
  // one the runtime refuses the device tensor at enqueue. Either way: an hvd::Error naming the
  // tensor, never a crash or a hang.
  std::vector<float> host(8, 1.0f);
  TensorView v(host.data(), DataType::kFloat32, {8}, Device::cuda(0));
  try {
    hvd::allreduce(v, "device.tensor");
    FAIL("allreduce of a host pointer labelled cuda:0 succeeded");
  } catch (const hvd::Error& e) {
    const std::string m = e.what();
    INFO(m);
    std::printf("device error: %s\n", m.c_str());
    REQUIRE(m.find("device.tensor") != std::string::npos);
#if HVD_HAVE_NCCL
    const bool selected = m.find("not device memory") != std::string::npos;
    const bool no_device = m.find("no usable CUDA device") != std::string::npos;
    // np > 1 with every rank on one GPU: NCCL refuses the communicator (duplicate GPU).
    const bool shared_gpu = m.find("ncclCommInitRank") != std::string::npos;
    REQUIRE((selected || no_device || shared_gpu));
#else
    REQUIRE(m.find("no GPU support") != std::string::npos);
#endif
  }
  // The runtime keeps serving host tensors afterwards.
  std::vector<float> ok(4, 2.0f);
  hvd::allreduce(TensorView(ok.data(), DataType::kFloat32, {4}), "host.after", ReduceOp::kSum);
  REQUIRE(ok[0] == 2.0f * static_cast<float>(hvd::size()));
}
