# SPDX-License-Identifier: Apache-2.0
"""The torch side of hvd's gradient registry (private).

The registry's rules (which parameters are reduced, under which names, when; see
optimizer/include/hvd/optim/grad_registry.h) live once, in C++, and are shared with the libtorch
DistributedOptimizer. This module gives the registry what it needs from torch, without the
extension ever linking torch:

- ``_Slot``: one per registered parameter. It installs the two hooks (before autograd accumulates
  into ``.grad``: ``register_hook``; after: the post-accumulate hook, or a hook on the gradient
  accumulator before torch 2.1), sets the gradient aside when a new backward pass starts on a
  reduced gradient (``stash``: a reference move, no copy), takes a gradient in flight away from
  a new pass (``release``), puts either back when the pass accumulated nothing (``restore``:
  torch.autograd.grad) and writes results back (``finish``, ``settle``).
- ``_submit``: starts a reduction of the slots' gradients, or of zeros (compression, sparse
  gradients by allgather, grouped allreduces), ``_wait`` waits for one, ``_defer`` runs the
  registry's end-of-pass flush when the current backward pass ends (ready reductions are
  bucketed, as DDP does, so the runtime fuses a pass's gradients into few rounds), and tells the
  registry when the pass raised instead (so that the next pass overlaps again).
"""
import gc
import weakref

import torch

from hvd import _core
from hvd.common.basics import Average, _set_id
from hvd.torch import mpi_ops

_SPARSE = object()  # ctx marker: the slot was reduced with sparse_allreduce_async
# _Slot.attached: what .grad was before a pre-hook made it the bucket's view
_WAS_NONE, _WAS_VALUE, _STASHED = object(), object(), object()


class _Slot:
    """One registered parameter (see the module docstring)."""
    __slots__ = ("param", "settings", "sparse", "sparse_only", "acc", "hooks", "base", "wired",
                 "wired_version", "wire", "ctx", "taken", "bucket", "view", "attached",
                 "inflight", "owned", "__weakref__")

    def __init__(self, param, settings, sparse):
        self.param, self.settings = param, settings
        self.sparse = sparse  # its gradients are sparse (SparseAdam, or seen so)
        self.sparse_only = sparse  # its optimizer takes sparse gradients only (SparseAdam)
        self.acc, self.hooks = None, []
        self.base = self.wired = self.wire = self.ctx = self.taken = None
        self.wired_version = 0
        # Bucket views: the _Bucket, this parameter's view into its flat buffer, and what .grad
        # was before a pre-hook made it the view (None: nothing attached since the last pass).
        self.bucket = self.view = self.attached = None
        self.inflight = None  # the _Bucket whose reduction in flight holds this gradient
        self.owned = None  # weak reference to the .grad given a version counter of its own

    def attach(self, ref):
        p = self.param
        # The registry's own methods are the hooks (no Python frame of ours per hook).
        before, after = ref.pre_hook, ref.post_hook
        self.hooks.append(p.register_hook(before))
        if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
            self.hooks.append(p.register_post_accumulate_grad_hook(after))
        else:
            with torch.enable_grad():
                self.acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self.hooks.append(self.acc.register_hook(after))  # self.acc keeps the hook alive

    def detach(self):
        for h in self.hooks:
            h.remove()
        self.hooks, self.acc = [], None

    def stash(self):
        g = self.param.grad
        self.attached = None
        if g is None:
            return
        if self.view is not None and g is self.view:
            # The view stays .grad (the pass accumulates into it): its value is set aside.
            with torch.no_grad():
                self.base = g.clone()
                g.zero_()
            self.attached = _STASHED
            return
        self.base = g
        self.param.grad = None

    def drop_stash(self):
        self.base = None
        self.attached = None

    def release(self):
        """A pass begins while .grad is being reduced: the reduction keeps it, .grad empties."""
        if self.wired is not None and self.param.grad is self.wired:
            self.taken, self.param.grad = self.param.grad, None

    def restore(self, released):
        """The pass of the last stash()/release() accumulated nothing: .grad as it was."""
        p, attached = self.param, self.attached
        self.attached = None
        if attached is not None and not released and self.view is not None and \
                p.grad is self.view:
            # reattach() (or a stash of the view) made .grad the view for the pass: put back
            # what .grad held before.
            if self.base is not None:
                with torch.no_grad():
                    self.view.copy_(self.base)
                self.base = None
            elif attached is _WAS_NONE:
                p.grad = None
            self.taken = None
            return
        if p.grad is None:
            p.grad = self.taken if released else self.base
            if not released:
                self.base = None
        self.taken = None

    def untouched(self):
        """.grad is still the gradient the reduction in flight started from."""
        g = self.param.grad
        return g is not None and g is self.wired and \
            (self.ctx is _SPARSE or g._version == self._wired_version())

    def _wired_version(self):
        # A bucket's views share one version counter: finish() of a mate writes into the flat
        # buffer too (decompression, a set-aside value), so the bucket keeps the count expected.
        return self.inflight.version if self.inflight is not None else self.wired_version

    # ---- bucket views ----------------------------------------------------------------------

    def bucket_kind(self):
        """The flat buffer this gradient can live in ("float32/cpu"), or "" (never bucketed:
        sparse gradients, tensors that are not strided)."""
        p = self.param
        if self.sparse or self.sparse_only or p.layout != torch.strided or \
                (p.grad is not None and p.grad.layout != torch.strided):
            return ""
        return f"{str(p.dtype).replace('torch.', '')}/{p.device.type}"

    def reattach(self):
        """.grad becomes the view again (holding .grad's value, zeros when empty), unless the
        bucket is being reduced."""
        b, p = self.bucket, self.param
        if b is None or b.pending or p.grad is self.view:
            return
        g = p.grad
        with torch.no_grad():
            if g is None:
                self.view.zero_()
            else:
                self.view.copy_(g)
        p.grad = self.view
        if self.attached is None:
            self.attached = _WAS_NONE if g is None else _WAS_VALUE

    def leave_bucket(self):
        self.bucket = self.view = self.attached = None

    def settle(self):
        """Results set aside (reductions of earlier passes, zeros) join .grad."""
        if self.base is None:
            return
        p, base = self.param, self.base
        self.base = None
        with torch.no_grad():
            if p.grad is None:
                p.grad = base
            elif p.grad.is_sparse or base.is_sparse:
                p.grad = p.grad + base
            else:
                p.grad.add_(base)
            if self.sparse_only and not p.grad.is_sparse:
                p.grad = p.grad.to_sparse(min(1, p.grad.dim()))

    def _value(self, result, index):
        if self.ctx is _SPARSE:
            return result
        if self.inflight is not None:
            # A bucket's reduction: this member's slice of the flat buffer, reduced in place.
            return self.settings.compression.decompress(self.wire, self.ctx)
        val = result if index is None or not isinstance(result, (list, tuple)) else result[index]
        return self.settings.compression.decompress(val, self.ctx)

    def finish(self, result, index, ok, use=0):
        """Reduction over. use 0: .grad becomes result + base (unless the user replaced or
        changed .grad meanwhile); 1: the result joins base (.grad is a later pass's); 2:
        dropped (the gradient was zeroed after it started)."""
        bucket = self.inflight
        if use:
            try:
                if ok and use == 1:
                    with torch.no_grad():
                        val = self._value(result, index)
                        if bucket is not None and val is self.wire:
                            val = val.clone()  # a slice of the flat buffer, which is reused
                        self.base = val if self.base is None else self.base + val
            finally:
                self._done(bucket)
            return
        p, g = self.param, self.param.grad
        try:
            if not ok:
                return
            if self.ctx is _SPARSE:
                if g is self.wired:  # untouched meanwhile
                    p.grad = result if self.base is None else result + self.base
                return
            with torch.no_grad():
                if g is self.wired and g._version == self._wired_version():
                    before = g._version
                    val = self._value(result, index)
                    if val is not g:
                        g.copy_(val)
                    if self.base is not None:
                        g.add_(self.base)
                    if bucket is not None:
                        bucket.version += g._version - before  # this member's own writes
                elif g is self.wired and self.wire is g:
                    g.zero_()  # zeroed in place while the reduction wrote into it: keep the zeros
                if self.sparse_only and g is self.wired:
                    # Reduced densely (sparse_as_dense): sparse again, rows of zeros left out,
                    # as nn.Embedding's (sparse in the first dimension) for SparseAdam.
                    p.grad = g.to_sparse(min(1, g.dim()))
        finally:
            self.base = None
            self._done(bucket)

    def _done(self, bucket):
        self.wired = self.wire = self.ctx = self.taken = self.inflight = None
        if bucket is not None:
            bucket.pending -= 1
            if not bucket.pending:
                bucket.wire = None

    def prepare(self, densify, zeros=False):
        """The tensor to reduce: .grad (zeros when None), densified or compressed; zeros shaped
        as it when `zeros` (.grad untouched)."""
        p = self.param
        if zeros:
            self.wired = None
            if self.sparse and not densify:
                self.ctx = _SPARSE
                self.wire = torch.sparse_coo_tensor(torch.empty((1, 0), dtype=torch.long),
                                                    p.new_empty((0,) + tuple(p.shape[1:])),
                                                    p.shape)
            else:
                self.wire, self.ctx = self.settings.compression.compress(torch.zeros_like(p))
            return self.wire
        empty = p.grad is None or (p.grad.is_sparse and p.grad._nnz() == 0)  # zero_() on sparse
        if empty and (self.sparse or p.grad is not None) and not densify:
            # No gradient on this rank: contribute an empty sparse one shaped as the others'
            # (sparse in the first dimension, as nn.Embedding's).
            p.grad = torch.sparse_coo_tensor(torch.empty((1, 0), dtype=torch.long),
                                             p.new_empty((0,) + tuple(p.shape[1:])), p.shape)
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        self.sparse = self.sparse or p.grad.is_sparse
        if p.grad.is_sparse and densify:
            p.grad = p.grad.to_dense()
        if not p.grad.is_sparse:
            owned = self.owned() if self.owned is not None else None
            if owned is not p.grad:
                # Autograd can leave one version counter to the gradients of several parameters
                # (reached through one torch.cat): another's accumulation, or a result written
                # into another, would look like an in-place change of this one while it is
                # reduced (and drop it). .data is the same memory with a counter of its own (no
                # copy); once per .grad tensor (a weak reference: a dropped .grad is freed).
                p.grad = p.grad.data
                self.owned = weakref.ref(p.grad)
        self.wired, self.wired_version = p.grad, p.grad._version
        if p.grad.is_sparse:
            self.ctx = _SPARSE
            self.wire = p.grad
        else:
            self.wire, self.ctx = self.settings.compression.compress(p.grad)
        return self.wire


def _submit(slots, name, grouped, zeros=False):
    s = slots[0].settings
    pre, post = (1.0 / s.predivide, s.predivide) if s.op == Average else (1.0, 1.0)
    with torch.no_grad():
        wires = [sl.prepare(s.sparse_as_dense or grouped, zeros) for sl in slots]
    if grouped:
        return mpi_ops.grouped_allreduce_async_(wires, name=name, op=s.op, prescale_factor=pre,
                                                postscale_factor=post, process_set=s.process_set)
    if slots[0].ctx is _SPARSE:
        return mpi_ops.sparse_allreduce_async(wires[0], name, s.op, process_set=s.process_set)
    return mpi_ops.allreduce_async_(wires[0], name=name, op=s.op, prescale_factor=pre,
                                    postscale_factor=post, process_set=s.process_set)


class _Bucket:
    """The flat buffer of a bucket of views (gradient_as_bucket_view): one tensor per bucket,
    each member's .grad a view of its slice, in the order backward produces them."""
    __slots__ = ("flat", "name", "pending", "version", "wire", "__weakref__")

    def __init__(self, flat, name):
        self.flat, self.name = flat, name
        self.pending = 0  # members whose reduction in flight reads or writes the buffer
        self.version = 0  # the views' version counter once the reduction's writes are expected
        self.wire = None  # the tensor on the wire (the buffer, or its 16-bit copy)


def _flat_buffer(numel, like):
    """A bucket's buffer of `like`'s dtype and device: on the CPU in hvd's own mapping (huge
    pages, which MPI moves between processes faster than torch's allocator's memory; the tensor
    keeps the mapping alive)."""
    if like.device.type != "cpu" or numel == 0:
        return torch.empty(numel, dtype=like.dtype, device=like.device)
    return torch.frombuffer(_core.HostBuffer(numel * like.element_size()), dtype=like.dtype,
                            count=numel)


def _make_bucket(slots, name):
    """One flat buffer for `slots` (one dtype and device), each slot's .grad (zeros where
    there is none) copied into its slice and .grad made that slice."""
    p0 = slots[0].param
    flat = _flat_buffer(sum(sl.param.numel() for sl in slots), p0)
    bucket = _Bucket(flat, name)
    off = 0
    with torch.no_grad():
        for sl in slots:
            p, n = sl.param, sl.param.numel()
            view = flat[off:off + n].view_as(p)
            off += n
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad.to_dense() if p.grad.is_sparse else p.grad)
            p.grad = view
            sl.bucket, sl.view, sl.attached = bucket, view, None


class _ZeroFlight:
    """The reduction of a bucket's zeros (a rank that did not reach it): no buffer of a slot."""
    __slots__ = ("pending", "version", "wire")

    def __init__(self, n):
        self.pending, self.version, self.wire = n, 0, None


def _submit_bucket(slots, name, zeros=False):
    """One allreduce of the bucket's flat buffer in place (cast to 16 bits first under
    compression), after each member's .grad is in its view; `zeros`: of a zero buffer shaped
    as it, .grad untouched."""
    s, bucket = slots[0].settings, slots[0].bucket
    pre, post = (1.0 / s.predivide, s.predivide) if s.op == Average else (1.0, 1.0)
    with torch.no_grad():
        if zeros:
            flight = _ZeroFlight(len(slots))
            wire, ctx = s.compression.compress(torch.zeros_like(bucket.flat))
        else:
            flight = bucket
            for sl in slots:
                if sl.param.grad is not sl.view:
                    sl.reattach()
                sl.attached = None
            wire, ctx = s.compression.compress(bucket.flat)
            bucket.wire = wire
        if wire is bucket.flat and not zeros:
            # Reduced in place: each member's wire is its view, which is .grad (reattached).
            for sl in slots:
                sl.inflight, sl.ctx = flight, ctx
                sl.wire = sl.wired = sl.view
        else:
            off = 0
            for sl in slots:
                n = sl.param.numel()
                sl.inflight, sl.ctx = flight, ctx
                sl.wire = wire[off:off + n].view_as(sl.param)
                sl.wired = None if zeros else sl.param.grad
                off += n
        flight.pending = len(slots)
        flight.version = bucket.flat._version
    return mpi_ops.allreduce_async_(wire, name=name, op=s.op, prescale_factor=pre,
                                    postscale_factor=post, process_set=s.process_set)


def _intact(bucket):
    """`bucket` (a slot's flight) is a bucket reduced in place whose buffer nobody wrote to since
    the submission: its views hold the reduction's result (or will)."""
    return type(bucket) is _Bucket and bucket.wire is bucket.flat and \
        bucket.flat._version == bucket.version


def _on_view(sl, bucket):
    """sl's .grad is still the view `bucket`'s flight reduces."""
    return sl.inflight is bucket and sl.wired is sl.view and sl.param.grad is sl.wired


def _finish_all(slots, result, index, ok, uses):
    """finish() of the members of one reduction. A bucket reduced in place whose buffer nobody
    wrote to meanwhile already holds the result in its views: a member whose .grad is still its
    view and has nothing set aside only forgets the flight (no tensor work); the others finish()
    as alone. Fast members write nothing, so doing them first changes no other's outcome."""
    bucket = slots[0].inflight
    rest = range(len(slots))
    if ok and not any(uses) and _intact(bucket):
        rest, fast = [], 0
        for i, sl in enumerate(slots):
            if sl.base is None and _on_view(sl, bucket):
                sl.wired = sl.wire = sl.ctx = sl.taken = sl.inflight = None
                fast += 1
            else:
                rest.append(i)
        bucket.pending -= fast
        if not bucket.pending:
            bucket.wire = None
    for i in rest:
        slots[i].finish(result, index[i], ok, uses[i])


def _untouched_all(slots):
    """[untouched() of each slot] (members of one reduction in flight). A bucket reduced in
    place whose buffer nobody wrote to: a member is untouched when .grad is still its view."""
    bucket = slots[0].inflight
    if _intact(bucket):
        return [_on_view(sl, bucket) or sl.untouched() for sl in slots]
    return [sl.untouched() for sl in slots]


def _drop_stash_all(slots):
    """drop_stash() of each slot (zero_grad(): one call for all)."""
    for sl in slots:
        sl.base = sl.attached = None


def _settle_all(slots):
    """settle() of each slot that has something set aside (one call for all)."""
    for sl in slots:
        if sl.base is not None:
            sl.settle()


def bucket_buffer(param):
    """The flat buffer whose view `param`.grad is meant to be, or None (not bucketed)."""
    for key in [k for k, (ref, _) in _slots.items() if ref() is None]:
        del _slots[key]
    ref, _ = _slots.get(id(param), (None, None))
    sl = ref() if ref is not None else None
    if sl is None or sl.param is not param or sl.bucket is None:
        return None
    return sl.bucket.flat


def _wait(handle):
    return mpi_ops.synchronize(handle)


class _PassEnd:
    """The end-of-pass callback. A pass that raises drops its callbacks unrun: this one then
    tells the registry when it goes away, so that the next pass asks for a new one."""
    __slots__ = ("ran",)

    def __init__(self):
        self.ran = False

    def __call__(self):
        self.ran = True
        _core.registry_end_of_pass()

    def __del__(self):
        if not self.ran and _core is not None:
            _core.registry_pass_abandoned()


def _defer():
    cb = _PassEnd()
    try:
        torch.autograd.Variable._execution_engine.queue_callback(cb)
    except RuntimeError:  # not inside a backward pass
        cb.ran = True
        return False
    return True


_core.registry_set_frontend(_submit, _wait, _defer, _make_bucket, _submit_bucket, _finish_all,
                            _settle_all, _drop_stash_all, _untouched_all)


def compression_key(compression):
    """The registry's name for a compressor: optimizers sharing a parameter must use the same."""
    return getattr(compression, "__qualname__", None) or f"{type(compression).__qualname__}@" \
        f"{id(compression):x}"


# id(param) -> (weak reference, wire name): the wire name a parameter had when it was last
# registered, so that registering it again after its optimizer is gone keeps that name (on a rank
# where the old optimizer is still alive, the parameter shares the old entry and its name).
_wires = {}
# id(param) -> (weak reference to its registered _Slot, None)
_slots = {}


def add(owner, label, specs, settings, groups, sparse=False):
    """Registers `specs` [(name or None, param)] for `owner`; returns the registry's entries.
    `sparse`: the optimizer takes sparse gradients only (SparseAdam). Raises ValueError (naming
    the parameter) without changing anything."""
    for name, p in specs:
        if not p.is_leaf:
            raise ValueError(f"DistributedOptimizer '{label}': parameter '{name}' "
                             f"({p.dtype}{list(p.shape)}) is not a leaf tensor")
    for key in [k for k, (ref, _) in _wires.items() if ref() is None]:
        del _wires[key]
    # A parameter registered before may still be held by an optimizer that is unreachable but not
    # yet collected (on some ranks only): collect it first, so that whether the parameter is
    # shared (and must be reduced the same way) is the same on every rank.
    if any(_remembered_wire(p) is not None for _, p in specs):
        gc.collect()
    wire = (settings.op, compression_key(settings.compression), settings.bpps, settings.predivide,
            _set_id(settings.process_set), settings.sparse_as_dense, settings.bucket_view,
            None if settings.bucket_cap_mb is None else int(settings.bucket_cap_mb * (1 << 20)))
    slots = [_Slot(p, settings, sparse) for _, p in specs]
    items = [(name, id(p), sl, p.numel() * p.element_size(),
              f"{p.dtype}{list(p.shape)} at {hex(id(p))}", _remembered_wire(p))
             for (name, p), sl in zip(specs, slots)]
    entries = _core.registry_add(owner, label, items, wire, groups)
    for (_, p), sl in zip(specs, entries.slots):
        _slots[id(p)] = (weakref.ref(sl), None)
    for (_, p), w in zip(specs, entries.wires):
        _wires[id(p)] = (weakref.ref(p), w)
    return entries


def _remembered_wire(p):
    ref, w = _wires.get(id(p), (None, None))
    return w if ref is not None and ref() is p else None
