// SPDX-License-Identifier: Apache-2.0
// A parameter's entry in a libtorch optimizer's state: the one place that knows how each
// libtorch release keys Optimizer::state(). libtorch 1.x keys it by the address of the
// parameter's TensorImpl as text (c10::guts::to_string, which writes a pointer through an
// ostream), libtorch 2.x by the address itself. The choice follows the map's own key type, so a
// program built against either release computes the key that release's optimizers use.
#pragma once

#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace hvd::optim {

/// The key type of torch::optim::Optimizer::state() in the libtorch built against.
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

namespace detail {
// A template, so that only the branch of the key type built against is instantiated.
template <typename Key>
Key state_key_of(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // libtorch 1.x
    text << static_cast<const void*>(impl);
    return text.str();
  } else {
    return static_cast<Key>(impl);  // libtorch 2.x
  }
}
}  // namespace detail

/// The key of `param`'s entry in Optimizer::state(), as libtorch's own optimizers compute it.
inline OptimizerStateKey optimizer_state_key(const torch::Tensor& param) {
  return detail::state_key_of<OptimizerStateKey>(param.unsafeGetTensorImpl());
}

/// `param`'s state in `optimizer`, or null when it has none (before its first step).
inline torch::optim::OptimizerParamState* optimizer_state(torch::optim::Optimizer& optimizer,
                                                          const torch::Tensor& param) {
  const auto it = optimizer.state().find(optimizer_state_key(param));
  return it == optimizer.state().end() ? nullptr : it->second.get();
}

}  // namespace hvd::optim
