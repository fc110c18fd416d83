// SPDX-License-Identifier: Apache-2.0
// Collective submissions: a tensor arrives as (data pointer, dtype code, shape, device, stream);
// device -1 is host memory, >= 0 a CUDA device index; stream is the producer's cudaStream_t.
// Every call takes `keep`, the Python objects to hold until the collective finished, and
// returns a Handle (or a list of them for the grouped size-deciding forms).
#include "py_collectives.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "hvd/hvd.h"
#include "hvd/ops/gpu_module.h"
#include "py_handle.h"

namespace hvd::py {
namespace {

using Dims = std::vector<int64_t>;  // a shape as pybind11 converts it (the fast path: hvd::Shape)
/// (data pointer, dtype code, shape, device index, stream)
using Desc = std::tuple<uintptr_t, int, Dims, int, uintptr_t>;

/// Sweeps the graveyard every this many submissions (it is empty in the common case).
constexpr unsigned kSweepEvery = 256;

TensorView view(uintptr_t ptr, int dtype, hvd::Shape shape, int device, uintptr_t stream) {
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
  return make_handle(std::move(h), std::move(keep), std::move(extra));
}

/// For outputs whose size negotiation decides: host outputs are hvd's own memory (no
/// allocator); device outputs are allocated on the tensor's device by the background thread
/// and owned by the handle (`*extra`).
Allocator output_allocator(const TensorView& v, std::shared_ptr<void>* extra) {
  if (v.device.kind == DeviceKind::kHost) return nullptr;
  // Device memory comes from the GPU module (this extension links no CUDA).
  const ops::GpuModuleApi* gpu = ops::gpu_module().api;
  if (gpu == nullptr) {
    throw pyb::value_error(
        "hvd: a tensor on " + v.device.str() +
        " but this process has no GPU support (nccl_built() is 0): " + ops::gpu_module().reason);
  }
  struct DeviceBuffer {
    const ops::GpuModuleApi* gpu = nullptr;
    void* ptr = nullptr;
    ~DeviceBuffer() { gpu->device_free(ptr); }
  };
  auto buf = std::make_shared<DeviceBuffer>();
  buf->gpu = gpu;
  *extra = buf;
  const int device = v.device.index;
  const size_t elem = dtype_size(v.dtype);
  return [buf, device, elem](const Dims& shape) -> void* {
    size_t bytes = static_cast<size_t>(shape_numel(shape)) * elem;
    Result<void*> p = buf->gpu->device_alloc(device, bytes);
    if (!p.ok()) throw std::runtime_error(p.status().message());
    buf->ptr = p.value();
    return buf->ptr;
  };
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

/// `o` as a C integer of type T; false with a Python error set when it is not one or its
/// value does not fit T (never truncated: 2**32 + 1 is not 1).
template <typename T>
bool int_arg(PyObject* o, T* out) {
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) return false;
  using L = std::numeric_limits<T>;
  const bool fits = std::is_signed_v<T> ? v >= static_cast<long long>(L::min()) &&
                                              v <= static_cast<long long>(L::max())
                                        : v >= 0 && static_cast<unsigned long long>(v) <=
                                                        static_cast<unsigned long long>(L::max());
  if (!fits) {
    PyErr_Format(PyExc_ValueError, "hvd: integer argument %lld is out of range [%lld, %llu]", v,
                 static_cast<long long>(L::min()), static_cast<unsigned long long>(L::max()));
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

/// A reduce op code as the enum; a Python ValueError for any other value (the enum is 8 bits:
/// an unchecked cast would turn 256 into Sum).
ReduceOp reduce_op_arg(int op) {
  if (op < 0 || op > static_cast<int>(ReduceOp::kAdasum)) {
    throw pyb::value_error("hvd: reduce op " + std::to_string(op) +
                           " is not one of Sum, Average, Min, Max, Product, Adasum (0-5)");
  }
  return static_cast<ReduceOp>(op);
}

/// A shape given as a tuple (torch.Size is one) or any other sequence of ints.
bool shape_arg(PyObject* o, hvd::Shape* out) {
  if (PyTuple_Check(o)) {  // subclasses too: PySequence_Fast copies torch.Size into a new list
    const Py_ssize_t n = PyTuple_GET_SIZE(o);
    out->resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!int_arg(PyTuple_GET_ITEM(o, i), &(*out)[static_cast<size_t>(i)])) return false;
    }
    return true;
  }
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

/// The in-place allreduce of a contiguous host tensor (`keep`), as a new Handle.
PyObject* submit_host(PyObject* keep, uintptr_t ptr, int dtype, hvd::Shape shape, const char* name,
                      Py_ssize_t name_len, int op, double pre, double post, int32_t ps) {
  try {
    maybe_sweep();
    Handle h = allreduce_async(view(ptr, dtype, std::move(shape), -1, 0),
                               std::string(name, static_cast<size_t>(name_len)), reduce_op_arg(op),
                               pre, post, ProcessSet(ps));
    return wrap(std::move(h), pyb::reinterpret_borrow<pyb::object>(keep)).release().ptr();
  } catch (...) {
    raise_python_error(std::current_exception());
    return nullptr;
  }
}

/// allreduce_host(keep, ptr, dtype, shape, name, op, prescale, postscale, process_set): the
/// in-place allreduce of a contiguous host tensor. `name` may be None (an automatic name). A
/// raw METH_FASTCALL function rather than an m.def: pybind11's casting of 12 arguments alone
/// took 0.44 us a call, more than hvd's own submission.
PyObject* allreduce_host(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError, "allreduce_host() takes 9 arguments (%zd given)", nargs);
    return nullptr;
  }
  uintptr_t ptr = 0;
  int dtype = 0, op = 0;
  int32_t ps = 0;
  hvd::Shape shape;
  Py_ssize_t len = 0;
  const char* name = args[4] == Py_None ? "" : PyUnicode_AsUTF8AndSize(args[4], &len);
  if (!name || !int_arg(args[1], &ptr) || !int_arg(args[2], &dtype) ||
      !shape_arg(args[3], &shape) || !int_arg(args[5], &op) || !int_arg(args[8], &ps)) {
    return nullptr;
  }
  const double pre = PyFloat_AsDouble(args[6]), post = PyFloat_AsDouble(args[7]);
  if (PyErr_Occurred()) return nullptr;
  return submit_host(args[0], ptr, dtype, std::move(shape), name, len, op, pre, post, ps);
}

// ---- hvd.torch.allreduce_async_ ------------------------------------------------------------
//
// The call made once per gradient, entirely in C for the common case: no `average`, a plain op
// (Sum, Average, Min, Max, Product) or None, the global process set, a name that is None or a
// str, float or int scale factors, and a contiguous CPU tensor of a supported dtype. Every
// other call goes, arguments untouched, to the Python implementation (`fallback`), which owns
// the semantics: errors, warnings, copies of non-contiguous tensors, device tensors. The tensor
// is read through its Python attributes (is_cpu, is_contiguous(), dtype, data_ptr(), shape),
// so no framework is linked. The Python function's own frame and attribute reads took 0.4 us a
// call, as long as hvd's submission.

/// A tensor attribute read by the fast path: its interned name, and the descriptor found on
/// the tensor classes (null when it is not a plain getter or method: read by name then).
struct Attr {
  PyObject* name = nullptr;
  PyObject* descr = nullptr;
};

struct FastAllreduce {
  PyObject* fallback;  // the Python allreduce_async_
  PyObject* dtypes;    // dict: dtype object -> hvd dtype code
  PyObject* global_set;
  PyObject* kw[7];  // interned parameter names, in positional order
  /// Exact classes whose attributes are read through the descriptors of `classes[0]` (e.g.
  /// torch.Tensor and torch.nn.Parameter): no attribute lookup (the MRO, the instance dict) per
  /// read. Instances of any other class are read by name.
  PyTypeObject* classes[2];
  Attr is_cpu, is_contiguous, dtype, data_ptr, shape;
};

constexpr const char* kParams[7] = {"tensor",          "average",          "name",       "op",
                                    "prescale_factor", "postscale_factor", "process_set"};
constexpr int kMaxPlainOp = 4;  // Sum, Average, Min, Max, Product: 0..4

/// The parameter `name` stands for (-1: none).
int param_index(const FastAllreduce& f, PyObject* name) {
  for (int i = 0; i < 7; ++i) {
    if (name == f.kw[i]) return i;
  }
  for (int i = 0; i < 7; ++i) {
    if (PyUnicode_Compare(name, f.kw[i]) == 0) return i;
  }
  return -1;
}

bool scale_arg(PyObject* o, double* out) {
  if (!o) return true;
  if (!PyFloat_CheckExact(o) && !PyLong_CheckExact(o)) return false;
  *out = PyFloat_AsDouble(o);
  return !PyErr_Occurred();
}

/// Attribute `a` of `t` (a new reference): a property's value, or the result of a method called
/// without arguments (`call`). `direct`: `t` is an instance of one of the classes the
/// descriptors were found on.
PyObject* read_attr(PyObject* t, const Attr& a, bool call, bool direct) {
  if (direct && a.descr) {
    if (call) return PyObject_Vectorcall(a.descr, &t, 1, nullptr);
    return Py_TYPE(a.descr)->tp_descr_get(a.descr, t, reinterpret_cast<PyObject*>(Py_TYPE(t)));
  }
  return call ? PyObject_CallMethodNoArgs(t, a.name) : PyObject_GetAttr(t, a.name);
}

/// An attribute of `t` that must be True (see read_attr).
bool is_true(PyObject* t, const Attr& a, bool call, bool direct) {
  PyObject* v = read_attr(t, a, call, direct);
  if (!v) return false;
  const bool yes = v == Py_True;
  Py_DECREF(v);
  return yes;
}

/// The fast path: the handle, or nullptr with `*common` false when the call is not the common
/// case (take the fallback; a Python error may be set), or nullptr with `*common` true and the
/// error of the submission set.
PyObject* fast_allreduce(const FastAllreduce& f, PyObject* const* a, bool* common) {
  *common = false;
  PyObject* t = a[0];
  if (!t || (a[1] && a[1] != Py_None)) return nullptr;
  int op = 1;  // op=None and no average: Average
  if (a[3] && a[3] != Py_None) {
    if (!PyLong_CheckExact(a[3])) return nullptr;
    const long v = PyLong_AsLong(a[3]);
    if (v < 0 || v > kMaxPlainOp) {
      PyErr_Clear();
      return nullptr;
    }
    op = static_cast<int>(v);
  }
  double pre = 1.0, post = 1.0;
  if (!scale_arg(a[4], &pre) || !scale_arg(a[5], &post)) return nullptr;
  if (a[6] && a[6] != Py_None && a[6] != f.global_set) return nullptr;
  const char* name = "";
  Py_ssize_t len = 0;
  if (a[2] && a[2] != Py_None) {
    if (!PyUnicode_CheckExact(a[2]) || !(name = PyUnicode_AsUTF8AndSize(a[2], &len))) {
      return nullptr;
    }
  }
  const bool direct = Py_TYPE(t) == f.classes[0] || Py_TYPE(t) == f.classes[1];
  if (!is_true(t, f.is_cpu, false, direct) || !is_true(t, f.is_contiguous, true, direct)) {
    return nullptr;
  }
  pyb::object dt = pyb::reinterpret_steal<pyb::object>(read_attr(t, f.dtype, false, direct));
  PyObject* code = dt ? PyDict_GetItemWithError(f.dtypes, dt.ptr()) : nullptr;  // borrowed
  if (!code) return nullptr;
  pyb::object ptr = pyb::reinterpret_steal<pyb::object>(read_attr(t, f.data_ptr, true, direct));
  pyb::object shp = pyb::reinterpret_steal<pyb::object>(read_attr(t, f.shape, false, direct));
  uintptr_t p = 0;
  int dtype = 0;
  hvd::Shape shape;
  if (!ptr || !shp || !int_arg(ptr.ptr(), &p) || !int_arg(code, &dtype) ||
      !shape_arg(shp.ptr(), &shape)) {
    return nullptr;
  }
  *common = true;
  return submit_host(t, p, dtype, std::move(shape), name, len, op, pre, post, 0);
}

PyObject* allreduce_async_(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                           PyObject* kwnames) {
  const auto& f = *static_cast<FastAllreduce*>(PyCapsule_GetPointer(self, nullptr));
  PyObject* a[7] = {};
  bool plain = nargs <= 7;
  for (Py_ssize_t i = 0; plain && i < nargs; ++i) a[i] = args[i];
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; plain && i < nkw; ++i) {
    const int k = param_index(f, PyTuple_GET_ITEM(kwnames, i));
    plain = k >= 0 && !a[k];
    if (plain) a[k] = args[nargs + i];
  }
  if (plain) {
    bool common = false;
    PyObject* h = fast_allreduce(f, a, &common);
    if (h || common) return h;
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) return nullptr;
    PyErr_Clear();  // the fallback raises what the Python implementation raises
  }
  return PyObject_Vectorcall(f.fallback, args, static_cast<size_t>(nargs), kwnames);
}

PyMethodDef allreduce_async_def = {
    "allreduce_async_",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allreduce_async_)),
    METH_FASTCALL | METH_KEYWORDS,
    "allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, "
    "postscale_factor=1.0, process_set=global_process_set)\n\n"
    "In-place asynchronous allreduce; synchronize(handle) returns `tensor`."};

/// `a` named `name`, with its descriptor on `cls` when it is a plain one: a getter with
/// __get__ (`call` false) or a method descriptor (`call` true); else none (read by name).
void find_attr(Attr* a, const char* name, PyObject* cls, bool call) {
  a->name = PyUnicode_InternFromString(name);
  PyObject* d = PyObject_GetAttr(cls, a->name);
  if (!d) {
    PyErr_Clear();
    return;
  }
  const bool plain = call ? Py_IS_TYPE(d, &PyMethodDescr_Type)
                          : Py_IS_TYPE(d, &PyGetSetDescr_Type) && Py_TYPE(d)->tp_descr_get;
  if (plain) {
    a->descr = d;
  } else {
    Py_DECREF(d);
  }
}

/// fast_allreduce_(fallback, dtypes, global_set, classes): hvd.torch's allreduce_async_ (see
/// above); `classes`: one or two exact tensor classes whose attributes are those of the first.
pyb::object make_fast_allreduce(pyb::object fallback, pyb::dict dtypes, pyb::object global_set,
                                pyb::tuple classes) {
  if (classes.empty() || classes.size() > 2) throw pyb::value_error("classes: one or two types");
  for (auto c : classes) {
    if (!PyType_Check(c.ptr())) throw pyb::type_error("classes: types");
  }
  auto* f = new FastAllreduce{};  // lives as long as the function (the capsule's destructor)
  f->fallback = fallback.release().ptr();
  f->dtypes = dtypes.release().ptr();
  f->global_set = global_set.release().ptr();
  for (int i = 0; i < 7; ++i) f->kw[i] = PyUnicode_InternFromString(kParams[i]);
  for (size_t i = 0; i < 2; ++i) {
    PyObject* c = classes[std::min(i, classes.size() - 1)].ptr();
    Py_INCREF(c);
    f->classes[i] = reinterpret_cast<PyTypeObject*>(c);
  }
  PyObject* cls = reinterpret_cast<PyObject*>(f->classes[0]);
  find_attr(&f->is_cpu, "is_cpu", cls, false);
  find_attr(&f->is_contiguous, "is_contiguous", cls, true);
  find_attr(&f->dtype, "dtype", cls, false);
  find_attr(&f->data_ptr, "data_ptr", cls, true);
  find_attr(&f->shape, "shape", cls, false);
  pyb::capsule state(f, [](void* p) {
    auto* s = static_cast<FastAllreduce*>(p);
    PyObject* refs[] = {s->fallback, s->dtypes, s->global_set, s->kw[0], s->kw[1],
                        s->kw[2],    s->kw[3],  s->kw[4],      s->kw[5], s->kw[6]};
    for (PyObject* r : refs) Py_XDECREF(r);
    for (PyTypeObject* c : s->classes) Py_XDECREF(c);
    for (Attr* a : {&s->is_cpu, &s->is_contiguous, &s->dtype, &s->data_ptr, &s->shape}) {
      Py_XDECREF(a->name);
      Py_XDECREF(a->descr);
    }
    delete s;
  });
  PyObject* fn = PyCFunction_NewEx(&allreduce_async_def, state.ptr(), nullptr);
  if (!fn) throw pyb::error_already_set();
  return pyb::reinterpret_steal<pyb::object>(fn);
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
  m.def("fast_allreduce_", &make_fast_allreduce,
        "fast_allreduce_(fallback, dtypes, global_set, classes): allreduce_async_ with its "
        "common case in C; every other call goes to `fallback`. Instances of the (one or two) "
        "exact `classes` are read through the first's attribute descriptors.");
  m.def(
      "allreduce_async",
      [](pyb::object keep, uintptr_t ptr, int dtype, Dims shape, int device, uintptr_t stream,
         uintptr_t out_ptr, const std::string& name, int op, double pre, double post, int32_t ps) {
        maybe_sweep();
        TensorView in = view(ptr, dtype, std::move(shape), device, stream);
        Handle h;
        if (out_ptr == 0 || out_ptr == ptr) {
          h = allreduce_async(in, name, reduce_op_arg(op), pre, post, ProcessSet(ps));
        } else {
          TensorView out = in;
          out.data = reinterpret_cast<void*>(out_ptr);
          h = allreduce_async(in, out, name, reduce_op_arg(op), pre, post, ProcessSet(ps));
        }
        return wrap(std::move(h), std::move(keep));
      },
      pyb::arg("keep"), pyb::arg("ptr"), pyb::arg("dtype"), pyb::arg("shape"), pyb::arg("device"),
      pyb::arg("stream"), pyb::arg("out_ptr"), pyb::arg("name"), pyb::arg("op"),
      pyb::arg("prescale"), pyb::arg("postscale"), pyb::arg("process_set"));
  m.def("grouped_allreduce_async", [](pyb::object keep, const std::vector<Desc>& tensors,
                                      const std::string& name, int op, double pre, double post,
                                      int32_t ps) {
    maybe_sweep();
    Handle h =
        grouped_allreduce_async(views(tensors), name, reduce_op_arg(op), pre, post, ProcessSet(ps));
    return wrap(std::move(h), std::move(keep));
  });
  m.def("reducescatter_async", [](pyb::object keep, const Desc& d, const std::string& name, int op,
                                  double pre, double post, int32_t ps) {
    maybe_sweep();
    TensorView v = view(d);
    std::shared_ptr<void> extra;
    Allocator a = output_allocator(v, &extra);
    Handle h = reducescatter_async(v, name, reduce_op_arg(op), pre, post, ProcessSet(ps), a);
    return wrap(std::move(h), std::move(keep), std::move(extra));
  });
  m.def("grouped_reducescatter_async", [](pyb::object keep, const std::vector<Desc>& tensors,
                                          const std::string& name, int op, double pre, double post,
                                          int32_t ps) {
    maybe_sweep();
    std::vector<TensorView> vs = views(tensors);
    std::vector<std::shared_ptr<void>> extras(vs.size());
    std::vector<Allocator> allocs = output_allocators(vs, &extras);
    auto hs =
        grouped_reducescatter_async(vs, name, reduce_op_arg(op), pre, post, ProcessSet(ps), allocs);
    return wrap_all(std::move(hs), keep, std::move(extras));
  });
}

void bind_movement(pyb::module_& m) {
  m.def(
      "refuse_call",
      [](const std::string& op, const std::string& name, int group_size, const std::string& reason,
         int32_t ps) { hvd::detail::refuse_call(op, name, group_size, reason, ProcessSet(ps)); },
      "refuse_call(op, name, group_size, reason, process_set): this rank's call of `op` fails "
      "on every rank with `reason` (negotiated; see hvd::detail::refuse_call). Always raises.");
  m.def(
      "refuse_call_without_set",
      [](const std::string& op, const std::string& name, const std::string& reason) {
        hvd::detail::refuse_call_without_set(op, name, reason);
      },
      "refuse_call_without_set(op, name, reason): this rank's call of `op` on a process set it "
      "cannot name fails the call the other ranks wait for from it alone (see "
      "hvd::detail::refuse_call_without_set). Always raises.");
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
  m.def("alltoall_async", [](pyb::object keep, const Desc& d, const Dims& splits,
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
