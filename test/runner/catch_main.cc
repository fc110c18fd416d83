// SPDX-License-Identifier: Apache-2.0
// Catch2 main for hvdrun's test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
