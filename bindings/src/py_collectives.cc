// SPDX-License-Identifier: Apache-2.0
// Collective submissions: a tensor arrives as (data pointer, dtype code, shape, device, stream);
// device -1 is host memory, >= 0 a CUDA device index; stream is the producer's cudaStream_t.
// Every call takes `keep`, the Python objects to hold until the collective finished, and
// returns a Handle (or a list of them for the grouped size-deciding forms).
#include "py_collectives.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "hvd/hvd.h"
#include "py_handle.h"
#if HVD_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace hvd::py {
namespace {

using Shape = std::vector<int64_t>;
/// (data pointer, dtype code, shape, device index, stream)
using Desc = std::tuple<uintptr_t, int, Shape, int, uintptr_t>;

/// Sweeps the graveyard every this many submissions (it is empty in the common case).
constexpr unsigned kSweepEvery = 256;

TensorView view(uintptr_t ptr, int dtype, Shape shape, int device, uintptr_t stream) {
  if (!dtype_valid(dtype))
    throw pyb::value_error("hvd: unsupported dtype code " + std::to_string(dtype));
  TensorView v(reinterpret_cast<void*>(ptr), static_cast<DataType>(dtype), std::move(shape),
               device < 0 ? Device::host() : Device::cuda(device));
  v.stream = reinterpret_cast<void*>(stream);
  return v;
}

TensorView view(const Desc& d) {
  return view(std::get<0>(d), std::get<1>(d), std::get<2>(d), std::get<3>(d), std::get<4>(d));
}

void maybe_sweep() {
  static unsigned n = 0;
  if (++n % kSweepEvery == 0) sweep_graveyard(false);
}

pyb::object wrap(Handle h, pyb::object keep, std::shared_ptr<void> extra = {}) {
  auto p = std::make_unique<PyHandle>(std::move(h), std::move(keep));
  p->extra = std::move(extra);
  return make_handle(std::move(p));
}

/// For outputs whose size negotiation decides: host outputs are hvd's own memory (no
/// allocator); device outputs are allocated on the tensor's device by the background thread
/// and owned by the handle (`*extra`).
Allocator output_allocator(const TensorView& v, std::shared_ptr<void>* extra) {
  if (v.device.kind == DeviceKind::kHost) return nullptr;
#if HVD_HAVE_NCCL
  struct DeviceBuffer {
    void* ptr = nullptr;
    ~DeviceBuffer() {
      if (ptr) cudaFree(ptr);
    }
  };
  auto buf = std::make_shared<DeviceBuffer>();
  *extra = buf;
  const int device = v.device.index;
  const size_t elem = dtype_size(v.dtype);
  return [buf, device, elem](const Shape& shape) -> void* {
    size_t bytes = static_cast<size_t>(shape_numel(shape)) * elem;
    if (cudaSetDevice(device) != cudaSuccess) return nullptr;
    if (cudaMalloc(&buf->ptr, bytes > 0 ? bytes : 1) != cudaSuccess) {
      (void)cudaGetLastError();
      buf->ptr = nullptr;
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
    }
    return buf->ptr;
  };
#else
  (void)extra;
  throw pyb::value_error("hvd: a tensor on " + v.device.str() +
                         " but this build of hvd has no CUDA support (nccl_built() is False)");
#endif
}

/// One allocator per tensor (output_allocator), or none at all when every tensor is on the host.
std::vector<Allocator> output_allocators(const std::vector<TensorView>& vs,
                                         std::vector<std::shared_ptr<void>>* extras) {
  std::vector<Allocator> allocs;
  bool device = false;
  for (size_t i = 0; i < vs.size(); ++i) {
    allocs.push_back(output_allocator(vs[i], &(*extras)[i]));
    device = device || allocs.back() != nullptr;
  }
  if (!device) allocs.clear();
  return allocs;
}

std::vector<TensorView> views(const std::vector<Desc>& ds) {
  std::vector<TensorView> out;
  out.reserve(ds.size());
  for (const auto& d : ds) out.push_back(view(d));
  return out;
}

pyb::list wrap_all(std::vector<Handle> hs, const pyb::object& keep,
                   std::vector<std::shared_ptr<void>> extras) {
  pyb::list out;
  for (size_t i = 0; i < hs.size(); ++i) {
    out.append(wrap(std::move(hs[i]), keep, i < extras.size() ? extras[i] : nullptr));
  }
  return out;
}

/// `o` as a C integer; false with a Python error set when it is not one.
template <typename T>
bool int_arg(PyObject* o, T* out) {
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) return false;
  *out = static_cast<T>(v);
  return true;
}

/// A shape given as a tuple (torch.Size is one) or any other sequence of ints.
bool shape_arg(PyObject* o, Shape* out) {
  pyb::object seq = pyb::reinterpret_steal<pyb::object>(PySequence_Fast(o, "shape: a sequence"));
  if (!seq) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  out->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!int_arg(items[i], &(*out)[static_cast<size_t>(i)])) return false;
  }
  return true;
}

/// allreduce_host(keep, ptr, dtype, shape, name, op, prescale, postscale, process_set): the
/// in-place allreduce of a contiguous host tensor, the call made once per gradient. `name` may
/// be None (an automatic name). A raw METH_FASTCALL function rather than an m.def: pybind11's
/// casting of 12 arguments alone took 0.44 us a call, more than hvd's own submission.
PyObject* allreduce_host(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError, "allreduce_host() takes 9 arguments (%zd given)", nargs);
    return nullptr;
  }
  uintptr_t ptr = 0;
  int dtype = 0, op = 0;
  int32_t ps = 0;
  Shape shape;
  Py_ssize_t len = 0;
  const char* name = args[4] == Py_None ? "" : PyUnicode_AsUTF8AndSize(args[4], &len);
  if (!name || !int_arg(args[1], &ptr) || !int_arg(args[2], &dtype) ||
      !shape_arg(args[3], &shape) || !int_arg(args[5], &op) || !int_arg(args[8], &ps)) {
    return nullptr;
  }
  const double pre = PyFloat_AsDouble(args[6]), post = PyFloat_AsDouble(args[7]);
  if (PyErr_Occurred()) return nullptr;
  try {
    maybe_sweep();
    Handle h = allreduce_async(view(ptr, dtype, std::move(shape), -1, 0), std::string(name, len),
                               static_cast<ReduceOp>(op), pre, post, ProcessSet(ps));
    return wrap(std::move(h), pyb::reinterpret_borrow<pyb::object>(args[0])).release().ptr();
  } catch (...) {
    raise_python_error(std::current_exception());
    return nullptr;
  }
}

PyMethodDef allreduce_host_def = {
    "allreduce_host", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allreduce_host)),
    METH_FASTCALL,
    "allreduce_host(keep, ptr, dtype, shape, name, op, prescale, postscale, process_set): "
    "in-place allreduce of a contiguous host tensor; returns a Handle."};

void bind_reductions(pyb::module_& m) {
  PyObject* f = PyCFunction_NewEx(&allreduce_host_def, nullptr, m.attr("__name__").ptr());
  if (!f) throw pyb::error_already_set();
  m.add_object("allreduce_host", pyb::reinterpret_steal<pyb::object>(f));
  m.def(
      "allreduce_async",
      [](pyb::object keep, uintptr_t ptr, int dtype, Shape shape, int device, uintptr_t stream,
         uintptr_t out_ptr, const std::string& name, int op, double pre, double post, int32_t ps) {
        maybe_sweep();
        TensorView in = view(ptr, dtype, std::move(shape), device, stream);
        Handle h;
        if (out_ptr == 0 || out_ptr == ptr) {
          h = allreduce_async(in, name, static_cast<ReduceOp>(op), pre, post, ProcessSet(ps));
        } else {
          TensorView out = in;
          out.data = reinterpret_cast<void*>(out_ptr);
          h = allreduce_async(in, out, name, static_cast<ReduceOp>(op), pre, post, ProcessSet(ps));
        }
        return wrap(std::move(h), std::move(keep));
      },
      pyb::arg("keep"), pyb::arg("ptr"), pyb::arg("dtype"), pyb::arg("shape"), pyb::arg("device"),
      pyb::arg("stream"), pyb::arg("out_ptr"), pyb::arg("name"), pyb::arg("op"),
      pyb::arg("prescale"), pyb::arg("postscale"), pyb::arg("process_set"));
  m.def("grouped_allreduce_async",
        [](pyb::object keep, const std::vector<Desc>& tensors, const std::string& name, int op,
           double pre, double post, int32_t ps) {
          maybe_sweep();
          Handle h = grouped_allreduce_async(views(tensors), name, static_cast<ReduceOp>(op), pre,
                                             post, ProcessSet(ps));
          return wrap(std::move(h), std::move(keep));
        });
  m.def("reducescatter_async", [](pyb::object keep, const Desc& d, const std::string& name, int op,
                                  double pre, double post, int32_t ps) {
    maybe_sweep();
    TensorView v = view(d);
    std::shared_ptr<void> extra;
    Allocator a = output_allocator(v, &extra);
    Handle h =
        reducescatter_async(v, name, static_cast<ReduceOp>(op), pre, post, ProcessSet(ps), a);
    return wrap(std::move(h), std::move(keep), std::move(extra));
  });
  m.def("grouped_reducescatter_async",
        [](pyb::object keep, const std::vector<Desc>& tensors, const std::string& name, int op,
           double pre, double post, int32_t ps) {
          maybe_sweep();
          std::vector<TensorView> vs = views(tensors);
          std::vector<std::shared_ptr<void>> extras(vs.size());
          std::vector<Allocator> allocs = output_allocators(vs, &extras);
          auto hs = grouped_reducescatter_async(vs, name, static_cast<ReduceOp>(op), pre, post,
                                                ProcessSet(ps), allocs);
          return wrap_all(std::move(hs), keep, std::move(extras));
        });
}

void bind_movement(pyb::module_& m) {
  m.def("broadcast_async",
        [](pyb::object keep, const Desc& d, int root, const std::string& name, int32_t ps) {
          maybe_sweep();
          return wrap(broadcast_async(view(d), root, name, ProcessSet(ps)), std::move(keep));
        });
  m.def(
      "allgather_async", [](pyb::object keep, const Desc& d, const std::string& name, int32_t ps) {
        maybe_sweep();
        TensorView v = view(d);
        std::shared_ptr<void> extra;
        Allocator a = output_allocator(v, &extra);
        return wrap(allgather_async(v, name, ProcessSet(ps), a), std::move(keep), std::move(extra));
      });
  m.def("grouped_allgather_async", [](pyb::object keep, const std::vector<Desc>& tensors,
                                      const std::string& name, int32_t ps) {
    maybe_sweep();
    std::vector<TensorView> vs = views(tensors);
    std::vector<std::shared_ptr<void>> extras(vs.size());
    std::vector<Allocator> allocs = output_allocators(vs, &extras);
    auto hs = grouped_allgather_async(vs, name, ProcessSet(ps), allocs);
    return wrap_all(std::move(hs), keep, std::move(extras));
  });
  m.def("alltoall_async", [](pyb::object keep, const Desc& d, const Shape& splits,
                             const std::string& name, int32_t ps) {
    maybe_sweep();
    TensorView v = view(d);
    std::shared_ptr<void> extra;
    Allocator a = output_allocator(v, &extra);
    return wrap(alltoall_async(v, splits, name, ProcessSet(ps), a), std::move(keep),
                std::move(extra));
  });
}

}  // namespace

void bind_collectives(pyb::module_& m) {
  bind_reductions(m);
  bind_movement(m);
}

}  // namespace hvd::py
