// SPDX-License-Identifier: Apache-2.0
// PyHandle: waiting without the GIL, the graveyard of dropped handles, DLPack/numpy outputs.
#include "py_handle.h"

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>

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

PyHandle::~PyHandle() {
  // pybind11 destroys instances with the GIL held.
  if (keep && !keep.is_none() && handle.valid() && !handle.poll()) {
    graveyard().push_back({handle, std::move(keep)});
  }
}

bool PyHandle::poll() {
  if (!finished && handle.poll()) finished = true;
  return finished;
}

void PyHandle::wait() {
  Status s;
  {
    pyb::gil_scoped_release nogil;
    s = handle.wait_status();
  }
  finished = true;
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
      done.swap(g);
      pyb::gil_scoped_release nogil;
      for (auto& d : done) (void)d.handle.wait_status();
    } else {
      size_t kept = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (g[i].handle.poll()) {
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

void bind_handle(pyb::module_& m) {
  pyb::class_<PyHandle>(m, "Handle",
                        "A collective in flight. Keeps its tensors alive until it finished; "
                        "dropping it unfinished is safe.")
      .def("poll", &PyHandle::poll, "True once finished (never blocks).")
      .def("wait", &PyHandle::wait,
           "Blocks until finished (without the GIL); raises HorovodInternalError on failure.")
      .def("result", &PyHandle::result, "wait(), then ctx (the Python layer's result).")
      .def("output_dlpack", &output_dlpack,
           "The output of allgather/alltoall/reducescatter as a DLPack capsule (no copy).")
      .def("output_numpy", &output_numpy, pyb::arg("dtype"),
           "The output as a numpy array sharing hvd's memory (host outputs only).")
      .def_property_readonly("output_shape",
                             [](PyHandle& h) {
                               if (!h.poll()) h.wait();
                               return h.handle.output().shape;
                             })
      .def_property_readonly("received_splits",
                             [](PyHandle& h) {
                               if (!h.poll()) h.wait();
                               return h.handle.received_splits();
                             })
      .def_property_readonly("finished", [](PyHandle& h) { return h.finished; })
      .def_readwrite("ctx", &PyHandle::ctx)
      .def_readwrite("keep", &PyHandle::keep);
}

}  // namespace hvd::py
