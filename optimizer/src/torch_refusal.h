// SPDX-License-Identifier: Apache-2.0
// One rank's mistake in a libtorch collective's arguments fails every rank's call.
#pragma once

#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "hvd/core/status.h"
#include "hvd/hvd.h"

namespace hvd::optim::detail {

/// How errors name a call: "<op> '<name>'", or "<op>" when it has no name.
inline std::string call_label(const std::string& op, const std::string& name) {
  return op + (name.empty() ? std::string() : " '" + name + "'");
}

/// Runs `stage`: this rank's checks and conversions of a collective's torch arguments, before
/// anything is submitted. A mistake it throws (an undefined, sparse, meta or complex tensor: an
/// hvd::Error or a c10::Error) would leave the other ranks waiting for this rank's call; it is
/// refused through negotiation instead (hvd::detail::refuse_call: `op` "allreduce", ...,
/// `name`, `group_size` members of a grouped call or 0), so every rank's call fails with it,
/// naming this rank. Throws the refusal.
template <class Stage>
auto refusing(const char* op, const std::string& name, int group_size, const ProcessSet& ps,
              Stage&& stage) -> decltype(stage()) {
  std::string reason;
  try {
    return std::forward<Stage>(stage)();
  } catch (const Error& e) {
    if (e.code() != StatusCode::kInvalidArgument) throw;
    reason = e.what();
  } catch (const c10::Error& e) {
    reason = e.what_without_backtrace();
  }
  // refuse_call names the collective and the tensor itself.
  const std::string said = call_label(op, name) + ": ";
  if (reason.compare(0, said.size(), said) == 0) reason.erase(0, said.size());
  hvd::detail::refuse_call(op, name, group_size, reason, ps);
}

}  // namespace hvd::optim::detail
