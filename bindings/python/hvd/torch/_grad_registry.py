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


class _Slot:
    """One registered parameter (see the module docstring)."""
    __slots__ = ("param", "settings", "sparse", "sparse_only", "acc", "hooks", "base", "wired",
                 "wired_version", "wire", "ctx", "taken", "__weakref__")

    def __init__(self, param, settings, sparse):
        self.param, self.settings = param, settings
        self.sparse = sparse  # its gradients are sparse (SparseAdam, or seen so)
        self.sparse_only = sparse  # its optimizer takes sparse gradients only (SparseAdam)
        self.acc, self.hooks = None, []
        self.base = self.wired = self.wire = self.ctx = self.taken = None
        self.wired_version = 0

    def attach(self, ref):
        p = self.param

        def before(_grad):
            ref.before_pass()

        def after(*_):
            ref.after_pass()

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
        if self.param.grad is not None:
            self.base = self.param.grad
            self.param.grad = None

    def drop_stash(self):
        self.base = None

    def release(self):
        """A pass begins while .grad is being reduced: the reduction keeps it, .grad empties."""
        if self.wired is not None and self.param.grad is self.wired:
            self.taken, self.param.grad = self.param.grad, None

    def restore(self, released):
        """The pass of the last stash()/release() accumulated nothing: .grad as it was."""
        if self.param.grad is None:
            self.param.grad = self.taken if released else self.base
            if not released:
                self.base = None
        self.taken = None

    def untouched(self):
        """.grad is still the gradient the reduction in flight started from."""
        g = self.param.grad
        return g is not None and g is self.wired and \
            (self.ctx is _SPARSE or g._version == self.wired_version)

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
        val = result if index is None or not isinstance(result, (list, tuple)) else result[index]
        return self.settings.compression.decompress(val, self.ctx)

    def finish(self, result, index, ok, use=0):
        """Reduction over. use 0: .grad becomes result + base (unless the user replaced or
        changed .grad meanwhile); 1: the result joins base (.grad is a later pass's); 2:
        dropped (the gradient was zeroed after it started)."""
        if use:
            try:
                if ok and use == 1:
                    with torch.no_grad():
                        val = self._value(result, index)
                        self.base = val if self.base is None else self.base + val
            finally:
                self.wired = self.wire = self.ctx = self.taken = None
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
                if g is self.wired and g._version == self.wired_version:
                    val = self._value(result, index)
                    if val is not g:
                        g.copy_(val)
                    if self.base is not None:
                        g.add_(self.base)
                elif g is self.wired and self.wire is g:
                    g.zero_()  # zeroed in place while the reduction wrote into it: keep the zeros
                if self.sparse_only and g is self.wired:
                    # Reduced densely (sparse_as_dense): sparse again, rows of zeros left out,
                    # as nn.Embedding's (sparse in the first dimension) for SparseAdam.
                    p.grad = g.to_sparse(min(1, g.dim()))
        finally:
            self.base = self.wired = self.wire = self.ctx = self.taken = None

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


_core.registry_set_frontend(_submit, _wait, _defer)


def compression_key(compression):
    """The registry's name for a compressor: optimizers sharing a parameter must use the same."""
    return getattr(compression, "__qualname__", None) or f"{type(compression).__qualname__}@" \
        f"{id(compression):x}"


# id(param) -> (weak reference, wire name): the wire name a parameter had when it was last
# registered, so that registering it again after its optimizer is gone keeps that name (on a rank
# where the old optimizer is still alive, the parameter shares the old entry and its name).
_wires = {}


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
            _set_id(settings.process_set),
            settings.sparse_as_dense)
    items = [(name, id(p), _Slot(p, settings, sparse), p.numel() * p.element_size(),
              f"{p.dtype}{list(p.shape)} at {hex(id(p))}", _remembered_wire(p))
             for name, p in specs]
    entries = _core.registry_add(owner, label, items, wire, groups)
    for (_, p), w in zip(specs, entries.wires):
        _wires[id(p)] = (weakref.ref(p), w)
    return entries


def _remembered_wire(p):
    ref, w = _wires.get(id(p), (None, None))
    return w if ref is not None and ref() is p else None
