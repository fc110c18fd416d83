// SPDX-License-Identifier: Apache-2.0
// A non-owning reference to a callable, for callbacks run before the call that takes them
// returns (as Runtime::enqueue_with's fill): unlike std::function, binding a lambda with many
// captures allocates nothing.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace hvd::core {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  /// Refers to `f`, which must outlive every call (a temporary lives to the end of the full
  /// expression: enough for an argument).
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): binds like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace hvd::core
