// SPDX-License-Identifier: Apache-2.0
// hvd._core: the Python extension over hvd's C++ API. It links no framework: tensors arrive as
// descriptions (data pointer, dtype code, shape, device index, stream) made by the pure-Python
// layer (hvd.torch, hvd.numpy), which also keeps them alive through the handles made here.
//
// Threads: the GIL is released for every call that can wait (wait, barrier, join, init,
// shutdown, process-set changes). No Python code ever runs on hvd's background threads: outputs
// whose size negotiation decides are allocated by hvd and handed to Python afterwards (DLPack or
// numpy, without a copy), and dropped handles park their Python objects in a graveyard that is
// swept on this side.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <new>
#include <optional>

#include "hvd/core/host_buffer.h"
#include "hvd/hvd.h"
#include "hvd/mpi.h"
#include "py_collectives.h"
#include "py_elastic.h"
#include "py_handle.h"
#include "py_registry.h"

namespace hvd::py {
namespace {

void bind_lifecycle(pyb::module_& m) {
  // `comm_f2c`: the Fortran handle of an mpi4py communicator (comm.py2f(), portable across MPI
  // implementations); `world_ranks`: Horovod's list form. Neither: MPI_COMM_WORLD.
  m.def(
      "init",
      [](const std::vector<std::vector<int>>& process_sets, std::optional<int64_t> comm_f2c,
         const std::optional<std::vector<int>>& world_ranks) {
        pyb::gil_scoped_release nogil;
        if (comm_f2c) {
          hvd::init(MPI_Comm_f2c(static_cast<MPI_Fint>(*comm_f2c)), process_sets);
        } else if (world_ranks) {
          hvd::init_on_ranks(*world_ranks, process_sets);
        } else {
          hvd::init(process_sets);
        }
      },
      pyb::arg("process_sets") = std::vector<std::vector<int>>{},
      pyb::arg("comm_f2c") = std::nullopt, pyb::arg("world_ranks") = std::nullopt);
  m.def("shutdown", []() {
    {
      pyb::gil_scoped_release nogil;
      hvd::shutdown();
    }
    sweep_graveyard(true);
  });
  m.def("is_initialized", &hvd::is_initialized);
  m.def("rank", &hvd::rank);
  m.def("size", &hvd::size);
  m.def("local_rank", &hvd::local_rank);
  m.def("local_size", &hvd::local_size);
  m.def("cross_rank", &hvd::cross_rank);
  m.def("cross_size", &hvd::cross_size);
  m.def("mpi_threads_supported", &hvd::mpi_threads_supported);
  m.def("mpi_built", &hvd::mpi_built);
  m.def("nccl_built", &hvd::nccl_built);
  m.def("nccl_version", &hvd::nccl_version);
  m.def("cuda_built", &hvd::cuda_built);
  m.def("gpu_support", []() {
    const hvd::GpuSupport g = hvd::gpu_support();
    pyb::dict d;
    d["loaded"] = g.loaded;
    d["module"] = g.module;
    d["nccl_version"] = g.nccl_version;
    d["cuda_runtime_version"] = g.cuda_runtime_version;
    d["devices"] = g.devices;
    d["reason"] = g.reason;
    return d;
  });
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        pyb::gil_scoped_release nogil;
        hvd::start_timeline(path, mark_cycles);
      },
      pyb::arg("path"), pyb::arg("mark_cycles") = false);
  m.def("stop_timeline", []() {
    pyb::gil_scoped_release nogil;
    hvd::stop_timeline();
  });
  m.def("runtime_stats", []() {
    RuntimeStats st = hvd::runtime_stats();
    pyb::dict d;
    d["rounds"] = st.rounds;
    d["full_rounds"] = st.full_rounds;
    d["responses"] = st.responses;
    d["fused_batches"] = st.fused_batches;
    return d;
  });
  m.def("graveyard_size", &graveyard_size,
        "Dropped handles whose collective is still running (their tensors are kept alive).");
}

void bind_process_sets(pyb::module_& m) {
  m.def("add_process_set", [](const std::vector<int>& ranks) {
    pyb::gil_scoped_release nogil;
    return hvd::add_process_set(ranks).id();
  });
  m.def(
      "refuse_add_process_set",
      [](const std::vector<int>& ranks, const std::string& reason) {
        pyb::gil_scoped_release nogil;
        hvd::detail::refuse_add_process_set(ranks, reason);
      },
      "This rank's add_process_set fails on every rank with `reason` (negotiated; see "
      "hvd::detail::refuse_add_process_set). Always raises.");
  m.def("remove_process_set", [](int32_t id) {
    pyb::gil_scoped_release nogil;
    hvd::remove_process_set(ProcessSet(id));
  });
  m.def("process_set_ids", []() {
    std::vector<int32_t> ids;
    for (const auto& ps : hvd::process_sets()) ids.push_back(ps.id());
    return ids;
  });
  m.def("process_set_ranks", [](int32_t id) { return ProcessSet(id).ranks(); });
  m.def("process_set_rank", [](int32_t id) { return ProcessSet(id).rank(); });
  m.def("process_set_size", [](int32_t id) { return ProcessSet(id).size(); });
  m.def("process_set_included", [](int32_t id) { return ProcessSet(id).included(); });
  m.def(
      "barrier",
      [](int32_t ps) {
        pyb::gil_scoped_release nogil;
        hvd::barrier(ProcessSet(ps));
      },
      pyb::arg("process_set") = 0);
  m.def(
      "join",
      [](int32_t ps) {
        pyb::gil_scoped_release nogil;
        return hvd::join(ProcessSet(ps));
      },
      pyb::arg("process_set") = 0);
}

/// Storage filled once and never destroyed: pybind11's gil_safe_call_once_and_store (2.12) for
/// the pybind11 of Debian 12 (2.10), which lacks it. A function-local `static pyb::object`
/// would be released by the C++ runtime at exit, after the interpreter is finalized; what is
/// stored here is never released.
template <typename T>
class OnceStore {
 public:
  /// Stores `fn()` on the first call (GIL held; the import lock serialises module inits), then
  /// returns the stored value.
  template <typename F>
  const T& call_once_and_store_result(F&& fn) {
    if (!stored_) {
      new (storage_) T(fn());
      stored_ = true;
    }
    return *std::launder(reinterpret_cast<T*>(storage_));
  }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
  bool stored_ = false;
};

struct ExceptionTypes {
  pyb::object error;             ///< HorovodInternalError
  pyb::object not_initialized;   ///< NotInitializedError
  pyb::object invalid_argument;  ///< InvalidArgumentError
  pyb::object mismatch;          ///< MismatchError
};

// The module's exception types (set once at import; references held for the process's life).
PyObject* g_error = nullptr;
PyObject* g_not_initialized = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_mismatch = nullptr;

void set_error(const hvd::Error& e) {
  const bool uninit = e.code() == hvd::StatusCode::kPrecondition && !hvd::is_initialized();
  PyObject* type = uninit ? g_not_initialized : g_error;
  if (e.code() == hvd::StatusCode::kInvalidArgument) type = g_invalid_argument;
  if (e.code() == hvd::StatusCode::kMismatch) type = g_mismatch;
  PyErr_SetString(type, e.what());
}

// hvd.torch's gradient buckets: core::HostBuffer memory (huge pages) that torch.frombuffer
// views; the tensor keeps the object, so the mapping lives as long as the tensor.
void bind_host_buffer(pyb::module_& m) {
  pyb::class_<hvd::core::HostBuffer>(m, "HostBuffer", pyb::buffer_protocol())
      .def(pyb::init([](size_t bytes) { return std::make_unique<hvd::core::HostBuffer>(bytes); }),
           pyb::arg("bytes"))
      .def("__len__", &hvd::core::HostBuffer::size)
      .def_buffer([](hvd::core::HostBuffer& b) {
        return pyb::buffer_info(b.data(), 1, pyb::format_descriptor<uint8_t>::format(),
                                static_cast<pyb::ssize_t>(b.size()));
      });
}

}  // namespace

void raise_python_error(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const hvd::Error& e) {
    set_error(e);
  } catch (...) {
    pyb::detail::translate_exception(std::current_exception());  // pybind11's own mapping
  }
}

}  // namespace hvd::py

PYBIND11_MODULE(_core, m) {
  namespace pyb = pybind11;
  using namespace hvd::py;  // NOLINT(google-build-using-namespace)
  m.doc() = "hvd's C++ runtime for Python (framework-agnostic; see hvd.torch and hvd.numpy)";
  // HorovodInternalError: the error every failed collective raises (a RuntimeError, as in
  // Horovod), carrying the core's message that names the tensor, the ranks and the values.
  // A collective called before init() (or after shutdown()): NotInitializedError, a
  // HorovodInternalError, as Horovod raises there, that is also a ValueError, as Horovod's
  // rank()/size() raise. A call refused for its arguments (a duplicate in-flight name, a bad
  // root, dtype or op): InvalidArgumentError, a HorovodInternalError that is also a
  // ValueError, the type Horovod raises for them. Ranks that disagree about a collective (shape,
  // dtype, op, or one rank's refused call): MismatchError, a HorovodInternalError (as Horovod
  // raises there) that elastic mode tells from a lost peer. All live in storage that is never
  // destroyed (see OnceStore).
  static OnceStore<ExceptionTypes> types;
  const ExceptionTypes& t = types.call_once_and_store_result([&] {
    pyb::exception<hvd::Error> error(m, "HorovodInternalError", PyExc_RuntimeError);
    pyb::tuple bases = pyb::make_tuple(error, pyb::handle(PyExc_ValueError));
    PyObject* ni = PyErr_NewException("hvd._core.NotInitializedError", bases.ptr(), nullptr);
    if (!ni) throw pyb::error_already_set();
    PyObject* ia = PyErr_NewException("hvd._core.InvalidArgumentError", bases.ptr(), nullptr);
    if (!ia) {
      Py_DECREF(ni);
      throw pyb::error_already_set();
    }
    PyObject* mm = PyErr_NewException("hvd._core.MismatchError", error.ptr(), nullptr);
    if (!mm) {
      Py_DECREF(ni);
      Py_DECREF(ia);
      throw pyb::error_already_set();
    }
    return ExceptionTypes{error, pyb::reinterpret_steal<pyb::object>(ni),
                          pyb::reinterpret_steal<pyb::object>(ia),
                          pyb::reinterpret_steal<pyb::object>(mm)};
  });
  m.add_object("NotInitializedError", t.not_initialized);
  m.add_object("InvalidArgumentError", t.invalid_argument);
  m.add_object("MismatchError", t.mismatch);
  g_error = t.error.ptr();
  g_not_initialized = t.not_initialized.ptr();
  g_invalid_argument = t.invalid_argument.ptr();
  g_mismatch = t.mismatch.ptr();
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hvd::Error& e) {
      set_error(e);
    }
  });
  bind_lifecycle(m);
  bind_process_sets(m);
  bind_host_buffer(m);
  bind_handle(m);
  bind_collectives(m);
  bind_registry(m);
  bind_elastic(m);
}
