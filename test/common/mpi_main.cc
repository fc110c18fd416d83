// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the [mpi] tier: every rank runs the same test cases in the same order.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "hvd/hvd.h"

int main(int argc, char** argv) {
  hvd::init();
  int rc = Catch::Session().run(argc, argv);
  hvd::shutdown();
  return rc;
}
