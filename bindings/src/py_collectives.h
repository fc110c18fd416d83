// SPDX-License-Identifier: Apache-2.0
// Collective submissions for Python (private to the extension).
#pragma once

#include <pybind11/pybind11.h>

namespace hvd::py {

void bind_collectives(pybind11::module_& m);

}  // namespace hvd::py
