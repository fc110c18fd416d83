// SPDX-License-Identifier: Apache-2.0
// [python] hvd._core releases no Python object after the interpreter is finalized: an embedding
// program imports it, finalizes Python, then checks at the very end of exit (after the C++
// runtime ran the extension's static destructors) that the reference count of
// HorovodInternalError did not change since finalization. A function-local `static
// pybind11::object` in the extension decrements it there, on an interpreter that no longer
// exists. Usage: hvd_python_finalize_test <dir holding the hvd package>
#include <Python.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

PyObject* g_error_type = nullptr;  // one reference of ours, never released: stays allocated
Py_ssize_t g_refs_at_finalize = 0;

// Registered before the import, so it runs after every exit-time destructor the import added.
void check_at_exit() {
  const Py_ssize_t now = Py_REFCNT(g_error_type);
  if (now != g_refs_at_finalize) {
    std::fprintf(stderr,
                 "FAIL: HorovodInternalError's reference count went from %zd to %zd after "
                 "Py_FinalizeEx (an object released by a static destructor)\n",
                 g_refs_at_finalize, now);
    std::fflush(stderr);
    std::_Exit(1);
  }
  std::printf("finalize test: ok (reference count %zd unchanged after finalization)\n", now);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <python dir>\n", argv[0]);
    return 2;
  }
  std::atexit(check_at_exit);
  Py_Initialize();
  PyObject* sys_path = PySys_GetObject("path");  // borrowed
  PyObject* dir = PyUnicode_FromString(argv[1]);
  if (!sys_path || !dir || PyList_Insert(sys_path, 0, dir) != 0) return 2;
  Py_DECREF(dir);
  PyObject* core = PyImport_ImportModule("hvd._core");
  if (!core) {
    PyErr_Print();
    return 2;
  }
  g_error_type = PyObject_GetAttrString(core, "HorovodInternalError");
  Py_DECREF(core);
  if (!g_error_type) {
    PyErr_Print();
    return 2;
  }
  if (Py_FinalizeEx() != 0) return 2;
  g_refs_at_finalize = Py_REFCNT(g_error_type);
  return 0;
}
