// SPDX-License-Identifier: Apache-2.0
// Collective submissions for Python (private to the extension).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>

namespace hvd::py {

void bind_collectives(pybind11::module_& m);

/// Sets the Python error for the exception `p` as a pybind11-bound function would raise it
/// (hvd::Error: HorovodInternalError or NotInitializedError), for the raw entry points.
void raise_python_error(std::exception_ptr p);

}  // namespace hvd::py
