// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the [gpu] tier: hvd::init() (MPI + the NCCL executor when a device exists).
// Exit status: Catch's (failures), else 77 when a test case was skipped for want of a device
// (CTest's SKIP_RETURN_CODE: reported as skipped, not passed), else 0.
#define CATCH_CONFIG_RUNNER
#include <cstdio>

#include "gpu_test_util.h"
#include "hvd/hvd.h"
#include "hvd_catch.h"

int main(int argc, char** argv) {
  hvd::init();
  if (!hvd::gputest::have_gpu()) std::printf("skipped: no CUDA device\n");
  int rc = Catch::Session().run(argc, argv);
  hvd::shutdown();
  const int skipped = hvd::gputest::skipped_cases();
  if (rc == 0 && skipped > 0) {
    std::printf("%d test case(s) skipped: no CUDA device (exit status %d)\n", skipped,
                hvd::gputest::kSkipExitCode);
    return hvd::gputest::kSkipExitCode;
  }
  return rc;
}
