// SPDX-License-Identifier: Apache-2.0
// PyHandle: waiting without the GIL, the graveyard of dropped handles, DLPack/numpy outputs.
#include "py_handle.h"

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>

#include "py_collectives.h"

namespace hvd::py {
namespace {

struct Dropped {
  Handle handle;
  pyb::object keep;
};

std::vector<Dropped>& graveyard() {
  static auto* g = new std::vector<Dropped>();  // never destroyed: outlives interpreter teardown
  return *g;
}

/// Owns what a DLPack tensor points into: the handle's state (hvd's output memory, or the
/// allocation made for it), plus the shape and strides DLPack points to.
struct DlpackOwner {
  DLManagedTensor managed{};
  Handle handle;                // keeps the state (and hvd's output memory) alive
  std::shared_ptr<void> extra;  // an output allocated for a device tensor
  std::vector<int64_t> shape;
};

void dlpack_deleter(DLManagedTensor* t) { delete static_cast<DlpackOwner*>(t->manager_ctx); }

DLDataType dl_dtype(DataType t) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(dtype_size(t) * 8);
  switch (t) {
    case DataType::kUInt8:
    case DataType::kBool:
      d.code = kDLUInt;
      break;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
      d.code = kDLInt;
      break;
    case DataType::kBFloat16:
      d.code = kDLBfloat;
      break;
    default:
      d.code = kDLFloat;
  }
  return d;
}

}  // namespace

PyHandle::~PyHandle() { park_keep(); }  // with the GIL held

void PyHandle::park_keep() {
  if (keep && !keep.is_none() && handle.valid() && !released()) {
    graveyard().push_back({handle, std::move(keep)});
  }
  keep = pyb::none();
}

bool PyHandle::released() {
  if (!let_go && finished && handle.released()) let_go = true;
  return let_go;
}

bool PyHandle::poll() {
  if (!finished && handle.poll()) finished = true;
  (void)released();
  return finished;
}

void PyHandle::wait() {
  Status s;
  if (handle.valid() && poll()) {
    s = handle.wait_status();  // finished: returns at once, no need to let the GIL go
  } else {
    pyb::gil_scoped_release nogil;
    s = handle.wait_status();
  }
  finished = true;
  (void)released();
  // A finished wait is a sync point: dropped handles submitted before it are likely done too.
  sweep_graveyard(false);
  throw_if_error(s);  // hvd::Error: the module's translator raises HorovodInternalError
}

void sweep_graveyard(bool all) {
  auto& g = graveyard();
  // Releasing a dropped handle's objects runs Python code that may drop more unfinished handles
  // (a grouped or sparse handle keeps its parts): those land in `g` while `done` dies, never
  // while `g` is being walked.
  while (!g.empty()) {
    std::vector<Dropped> done;
    if (all) {
      std::vector<Dropped> waiting;  // other Python threads may add to `g` meanwhile
      waiting.swap(g);
      {
        pyb::gil_scoped_release nogil;
        for (auto& d : waiting) (void)d.handle.wait_status();
      }
      for (auto& d : waiting) g.push_back(std::move(d));
    }
    {
      // Only once hvd let go of them (Handle::released()): after an abort a handle completes
      // while the executor may still write into its tensors, and one stuck on a dead peer never
      // lets go: those stay here for good (a leak, in a job that is already dead).
      size_t kept = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (g[i].handle.released()) {
          done.push_back(std::move(g[i]));
        } else {
          if (kept != i) g[kept] = std::move(g[i]);
          ++kept;
        }
      }
      g.erase(g.begin() + static_cast<std::ptrdiff_t>(kept), g.end());
      if (done.empty()) return;
    }
  }
}

size_t graveyard_size() {
  sweep_graveyard(false);
  return graveyard().size();
}

pyb::capsule output_dlpack(PyHandle& h) {
  if (!h.poll()) h.wait();
  auto* owner = new DlpackOwner();
  owner->handle = h.handle;
  owner->extra = h.extra;
  const TensorView& out = h.handle.output();
  owner->shape = out.shape;
  DLTensor& t = owner->managed.dl_tensor;
  t.data = out.data;
  t.device.device_type = out.device.kind == DeviceKind::kCuda ? kDLCUDA : kDLCPU;
  t.device.device_id = out.device.kind == DeviceKind::kCuda ? out.device.index : 0;
  t.ndim = static_cast<int32_t>(owner->shape.size());
  t.dtype = dl_dtype(out.dtype);
  t.shape = owner->shape.empty() ? nullptr : owner->shape.data();
  t.strides = nullptr;  // compact, row-major
  t.byte_offset = 0;
  owner->managed.manager_ctx = owner;
  owner->managed.deleter = dlpack_deleter;
  // A capsule nobody consumed deletes its tensor; a consumer renames it "used_dltensor" and
  // calls the deleter itself.
  PyObject* cap = PyCapsule_New(&owner->managed, "dltensor", [](PyObject* c) {
    if (PyCapsule_IsValid(c, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    }
  });
  if (!cap) {
    dlpack_deleter(&owner->managed);
    throw pyb::error_already_set();
  }
  return pyb::reinterpret_steal<pyb::capsule>(cap);
}

pyb::object output_numpy(PyHandle& h, const pyb::object& numpy_dtype) {
  if (!h.poll()) h.wait();
  const TensorView& out = h.handle.output();
  if (out.device.kind != DeviceKind::kHost) {
    throw pyb::value_error("output_numpy: the output lives on " + out.device.str());
  }
  auto* holder = new Handle(h.handle);
  pyb::capsule base(holder, [](void* p) { delete static_cast<Handle*>(p); });
  pyb::dtype dt = pyb::dtype::from_args(numpy_dtype);
  std::vector<pyb::ssize_t> shape(out.shape.begin(), out.shape.end());
  // Zero-element outputs may have no memory: numpy wants a non-null pointer.
  static uint64_t empty_storage = 0;
  void* data = out.data ? out.data : &empty_storage;
  return pyb::array(dt, shape, data, base);
}

}  // namespace hvd::py

namespace hvd::py {
namespace {

struct HandleObject {
  PyObject ob_base;    // what PyObject_HEAD declares
  PyHandle* h;         // constructed in `storage` (null until then)
  PyObject* weakrefs;  // weakref.ref(handle) works, as it did on the pybind11 class
  // The PyHandle lives inside the object: one allocation per collective, not two.
  alignas(PyHandle) unsigned char storage[sizeof(PyHandle)];
};

PyTypeObject* g_handle_type = nullptr;

PyHandle& self_of(PyObject* o) { return *reinterpret_cast<HandleObject*>(o)->h; }

/// Runs `f` (returning a pyb::object), turning a C++ exception into the Python one.
template <typename F>
PyObject* guarded_call(F&& f) {
  try {
    return f().release().ptr();
  } catch (...) {
    raise_python_error(std::current_exception());
    return nullptr;
  }
}

void handle_dealloc(PyObject* o) {
  PyObject_GC_UnTrack(o);
  auto* self = reinterpret_cast<HandleObject*>(o);
  if (self->weakrefs) PyObject_ClearWeakRefs(o);
  if (self->h) self->h->~PyHandle();  // an unfinished collective parks its objects in the graveyard
  Py_TYPE(o)->tp_free(o);
}

// `keep` is visited only once the handle saw hvd let go of its tensors (`let_go` changes only
// under the GIL in poll()/wait(), never during a collection): until then what it holds belongs
// to the collective, and must be neither cleared nor have its weak references cleared by the
// collector as part of a dead cycle. `ctx` is always visited.
int handle_traverse(PyObject* o, visitproc visit, void* arg) {
  PyHandle* h = reinterpret_cast<HandleObject*>(o)->h;  // null until make_handle() set it
  if (!h) return 0;
  if (h->let_go) Py_VISIT(h->keep.ptr());
  Py_VISIT(h->ctx.ptr());
  return 0;
}

// The collector breaks a cycle through this handle: `ctx` goes; `keep` goes too once hvd let
// go of it, else to the graveyard, which holds it until then. (A cycle through the
// `keep` of a handle nobody waited on is not found: see handle_traverse.)
int handle_clear(PyObject* o) {
  PyHandle* h = reinterpret_cast<HandleObject*>(o)->h;
  if (!h) return 0;
  pyb::object ctx = std::move(h->ctx);  // released on return, once the handle is consistent
  h->ctx = pyb::none();
  h->park_keep();
  return 0;
}

PyObject* handle_poll(PyObject* o, PyObject* /*unused*/) {
  return guarded_call([&] { return pyb::bool_(self_of(o).poll()); });
}

PyObject* handle_wait(PyObject* o, PyObject* /*unused*/) {
  return guarded_call([&] {
    self_of(o).wait();
    return pyb::none();
  });
}

PyObject* handle_hold(PyObject* o, PyObject* obj) {
  PyHandle& h = self_of(o);
  h.keep = h.keep.is_none() ? pyb::reinterpret_borrow<pyb::object>(obj)
                            : pyb::make_tuple(h.keep, pyb::handle(obj));
  Py_RETURN_NONE;
}

PyObject* handle_result(PyObject* o, PyObject* /*unused*/) {
  return guarded_call([&] { return self_of(o).result(); });
}

PyObject* handle_output_dlpack(PyObject* o, PyObject* /*unused*/) {
  return guarded_call([&] { return pyb::object(output_dlpack(self_of(o))); });
}

PyObject* handle_output_numpy(PyObject* o, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  const bool by_name =
      nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "dtype") == 0;
  if (n + nkw != 1 || (nkw == 1 && !by_name)) {
    PyErr_SetString(PyExc_TypeError, "output_numpy() takes one argument: dtype");
    return nullptr;
  }
  return guarded_call(
      [&] { return output_numpy(self_of(o), pyb::reinterpret_borrow<pyb::object>(args[0])); });
}

PyObject* get_output_shape(PyObject* o, void* /*unused*/) {
  return guarded_call([&] {
    PyHandle& h = self_of(o);
    if (!h.poll()) h.wait();
    return pyb::cast(h.handle.output().shape.vec());
  });
}

PyObject* get_received_splits(PyObject* o, void* /*unused*/) {
  return guarded_call([&] {
    PyHandle& h = self_of(o);
    if (!h.poll()) h.wait();
    return pyb::cast(h.handle.received_splits());
  });
}

PyObject* get_finished(PyObject* o, void* /*unused*/) {
  return PyBool_FromLong(self_of(o).finished);
}

PyObject* get_released(PyObject* o, void* /*unused*/) {
  PyHandle& h = self_of(o);
  (void)h.poll();
  return PyBool_FromLong(h.let_go);
}

using ObjectField = pyb::object PyHandle::*;

template <ObjectField member>
PyObject* get_object(PyObject* o, void* /*unused*/) {
  return pyb::object(self_of(o).*member).release().ptr();  // a new reference
}

int set_ctx(PyObject* o, PyObject* value, void* /*unused*/) {
  if (!value) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete a Handle's attribute");
    return -1;
  }
  self_of(o).ctx = pyb::reinterpret_borrow<pyb::object>(value);
  return 0;
}

PyMethodDef handle_methods[] = {
    {"poll", handle_poll, METH_NOARGS, "True once finished (never blocks)."},
    {"wait", handle_wait, METH_NOARGS,
     "Blocks until finished (without the GIL); raises HorovodInternalError on failure."},
    {"result", handle_result, METH_NOARGS, "wait(), then ctx (the Python layer's result)."},
    {"hold", handle_hold, METH_O,
     "hold(obj): keep obj alive (in `keep`) until the collective finished."},
    {"output_dlpack", handle_output_dlpack, METH_NOARGS,
     "The output of allgather/alltoall/reducescatter as a DLPack capsule (no copy)."},
    {"output_numpy",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(handle_output_numpy)),
     METH_FASTCALL | METH_KEYWORDS,
     "output_numpy(dtype): the output as a numpy array sharing hvd's memory (host outputs "
     "only)."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef handle_getset[] = {
    {"output_shape", get_output_shape, nullptr, "The output's shape (waits).", nullptr},
    {"received_splits", get_received_splits, nullptr, "alltoall's received splits (waits).",
     nullptr},
    {"finished", get_finished, nullptr, "Set by wait() or a poll() that saw completion.", nullptr},
    {"released", get_released, nullptr,
     "True once hvd no longer reads or writes the tensors in `keep` (after an abort a handle "
     "finishes while the background thread may still write them; never blocks).",
     nullptr},
    {"ctx", get_object<&PyHandle::ctx>, set_ctx,
     "What the Python layer needs to finish the call (free for its use); `keep` until set.",
     nullptr},
    {"keep", get_object<&PyHandle::keep>, nullptr,
     "The objects the collective uses, alive until hvd let go of them (`released`; read-only: "
     "the background thread may still read and write them; add to it with hold()).",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ---- synchronize(handle) ---------------------------------------------------------------------
//
// hvd.common.handles.synchronize, called once per collective: `handle.result()` (for a Handle
// without a method lookup), then `ctx.fn(handle)` when the result is a `Finish`. In C, as the
// Python function's frame took about a third of a wait's cost.

struct Synchronize {
  PyObject* finish_type;  // hvd.common.handles.Finish
  PyObject* result;       // interned "result"
  PyObject* fn;           // interned "fn"
};

PyObject* synchronize(PyObject* self, PyObject* handle) {
  const auto& s = *static_cast<Synchronize*>(PyCapsule_GetPointer(self, nullptr));
  PyObject* ctx = Py_TYPE(handle) == g_handle_type ? handle_result(handle, nullptr)
                                                   : PyObject_CallMethodNoArgs(handle, s.result);
  if (!ctx || Py_TYPE(ctx) != reinterpret_cast<PyTypeObject*>(s.finish_type)) return ctx;
  PyObject* fn = PyObject_GetAttr(ctx, s.fn);
  Py_DECREF(ctx);
  if (!fn) return nullptr;
  PyObject* out = PyObject_CallOneArg(fn, handle);
  Py_DECREF(fn);
  return out;
}

PyMethodDef synchronize_def = {
    "synchronize", synchronize, METH_O,
    "synchronize(handle)\n\nWaits for `handle` and returns its output; raises "
    "HorovodInternalError on failure."};

/// fast_synchronize(finish_type): the `synchronize` function of hvd.common.handles.
pyb::object make_synchronize(pyb::object finish_type) {
  auto* s = new Synchronize{};  // lives as long as the function (the capsule's destructor)
  s->finish_type = finish_type.release().ptr();
  s->result = PyUnicode_InternFromString("result");
  s->fn = PyUnicode_InternFromString("fn");
  pyb::capsule state(s, [](void* p) {
    auto* st = static_cast<Synchronize*>(p);
    Py_XDECREF(st->finish_type);
    Py_XDECREF(st->result);
    Py_XDECREF(st->fn);
    delete st;
  });
  PyObject* fn = PyCFunction_NewEx(&synchronize_def, state.ptr(), nullptr);
  if (!fn) throw pyb::error_already_set();
  return pyb::reinterpret_steal<pyb::object>(fn);
}

}  // namespace

pyb::object make_handle(Handle h, pyb::object keep, std::shared_ptr<void> extra) {
  PyObject* o = g_handle_type->tp_alloc(g_handle_type, 0);  // zeroed: `h` null, no weakrefs
  if (!o) throw pyb::error_already_set();
  auto* self = reinterpret_cast<HandleObject*>(o);
  self->h = new (self->storage) PyHandle(std::move(h), std::move(keep));
  self->h->extra = std::move(extra);
  return pyb::reinterpret_steal<pyb::object>(o);
}

void bind_handle(pyb::module_& m) {
  static PyTypeObject type = [] {
    PyTypeObject t{};
    Py_SET_REFCNT(reinterpret_cast<PyObject*>(&t), 1);  // static: never freed
    t.tp_name = "hvd._core.Handle";
    t.tp_basicsize = sizeof(HandleObject);
    t.tp_dealloc = handle_dealloc;
    // A GC type: `ctx` is the Python layer's to set, so a cycle can run through a handle.
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    t.tp_traverse = handle_traverse;
    t.tp_clear = handle_clear;
    t.tp_free = PyObject_GC_Del;
    t.tp_doc =
        "A collective in flight. Keeps its tensors alive until hvd let go of them; dropping it "
        "unfinished is safe.";
    t.tp_weaklistoffset = offsetof(HandleObject, weakrefs);
    t.tp_methods = handle_methods;
    t.tp_getset = handle_getset;
    return t;
  }();
  if (PyType_Ready(&type) < 0) throw pyb::error_already_set();
  g_handle_type = &type;
  m.add_object("Handle", pyb::handle(reinterpret_cast<PyObject*>(&type)));
  m.def("fast_synchronize", &make_synchronize,
        "fast_synchronize(finish_type): synchronize(handle), which returns handle.result(), or "
        "result.fn(handle) when the result is a finish_type.");
}

}  // namespace hvd::py
