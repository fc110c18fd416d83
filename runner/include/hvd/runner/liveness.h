// SPDX-License-Identifier: Apache-2.0
// Handlers that outlive their owner on an io_context do nothing.
#pragma once

#include <memory>
#include <utility>

namespace hvd::runner {

// An asio handler can run after what it refers to is gone: destroying a stream or timer (or
// cancelling a wait) does not drop its handler, which runs at the next run()/poll() with
// operation_aborted, or with success when the operation had completed before (a timer that
// expired in the pass that stopped the io_context: cancel() cannot recall it). An object (or a
// stack frame) owns a Liveness and wraps each handler that refers to it in guard(): once the
// Liveness is destroyed, the wrapped handlers return without touching anything.
class Liveness {
 public:
  Liveness() = default;
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;
  ~Liveness() { *alive_ = false; }

  // `handler`, called only while this Liveness exists.
  template <class Handler>
  auto guard(Handler handler) const {
    return [alive = alive_, handler = std::move(handler)](auto&&... args) mutable {
      if (*alive) handler(std::forward<decltype(args)>(args)...);
    };
  }

 private:
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace hvd::runner
