// SPDX-License-Identifier: Apache-2.0
// Elastic training's snapshot store and resume protocol for Python (private to the extension).
#pragma once

#include <pybind11/pybind11.h>

namespace hvd::py {

void bind_elastic(pybind11::module_& m);

}  // namespace hvd::py
