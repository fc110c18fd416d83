// SPDX-License-Identifier: Apache-2.0
// The Python side of a collective in flight (private to the extension).
//
// A PyHandle holds the core handle plus the Python objects the collective reads or writes
// (`keep`): they stay alive until hvd let go of them (Handle::released(): normally when the
// collective finished; after an abort, which fails handles at once, only when the background
// thread's executor returned). A PyHandle dropped before that moves them to a graveyard, swept
// (with the GIL held) on later submissions and at shutdown, so no Python object is ever
// released on the background thread, and no tensor is freed while hvd may write it. An
// executor stuck for good on a dead peer never lets go: its tensors stay in the graveyard
// until the process exits (a leak only in a job that is already dead).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "hvd/hvd.h"

namespace hvd::py {

namespace pyb = pybind11;

struct PyHandle {
  Handle handle;
  /// Tensors the collective uses (inputs, outputs): read-only from Python (hold() adds to it),
  /// since the background thread may read and write them until the collective finished.
  pyb::object keep;
  /// What the Python layer needs to finish the call (free for its use); `keep` until set.
  pyb::object ctx;
  std::shared_ptr<void> extra;  ///< memory allocated for a device output (owned with it)
  /// Set by wait(): the first wait or a poll() that saw completion.
  bool finished = false;
  /// Set (GIL held, by released(), poll() and wait()) once finished and hvd let go of `keep`.
  bool let_go = false;

  PyHandle(Handle h, pyb::object k) : handle(std::move(h)), keep(std::move(k)), ctx(keep) {}
  ~PyHandle();
  /// Lets go of `keep` (GIL held): at once when the collective finished, else through the
  /// graveyard once it has.
  void park_keep();
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;

  /// True once finished. Never blocks.
  bool poll();
  /// True once finished and hvd no longer touches `keep` (updates `let_go`). Never blocks.
  bool released();
  /// Blocks (GIL released) until finished, then sweeps the graveyard; raises
  /// HorovodInternalError with the core's message.
  void wait();
  /// wait(), then `ctx`.
  pyb::object result() {
    wait();
    return ctx;
  }
};

/// Releases the Python objects of dropped handles that hvd let go of (GIL held). `all`: wait
/// for every dropped handle to finish first (shutdown); those still not let go stay.
void sweep_graveyard(bool all);
/// Dropped handles still waiting for their collective (sweeps the finished ones first).
size_t graveyard_size();

/// A new Python `Handle` owning `h`, holding `keep` (and `extra`: memory allocated for a device
/// output), GIL held. The type is a plain CPython type rather than a pybind11 class: one is made
/// per collective, and pybind11's instance registry made each cost 0.24 us to create and
/// destroy, as much as hvd's own submission; the PyHandle lives inside the object.
pyb::object make_handle(Handle h, pyb::object keep, std::shared_ptr<void> extra = {});

/// The output of a size-deciding collective as a DLPack capsule ("dltensor") that owns it (the
/// handle's memory is shared, never copied). `dtype_code`/`bits`/`lanes` follow DLPack.
pyb::capsule output_dlpack(PyHandle& h);
/// The output as a numpy array sharing the handle's memory (host outputs only).
pyb::object output_numpy(PyHandle& h, const pyb::object& numpy_dtype);

void bind_handle(pyb::module_& m);

}  // namespace hvd::py
