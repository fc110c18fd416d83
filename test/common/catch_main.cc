// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the unit and local tiers and hvdrun's tests.
#define CATCH_CONFIG_RUNNER  // Catch2 2: this file provides main; Catch2 3 ignores it
#include "hvd_catch.h"

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
