// SPDX-License-Identifier: Apache-2.0
// Test helper for hvdrun's [unit] tests: the message of the UsageError `f` throws.
#pragma once

#include <functional>
#include <string>

#include "hvd/runner/errors.h"

namespace hvd_runner_test {

/// What `f` throws as hvd::runner::UsageError, or "<no error>" when it throws nothing.
inline std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const hvd::runner::UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace hvd_runner_test
