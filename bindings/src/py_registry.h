// SPDX-License-Identifier: Apache-2.0
// The gradient registry for Python (private to the extension).
#pragma once

#include <pybind11/pybind11.h>

namespace hvd::py {

void bind_registry(pybind11::module_& m);

}  // namespace hvd::py
