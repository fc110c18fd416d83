// SPDX-License-Identifier: Apache-2.0
// The background threads' exception barrier (private to core).
#pragma once

#include <exception>
#include <string>

#include "hvd/core/status.h"

namespace hvd::core::detail {

/// Runs `f`; an exception it throws becomes an internal error "<what> threw: <what()>". The
/// background thread lets no exception escape: a failure reaches every rank as a status.
template <typename F>
Status guarded(const std::string& what, F&& f) noexcept {
  try {
    f();
    return Status::OK();
  } catch (const std::exception& e) {
    return internal_error(what + " threw: " + e.what());
  } catch (...) {
    return internal_error(what + " threw a non-standard exception");
  }
}

}  // namespace hvd::core::detail
