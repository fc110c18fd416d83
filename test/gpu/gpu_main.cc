// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the [gpu] tier: hvd::init() (MPI + the NCCL executor when a device exists).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "gpu_test_util.h"
#include "hvd/hvd.h"

int main(int argc, char** argv) {
  hvd::init();
  if (!hvd::gputest::have_gpu()) std::printf("skipped: no CUDA device\n");
  int rc = Catch::Session().run(argc, argv);
  hvd::shutdown();
  return rc;
}
