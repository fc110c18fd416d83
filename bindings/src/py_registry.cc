// SPDX-License-Identifier: Apache-2.0
// The Python frontend of the gradient registry (hvd/optim/grad_registry.h): the registry's rules
// run here, in C++, for hvd.torch.DistributedOptimizer as for the libtorch one; the tensor work
// (hooks, staging, submission, writing results back) is done by the per-parameter Python objects
// of hvd/torch/_grad_registry.py, which this file calls with the GIL held.
//
// Locking: every call into the registry comes from Python, holding the GIL, and the registry calls
// back into Python under its own lock. The registry's lock is therefore only ever waited for with
// the GIL released (PyFrontend::lock), so a thread holding it can always get the GIL back.
#include "py_registry.h"

#include <pybind11/stl.h>

#include <memory>

#include "hvd/core/status.h"
#include "hvd/hvd.h"
#include "hvd/optim/grad_registry.h"

namespace hvd::py {
namespace {

namespace pyb = pybind11;
using optim::EntryList;
using optim::GradEntry;
using optim::GradParam;
using optim::GradReduction;

/// A parameter's Python object (hvd.torch._grad_registry._Slot).
class PyGradParam : public GradParam {
 public:
  PyGradParam(pyb::object slot, size_t nbytes, std::string describe)
      : slot_(std::move(slot)), nbytes_(nbytes), describe_(std::move(describe)) {}
  ~PyGradParam() override {
    pyb::gil_scoped_acquire gil;
    slot_ = param_ = view_ = pyb::object();
  }
  size_t nbytes() const override { return nbytes_; }
  std::string describe() const override { return describe_; }
  void attach(const std::weak_ptr<GradEntry>& e) override;
  void detach() override { call("detach"); }
  void stash() override { call("stash"); }
  void drop_stash() override { call("drop_stash"); }
  void release() override { call("release"); }
  void restore(bool released) override {
    try {
      slot_.attr("restore")(released);
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("restore");
    }
  }
  void settle() override { call("settle"); }
  bool untouched() const override {
    try {
      return slot_.attr("untouched")().cast<bool>();
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("untouched");
      return false;
    }
  }
  std::string bucket_kind() const override {
    try {
      return slot_.attr("bucket_kind")().cast<std::string>();
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("bucket_kind");
      return {};
    }
  }
  void reattach() override {
    if (!in_bucket_) return;     // nothing to do: no Python call
    if (grad_is_view()) return;  // already the view (zero_grad() without set_to_none): no call
    call("reattach");
  }
  void leave_bucket() override {
    in_bucket_ = false;
    param_ = view_ = pyb::object();
    call("leave_bucket");
  }
  /// make_bucket() gave it a view.
  void joined_bucket() {
    in_bucket_ = true;
    try {
      param_ = slot_.attr("param");
      view_ = slot_.attr("view");
    } catch (pyb::error_already_set& e) {
      param_ = view_ = pyb::object();
      e.discard_as_unraisable("joined_bucket");
    }
  }
  const pyb::object& slot() const { return slot_; }
  /// The bucket's in-place reduction `bucket` in flight still works on .grad: slot.inflight is
  /// it, slot.wired is the view and param.grad is the view (hvd.torch._grad_registry._on_view,
  /// without a Python frame); with `bare`, also nothing set aside (slot.base is None).
  bool on_view(PyObject* bucket, bool bare) const {
    static PyObject* const inflight = PyUnicode_InternFromString("inflight");
    static PyObject* const wired = PyUnicode_InternFromString("wired");
    static PyObject* const base = PyUnicode_InternFromString("base");
    if (!in_bucket_ || !view_) return false;
    PyObject* slot = slot_.ptr();
    return attr_is(slot, inflight, bucket) && attr_is(slot, wired, view_.ptr()) &&
           (!bare || attr_is(slot, base, Py_None)) && grad_is_view();
  }
  /// Forgets the finished flight (wired, wire, ctx, taken, inflight: None), as _finish_all does
  /// for a member whose result is its .grad already.
  bool forget_flight() const {
    static PyObject* const names[] = {
        PyUnicode_InternFromString("wired"), PyUnicode_InternFromString("wire"),
        PyUnicode_InternFromString("ctx"), PyUnicode_InternFromString("taken"),
        PyUnicode_InternFromString("inflight")};
    for (PyObject* n : names) {
      if (PyObject_SetAttr(slot_.ptr(), n, Py_None) != 0) return false;
    }
    return true;
  }

 private:
  /// Hooks and stashes cannot fail in a way the registry could repair: a Python error here is
  /// reported (sys.unraisablehook) and the call is skipped.
  void call(const char* method) {
    try {
      slot_.attr(method)();
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable(method);
    }
  }
  /// obj.<name> is `want` (one attribute read, no Python frame; an error reads as false).
  static bool attr_is(PyObject* obj, PyObject* name, PyObject* want) {
    PyObject* v = PyObject_GetAttr(obj, name);
    if (v == nullptr) {
      PyErr_Clear();
      return false;
    }
    const bool same = v == want;
    Py_DECREF(v);
    return same;
  }
  /// param.grad is this parameter's view.
  bool grad_is_view() const {
    if (!param_ || !view_) return false;
    static PyObject* const grad = PyUnicode_InternFromString("grad");
    return attr_is(param_.ptr(), grad, view_.ptr());
  }
  pyb::object slot_;
  size_t nbytes_;
  std::string describe_;
  bool in_bucket_ = false;
  pyb::object param_, view_;  ///< in a bucket: the parameter and its view (slot.param, .view)
};

/// A submitted reduction: the Python handle, then its result.
class PyReduction : public GradReduction {
 public:
  PyReduction(pyb::object handle, pyb::object wait_fn)
      : handle_(std::move(handle)), wait_(std::move(wait_fn)) {}
  ~PyReduction() override {
    pyb::gil_scoped_acquire gil;
    handle_ = result_ = wait_ = pyb::object();
  }
  Status wait() override {
    try {
      result_ = wait_(handle_);
      return Status();
    } catch (pyb::error_already_set& e) {
      return internal_error(e.what());
    }
  }
  bool done() override {
    try {
      return handle_.attr("poll")().cast<bool>();
    } catch (pyb::error_already_set&) {
      return true;  // wait() reports the error
    }
  }
  const pyb::object& result() const { return result_; }

 private:
  pyb::object handle_, wait_, result_;
};

class PyFrontend : public optim::GradFrontend {
 public:
  void lock(std::mutex& mu) override {
    if (mu.try_lock()) return;
    pyb::gil_scoped_release nogil;  // whoever holds it may need the GIL to finish
    mu.lock();
  }
  Result<std::shared_ptr<GradReduction>> submit(const std::vector<GradParam*>& params,
                                                const std::string& name, bool grouped,
                                                const optim::ReduceSettings&, bool zeros) override {
    try {
      pyb::object h = py_submit(slots_of(params), name, grouped, zeros);
      return std::shared_ptr<GradReduction>(std::make_shared<PyReduction>(h, py_wait));
    } catch (pyb::error_already_set& e) {
      return internal_error(e.what());
    }
  }
  Status make_bucket(const std::vector<GradParam*>& members, const std::string& name,
                     const optim::ReduceSettings&) override {
    try {
      py_make_bucket(slots_of(members), name);
      for (GradParam* p : members) static_cast<PyGradParam*>(p)->joined_bucket();
      return Status();
    } catch (pyb::error_already_set& e) {
      return internal_error(e.what());
    }
  }
  Result<std::shared_ptr<GradReduction>> submit_bucket(const std::vector<GradParam*>& members,
                                                       const std::string& name,
                                                       const optim::ReduceSettings&,
                                                       bool zeros) override {
    try {
      pyb::object h = py_submit_bucket(slots_of(members), name, zeros);
      return std::shared_ptr<GradReduction>(std::make_shared<PyReduction>(h, py_wait));
    } catch (pyb::error_already_set& e) {
      return internal_error(e.what());
    }
  }
  void finish(GradParam& p, GradReduction& r, size_t index, bool ok, Use use) override {
    try {
      const pyb::object& result = static_cast<PyReduction&>(r).result();
      static_cast<PyGradParam&>(p).slot().attr("finish")(result ? result : pyb::none(), index, ok,
                                                         static_cast<int>(use));
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("finish");
    }
  }
  void finish_all(const std::vector<GradParam*>& params, GradReduction& r,
                  const std::vector<size_t>& index, bool ok,
                  const std::vector<Use>& uses) override {
    try {
      const pyb::object& result = static_cast<PyReduction&>(r).result();
      pyb::list use_list(uses.size());
      for (size_t i = 0; i < uses.size(); ++i) use_list[i] = pyb::int_(static_cast<int>(uses[i]));
      py_finish_all(slots_of(params), result ? result : pyb::none(), pyb::cast(index), ok,
                    use_list);
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("finish_all");
    }
  }
  std::vector<bool> untouched_all(const std::vector<GradParam*>& params) override {
    std::vector<bool> out(params.size(), false);
    if (params.empty()) return out;
    try {
      pyb::list r = py_untouched_all(slots_of(params));
      for (size_t i = 0; i < out.size() && i < r.size(); ++i) out[i] = r[i].cast<bool>();
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("untouched_all");  // false: dropped, as if changed
    } catch (const pyb::cast_error&) {
    }
    return out;
  }
  bool bucket_untouched(const std::vector<GradParam*>& members) override {
    try {
      return static_cast<bool>(bucket_on_views(members, false));
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("bucket_untouched");  // false: asked member by member
      return false;
    }
  }
  bool finish_bucket(const std::vector<GradParam*>& members) override {
    try {
      pyb::object bucket = bucket_on_views(members, true);
      if (!bucket) return false;
      // Every member's result is its .grad: each forgets the flight, the bucket its wire.
      for (GradParam* p : members) {
        if (!static_cast<PyGradParam*>(p)->forget_flight()) throw pyb::error_already_set();
      }
      const auto pending =
          bucket.attr("pending").cast<int64_t>() - static_cast<int64_t>(members.size());
      bucket.attr("pending") = pending;
      if (pending == 0) bucket.attr("wire") = pyb::none();
      return true;
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("finish_bucket");
      return false;
    }
  }
  void drop_stash_all(const std::vector<GradParam*>& params) override {
    call_all(py_drop_stash_all, params, "drop_stash_all");
  }
  void settle_all(const std::vector<GradParam*>& params) override {
    call_all(py_settle_all, params, "settle_all");
  }
  Result<std::vector<int64_t>> agree(const std::string& name, const std::vector<int64_t>& values,
                                     int32_t process_set) override {
    std::vector<int64_t> buf = values;
    try {
      const TensorView v(buf.data(), DataType::kInt64, {static_cast<int64_t>(buf.size())});
      Handle h = hvd::allreduce_async(v, name, ReduceOp::kMax, 1.0, 1.0, ProcessSet(process_set));
      pyb::gil_scoped_release nogil;
      if (Status s = h.wait_status(); !s.ok()) return s;
    } catch (const Error& e) {
      return Status(e.code(), e.what());
    }
    return buf;
  }
  bool defer_to_end_of_pass() override {
    try {
      return py_defer().cast<bool>();
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable("defer_to_end_of_pass");
      return false;
    }
  }
  /// Set once by hvd.torch._grad_registry.
  pyb::object py_submit, py_wait, py_defer, py_make_bucket, py_submit_bucket, py_finish_all,
      py_settle_all, py_drop_stash_all, py_untouched_all;

 private:
  /// The _Bucket whose in-place reduction the members' first slot has in flight, when nobody
  /// wrote to its buffer since (hvd.torch._grad_registry._intact); else null.
  pyb::object intact_bucket(const std::vector<GradParam*>& members) {
    if (members.size() < 2) return pyb::object();
    pyb::object bucket = static_cast<PyGradParam*>(members[0])->slot().attr("inflight");
    if (bucket.is_none()) return pyb::object();
    if (!py_intact) py_intact = pyb::module_::import("hvd.torch._grad_registry").attr("_intact");
    return py_intact(bucket).cast<bool>() ? bucket : pyb::object();
  }
  pyb::object py_intact;
  /// intact_bucket(), when every member is on its view (PyGradParam::on_view); else null.
  pyb::object bucket_on_views(const std::vector<GradParam*>& members, bool bare) {
    pyb::object bucket = intact_bucket(members);
    if (!bucket) return bucket;
    for (GradParam* p : members) {
      if (!static_cast<PyGradParam*>(p)->on_view(bucket.ptr(), bare)) return pyb::object();
    }
    return bucket;
  }

  /// fn(slots of `params`), unless there are none; a Python error is reported, not raised.
  static void call_all(const pyb::object& fn, const std::vector<GradParam*>& params,
                       const char* what) {
    if (params.empty()) return;
    try {
      fn(slots_of(params));
    } catch (pyb::error_already_set& e) {
      e.discard_as_unraisable(what);
    }
  }
  static pyb::list slots_of(const std::vector<GradParam*>& params) {
    pyb::list slots(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      slots[i] = static_cast<PyGradParam*>(params[i])->slot();
    }
    return slots;
  }
};

PyFrontend& frontend() {
  static auto* fe = new PyFrontend();  // never destroyed: Python objects outlive statics
  return *fe;
}

optim::GradRegistry& registry() {
  static auto* r = new optim::GradRegistry(frontend(), 25u << 20);
  return *r;
}

/// What the hooks hold: the entry, weakly (the entry holds the hooks' owner).
struct EntryRef {
  std::weak_ptr<GradEntry> e;
  std::shared_ptr<GradEntry> get() const {
    auto p = e.lock();
    if (!p) throw pyb::value_error("the parameter is no longer registered");
    return p;
  }
};

/// What an optimizer holds: its entries.
struct Entries {
  EntryList list;
};

void PyGradParam::attach(const std::weak_ptr<GradEntry>& e) { slot_.attr("attach")(EntryRef{e}); }

void throw_status(const Status& s) {
  if (!s.ok()) throw hvd::Error(s);
}

optim::ReduceSettings settings_from(const pyb::tuple& t) {
  optim::ReduceSettings s;
  s.op = static_cast<ReduceOp>(t[0].cast<int>());
  s.compression = t[1].cast<std::string>();
  s.backward_passes_per_step = t[2].cast<int>();
  s.predivide = t[3].cast<double>();
  s.process_set = t[4].cast<int32_t>();
  s.sparse_as_dense = t[5].cast<bool>();
  s.bucket_view = t[6].cast<bool>();
  if (!t[7].is_none()) s.bucket_view_bytes = t[7].cast<size_t>();
  return s;
}

}  // namespace

void bind_registry(pybind11::module_& m) {
  pyb::class_<EntryRef>(m, "_GradEntryRef")
      // The hooks themselves (whatever torch passes them is ignored; they return None): no
      // Python frame between autograd and the registry.
      .def("pre_hook", [](const EntryRef& r,
                          const pyb::args&) { throw_status(registry().before_pass(r.get())); })
      .def("post_hook", [](const EntryRef& r,
                           const pyb::args&) { throw_status(registry().after_pass(r.get())); })
      .def_property_readonly("name", [](const EntryRef& r) { return r.get()->name; })
      .def_property_readonly("wire", [](const EntryRef& r) { return r.get()->wire; });
  pyb::class_<Entries>(m, "_GradEntries")
      .def("__len__", [](const Entries& e) { return e.list.size(); })
      .def("extend",
           [](Entries& e, const Entries& o) {
             e.list.insert(e.list.end(), o.list.begin(), o.list.end());
           })
      .def_property_readonly("names",
                             [](const Entries& e) {
                               std::vector<std::string> out;
                               for (const auto& x : e.list) out.push_back(x->name);
                               return out;
                             })
      .def_property_readonly("wires",
                             [](const Entries& e) {
                               std::vector<std::string> out;
                               for (const auto& x : e.list) out.push_back(x->wire);
                               return out;
                             })
      .def_property_readonly("slots", [](const Entries& e) {
        pyb::list out;
        for (const auto& x : e.list) out.append(static_cast<PyGradParam&>(*x->param).slot());
        return out;
      });

  m.def("registry_set_frontend",
        [](pyb::object submit, pyb::object wait, pyb::object defer, pyb::object make_bucket,
           pyb::object submit_bucket, pyb::object finish_all, pyb::object settle_all,
           pyb::object drop_stash_all, pyb::object untouched_all) {
          frontend().py_untouched_all = std::move(untouched_all);
          frontend().py_drop_stash_all = std::move(drop_stash_all);
          frontend().py_finish_all = std::move(finish_all);
          frontend().py_settle_all = std::move(settle_all);
          frontend().py_submit = std::move(submit);
          frontend().py_wait = std::move(wait);
          frontend().py_defer = std::move(defer);
          frontend().py_make_bucket = std::move(make_bucket);
          frontend().py_submit_bucket = std::move(submit_bucket);
        });
  // specs: [(name or None, key, slot, nbytes, description, remembered wire name or None)];
  // settings: (op, compression name, backward_passes_per_step, predivide, process set id,
  // sparse_as_dense, gradient_as_bucket_view, bucket bytes or None for the registry's default).
  m.def("registry_add",
        [](int64_t owner, const std::string& label, const pyb::list& specs,
           const pyb::tuple& settings, const std::vector<std::vector<size_t>>& groups) {
          std::vector<optim::ParamSpec> params;
          for (const auto& item : specs) {
            auto t = item.cast<pyb::tuple>();
            optim::ParamSpec p;
            p.name = t[0].is_none() ? std::string() : t[0].cast<std::string>();
            p.key = t[1].cast<uint64_t>();
            p.param = std::make_unique<PyGradParam>(pyb::reinterpret_borrow<pyb::object>(t[2]),
                                                    t[3].cast<size_t>(), t[4].cast<std::string>());
            if (t.size() > 5 && !t[5].is_none()) p.wire = t[5].cast<std::string>();
            params.push_back(std::move(p));
          }
          Result<EntryList> r =
              registry().add(owner, label, std::move(params), settings_from(settings), groups);
          if (!r.ok()) throw pyb::value_error(r.status().message());
          return Entries{std::move(r).value()};
        });
  m.def("registry_remove",
        [](int64_t owner, const Entries& e) { registry().remove(owner, e.list); });
  m.def("registry_has_live_name",
        [](const std::string& name) { return registry().has_live_name(name); });
  m.def("registry_synchronize", [](int64_t owner, const Entries& e) {
    throw_status(registry().synchronize(owner, e.list));
  });
  m.def("registry_consume",
        [](int64_t owner, const Entries& e) { registry().consume(owner, e.list); });
  m.def("registry_quiesce", [](const Entries& e) { registry().quiesce(e.list); });
  m.def("registry_end_of_pass", []() { throw_status(registry().end_of_pass()); });
  m.def("registry_pass_abandoned", []() { registry().pass_abandoned(); });
  m.def("registry_first_in_flight", [](const Entries& e) -> pyb::object {
    auto busy = registry().first_in_flight(e.list);
    if (!busy) return pyb::none();
    return pyb::str(busy->name);
  });
  m.def("registry_set_backward_passes_per_step", [](const Entries& e, int passes) {
    registry().set_backward_passes_per_step(e.list, passes);
  });
  m.def("registry_submissions", []() { return registry().submissions(); });
  m.def("registry_bucket_bytes", []() { return registry().bucket_bytes(); });
  m.def("registry_set_bucket_bytes", [](size_t b) { registry().set_bucket_bytes(b); });
}

}  // namespace hvd::py
