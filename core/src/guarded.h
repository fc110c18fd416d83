// SPDX-License-Identifier: Apache-2.0
// The background threads' exception barrier (private to core).
#pragma once

#include <exception>
#include <string>
#include <type_traits>

#include "hvd/core/status.h"

namespace hvd::core::detail {

/// Runs `f`; an exception it throws becomes an internal error "<what> threw: <what()>". The
/// background thread lets no exception escape: a failure reaches every rank as a status.
/// `what` is a string, or a callable returning one: then it is built only on a failure (the
/// hot path builds no message).
template <typename What, typename F>
Status guarded(const What& what, F&& f) noexcept {
  auto label = [&]() -> std::string {
    if constexpr (std::is_invocable_v<const What&>) {
      return what();
    } else {
      return std::string(what);
    }
  };
  try {
    f();
    return Status::OK();
  } catch (const std::exception& e) {
    return internal_error(label() + " threw: " + e.what());
  } catch (...) {
    return internal_error(label() + " threw a non-standard exception");
  }
}

}  // namespace hvd::core::detail
